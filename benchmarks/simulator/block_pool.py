"""The paged KV block pool and its prefix cache: what the engine's scheduler allocates from.

The GPU pool has `config.total_blocks` blocks of `effective_block_size` tokens.
A block is one of: free; in use by running sequences (private to one, or shared through the
prefix cache with a reference count); cached but unreferenced (evictable, LRU order). Blocks
have no ids: only counts and, for cached blocks, their key (the hash chain of their tokens,
or a symbolic key offline). `kv_cache_usage` = in-use blocks / total, as vLLM reports it
(evictable cached blocks count as free). With offload (or swap preemption) a CPU tier keeps
evicted cached blocks; under the `slots` strategy (llama.cpp) idle slots keep their last
prompt resident instead of a shared cache.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from itertools import repeat
from typing import Hashable

from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.sequence import Sequence


class Slot:
    """One llama.cpp slot (the `slots` strategy): the request it serves, or the tokens it keeps resident
    (their chain keys) and the blocks they hold, until another request takes the slot."""

    __slots__ = ("index", "seq", "keys", "blocks", "last_used")

    def __init__(self, index: int) -> None:
        self.index = index
        self.seq: Sequence | None = None
        self.keys: list[Hashable] = []
        self.blocks = 0
        self.last_used = 0.0


SLOT_PROMPT_SIMILARITY = 0.5  # llama-server's --slot-prompt-similarity default


def common_prefix(first: list[Hashable], second: list[Hashable]) -> int:
    count = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        count += 1
    return count


class BlockPool:
    """The block counts, the prefix cache (reference counts, the evictable LRU), the CPU tier and the
    llama.cpp slots, with the operations on them; `Engine` schedules sequences over it."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        strategy = config.strategy
        self.prefix_caching: bool = config.prefix_caching_on
        self.offload: bool = strategy["offload"]
        self.slots_mode: bool = bool(strategy.get("slots"))
        self.slot_table = [Slot(i) for i in range(config.max_num_seqs)] if self.slots_mode else []
        self.idle_slot_blocks = 0  # blocks idle slots keep resident (reclaimed LRU when the pool runs short)
        self.bs = config.effective_block_size
        self.total_blocks = config.total_blocks
        self.cpu_capacity = config.total_cpu_blocks if (self.offload or config.preemption_mode == "swap") else 0
        self.free = self.total_blocks
        self.ref: dict[Hashable, int] = {}  # cached block key -> reference count (>= 1: in use)
        self.evictable: OrderedDict[Hashable, float] = OrderedDict()  # ref 0, LRU first; value: time freed
        self.cpu: OrderedDict[Hashable, bool] = OrderedDict()  # CPU tier of cached blocks (LRU first)
        self.cpu_swap_used = 0  # CPU blocks held by swap-preempted sequences
        self.stats: dict[str, int] = dict.fromkeys(
            (
                "prefix_queries",
                "prefix_hits",
                "preemptions",
                "swap_in_blocks",
                "swap_out_blocks",
                "offload_store_blocks",
                "offload_load_blocks",
                "prompt_tokens",
                "generation_tokens",
                "requests_success",
                "requests_aborted",
                "requests_rejected",
                "requests_oom",
                "evictions",
            ),
            0,
        )

    @property
    def available(self) -> int:
        return self.free + len(self.evictable) + self.idle_slot_blocks

    @property
    def used_blocks(self) -> int:
        """Blocks holding KV: an idle slot's resident prompt counts (llama.cpp reports it as used)."""
        return self.total_blocks - self.free - len(self.evictable)

    def kv_cache_usage(self) -> float:
        return self.used_blocks / self.total_blocks if self.total_blocks else 0.0

    def allocate(self, count: int) -> None:
        if self.slots_mode and count > self.free:
            self.reclaim_slots(count)
        if count <= self.free:
            self.free -= count
            return
        evict = count - self.free
        self.free = 0
        self.stats["evictions"] += evict
        evicted = map(self.evictable.popitem, repeat(False, evict))  # oldest first, in C
        if self.offload:
            for key, _ in list(evicted):
                self.store_cpu(key)
        else:
            deque(evicted, maxlen=0)

    def reclaim_slots(self, count: int) -> None:
        """Overwrite idle slots, least recently used first, until `count` blocks are free."""
        for slot in sorted((s for s in self.slot_table if s.seq is None and s.blocks), key=lambda s: s.last_used):
            if self.free >= count:
                return
            self.free += slot.blocks
            self.idle_slot_blocks -= slot.blocks
            self.stats["evictions"] += slot.blocks
            slot.blocks, slot.keys = 0, []

    def admit_to_slot(self, seq: Sequence, budget: int) -> int:
        """The `slots` strategy's admission: the idle slot holding the longest common prefix with the
        prompt (else the least recently used) takes the request; that prefix is reused, the rest of
        what the slot held is dropped. Returns the first chunk, or -1 when no slot or room is free."""
        idle = [slot for slot in self.slot_table if slot.seq is None]
        if not idle:
            return -1
        keys = seq.keys.block_keys(0, max(seq.target - 1, 0), 1) if self.config.prefix_caching else []
        best, reused = min(idle, key=lambda slot: slot.last_used), 0
        for slot in idle:
            common = common_prefix(keys, slot.keys) if keys and slot.keys else 0
            # llama-server's --slot-prompt-similarity (0.5): a slot is chosen for what it holds only when
            # the prompt shares more than half of it; otherwise the least recently used slot is taken
            if common > reused and common > SLOT_PROMPT_SIMILARITY * len(slot.keys):
                best, reused = slot, common
        if reused == 0 and keys and best.keys:
            reused = common_prefix(keys, best.keys)  # the LRU slot's own common prefix is still reused
        chunk = min(seq.target - reused, budget)
        if self.free + self.idle_slot_blocks - reused < chunk:
            return -1
        self.idle_slot_blocks -= best.blocks
        self.free += best.blocks - reused
        best.seq, best.keys, best.blocks = seq, [], 0
        seq.slot = best.index
        self.allocate(chunk)
        seq.private = reused + chunk
        seq.computed = reused
        seq.hit_tokens += reused
        self.stats["prefix_queries"] += seq.target
        self.stats["prefix_hits"] += reused
        return chunk

    def release_to_slot(self, seq: Sequence, now: float) -> None:
        """A finished (or aborted) request's KV stays in its slot for the next prompt with its prefix."""
        slot = self.slot_table[seq.slot] if seq.slot is not None else None
        blocks = len(seq.shared) + seq.private
        seq.shared, seq.private, seq.slot = [], 0, None
        if slot is None:
            self.free += blocks
            return
        slot.seq, slot.blocks, slot.last_used = None, blocks, now
        slot.keys = seq.keys.block_keys(0, min(seq.computed, blocks), 1) if self.config.prefix_caching else []
        self.idle_slot_blocks += blocks

    def store_cpu(self, key: Hashable) -> None:
        if self.cpu_capacity <= self.cpu_swap_used:
            return
        if key in self.cpu:
            self.cpu.move_to_end(key)
            return
        while len(self.cpu) + self.cpu_swap_used >= self.cpu_capacity:
            self.cpu.popitem(last=False)
        self.cpu[key] = True
        self.stats["offload_store_blocks"] += 1

    def decref(self, key: Hashable, now: float) -> None:
        count = self.ref[key] - 1
        if count:
            self.ref[key] = count
        else:
            del self.ref[key]
            self.evictable[key] = now

    def offload_idle(self, now: float) -> int:
        """Move cached blocks idle for `offload_after_s` to the CPU tier (paged-offload)."""
        if not self.offload:
            return 0
        moved = 0
        limit = now - self.config.offload_after_s
        evictable = self.evictable
        while evictable:
            key, freed_at = next(iter(evictable.items()))
            if freed_at > limit:
                break
            evictable.popitem(last=False)
            self.free += 1
            self.store_cpu(key)
            moved += 1
        return moved

    def reset_prefix_cache(self) -> int:
        """Drop every cached block no request holds (GPU evictable and the CPU tier), as vLLM's
        `POST /reset_prefix_cache` and SGLang's `POST /flush_cache` do: the next request with the
        same history recomputes it. Returns the blocks dropped; swapped-out sequences keep theirs."""
        if self.slots_mode:
            return 0  # llama.cpp has no cache reset (the server answers 404)
        dropped = len(self.evictable) + len(self.cpu)
        self.free += len(self.evictable)
        self.evictable.clear()
        self.cpu.clear()
        return dropped

    def lookup(self, seq: Sequence) -> tuple[list[Hashable], int, int]:
        """Prefix-cache hits for a sequence about to be scheduled: (keys, GPU hits, CPU hits)."""
        if not self.prefix_caching:
            return [], 0, 0
        limit = (seq.target - 1) // self.bs  # at least one token is always computed
        keys = seq.keys.block_keys(0, limit, self.bs)
        ref, evictable = self.ref, self.evictable
        gpu_hits = 0
        for key in keys:
            if key not in ref and key not in evictable:
                break
            gpu_hits += 1
        cpu_hits = 0
        if self.offload:
            cpu = self.cpu
            for index in range(gpu_hits, len(keys)):
                key = keys[index]
                if key not in cpu or key in ref or key in evictable:
                    break
                cpu_hits += 1
        return keys, gpu_hits, cpu_hits

    def register_full_blocks(self, seq: Sequence) -> None:
        """Publish newly computed full blocks in the prefix cache (still referenced by `seq`)."""
        start = len(seq.shared)
        full = min(seq.computed // self.bs, start + seq.private)
        if full <= start:
            return
        keys = seq.keys.block_keys(start, full, self.bs)
        ref, evictable = self.ref, self.evictable
        if not (ref.keys().isdisjoint(keys) and evictable.keys().isdisjoint(keys)):
            for index, key in enumerate(keys):
                if key in ref or key in evictable:  # computed twice concurrently: keep ours (and later ones) private
                    keys = keys[:index]
                    break
        ref.update(dict.fromkeys(keys, 1))
        seq.shared.extend(keys)
        seq.private -= len(keys)
