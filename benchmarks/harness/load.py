"""Load generation: closed loop (fixed concurrency) and open loop (Poisson/gamma arrivals).

Why its own module: the established clients silently under-deliver (they report a concurrency or
rate they did not keep). This one measures what it actually held: the time-weighted number of
requests in flight (from each request's send to its last byte, both on the one perf_counter
clock, so it can never exceed what was requested), and flags the run as client-bound, saying
which, when the client process used more than 90% of a core, when sends were late, when reads
held tokens that arrived more than one inter-token gap apart (their times are stamped late), or
when the requested concurrency or rate was not kept. It is cancellable within well under 2 s
(partial data kept) and reports progress at a fixed interval.

Above PROCESS_CONCURRENCY requests in flight one event loop saturates its core, so a closed loop
is split over worker processes (`benchmarks.harness.workers`), one per core it may use, and their
records merged: held concurrency, peak, lateness and reads are computed on the merged records.

What the outcome is judged by lives in `load_judging`, its summary in `load_summary`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import math
import random
import time
from collections import deque
from dataclasses import replace
from typing import Any, Callable

from benchmarks.harness import workers as worker_processes
from benchmarks.harness.client import OpenAIClient
from benchmarks.harness.load_config import CancelHook, LoadConfig, LoadOutcome, ProgressCallback
from benchmarks.harness.load_judging import (
    held_concurrency,
    held_window_end,
    judge,
    kernel_clock,
    peak_concurrency,
    sending_rate,
)
from benchmarks.harness.request_record import RequestRecord, RequestSpec
from benchmarks.harness.stopping import EarlyStop

# A closed loop above this many requests in flight runs in worker processes (one per usable core):
# one process on vLLM-shaped streams (10 ms between tokens) nears a core at about this many
# (benchmarks/perf/side_by_side.py prints each run's share of a core).
PROCESS_CONCURRENCY = 512


def _cancel_requested(cancel: CancelHook) -> bool:
    if cancel is None:
        return False
    if hasattr(cancel, "is_set"):
        return bool(cancel.is_set())
    return bool(cancel())


def _inter_arrival(config: LoadConfig, rng: random.Random, rate: float) -> float:
    if config.arrival == "constant":
        return 1.0 / rate
    if config.arrival == "gamma":
        shape = config.gamma_shape
        return rng.gammavariate(shape, 1.0 / (rate * shape))
    return rng.expovariate(rate)


class _Tracker:
    """Requests in flight now, the peak and recent TTFTs: for progress reports (held concurrency is
    computed afterwards from the records, on one clock)."""

    __slots__ = ("in_flight", "peak", "done", "ttfts")

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.done = 0
        self.ttfts: deque[float] = deque(maxlen=256)

    def up(self) -> None:
        self.in_flight += 1
        if self.in_flight > self.peak:
            self.peak = self.in_flight

    def down(self, record: RequestRecord) -> None:
        self.in_flight -= 1
        self.done += 1
        ttft = record.ttft_ms
        if ttft is not None:
            self.ttfts.append(ttft)

    def ttft_p50(self) -> float | None:
        if not self.ttfts:
            return None
        values = sorted(self.ttfts)
        return values[len(values) // 2]


def run_async(coro: Any) -> Any:
    """Run a coroutine to completion on uvloop when it is installed (about 1.3x fewer client CPU
    cycles per request than the default loop, measured in benchmarks/perf/harness.py), else asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def process_count(config: LoadConfig) -> int:
    """Worker processes for this load: as configured, else one per usable core above PROCESS_CONCURRENCY."""
    if config.processes is not None:
        return config.processes if worker_processes.fork_available() else 1
    if config.mode != "closed" or not config.concurrency or config.concurrency <= PROCESS_CONCURRENCY:
        return 1
    if not worker_processes.fork_available():
        return 1
    return max(1, min(worker_processes.usable_cores(), math.ceil(config.concurrency / PROCESS_CONCURRENCY)))


async def run_load(
    client: OpenAIClient,
    make_request: Callable[[int], RequestSpec],
    config: LoadConfig,
    cancel: CancelHook = None,
    progress: ProgressCallback | None = None,
    phase: str = "load",
) -> LoadOutcome:
    """Drive `client` with requests from `make_request(index)` under `config`.

    `cancel`: an asyncio/threading Event or a callable returning True to stop; checked every
    0.2 s, in-flight requests are cancelled and the data so far kept (`outcome.cancelled`).
    `progress`: called with {phase, percent, requests_done, ttft_p50_ms, in_flight, elapsed_s} at
    least every `config.progress_interval_s`; a plain function runs in a worker thread (so a slow
    database write never stalls the event loop), a coroutine function is awaited.
    With several worker processes (`process_count`), `make_request` runs in them (it is inherited
    through fork, not pickled) with the same indices as in one process.
    """
    config.validate()
    processes = process_count(config)
    if processes > 1:
        outcome = await _run_in_processes(client, make_request, config, processes, cancel, progress, phase)
    else:
        outcome = await _run_here(client, make_request, config, cancel, progress, phase)
        outcome.client_clock = client.timestamping()
    judge(outcome, kernel_clock(outcome.client_clock))
    return outcome


def _thread_busy_s() -> float | None:
    """Seconds this thread has run plus waited on the run queue (Linux schedstat), None elsewhere."""
    try:
        with open("/proc/thread-self/schedstat") as handle:
            run_ns, wait_ns = handle.read().split()[:2]
        return (int(run_ns) + int(wait_ns)) / 1e9
    except (OSError, ValueError):
        return None


async def _run_here(
    client: OpenAIClient,
    make_request: Callable[[int], RequestSpec],
    config: LoadConfig,
    cancel: CancelHook,
    progress: ProgressCallback | None,
    phase: str,
) -> LoadOutcome:
    """The load in this process's event loop (judged by the caller): setup, the send loop (closed
    workers or the open scheduler), the drain, then the summary figures."""
    load = _LocalLoad(client, make_request, config, cancel, progress, phase)
    watch_task = load.loop.create_task(load.watcher())
    try:
        if config.mode == "closed":
            await load.closed_loop()
        else:
            await load.open_loop()
        await load.drain()
    finally:
        end = await load.stop_all(watch_task)
    load.close_books(end)
    return load.outcome


class _LocalLoad:
    """One load in this process: the outcome being filled, the counters the senders share, their
    tasks. Per request: next_index, then one (the send); closed_worker or open_scheduler loops them."""

    def __init__(
        self,
        client: OpenAIClient,
        make_request: Callable[[int], RequestSpec],
        config: LoadConfig,
        cancel: CancelHook,
        progress: ProgressCallback | None,
        phase: str,
    ) -> None:
        self.client, self.make_request, self.config = client, make_request, config
        self.cancel, self.progress, self.phase = cancel, progress, phase
        self.loop = asyncio.get_running_loop()
        self.outcome = LoadOutcome(config=config)
        self.tracker = _Tracker()
        self.rng = random.Random(config.seed)
        self.stop = asyncio.Event()
        self.warmup_count = config.warmup_requests
        self.cpu_start, self.busy_start = time.process_time(), _thread_busy_s()
        self.run_start = time.perf_counter()
        self.outcome.run_start = self.run_start
        self.measure_start = self.run_start + config.warmup_s
        self.outcome.measure_start = self.measure_start
        self.deadline = self.measure_start + config.duration_s if config.duration_s is not None else math.inf
        self.total_requests = (config.max_requests or 0) + self.warmup_count
        self.issued = 0
        self.measured_sends: list[float] = []
        self.lateness: list[float] = []
        self.lags: list[float] = []
        self.tasks: set[asyncio.Task] = set()
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvselect-progress")
        self.stopper = EarlyStop(config.stop_after_connection_failures, config.stop_after_s_without_success)
        self.stopper.start(self.run_start)
        self.window_started = config.warmup_s <= 0 and self.warmup_count == 0

    def next_index(self) -> int | None:
        now = time.perf_counter()
        if self.stop.is_set() or now >= self.deadline:
            return None
        if self.config.max_requests is not None and self.issued >= self.total_requests:
            return None
        index = self.issued
        self.issued += 1
        if not self.window_started and index >= self.warmup_count and now >= self.measure_start:
            self.window_started = True
            if self.warmup_count:  # a warm-up by count: the window starts with the first measured send
                self.measure_start = now
                self.outcome.measure_start = now
        return index

    async def one(self, index: int) -> RequestRecord:
        spec = self.make_request(index)
        record = RequestRecord()
        measured = index >= self.warmup_count and self.window_started
        self.tracker.up()
        try:
            await self.client.send(spec, record)
        except asyncio.CancelledError:
            pass
        finally:
            self.tracker.down(record)
            outcome = self.outcome
            if (
                self.stopper.observe(record.ok, record.error_class, record.error, time.perf_counter())
                and not self.stop.is_set()
            ):
                outcome.stopped_early = self.stopper.reason  # a dead engine is not hammered until the planned end
                outcome.stopped_early_message = self.stopper.reason_message
                self.stop.set()
            if measured:
                outcome.records.append(record)
                self.measured_sends.append(record.send_time)
            else:
                outcome.warmup.append(record)
        return record

    def add_task(self, coroutine: Any) -> asyncio.Task:
        task = self.loop.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def closed_worker(self, worker: int) -> None:
        config = self.config
        delay = config.ramp_up_s * worker / max(config.concurrency or 1, 1)
        if delay:
            try:
                await asyncio.wait_for(self.stop.wait(), timeout=delay)
                return
            except asyncio.TimeoutError:
                pass
        previous_end: float | None = None
        while True:
            index = self.next_index()
            if index is None:
                return
            record = await self.one(index)
            # closed loop: a send is late by the time since this worker's previous response ended
            if previous_end is not None and index >= self.warmup_count and record.send_time > 0:
                self.lateness.append((record.send_time - previous_end) * 1000.0)
            previous_end = record.end_time

    async def closed_loop(self) -> None:
        """`concurrency` workers, each sending its next request when its previous one ended."""
        for w in range(int(self.config.concurrency or 0)):
            self.add_task(self.closed_worker(w))
        deadline_wait = self.loop.create_task(_sleep_until(self.deadline, self.stop))
        while self.tasks and not self.stop.is_set():
            await asyncio.wait(set(self.tasks) | {deadline_wait}, return_when=asyncio.FIRST_COMPLETED)
            if deadline_wait.done():
                break
        deadline_wait.cancel()

    async def open_scheduler(self) -> None:
        config, perf = self.config, time.perf_counter
        semaphore = asyncio.Semaphore(config.max_concurrency) if config.max_concurrency else None
        due = perf()
        base_rate = float(config.rate or 1.0)
        while True:
            elapsed = due - self.run_start
            rate = base_rate
            if config.ramp_up_s > 0 and elapsed < config.ramp_up_s:
                rate = max(base_rate * elapsed / config.ramp_up_s, base_rate * 0.05)
            due += _inter_arrival(config, self.rng, rate)
            delay = due - perf()
            if delay > 0:
                try:
                    await asyncio.wait_for(self.stop.wait(), timeout=delay)
                    return
                except asyncio.TimeoutError:
                    pass
            if semaphore is not None:
                await semaphore.acquire()
            index = self.next_index()
            if index is None:
                if semaphore is not None:
                    semaphore.release()
                return
            if index >= self.warmup_count:
                self.lateness.append((perf() - due) * 1000.0)
            task = self.add_task(self.one(index))
            if semaphore is not None:
                task.add_done_callback(lambda _t: semaphore.release())

    async def open_loop(self) -> None:
        """Arrivals at the configured rate until the end, a stop or a cancel."""
        scheduler = self.loop.create_task(self.open_scheduler())
        await asyncio.wait({scheduler, self.loop.create_task(self.stop.wait())}, return_when=asyncio.FIRST_COMPLETED)
        scheduler.cancel()

    async def drain(self) -> None:
        """Requests in flight at the end of the window may finish (bounded), then are cancelled."""
        self.outcome.measure_end = self.outcome.load_end = time.perf_counter()
        tasks, stop = self.tasks, self.stop
        if tasks and not stop.is_set():
            stop.set()
            done, pending = await asyncio.wait(set(tasks), timeout=self.config.drain_timeout_s)
            for task in pending:
                task.cancel()
        stop.set()
        if tasks:
            await asyncio.wait(set(tasks), timeout=5.0)

    async def call_progress(self, payload: dict[str, Any]) -> None:
        progress = self.progress
        if progress is None:
            return
        if inspect.iscoroutinefunction(progress):
            await progress(payload)
        else:
            await self.loop.run_in_executor(self.executor, progress, payload)

    def progress_payload(self, now: float) -> dict[str, Any]:
        config, tracker = self.config, self.tracker
        fractions = []
        if config.duration_s is not None:
            fractions.append((now - self.run_start) / max(config.warmup_s + config.duration_s, 1e-9))
        if config.max_requests is not None:
            fractions.append(tracker.done / max(self.total_requests, 1))
        percent = min(max(fractions) if fractions else 0.0, 1.0) * 100.0
        return {
            "phase": self.phase,
            "percent": round(percent, 1),
            "requests_done": tracker.done,
            "ttft_p50_ms": tracker.ttft_p50(),
            "in_flight": tracker.in_flight,
            "elapsed_s": round(now - self.run_start, 3),
        }

    async def watcher(self) -> None:
        """Cancel checks every 0.2 s, progress every interval, and the event-loop lag."""
        perf, loop, cancel, stop, outcome = time.perf_counter, self.loop, self.cancel, self.stop, self.outcome
        next_progress = perf()
        pending_progress: asyncio.Task | None = None
        tick = 0.2
        expected = perf() + tick
        while True:
            await asyncio.sleep(tick)
            now = perf()
            self.lags.append(max(now - expected, 0.0) * 1000.0)
            expected = now + tick
            if callable(cancel) and not hasattr(cancel, "is_set"):
                requested = await loop.run_in_executor(self.executor, _cancel_requested, cancel)
            else:
                requested = _cancel_requested(cancel)
            if self.stopper.check(now) and not stop.is_set():
                outcome.stopped_early = self.stopper.reason
                outcome.stopped_early_message = self.stopper.reason_message
                stop.set()
            if requested and not stop.is_set():
                outcome.cancelled = True
                stop.set()
                for task in list(self.tasks):
                    task.cancel()
            if now >= next_progress and (pending_progress is None or pending_progress.done()):
                pending_progress = loop.create_task(self.call_progress(self.progress_payload(now)))
                next_progress = now + self.config.progress_interval_s
            if stop.is_set() and not self.tasks:
                return

    async def stop_all(self, watch_task: asyncio.Task) -> float:
        """Cancel what still runs, close the window and send the final progress; the end time."""
        outcome = self.outcome
        self.stop.set()
        for task in list(self.tasks):
            task.cancel()
        watch_task.cancel()
        try:
            await watch_task
        except asyncio.CancelledError:
            pass
        end = time.perf_counter()
        if outcome.records and not outcome.cancelled:
            outcome.measure_end = max((r.end_time or r.send_time) for r in outcome.records)
        elif not outcome.measure_end:
            outcome.measure_end = end
        outcome.peak_concurrency = self.tracker.peak
        outcome.client_cpu_s = time.process_time() - self.cpu_start
        final = self.progress_payload(end)
        if not outcome.cancelled:
            final["percent"] = 100.0
        final["phase"] = f"{self.phase}:cancelled" if outcome.cancelled else f"{self.phase}:done"
        try:
            await self.call_progress(final)
        finally:
            self.executor.shutdown(wait=False)
        return end

    def close_books(self, end: float) -> None:
        """The figures of the whole run: held concurrency, client CPU and busy shares, lateness, rate."""
        outcome = self.outcome
        outcome.achieved_concurrency = held_concurrency(
            outcome.records + outcome.warmup, outcome.measure_start, held_window_end(outcome)
        )
        outcome.wall_s = end - self.run_start
        if outcome.wall_s > 0:
            busy_end = _thread_busy_s()
            outcome.cpu_fractions = [outcome.client_cpu_s / outcome.wall_s]
            busy_start = self.busy_start
            busy = outcome.client_cpu_s if busy_start is None or busy_end is None else busy_end - busy_start
            outcome.busy_fractions = [min(busy / outcome.wall_s, 1.0)]
        outcome.send_lateness_ms, outcome.loop_lags_ms = self.lateness, self.lags
        if sends_window := [t for t in self.measured_sends if t > 0]:
            outcome.achieved_rate = sending_rate(len(sends_window), outcome)


def _share(config: LoadConfig, worker: int, workers: int) -> LoadConfig:
    """Worker `worker`'s part of the load: its share of the concurrency, requests and rate."""

    def part(total: int | None) -> int | None:
        return None if total is None else total // workers + (1 if worker < total % workers else 0)

    return replace(
        config,
        concurrency=part(config.concurrency),
        max_requests=part(config.max_requests),
        warmup_requests=part(config.warmup_requests) or 0,
        max_concurrency=part(config.max_concurrency) if config.max_concurrency else None,
        rate=config.rate / workers if config.rate else None,
        seed=config.seed + worker,
        processes=1,
    )


async def _run_in_processes(
    client: OpenAIClient,
    make_request: Callable[[int], RequestSpec],
    config: LoadConfig,
    workers: int,
    cancel: CancelHook,
    progress: ProgressCallback | None,
    phase: str,
) -> LoadOutcome:
    """The load split over forked worker processes; their outcomes merged exactly (records, CPU, reads)."""
    loop = asyncio.get_running_loop()
    latest: dict[int, dict[str, Any]] = {}
    cpu_start, wall_start = time.process_time(), time.perf_counter()

    async def job(worker: int, stopped: Callable[[], bool], report: Callable[[dict[str, Any]], None]) -> LoadOutcome:
        share = _share(config, worker, workers)
        async with client.clone() as own:
            outcome = await _run_here(
                own, lambda index: make_request(index * workers + worker), share, stopped, report, phase
            )
            outcome.client_clock = own.timestamping()
        return outcome

    # As in one process: a plain progress function or cancel check runs on a worker thread (a
    # database write or read must not run on, nor stall, the event loop), a coroutine is awaited.
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvselect-progress")

    def on_progress(worker: int, payload: dict[str, Any]) -> None:
        latest[worker] = payload
        if progress is None or worker != 0:
            return
        merged = dict(
            payload,
            requests_done=sum(p.get("requests_done") or 0 for p in latest.values()),
            in_flight=sum(p.get("in_flight") or 0 for p in latest.values()),
        )
        if inspect.iscoroutinefunction(progress):
            loop.create_task(progress(merged))
        else:
            loop.run_in_executor(executor, progress, merged)

    async def cancel_requested() -> bool:
        if callable(cancel) and not hasattr(cancel, "is_set"):
            return bool(await loop.run_in_executor(executor, _cancel_requested, cancel))
        return _cancel_requested(cancel)

    try:
        outcomes: list[LoadOutcome] = await worker_processes.run_forked(
            job, workers, run_async, cancel_requested, on_progress
        )
    finally:
        executor.shutdown(wait=True)  # the last progress report is written before the outcome returns
    merged = LoadOutcome(config=config, processes=workers)
    for part in outcomes:
        merged.records.extend(part.records)
        merged.warmup.extend(part.warmup)
        merged.send_lateness_ms.extend(part.send_lateness_ms)
        merged.loop_lags_ms.extend(part.loop_lags_ms)
        merged.client_cpu_s += part.client_cpu_s
        merged.cpu_fractions.extend(part.cpu_fractions)
        merged.busy_fractions.extend(part.busy_fractions)
    merged.records.sort(key=lambda record: record.send_time)
    merged.run_start = min(part.run_start for part in outcomes)
    merged.measure_start = min(part.measure_start for part in outcomes)
    merged.measure_end = max(part.measure_end for part in outcomes)
    merged.cancelled = any(part.cancelled for part in outcomes)
    stopped = next((part for part in outcomes if part.stopped_early), None)
    if stopped is not None:
        merged.stopped_early, merged.stopped_early_message = stopped.stopped_early, stopped.stopped_early_message
    merged.client_cpu_s += time.process_time() - cpu_start  # the parent's own share (relaying, merging)
    merged.wall_s = time.perf_counter() - wall_start
    merged.load_end = max(part.load_end for part in outcomes)
    merged.achieved_concurrency = held_concurrency(
        merged.records + merged.warmup, merged.measure_start, held_window_end(merged)
    )
    merged.peak_concurrency = peak_concurrency(merged.records + merged.warmup)
    sends = [record.send_time for record in merged.records if record.send_time > 0]
    merged.achieved_rate = sending_rate(len(sends), merged) if sends else None
    clocks = [part.client_clock or {} for part in outcomes]
    merged.client_clock = dict(clocks[0])
    if all(clock.get("reads") is not None for clock in clocks):  # counted (kernel stamps) in every process
        reads = sum(clock["reads"] for clock in clocks)
        unstamped = sum(clock.get("unstamped_reads") or 0 for clock in clocks)
        merged.client_clock.update(
            reads=reads,
            unstamped_reads=unstamped,
            kernel_stamped_read_fraction=round((reads - unstamped) / reads, 4) if reads else None,
        )
        client.absorb_reads(reads - unstamped, unstamped)
    return merged


async def _sleep_until(deadline: float, stop: asyncio.Event) -> None:
    if math.isinf(deadline):
        await stop.wait()
        return
    try:
        await asyncio.wait_for(stop.wait(), timeout=max(deadline - time.perf_counter(), 0))
    except asyncio.TimeoutError:
        pass
