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
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import math
import random
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Literal

from benchmarks.harness import workers as worker_processes
from benchmarks.harness.client import OpenAIClient
from benchmarks.harness.request_record import RequestRecord, RequestSpec
from benchmarks.harness.stopping import LIMITS, EarlyStop
from benchmarks.result import LoadPoint, Stats
from selection.domain.messages import Message, to_json


def _(text: str) -> str:  # marks the reasons below for makemessages; pages translate them when shown
    return text


CLIENT_PROCESS = _("client process")
CLIENT_WORKER = _("client worker %(index)s of %(count)s")
CPU_BOUND = _(
    "%(who)s needed %(busy)s of a core (ran %(cpu)s, waited for one %(waited)s): the client, not the engine, set "
    "the pace"
)
CONCURRENCY_NOT_HELD = _("held %(held)s requests in flight on average, %(expected)s requested")
SENDS_BEHIND = _("%(late)s of sends were more than %(ms)s ms behind schedule")
SENDS_AFTER = _("%(late)s of sends were more than %(ms)s ms after the previous response ended")
LATE_READS = _(
    "%(late)s of tokens were read together with tokens sent one or more inter-token gaps (%(gap)s ms) earlier "
    "while the event loop lagged (p99 %(lag)s ms): their TTFT/ITL are stamped late, by up to %(max)s ms"
)
RATE_NOT_HELD = _("sent %(rate)s requests/s, %(requested)s requested")
LOOP_LAG = _("event-loop lag p99 %(lag)s ms: client timings are unreliable")


def client_bound(outcome: LoadOutcome, template: str, params: dict[str, Any] | None = None) -> None:
    """Record why the client, not the engine, may have set the pace: in English and as a message."""
    message = Message(template, params)
    outcome.client_bound_reasons.append(str(message))
    outcome.client_bound_messages.append(message)


Mode = Literal["closed", "open"]
Arrival = Literal["poisson", "gamma", "constant"]
ProgressCallback = Callable[[dict[str, Any]], Any]
CancelHook = Any  # asyncio.Event | threading.Event | Callable[[], bool] | None

# Thresholds for the client-bound flag.
CONCURRENCY_KEPT_FRACTION = 0.95
RATE_KEPT_FRACTION = 0.95
LATE_SEND_MS = 10.0
LATE_FRACTION = 0.05
LOOP_LAG_P99_MS = 20.0
CPU_BUSY_FRACTION = 0.90  # of one core, per client process (running or waiting to run)
LATE_READ_FRACTION = 0.01  # of token events that shared a read with tokens more than one gap apart
PACED_GAP_MS = 1.0  # a stream whose median gap between reads is at least this streams token by token
# A closed loop above this many requests in flight runs in worker processes (one per usable core):
# one process on vLLM-shaped streams (10 ms between tokens) nears a core at about this many
# (benchmarks/perf/side_by_side.py prints each run's share of a core).
PROCESS_CONCURRENCY = 512


class LoadConfigError(ValueError):
    """A load configuration that cannot run; the message names the field."""


@dataclass
class LoadConfig:
    mode: Mode = "closed"
    concurrency: int | None = None  # closed loop: requests kept in flight
    rate: float | None = None  # open loop: requests per second
    arrival: Arrival = "poisson"
    gamma_shape: float = 1.0  # open loop, gamma: <1 burstier than Poisson, >1 smoother
    # stop early, keeping the data, when the engine is gone (benchmarks.harness.stopping; None: never)
    stop_after_connection_failures: int | None = LIMITS["consecutive_connection_failures"]
    stop_after_s_without_success: float | None = LIMITS["seconds_without_success"]
    max_concurrency: int | None = None  # open loop: cap on requests in flight (None: none)
    duration_s: float | None = None  # measured window, after warm-up
    max_requests: int | None = None  # measured requests to issue
    warmup_s: float = 0.0
    warmup_requests: int = 0
    ramp_up_s: float = 0.0  # closed: workers start spread over this; open: rate rises linearly
    drain_timeout_s: float = 60.0  # after the window: wait this long for requests in flight
    progress_interval_s: float = 1.0
    seed: int = 0
    processes: int | None = None  # worker processes; None: one per usable core above PROCESS_CONCURRENCY

    def validate(self) -> None:
        if self.mode not in ("closed", "open"):
            raise LoadConfigError(f"load.mode: must be 'closed' or 'open', got {self.mode!r}")
        if self.mode == "closed" and (not isinstance(self.concurrency, int) or self.concurrency < 1):
            raise LoadConfigError(
                f"load.concurrency: must be a positive integer for a closed loop, got {self.concurrency!r}"
            )
        if self.mode == "open" and (self.rate is None or not self.rate > 0 or not math.isfinite(self.rate)):
            raise LoadConfigError(
                f"load.rate: must be a positive number of requests/s for an open loop, got {self.rate!r}"
            )
        if self.duration_s is None and self.max_requests is None:
            raise LoadConfigError("load.duration_s: give a duration or load.max_requests (neither was set)")
        if self.duration_s is not None and not self.duration_s > 0:
            raise LoadConfigError(f"load.duration_s: must be positive, got {self.duration_s!r}")
        if self.max_requests is not None and self.max_requests < 1:
            raise LoadConfigError(f"load.max_requests: must be at least 1, got {self.max_requests!r}")
        if self.arrival not in ("poisson", "gamma", "constant"):
            raise LoadConfigError(f"load.arrival: must be poisson, gamma or constant, got {self.arrival!r}")
        if self.arrival == "gamma" and not self.gamma_shape > 0:
            raise LoadConfigError(f"load.gamma_shape: must be positive, got {self.gamma_shape!r}")
        if self.processes is not None and (not isinstance(self.processes, int) or self.processes < 1):
            raise LoadConfigError(f"load.processes: must be a positive integer or None, got {self.processes!r}")
        if not 0 < self.progress_interval_s <= 2.0:
            raise LoadConfigError(f"load.progress_interval_s: must be in (0, 2], got {self.progress_interval_s!r}")


@dataclass
class LoadOutcome:
    """What a load run produced: the records and what the client actually delivered."""

    config: LoadConfig
    records: list[RequestRecord] = field(default_factory=list)  # measured window
    warmup: list[RequestRecord] = field(default_factory=list)
    run_start: float = 0.0  # perf_counter at start (time zero of start_s columns)
    measure_start: float = 0.0
    measure_end: float = 0.0
    load_end: float = 0.0  # when the load stopped issuing (the deadline, or the last send): held concurrency ends here
    stopped_early: str | None = None  # why the load stopped before its planned end (the engine is gone)
    achieved_concurrency: float | None = None
    peak_concurrency: int = 0
    achieved_rate: float | None = None  # sends per second while the load issued requests (not the drain)
    late_sends_fraction: float | None = None  # open loop: sends > LATE_SEND_MS behind schedule
    send_lateness_ms_p99: float | None = None
    loop_lag_ms_p99: float | None = None
    client_cpu_s: float = 0.0
    wall_s: float = 0.0  # the run's wall time, start to end (the client CPU check's denominator)
    processes: int = 1  # worker processes that drove the load (their records merged here)
    cpu_fractions: list[float] = field(default_factory=list)  # each client process's CPU time / wall time
    # each client event loop's time running or waiting for a core / wall time: its demand for a core,
    # which a shared machine may not meet (Linux schedstat; else equal to the CPU share)
    busy_fractions: list[float] = field(default_factory=list)
    late_read_fraction: float | None = None  # of token events read together with tokens a gap apart
    late_read_max_ms: float | None = None  # how late such a read's earliest token may be stamped
    client_clock: dict[str, Any] | None = None  # how response times were taken (OpenAIClient.timestamping)
    client_bound: bool = False
    client_bound_reasons: list[str] = field(default_factory=list)  # in English (logs, the API)
    client_bound_messages: list[Message] = field(default_factory=list)  # the same, for pages in any language
    cancelled: bool = False
    send_lateness_ms: list[float] = field(default_factory=list, repr=False)  # raw, for judging and merging
    loop_lags_ms: list[float] = field(default_factory=list, repr=False)

    @property
    def duration_s(self) -> float:
        return max(self.measure_end - self.measure_start, 0.0)


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
    _judge(outcome, _kernel_clock(outcome.client_clock))
    return outcome


def _thread_busy_s() -> float | None:
    """Seconds this thread has run plus waited on the run queue (Linux schedstat), None elsewhere."""
    try:
        with open("/proc/thread-self/schedstat") as handle:
            run_ns, wait_ns = handle.read().split()[:2]
        return (int(run_ns) + int(wait_ns)) / 1e9
    except (OSError, ValueError):
        return None


def _kernel_clock(clock: dict[str, Any] | None) -> bool:
    """Response times from kernel stamps: a few unstamped reads (stamping switching on just after
    the first packets) do not make the run's times loop-dependent; many do."""
    if not clock or not str(clock.get("receive_clock", "")).startswith("kernel"):
        return False
    return (clock.get("unstamped_reads") or 0) <= max(5, 0.01 * (clock.get("reads") or 0))


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
    merged.stopped_early = next((part.stopped_early for part in outcomes if part.stopped_early), None)
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


def held_window_end(outcome: "LoadOutcome") -> float:
    """The end of the window held concurrency is averaged over: while the load still issued
    requests. The drain after the deadline (and, for a fixed request count, the tail after the last
    send) has workers that may not send again, so counting it would flag a client that kept the
    load as one that did not."""
    end = outcome.load_end or outcome.measure_end
    if outcome.config.max_requests is not None and outcome.config.duration_s is None:
        sends = [r.send_time for r in outcome.records if r.send_time > 0]
        if sends:
            end = min(end, max(sends))
    return min(end, outcome.measure_end) if outcome.measure_end else end


def sending_rate(sends: int, outcome: "LoadOutcome") -> float | None:
    """Sends per second while the load issued requests: the drain after the deadline sends nothing,
    so counting it would make a slow engine look like a client that fell behind."""
    window = held_window_end(outcome) - outcome.measure_start
    return sends / window if window > 0 else None


def held_concurrency(records: list[RequestRecord], start: float, end: float) -> float | None:
    """Requests in flight, time-weighted over [start, end]: each from its send to its last byte.

    Both ends are perf_counter times of the same clock (the send just before the socket write, the
    end the kernel's receive stamp of the last byte), and a closed-loop worker sends its next
    request only after its previous one ended, so this never exceeds the concurrency asked for.
    """
    if end <= start:
        return None
    area = 0.0
    for record in records:
        if record.send_time <= 0:
            continue  # never sent (no connection): nothing was in flight
        stop = record.end_time if record.end_time is not None else end
        if stop > start and record.send_time < end:
            area += min(stop, end) - max(record.send_time, start)
    return area / (end - start)


def peak_concurrency(records: list[RequestRecord]) -> int:
    """The most requests in flight at once, from the same send and end times."""
    edges = sorted(
        [(r.send_time, 1) for r in records if r.send_time > 0]
        + [(r.end_time, -1) for r in records if r.send_time > 0 and r.end_time is not None],
        key=lambda edge: (edge[0], edge[1]),
    )
    peak = current = 0
    for _, step in edges:
        current += step
        peak = max(peak, current)
    return peak


def late_reads(records: list[RequestRecord]) -> tuple[float | None, float | None, float | None]:
    """(fraction of token events that shared a read with earlier tokens of a paced stream, the most
    such a read may have stamped its earliest token late, ms, the streams' median gap between tokens, ms).

    A read is stamped with its newest packet's arrival. A stream the engine writes token by token
    (its tokens at least PACED_GAP_MS apart on average) puts one token in each read while the
    client keeps up; a read holding k of its tokens means the tokens queued, and its first token
    arrived about (k - 1) gaps before the stamp. O(1) Python work per record (set and len in C).
    """
    shared = total = 0
    worst = 0.0
    paced_gaps: list[float] = []
    for record in records:
        times = record.chunk_times
        count = len(times)
        if count < 3:
            continue
        reads = len(set(times))
        if reads < 3:
            continue  # the whole stream in one or two reads: written at once, not paced
        gap_ms = (times[-1] - times[0]) * 1000.0 / (count - 1)
        if gap_ms < PACED_GAP_MS:
            continue
        paced_gaps.append(gap_ms)
        total += count
        if reads < count:
            shared += count - reads
            run = longest = 1
            for previous, current in zip(times, times[1:], strict=False):
                run = run + 1 if current == previous else 1
                longest = max(longest, run)
            worst = max(worst, (longest - 1) * gap_ms)
    if not total:
        return None, None, None
    paced_gaps.sort()
    return shared / total, worst, paced_gaps[len(paced_gaps) // 2]


async def _sleep_until(deadline: float, stop: asyncio.Event) -> None:
    if math.isinf(deadline):
        await stop.wait()
        return
    try:
        await asyncio.wait_for(stop.wait(), timeout=max(deadline - time.perf_counter(), 0))
    except asyncio.TimeoutError:
        pass


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(int(math.ceil(q / 100.0 * len(ordered))) - 1, len(ordered) - 1)] if ordered else None


def _judge(outcome: LoadOutcome, kernel_clock: bool = False) -> None:
    """Decide whether the client kept the requested load and timed it truly; say why not.

    `kernel_clock`: response times came from the kernel's receive stamps, so a lagging loop did
    not skew them by itself; what it did to the load (late sends, concurrency not refilled, reads
    of several tokens stamped with the last one's arrival, a saturated core) is judged by the
    other checks.
    """
    config = outcome.config
    reasons = outcome.client_bound_reasons
    lateness, lags = outcome.send_lateness_ms, outcome.loop_lags_ms
    outcome.loop_lag_ms_p99 = _percentile(lags, 99)
    outcome.late_read_fraction, outcome.late_read_max_ms, gap_ms = late_reads(outcome.records)
    if lateness:
        outcome.late_sends_fraction = sum(1 for x in lateness if x > LATE_SEND_MS) / len(lateness)
        outcome.send_lateness_ms_p99 = _percentile(lateness, 99)
    if outcome.cancelled:
        return
    for index, busy in enumerate(outcome.busy_fractions):
        if busy > CPU_BUSY_FRACTION:
            count = len(outcome.busy_fractions)
            who = (
                Message(CLIENT_PROCESS) if count == 1 else Message(CLIENT_WORKER, {"index": index + 1, "count": count})
            )
            cpu = outcome.cpu_fractions[index] if index < len(outcome.cpu_fractions) else busy
            figures = {"busy": f"{busy:.0%}", "cpu": f"{cpu:.0%}", "waited": f"{max(busy - cpu, 0):.0%}"}
            client_bound(outcome, CPU_BOUND, {"who": who, **figures})
    if config.mode == "closed" and outcome.achieved_concurrency is not None and config.concurrency:
        expected = config.concurrency
        if config.max_requests is not None:  # a short request-count run cannot hold more than it sends
            expected = min(expected, config.max_requests)
        if outcome.achieved_concurrency < CONCURRENCY_KEPT_FRACTION * expected and config.ramp_up_s == 0:
            held = f"{outcome.achieved_concurrency:.1f}"
            client_bound(outcome, CONCURRENCY_NOT_HELD, {"held": held, "expected": expected})
    late = outcome.late_sends_fraction
    if late is not None and late > LATE_FRACTION and not (config.mode == "open" and config.max_concurrency):
        template = SENDS_BEHIND if config.mode == "open" else SENDS_AFTER
        client_bound(outcome, template, {"late": f"{late:.0%}", "ms": f"{LATE_SEND_MS:.0f}"})
    # A read of several paced tokens is the client's doing only when its loop fell more than a gap
    # behind; a server (or a shared host) that sent them in a burst is not.
    loop_late = outcome.loop_lag_ms_p99 is not None and gap_ms is not None and outcome.loop_lag_ms_p99 >= gap_ms
    if outcome.late_read_fraction is not None and outcome.late_read_fraction > LATE_READ_FRACTION and loop_late:
        figures = {"late": f"{outcome.late_read_fraction:.0%}", "gap": f"{gap_ms:.0f}"}
        figures.update(lag=f"{outcome.loop_lag_ms_p99:.0f}", max=f"{outcome.late_read_max_ms:.0f}")
        client_bound(outcome, LATE_READS, figures)
    if config.mode == "open":
        sends = len(outcome.records)
        if (
            outcome.achieved_rate is not None
            and config.rate
            and config.duration_s
            and config.max_requests is None
            and sends >= 20
            and outcome.achieved_rate < RATE_KEPT_FRACTION * config.rate * _expected_rate_fraction(config, sends)
        ):
            client_bound(
                outcome, RATE_NOT_HELD, {"rate": f"{outcome.achieved_rate:.1f}", "requested": f"{config.rate:g}"}
            )
    if outcome.loop_lag_ms_p99 is not None and outcome.loop_lag_ms_p99 > LOOP_LAG_P99_MS and not kernel_clock:
        client_bound(outcome, LOOP_LAG, {"lag": f"{outcome.loop_lag_ms_p99:.1f}"})
    outcome.client_bound = bool(reasons)


def _expected_rate_fraction(config: LoadConfig, count: int) -> float:
    """Poisson counts vary: allow 3 standard deviations below the requested count."""
    return max(1.0 - 3.0 / math.sqrt(max(count, 1)), 0.5)


def summarize(outcome: LoadOutcome, label: str = "", slo: dict[str, float] | None = None) -> LoadPoint:
    """One LoadPoint from a load outcome, in kvselect's definitions (see benchmarks.result)."""
    records = outcome.records
    finished = [r for r in records if r.error_class != "cancelled"]
    completed = [r for r in finished if r.ok and not r.aborted]
    failed = [r for r in finished if not r.ok]
    window = outcome.duration_s or None
    itl: list[float] = []
    for record in completed:
        itl.extend(record.itl_ms())
    errors: dict[str, int] = {}
    for record in failed:
        errors[record.error_class or "unknown"] = errors.get(record.error_class or "unknown", 0) + 1
    output_tokens = sum(r.output_tokens or 0 for r in completed)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in completed)
    point = LoadPoint(
        label=label,
        concurrency=outcome.config.concurrency if outcome.config.mode == "closed" else outcome.config.max_concurrency,
        request_rate=outcome.config.rate if outcome.config.mode == "open" else None,
        achieved_concurrency=outcome.achieved_concurrency,
        duration_s=window,
        requests_completed=len(completed),
        requests_failed=len(failed),
        ttft_ms=Stats.from_values(r.ttft_ms for r in completed),
        tpot_ms=Stats.from_values(r.tpot_ms for r in completed),
        itl_ms=Stats.from_values(itl),
        e2e_ms=Stats.from_values(r.e2e_ms for r in completed),
        request_throughput=len(completed) / window if window else None,
        output_token_throughput=output_tokens / window if window else None,
        input_token_throughput=prompt_tokens / window
        if window and any(r.prompt_tokens is not None for r in completed)
        else None,
        error_rate=len(failed) / len(finished) if finished else None,
        client_bound=outcome.client_bound,
        extra={
            "errors_by_class": errors,
            "aborted": sum(1 for r in records if r.aborted),
            "cancelled_in_flight": sum(1 for r in records if r.error_class == "cancelled"),
            "peak_concurrency": outcome.peak_concurrency,
            "achieved_rate": outcome.achieved_rate,
            "late_sends_fraction": outcome.late_sends_fraction,
            "send_lateness_ms_p99": outcome.send_lateness_ms_p99,
            "loop_lag_ms_p99": outcome.loop_lag_ms_p99,
            "client_cpu_s": round(outcome.client_cpu_s, 3),
            "client_processes": outcome.processes,
            "client_cpu_fraction": round(max(outcome.cpu_fractions), 3) if outcome.cpu_fractions else None,
            "client_busy_fraction": round(max(outcome.busy_fractions), 3) if outcome.busy_fractions else None,
            "late_read_fraction": outcome.late_read_fraction,
            "late_read_max_ms": outcome.late_read_max_ms,
            "client_bound_reasons": list(outcome.client_bound_reasons),
            "client_bound_reason_messages": to_json(outcome.client_bound_messages),
            "usage_reported_fraction": (sum(1 for r in completed if r.usage_reported) / len(completed))
            if completed
            else None,
            "warmup_requests": len(outcome.warmup),
            "stopped_early": outcome.stopped_early,
        },
    )
    if slo and completed:
        good = [r for r in completed if _meets_slo(r, slo)]
        point.slo_attainment = len(good) / len(completed)
        point.goodput = len(good) / window if window else None
    return point


def _meets_slo(record: RequestRecord, slo: dict[str, float]) -> bool:
    for key, limit in slo.items():
        value = getattr(record, key, None)
        if value is None or value > limit:
            return False
    return True


def requests_rows(outcome: LoadOutcome, point_index: int = 0, time_zero: float | None = None) -> list[dict[str, Any]]:
    """Rows of the per-request table (benchmarks.result.REQUEST_COLUMNS) for the measured records."""
    zero = outcome.run_start if time_zero is None else time_zero
    rows = []
    for record in outcome.records:
        itl = record.itl_ms()
        rows.append(
            {
                "point": point_index,
                "request_id": record.request_id,
                "start_s": record.send_time - zero,
                "ttft_ms": record.ttft_ms,
                "tpot_ms": record.tpot_ms,
                "itl_ms_mean": (sum(itl) / len(itl)) if itl else None,
                "e2e_ms": record.e2e_ms,
                "prompt_tokens": record.prompt_tokens,
                "output_tokens": record.output_tokens,
                "ok": record.ok and not record.aborted,
                "error": record.error_class if not record.aborted else "aborted",
                "finish_reason": record.finish_reason,
            }
        )
    return rows
