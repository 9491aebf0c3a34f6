"""The engine model: a paged KV block pool driven by a continuous-batching scheduler.

Clock-agnostic state machine: `Engine.step(now)` runs one scheduler iteration starting at
simulated time `now` and returns how long it took (`StepOutcome.duration`). The live server
sleeps that long (scaled) and streams the tokens; the offline simulator just adds it to a
virtual clock. Nothing here reads a clock or does I/O.

The memory model is the block pool's (`block_pool`).

Decode is accounted in aggregate so that a step costs O(block_size), not O(batch): every
decoding sequence advances with a global decode counter `G`; the blocks they need are counted
from their position modulo the block size, and attributed to individual sequences only when
they leave the decode set ("materialised"). The offline simulator can therefore coalesce runs
of identical decode steps (`coalesce=True`) and simulate 100k requests in seconds.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import Any

from benchmarks.simulator.block_pool import BlockPool
from benchmarks.simulator.config import SimConfig, blocks_for
from benchmarks.simulator.errors import EngineCrashed, EngineOOM, RequestRejected, RequestTooLarge
from benchmarks.simulator.sequence import DECODE, FINISHED, PREFILL, WAITING, Sequence, StepOutcome

LEAK_CAP = 0.9  # fault_kv_leak_blocks_per_request stops leaking at this share of the pool


def _rank(seq: Sequence) -> tuple[int, int]:
    """Scheduling rank: (priority, admission order); a larger rank is preempted first. Under fcfs
    every priority is 0, so this is the admission order alone."""
    return (seq.priority, seq.order)


class Engine(BlockPool):
    def __init__(self, config: SimConfig, coalesce: bool = False) -> None:
        super().__init__(config)
        strategy = config.strategy
        self.static: bool = strategy["static"]
        self.coalesce = coalesce
        self.by_priority = config.scheduling_policy == "priority"
        self.static_blocks = blocks_for(config.max_model_len, self.bs)
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

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def _try_admit(self, seq: Sequence, budget: int, now: float, outcome_extra: list[float]) -> int:
        """Admit the head of the queue if its first chunk fits; returns the chunk size, or -1."""
        if self.slots_mode:
            return self.admit_to_slot(seq, budget)
        if seq.swapped_blocks:  # swap-preempted: bring its blocks back
            if self.available < seq.swapped_blocks:
                return -1
            self.allocate(seq.swapped_blocks)
            seq.private = seq.swapped_blocks
            self.cpu_swap_used -= seq.swapped_blocks
            self.stats["swap_in_blocks"] += seq.swapped_blocks
            outcome_extra.append(self.config.transfer_s(seq.swapped_blocks))
            seq.swapped_blocks = 0
            self._mark_swapped_in(seq)
            return 0
        keys, gpu_hits, cpu_hits = self.lookup(seq)
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
        self.allocate(need_new)
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
            self.release_to_slot(seq, now)
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
                self.decref(key, now)
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
        self.allocate(growth)
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
                self.register_full_blocks(seq)
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
        self.allocate(need)
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
