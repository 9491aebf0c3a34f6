"""What a load run is asked for (`LoadConfig`, checked by `validate`) and what it produced
(`LoadOutcome`: the records and what the client actually delivered). Plain data: the workloads and
the judging rules read these without the runner's event loop or HTTP client."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from benchmarks.harness.request_record import RequestRecord
from benchmarks.harness.stopping import LIMITS
from selection.domain.messages import Message

Mode = Literal["closed", "open"]
Arrival = Literal["poisson", "gamma", "constant"]
ProgressCallback = Callable[[dict[str, Any]], Any]
CancelHook = Any  # asyncio.Event | threading.Event | Callable[[], bool] | None


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
    stopped_early_message: Message | None = None  # the same as a message (pages in any language)
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
