"""The engine model: a paged KV block pool driven by a continuous-batching scheduler.

Clock-agnostic state machine: `Engine.step(now)` runs one scheduler iteration starting at
simulated time `now` and returns how long it took (`StepOutcome.duration`). The live server
sleeps that long (scaled) and streams the tokens; the offline simulator just adds it to a
virtual clock. Nothing here reads a clock or does I/O.

Memory model. The GPU pool has `config.total_blocks` blocks of `effective_block_size` tokens.
A block is one of: free; in use by running sequences (private to one, or shared through the
prefix cache with a reference count); cached but unreferenced (evictable, LRU order). Blocks
have no ids: only counts and, for cached blocks, their key (the hash chain of their tokens,
or a symbolic key offline). `kv_cache_usage` = in-use blocks / total, as vLLM reports it
(evictable cached blocks count as free).

Decode is accounted in aggregate so that a step costs O(block_size), not O(batch): every
decoding sequence advances with a global decode counter `G`; the blocks they need are counted
from their position modulo the block size, and attributed to individual sequences only when
they leave the decode set ("materialised"). The offline simulator can therefore coalesce runs
of identical decode steps (`coalesce=True`) and simulate 100k requests in seconds.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Hashable, Protocol

from benchmarks.simulator.config import SimConfig, blocks_for
from benchmarks.simulator.tokens import chain_hashes, corrupt, output_token, prompt_digest

WAITING, PREFILL, DECODE, FINISHED = "waiting", "prefill", "decode", "finished"
LEAK_CAP = 0.9  # fault_kv_leak_blocks_per_request stops leaking at this share of the pool


class EngineError(Exception):
    """Base of errors the engine returns for a request."""

    status = 500


class RequestRejected(EngineError):
    """Admission limit reached under the 429 rejection policy."""

    status = 429


class RequestTooLarge(EngineError, ValueError):
    """The request can never fit (context length or KV pool)."""

    status = 400


class EngineOOM(EngineError):
    """Injected out-of-memory fault."""

    status = 500


class EngineCrashed(EngineOOM):
    """Out of memory with `oom_without_admission="crash"`: the engine process dies."""

    status = 503


class BlockKeys(Protocol):
    """Identity of the full blocks of a request's token stream (prompt then outputs)."""

    def block_keys(self, start: int, stop: int, block_size: int) -> list[Hashable]: ...


class TokenStream:
    """Real token ids (live mode): prompt ids plus deterministic outputs, hashed as a chain."""

    __slots__ = ("prompt", "outputs", "digest", "corrupted", "_hashes", "_hash_bs", "_salt")

    def __init__(self, prompt: list[int], seed: int = 0, private_to: Any = None) -> None:
        self.prompt = list(prompt)
        self.outputs: list[int] = []
        self.digest = prompt_digest(self.prompt, seed)
        self.corrupted = False
        self._hashes: list[Any] = []
        self._hash_bs = 0
        # a request that must not share its cache (llama.cpp `cache_prompt: false`): its chain
        # starts from its own salt, so it neither hits cached blocks nor leaves any others can hit
        self._salt = None if private_to is None else ("private", private_to)

    def extend_outputs(self, count: int) -> list[int]:
        """Generate outputs up to `count` tokens; returns the new ones."""
        new = []
        while len(self.outputs) < count:
            token = output_token(self.digest, len(self.outputs))
            if self.corrupted:
                token = corrupt(token)
            self.outputs.append(token)
            new.append(token)
        return new

    def block_keys(self, start: int, stop: int, block_size: int) -> list[Hashable]:
        if block_size != self._hash_bs:
            self._hashes, self._hash_bs = [], block_size
        if stop > len(self._hashes):
            tokens = self.prompt + self.outputs
            previous = self._hashes[-1] if self._hashes else self._salt
            self._hashes.extend(chain_hashes(tokens[: stop * block_size], block_size, len(self._hashes), previous))
        return self._hashes[start:stop]


class KeySpace:
    """Allocates integer key ranges to named streams for one simulation (see SymbolicKeys)."""

    def __init__(self) -> None:
        self._bases: dict[Any, int] = {}
        self._next = 1

    def base(self, name: Any = None) -> int:
        """The base of a named stream (None: a fresh anonymous one)."""
        if name is not None and name in self._bases:
            return self._bases[name]
        base = self._next
        self._next += 1
        if name is not None:
            self._bases[name] = base
        return base

    def keys(self, prefix_id: Any = None, prefix_tokens: int = 0, session_id: Any = None) -> "SymbolicKeys":
        return SymbolicKeys(self, prefix_id, prefix_tokens, session_id)


class SymbolicKeys:
    """Offline block identity without token ids: a shared prefix's blocks, then the session's
    stream (append-only across turns), then the request's own blocks.

    Keys are integers `stream_id + block_index * STEP` with an odd STEP larger than any stream
    id: unique, spread over the hash table's low bits (Python hashes small ints to themselves),
    and a run of keys is a `range`, so bulk cache operations stay in C."""

    STEP = 0x9E3779B1

    __slots__ = ("prefix_base", "prefix_blocks_tokens", "stream_base")

    def __init__(self, space: KeySpace, prefix_id: Any = None, prefix_tokens: int = 0, session_id: Any = None) -> None:
        self.prefix_base = space.base(("p", prefix_id)) if prefix_id is not None else 0
        self.prefix_blocks_tokens = prefix_tokens if prefix_id is not None else 0
        self.stream_base = space.base(("s", session_id, prefix_id)) if session_id is not None else space.base()

    def block_keys(self, start: int, stop: int, block_size: int) -> list[Hashable]:
        prefix_full = self.prefix_blocks_tokens // block_size
        step = self.STEP
        if stop <= prefix_full:
            return list(range(self.prefix_base + start * step, self.prefix_base + stop * step, step))
        if start >= prefix_full:
            return list(range(self.stream_base + start * step, self.stream_base + stop * step, step))
        return list(range(self.prefix_base + start * step, self.prefix_base + prefix_full * step, step)) + list(
            range(self.stream_base + prefix_full * step, self.stream_base + stop * step, step)
        )


class Sequence:
    """One request inside the engine."""

    __slots__ = (
        "request_id",
        "prompt_len",
        "max_tokens",
        "arrival",
        "keys",
        "stream",
        "status",
        "order",
        "computed",
        "target",
        "out_done",
        "shared",
        "private",
        "enter_g",
        "enter_kv",
        "enter_out",
        "finish_g",
        "need_r",
        "static",
        "hit_tokens",
        "preemptions",
        "swapped_blocks",
        "swapped_in",
        "first_scheduled",
        "first_token_t",
        "finish_t",
        "finish_reason",
        "error",
        "emitted",
        "user",
        "priority",
        "slot",
    )

    def __init__(
        self,
        request_id: Any,
        prompt_len: int,
        max_tokens: int,
        arrival: float,
        keys: BlockKeys,
        stream: TokenStream | None = None,
        user: Any = None,
        priority: int = 0,
    ) -> None:
        self.request_id, self.prompt_len, self.max_tokens, self.arrival = request_id, prompt_len, max_tokens, arrival
        self.keys, self.stream, self.user = keys, stream, user
        self.priority = priority  # lower first under the "priority" scheduling policy (vLLM's convention)
        self.status = WAITING
        self.order = 0
        self.computed = 0
        self.target = prompt_len
        self.out_done = 0
        self.shared: list[Hashable] = []
        self.private = 0
        self.enter_g = self.enter_kv = self.enter_out = 0
        self.finish_g = -1
        self.need_r = -1
        self.static = False
        self.hit_tokens = 0
        self.preemptions = 0
        self.swapped_blocks = 0
        self.swapped_in = False
        self.first_scheduled: float | None = None
        self.first_token_t: float | None = None
        self.finish_t: float | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.emitted = 0  # tokens handed to the client (live mode)
        self.slot: int | None = None  # the llama.cpp-style slot it runs in (the `slots` strategy)


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


def _common_prefix(first: list[Hashable], second: list[Hashable]) -> int:
    count = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        count += 1
    return count


def _rank(seq: Sequence) -> tuple[int, int]:
    """Scheduling rank: (priority, admission order); a larger rank is preempted first. Under fcfs
    every priority is 0, so this is the admission order alone."""
    return (seq.priority, seq.order)


@dataclass
class StepOutcome:
    duration: float
    steps: int = 1
    first_token: list[Sequence] = field(default_factory=list)  # prefill completed: emitted a token
    decoded: list[Sequence] = field(default_factory=list)  # live mode: decode seqs that emitted one token
    finished: list[Sequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)


class Engine:
    def __init__(self, config: SimConfig, coalesce: bool = False) -> None:
        self.config = config
        strategy = config.strategy
        self.prefix_caching: bool = config.prefix_caching_on
        self.static: bool = strategy["static"]
        self.offload: bool = strategy["offload"]
        self.slots_mode: bool = bool(strategy.get("slots"))
        self.slot_table = [Slot(i) for i in range(config.max_num_seqs)] if self.slots_mode else []
        self.idle_slot_blocks = 0  # blocks idle slots keep resident (reclaimed LRU when the pool runs short)
        self.bs = config.effective_block_size
        self.total_blocks = config.total_blocks
        self.cpu_capacity = config.total_cpu_blocks if (self.offload or config.preemption_mode == "swap") else 0
        self.coalesce = coalesce
        self.by_priority = config.scheduling_policy == "priority"
        self.static_blocks = blocks_for(config.max_model_len, self.bs)
        # pool
        self.free = self.total_blocks
        self.ref: dict[Hashable, int] = {}  # cached block key -> reference count (>= 1: in use)
        self.evictable: OrderedDict[Hashable, float] = OrderedDict()  # ref 0, LRU first; value: time freed
        self.cpu: OrderedDict[Hashable, bool] = OrderedDict()  # CPU tier of cached blocks (LRU first)
        self.cpu_swap_used = 0  # CPU blocks held by swap-preempted sequences
        # scheduler
        self.waiting: deque[Sequence] = deque()
        self.running: dict[int, Sequence] = {}  # admission order (the last is preempted first)
        self.decode: dict[int, Sequence] = {}
        self.prefilling: dict[int, Sequence] = {}
        self.G = 0
        self.S = 0  # sum of KV lengths of decode sequences at G
        self.need_at = [0] * self.bs  # paged decode seqs needing a block when G % bs == r
        self.growth = 0  # decode-growth blocks not yet attributed to a sequence
        self.finish_heap: list[tuple[int, int, Sequence]] = []
        self._order = 0
        self.peak_used_blocks = 0
        self.peak_running = 0
        self._admitted = 0
        self.leaked = 0  # blocks never returned (fault_kv_leak_blocks_per_request): a leak / fragmentation
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

    # --- pool ------------------------------------------------------------------------------
    @property
    def available(self) -> int:
        return self.free + len(self.evictable) + self.idle_slot_blocks

    @property
    def used_blocks(self) -> int:
        """Blocks holding KV: an idle slot's resident prompt counts (llama.cpp reports it as used)."""
        return self.total_blocks - self.free - len(self.evictable)

    def kv_cache_usage(self) -> float:
        return self.used_blocks / self.total_blocks if self.total_blocks else 0.0

    def _allocate(self, count: int) -> None:
        if self.slots_mode and count > self.free:
            self._reclaim_slots(count)
        if count <= self.free:
            self.free -= count
            return
        evict = count - self.free
        self.free = 0
        self.stats["evictions"] += evict
        evicted = map(self.evictable.popitem, repeat(False, evict))  # oldest first, in C
        if self.offload:
            for key, _ in list(evicted):
                self._store_cpu(key)
        else:
            deque(evicted, maxlen=0)

    def _reclaim_slots(self, count: int) -> None:
        """Overwrite idle slots, least recently used first, until `count` blocks are free."""
        for slot in sorted((s for s in self.slot_table if s.seq is None and s.blocks), key=lambda s: s.last_used):
            if self.free >= count:
                return
            self.free += slot.blocks
            self.idle_slot_blocks -= slot.blocks
            self.stats["evictions"] += slot.blocks
            slot.blocks, slot.keys = 0, []

    def _admit_to_slot(self, seq: Sequence, budget: int) -> int:
        """The `slots` strategy's admission: the idle slot holding the longest common prefix with the
        prompt (else the least recently used) takes the request; that prefix is reused, the rest of
        what the slot held is dropped. Returns the first chunk, or -1 when no slot or room is free."""
        idle = [slot for slot in self.slot_table if slot.seq is None]
        if not idle:
            return -1
        keys = seq.keys.block_keys(0, max(seq.target - 1, 0), 1) if self.config.prefix_caching else []
        best, reused = min(idle, key=lambda slot: slot.last_used), 0
        for slot in idle:
            common = _common_prefix(keys, slot.keys) if keys and slot.keys else 0
            # llama-server's --slot-prompt-similarity (0.5): a slot is chosen for what it holds only when
            # the prompt shares more than half of it; otherwise the least recently used slot is taken
            if common > reused and common > SLOT_PROMPT_SIMILARITY * len(slot.keys):
                best, reused = slot, common
        if reused == 0 and keys and best.keys:
            reused = _common_prefix(keys, best.keys)  # the LRU slot's own common prefix is still reused
        chunk = min(seq.target - reused, budget)
        if self.free + self.idle_slot_blocks - reused < chunk:
            return -1
        self.idle_slot_blocks -= best.blocks
        self.free += best.blocks - reused
        best.seq, best.keys, best.blocks = seq, [], 0
        seq.slot = best.index
        self._allocate(chunk)
        seq.private = reused + chunk
        seq.computed = reused
        seq.hit_tokens += reused
        self.stats["prefix_queries"] += seq.target
        self.stats["prefix_hits"] += reused
        return chunk

    def _release_to_slot(self, seq: Sequence, now: float) -> None:
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

    def _store_cpu(self, key: Hashable) -> None:
        if self.cpu_capacity <= self.cpu_swap_used:
            return
        if key in self.cpu:
            self.cpu.move_to_end(key)
            return
        while len(self.cpu) + self.cpu_swap_used >= self.cpu_capacity:
            self.cpu.popitem(last=False)
        self.cpu[key] = True
        self.stats["offload_store_blocks"] += 1

    def _decref(self, key: Hashable, now: float) -> None:
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
            self._store_cpu(key)
            moved += 1
        return moved

    # --- admission -------------------------------------------------------------------------
    def add(self, seq: Sequence, now: float) -> None:
        """Queue a request; raises RequestTooLarge, RequestRejected or EngineOOM."""
        config = self.config
        if seq.prompt_len <= 0:
            raise RequestTooLarge("prompt: must contain at least one token")
        if seq.max_tokens <= 0:
            raise RequestTooLarge(f"max_tokens: must be a positive integer, got {seq.max_tokens}")
        if seq.prompt_len + seq.max_tokens > config.max_model_len:
            raise RequestTooLarge(
                f"prompt ({seq.prompt_len} tokens) + max_tokens ({seq.max_tokens}) exceeds max_model_len "
                f"{config.max_model_len}"
            )
        needed = self.static_blocks if self.static else blocks_for(seq.prompt_len + seq.max_tokens, self.bs)
        if needed > self.total_blocks:
            raise RequestTooLarge(f"request needs {needed} KV blocks, the pool has {self.total_blocks}")
        self._admitted += 1
        if config.fault_oom_every and self._admitted % config.fault_oom_every == 0:
            self.stats["requests_oom"] += 1
            raise EngineOOM("CUDA out of memory (simulated fault): tried to allocate KV blocks")
        if config.oom_without_admission:
            self._reserve_or_oom(seq, needed)
        # 429: reject when the batch is full (counting the queue) and max_waiting already wait
        limit = config.max_waiting or 0
        if (
            config.reject_policy == "429"
            and len(self.waiting) >= limit
            and len(self.running) + len(self.waiting) >= config.max_num_seqs + limit
        ):
            self.stats["requests_rejected"] += 1
            raise RequestRejected(
                f"server busy: {len(self.waiting)} requests waiting (limit {config.max_waiting or 0})"
            )
        seq.arrival = now if seq.arrival is None else seq.arrival
        self.offload_idle(now)
        self.waiting.append(seq)

    def _reserve_or_oom(self, seq: Sequence, needed: int) -> None:
        """No admission control (`oom_without_admission`): the request's whole KV is claimed at once,
        so when what is in flight already holds the pool the allocation fails instead of queueing."""
        config = self.config
        in_flight = list(self.running.values()) + list(self.waiting)
        claimed = sum(
            self.static_blocks if self.static else blocks_for(s.prompt_len + s.max_tokens, self.bs) for s in in_flight
        )
        if claimed + needed <= self.total_blocks:
            return
        self.stats["requests_oom"] += 1
        message = (
            f"CUDA out of memory: tried to allocate {needed} KV blocks with {self.total_blocks - claimed} of "
            f"{self.total_blocks} free (simulated: no admission control)"
        )
        if config.oom_without_admission == "crash":
            raise EngineCrashed(message + "; the engine process died")
        raise EngineOOM(message)

    def abort(self, seq: Sequence, now: float) -> None:
        """Client went away: free everything the request holds."""
        if seq.status == FINISHED:
            return
        if seq.status == WAITING:
            try:
                self.waiting.remove(seq)
            except ValueError:
                pass
            if seq.swapped_blocks:
                self.cpu_swap_used -= seq.swapped_blocks
                seq.swapped_blocks = 0
        else:
            self._leave_running(seq)
            self._release(seq, now)
        seq.status = FINISHED
        seq.finish_t = now
        seq.finish_reason = "abort"
        self.stats["requests_aborted"] += 1

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

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def _lookup(self, seq: Sequence) -> tuple[list[Hashable], int, int]:
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

    def _try_admit(self, seq: Sequence, budget: int, now: float, outcome_extra: list[float]) -> int:
        """Admit the head of the queue if its first chunk fits; returns the chunk size, or -1."""
        if self.slots_mode:
            return self._admit_to_slot(seq, budget)
        if seq.swapped_blocks:  # swap-preempted: bring its blocks back
            if self.available < seq.swapped_blocks:
                return -1
            self._allocate(seq.swapped_blocks)
            seq.private = seq.swapped_blocks
            self.cpu_swap_used -= seq.swapped_blocks
            self.stats["swap_in_blocks"] += seq.swapped_blocks
            outcome_extra.append(self.config.transfer_s(seq.swapped_blocks))
            seq.swapped_blocks = 0
            self._mark_swapped_in(seq)
            return 0
        keys, gpu_hits, cpu_hits = self._lookup(seq)
        hit_blocks = gpu_hits + cpu_hits
        computed = hit_blocks * self.bs
        chunk = min(seq.target - computed, budget)
        if self.static:
            need_new = self.static_blocks
        else:
            need_new = blocks_for(computed + chunk, self.bs) - gpu_hits
        ref, evictable = self.ref, self.evictable
        gpu_keys = keys[:gpu_hits]
        reclaimable = 0
        for key in gpu_keys:
            if key in evictable:
                reclaimable += 1
        if self.available - reclaimable < need_new:
            return -1
        for key in gpu_keys:
            if key in evictable:
                del evictable[key]
                ref[key] = 1
            else:
                ref[key] += 1
        seq.shared.extend(gpu_keys)
        cpu_keys = keys[gpu_hits:hit_blocks]
        for key in cpu_keys:  # take them out first so eviction into the CPU tier cannot drop them
            del self.cpu[key]
        self._allocate(need_new)
        for key in cpu_keys:  # swap CPU-tier hits back in
            ref[key] = 1
        seq.shared.extend(cpu_keys)
        seq.private = need_new - cpu_hits
        if cpu_hits:
            self.stats["offload_load_blocks"] += cpu_hits
            self.stats["swap_in_blocks"] += cpu_hits
            outcome_extra.append(self.config.transfer_s(cpu_hits))
            self._mark_swapped_in(seq)
        seq.static = self.static
        seq.computed = computed
        seq.hit_tokens += computed
        self.stats["prefix_queries"] += seq.target
        self.stats["prefix_hits"] += computed
        return chunk

    def _mark_swapped_in(self, seq: Sequence) -> None:
        seq.swapped_in = True
        if self.config.fault_corrupt_swapped_in and seq.stream is not None:
            seq.stream.corrupted = True

    # --- decode set (aggregate accounting) --------------------------------------------------
    def _enter_decode(self, seq: Sequence) -> None:
        seq.status = DECODE
        seq.enter_g, seq.enter_kv, seq.enter_out = self.G, seq.target, seq.out_done
        self.decode[seq.order] = seq
        self.S += seq.target
        if not seq.static:
            seq.need_r = (self.G - seq.target) % self.bs
            self.need_at[seq.need_r] += 1
        seq.finish_g = self.G + (seq.max_tokens - seq.out_done)
        heapq.heappush(self.finish_heap, (seq.finish_g, seq.order, seq))

    def _kv_len(self, seq: Sequence) -> int:
        if seq.status == DECODE:
            return seq.enter_kv + (self.G - seq.enter_g)
        return seq.computed

    def _leave_decode(self, seq: Sequence) -> None:
        """Materialise a decode sequence's state and remove it from the aggregate."""
        steps = self.G - seq.enter_g
        kv = seq.enter_kv + steps
        seq.out_done = seq.enter_out + steps
        seq.computed = kv
        del self.decode[seq.order]
        self.S -= kv
        if not seq.static:
            self.need_at[seq.need_r] -= 1
            owed = blocks_for(kv, self.bs) - len(seq.shared) - seq.private
            seq.private += owed
            self.growth -= owed

    def _leave_running(self, seq: Sequence) -> None:
        if seq.status == DECODE:
            self._leave_decode(seq)
        else:
            self.prefilling.pop(seq.order, None)
        del self.running[seq.order]

    def _release(self, seq: Sequence, now: float) -> None:
        """Return a sequence's blocks: full blocks stay cached (prefix caching), the rest are freed.

        Blocks join the LRU tail-first, so a chain's later blocks are evicted before its head. Under the
        `slots` strategy the request's KV stays resident in its slot instead."""
        if self.slots_mode:
            self._release_to_slot(seq, now)
            return
        ref, evictable = self.ref, self.evictable
        private = seq.private
        if self.prefix_caching:
            full = seq.computed // self.bs
            start = len(seq.shared)
            if full > start:
                keys = seq.keys.block_keys(start, full, self.bs)
                if ref.keys().isdisjoint(keys) and evictable.keys().isdisjoint(keys):
                    keys.reverse()
                    evictable.update(dict.fromkeys(keys, now))
                    private -= len(keys)
                else:
                    for key in reversed(keys):
                        if key not in ref and key not in evictable:
                            evictable[key] = now
                            private -= 1
        for key in reversed(seq.shared):
            count = ref[key] - 1
            if count:
                ref[key] = count
            else:
                del ref[key]
                evictable[key] = now
        self.free += private
        seq.shared = []
        seq.private = 0

    def _crossings(self, steps: int) -> int:
        """Blocks the decode set needs over the next `steps` steps."""
        if steps <= 0:
            return 0
        bs, g = self.bs, self.G
        if steps == 1:
            return self.need_at[g % bs]
        if bs == 1:
            return steps * self.need_at[0]
        total = 0
        for r, count in enumerate(self.need_at):
            if count:
                total += count * (((g + steps - 1 - r) // bs) - ((g - 1 - r) // bs))
        return total

    def _preempt(self, seq: Sequence, now: float) -> float:
        """Preempt one running sequence (recompute or swap); returns the transfer time it costs."""
        self._leave_running(seq)
        self.stats["preemptions"] += 1
        seq.preemptions += 1
        cost = 0.0
        blocks = len(seq.shared) + seq.private
        if (
            self.config.preemption_mode == "swap"
            and seq.status == DECODE
            and self.cpu_capacity - self.cpu_swap_used - len(self.cpu) >= blocks
        ):
            for key in seq.shared:
                self._decref(key, now)
            self.free += seq.private
            seq.shared, seq.private = [], 0
            seq.swapped_blocks = blocks
            self.cpu_swap_used += blocks
            self.stats["swap_out_blocks"] += blocks
            cost = self.config.transfer_s(blocks)
            seq.target = seq.computed  # resumes decoding where it stopped
        else:
            self._release(seq, now)
            seq.computed = 0
            seq.target = seq.prompt_len + seq.out_done  # recompute prompt + generated tokens
        seq.status = WAITING
        self.waiting.appendleft(seq)
        return cost

    def _victim(self, exclude: Sequence | None = None) -> Sequence | None:
        if self.by_priority:  # the least important, latest admitted first
            candidates = [seq for seq in self.running.values() if seq is not exclude]
            return max(candidates, key=_rank, default=None)
        for order in reversed(self.running):
            seq = self.running[order]
            if seq is not exclude:
                return seq
        return None

    def _sort_waiting(self) -> None:
        """Priority policy: the waiting queue in priority order, arrival order within a priority."""
        waiting = self.waiting
        if len(waiting) > 1 and any(waiting[i].priority > waiting[i + 1].priority for i in range(len(waiting) - 1)):
            ordered = sorted(waiting, key=lambda seq: seq.priority)
            waiting.clear()
            waiting.extend(ordered)

    # --- the scheduler step ------------------------------------------------------------------
    def step(self, now: float, horizon: float = math.inf) -> StepOutcome:
        """One scheduler iteration starting at `now` (several identical decode steps when
        coalescing, never past `horizon`)."""
        config = self.config
        self.offload_idle(now)
        outcome = StepOutcome(duration=0.0)
        extra: list[float] = []  # transfer times paid by this step
        self._grow_decode(now, extra, outcome)
        budget = config.max_num_batched_tokens - len(self.decode)
        chunks: list[tuple[Sequence, int]] = []
        deferred, budget = self._continue_prefills(budget, now, chunks, extra, outcome)
        budget = self._admit(budget, now, chunks, extra, outcome)
        # 3b. priority policy: the less important prefills continue with what is left
        for seq in deferred:
            budget = self._continue_prefill(seq, budget, now, chunks, extra, outcome)

        n_decode = len(self.decode)
        prefill_compute = 0.0
        prefill_ctx = 0
        for seq, chunk in chunks:
            prefill_compute += config.prefill_s(chunk, seq.computed)
            prefill_ctx += seq.computed + chunk
        swap_time = sum(extra)
        steps = self._plan_steps(now, horizon, swap_time, bool(chunks), n_decode)
        duration = self._step_duration(steps, n_decode, bool(chunks), prefill_compute, prefill_ctx, swap_time)
        outcome.duration = duration
        outcome.steps = max(steps, 1)
        end = now + duration
        self._apply_decode(steps, n_decode, end, outcome)
        self._apply_prefill(chunks, end, outcome)
        return outcome

    def _grow_decode(self, now: float, extra: list[float], outcome: StepOutcome) -> None:
        """1. decode growth for one step; preempt from the back when blocks run out."""
        while self._crossings(1) > self.available:
            victim = self._victim()
            if victim is None:
                break
            extra.append(self._preempt(victim, now))
            outcome.preempted.append(victim)

    def _continue_prefills(
        self,
        budget: int,
        now: float,
        chunks: list[tuple[Sequence, int]],
        extra: list[float],
        outcome: StepOutcome,
    ) -> tuple[list[Sequence], int]:
        """2. continue chunked prefills of running sequences (under the priority policy, only
        those at least as important as the best waiting request: the rest, returned, get what is
        left after admission, step 3b); returns them and the budget left."""
        deferred: list[Sequence] = []
        prefilling = list(self.prefilling.values()) if self.prefilling else []
        if self.by_priority:
            self._sort_waiting()
            prefilling.sort(key=_rank)
            best_waiting = self.waiting[0].priority if self.waiting else math.inf
            deferred = [seq for seq in prefilling if seq.priority > best_waiting]
            prefilling = [seq for seq in prefilling if seq.priority <= best_waiting]
        for seq in prefilling:
            budget = self._continue_prefill(seq, budget, now, chunks, extra, outcome)
        return deferred, budget

    def _admit(
        self,
        budget: int,
        now: float,
        chunks: list[tuple[Sequence, int]],
        extra: list[float],
        outcome: StepOutcome,
    ) -> int:
        """3. admit from the waiting queue (FIFO, head-of-line blocking); not in a step that
        had to preempt, or the victim would be readmitted at once and thrash. Returns the budget left."""
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs and not outcome.preempted:
            seq = self.waiting[0]
            chunk = self._try_admit(seq, budget, now, extra)
            if chunk < 0:
                break
            self.waiting.popleft()
            self._order += 1
            seq.order = self._order
            self.running[seq.order] = seq
            if seq.first_scheduled is None:
                seq.first_scheduled = now
            if seq.target == seq.computed and seq.out_done > 0:  # swapped back in: resume decoding
                seq.status = DECODE
                self._enter_decode(seq)
                continue
            seq.status = PREFILL
            self.prefilling[seq.order] = seq
            chunks.append((seq, chunk))
            budget -= chunk
        return budget

    def _plan_steps(self, now: float, horizon: float, swap_time: float, prefills: bool, n_decode: int) -> int:
        """4. how many decode steps this iteration covers (0: stalled, no block left for decode
        growth); allocates their growth and records the peaks."""
        steps = 1
        if self.coalesce and not prefills and n_decode:
            steps = self._coalesced_steps(now, horizon, swap_time)
        growth = self._crossings(steps)
        if growth > self.available:  # nothing left to preempt: stall this step's decode
            steps, growth = 0, 0
        self._allocate(growth)
        self.growth += growth
        used = self.total_blocks - self.free - len(self.evictable)
        if used > self.peak_used_blocks:
            self.peak_used_blocks = used
        if len(self.running) > self.peak_running:
            self.peak_running = len(self.running)
        return steps

    def _step_duration(
        self, steps: int, n_decode: int, prefills: bool, prefill_compute: float, prefill_ctx: int, swap_time: float
    ) -> float:
        """5. duration: weights + KV read over bandwidth (decode), or compute (prefill)."""
        config = self.config
        bandwidth = config.gpu_profile.hbm_bandwidth_bytes_per_s
        kvb = config.kv_bytes_per_token
        if steps <= 1:
            # leaked (fragmented) blocks are read as scattered KV: each decode step slows as they grow
            memory_time = (config.weight_bytes + kvb * (self.S + prefill_ctx + self.leaked * self.bs)) / bandwidth
            compute_time = prefill_compute
            duration = config.step_overhead_s + max(memory_time, compute_time) + swap_time
            if not n_decode and not prefills:
                duration = swap_time or config.step_overhead_s
            return duration
        per_step = config.step_overhead_s + config.weight_bytes / bandwidth
        return (
            steps * per_step
            + kvb / bandwidth * (steps * (self.S + self.leaked * self.bs) + n_decode * steps * (steps - 1) / 2)
            + swap_time
        )

    def _apply_decode(self, steps: int, n_decode: int, end: float, outcome: StepOutcome) -> None:
        """6a. apply decode progress and the finishes it brings."""
        if steps and n_decode:
            if self.coalesce:
                self.G += steps
            else:
                outcome.decoded = list(self.decode.values())
                self.G += steps
            self.S += n_decode * steps
            self.stats["generation_tokens"] += n_decode * steps
        heap = self.finish_heap
        while heap and heap[0][0] <= self.G:
            finish_g, _, seq = heapq.heappop(heap)
            if seq.status != DECODE or seq.finish_g != finish_g:
                continue  # stale entry (preempted since)
            self._finish(seq, end, "length")
            outcome.finished.append(seq)

    def _apply_prefill(self, chunks: list[tuple[Sequence, int]], end: float, outcome: StepOutcome) -> None:
        """6b. apply prefill progress: a finished prefill gives the first token, then decodes or finishes."""
        for seq, chunk in chunks:
            if seq.order not in self.running or seq.status != PREFILL:
                continue
            seq.computed += chunk
            self.stats["prompt_tokens"] += chunk
            if self.prefix_caching:
                self._register_full_blocks(seq)
            if seq.computed >= seq.target:
                seq.out_done += 1
                self.stats["generation_tokens"] += 1
                if seq.first_token_t is None:
                    seq.first_token_t = end
                outcome.first_token.append(seq)
                del self.prefilling[seq.order]
                if seq.out_done >= seq.max_tokens:
                    del self.running[seq.order]
                    self._release(seq, end)
                    self._mark_finished(seq, end, "length")
                    outcome.finished.append(seq)
                else:
                    self._enter_decode(seq)

    def _continue_prefill(
        self,
        seq: Sequence,
        budget: int,
        now: float,
        chunks: list[tuple[Sequence, int]],
        extra: list[float],
        outcome: StepOutcome,
    ) -> int:
        """Schedule the next chunk of a running prefill (preempting later or less important
        sequences when blocks run out); returns the budget left."""
        if seq.status != PREFILL or budget <= 0 or seq.order not in self.running:
            return budget
        chunk = min(seq.target - seq.computed, budget)
        need = 0 if seq.static else blocks_for(seq.computed + chunk, self.bs) - len(seq.shared) - seq.private
        while need > self.available:
            victim = self._victim(exclude=seq)
            if victim is None or _rank(victim) < _rank(seq):
                break
            extra.append(self._preempt(victim, now))
            outcome.preempted.append(victim)
        if seq.order not in self.running:
            return budget
        if need > self.available:
            extra.append(self._preempt(seq, now))
            outcome.preempted.append(seq)
            return budget
        self._allocate(need)
        seq.private += need
        chunks.append((seq, chunk))
        return budget - chunk

    def _coalesced_steps(self, now: float, horizon: float, swap_time: float) -> int:
        """Largest run of identical decode steps: up to the next finish, the horizon, and memory."""
        steps = self.finish_heap[0][0] - self.G if self.finish_heap else 1
        steps = max(steps, 1)
        if math.isfinite(horizon):
            config = self.config
            bandwidth = config.gpu_profile.hbm_bandwidth_bytes_per_s
            a = len(self.decode) * config.kv_bytes_per_token / bandwidth / 2
            b = config.step_overhead_s + (config.weight_bytes + config.kv_bytes_per_token * self.S) / bandwidth - a
            dt = horizon - now - swap_time
            if dt <= 0:
                return 1
            if a > 0:
                k = math.ceil((-b + math.sqrt(b * b + 4 * a * dt)) / (2 * a))
            else:
                k = math.ceil(dt / b)
            steps = min(steps, max(k, 1))
        if self._crossings(steps) > self.available:
            low, high = 1, steps
            while low < high:
                mid = (low + high + 1) // 2
                if self._crossings(mid) <= self.available:
                    low = mid
                else:
                    high = mid - 1
            steps = low
        return steps

    def _register_full_blocks(self, seq: Sequence) -> None:
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

    def _finish(self, seq: Sequence, end: float, reason: str) -> None:
        self._leave_running(seq)
        self._release(seq, end)
        self._mark_finished(seq, end, reason)

    def _mark_finished(self, seq: Sequence, end: float, reason: str) -> None:
        leak = self.config.fault_kv_leak_blocks_per_request
        if leak:
            # the fault: blocks a finished request never gives back, up to LEAK_CAP of the pool (so
            # the engine keeps serving, ever slower and fuller, as a leaking engine does for a while)
            count = min(leak, self.free, max(int(self.total_blocks * LEAK_CAP) - self.leaked, 0))
            self.free -= count
            self.leaked += count
        seq.status = FINISHED
        seq.finish_t = end
        seq.finish_reason = reason
        self.stats["requests_success"] += 1

    # --- observation ----------------------------------------------------------------------
    def out_done(self, seq: Sequence) -> int:
        if seq.status == DECODE:
            return seq.enter_out + (self.G - seq.enter_g)
        return seq.out_done

    def fragmentation(self) -> float:
        """Share of in-use block slots holding no token (internal fragmentation)."""
        used = self.used_blocks
        if used <= 0:
            return 0.0
        unused = 0
        bs = self.bs
        for seq in self.running.values():
            kv = self._kv_len(seq)
            blocks = self.static_blocks if seq.static else max(blocks_for(kv, bs), len(seq.shared) + seq.private)
            unused += blocks * bs - kv
        unused += self.leaked * bs  # held by nobody, holding no token
        return min(1.0, max(0.0, unused / (used * bs)))

    def snapshot(self) -> dict[str, Any]:
        return {
            "kv_cache_usage": self.kv_cache_usage(),
            "used_blocks": self.used_blocks,
            "cached_blocks": len(self.ref) + len(self.evictable),
            "evictable_blocks": len(self.evictable),
            "free_blocks": self.free,
            "cpu_blocks": len(self.cpu) + self.cpu_swap_used,
            "running": len(self.running),
            "waiting": len(self.waiting),
            "fragmentation": self.fragmentation(),
            "leaked_blocks": self.leaked,
            **self.stats,
        }

    def check_invariants(self) -> None:
        """Block conservation (tests): free + evictable + in-use == total."""
        private = sum(s.private for s in self.running.values())
        in_use_shared = len(self.ref)
        assert all(count > 0 for count in self.ref.values())
        assert self.ref.keys().isdisjoint(self.evictable.keys())
        total = self.free + len(self.evictable) + in_use_shared + private + self.growth + self.leaked
        assert total == self.total_blocks, (
            total,
            self.total_blocks,
            self.free,
            len(self.evictable),
            in_use_shared,
            private,
            self.growth,
        )
        assert self.growth >= 0
