"""The six KV-cache validation tests of docs/domain.md, run against any OpenAI-compatible endpoint.

Each test has `plan_<test>(constraints) -> params` (a plain, JSON-serialisable dict the user may
edit) and `run_<test>(target, params, cancel=None, progress=None) -> NormalizedResult` with
`verdicts` ({name, passed, detail, value, threshold}; passed is None when it cannot be judged, e.g.
the engine exports no KV metric). Constraints use the field names of selection's Constraints
(peak_concurrency, avg_input_tokens, max_input_tokens, avg_output_tokens, ttft_p95_ms,
tpot_p95_ms, concurrent_sessions, idle_seconds_between_turns, ...); missing ones get defaults.

`trace_replay` replays a production trace on its own clock (`benchmarks.harness.trace_replay`) and
reports per traffic group; `params.length_trace` (a trace file) makes the concurrency-stress and
stability tests draw each request's input and output length from that trace instead.

`cancel` and `progress` behave as in `benchmarks.harness.load.run_load` (progress must be a plain
function here; it receives {phase, percent, requests_done, ttft_p50_ms, ...} with percent over
the whole test). A cancelled test returns the data gathered so far with `partial=True`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import aiohttp
import numpy as np

from benchmarks.harness import HARNESS_VERSION, overload, swap
from benchmarks.harness.client import Api, OpenAIClient, RequestRecord, RequestSpec
from benchmarks.harness.lengths import distribution, length_sampler
from benchmarks.harness.load import (
    LATE_SEND_MS,
    LoadConfig,
    LoadOutcome,
    requests_rows,
    run_async,
    run_load,
    summarize,
)
from benchmarks.harness.metrics import MetricsRecording, MetricsSampler
from benchmarks.harness.nvml import GpuSampler
from benchmarks.harness.prompts import PromptFactory, calibrate
from benchmarks.harness.safety import check_target
from benchmarks.harness.trace_replay import PromptBuilder, ReplayOutcome, lengths_from_trace, load_plan, run_replay
from benchmarks.harness.verdicts import (
    BOOTSTRAP_SEED,
    FAIL,
    INCONCLUSIVE,
    INSUFFICIENT_DATA,
    MIN_SAMPLES,
    NOT_EXERCISED,
    NOT_JUDGED,
    PASS,
    compare,
    judge_percentile,
    percentile_interval,
    ratio_interval,
    verdict,
)
from benchmarks.result import MEASURED, SIMULATED, LoadPoint, NormalizedResult, Stats
from benchmarks.traces.replay import GROUPS

TOOL = "kvselect-harness"
FORMAT = "kvselect-harness"
LADDER = (16384, 32768, 65536, 131072)
KV_BASELINE_TOLERANCE = 0.02
# prefix reuse passes when the hit ratio reaches this share of the prompt's shared part (the
# first request of each worker cannot hit, so the full shared share is out of reach)
PREFIX_REUSE_MIN_SHARE = 0.5


class PlanError(ValueError):
    """Parameters that cannot run; the message names the field."""


@dataclass
class Target:
    """The endpoint under test. The API key is never shown in repr or results."""

    endpoint_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    metrics_url: str | None = None
    engine: str = "auto"  # vllm, sglang, lmdeploy, tgi, trtllm, llamacpp, simulator, auto
    api: Api = "chat"
    evidence: str | None = None  # None: SIMULATED when engine == "simulator", else MEASURED
    max_model_len: int | None = None
    ignore_eos: bool | None = True  # None: do not send the field (engines that reject it)
    max_tokens_field: str = "max_tokens"
    allowed_hosts: list[str] | str | None = None  # when set, the endpoint and metrics URL are checked
    request_timeout_s: float = 600.0
    # llama.cpp's per-request prompt cache: None sends nothing; False asks the engine not to reuse a
    # cached prefix (llama.cpp only: the prefix test's "off" run on the same endpoint)
    cache_prompt: bool | None = None

    @property
    def evidence_label(self) -> str:
        if self.evidence in (MEASURED, SIMULATED):
            return self.evidence
        return SIMULATED if self.engine == "simulator" else MEASURED

    def describe(self) -> dict[str, Any]:
        return {
            "endpoint_url": self.endpoint_url,
            "model": self.model,
            "metrics_url": self.metrics_url,
            "engine": self.engine,
            "api": self.api,
            "api_key_set": bool(self.api_key),
            **({"cache_prompt": self.cache_prompt} if self.cache_prompt is not None else {}),
        }


# ---------------------------------------------------------------- plans


def _get(constraints: dict[str, Any] | None, key: str, default: Any) -> Any:
    value = (constraints or {}).get(key)
    return default if value is None else value


def _budgets(constraints: dict[str, Any] | None) -> dict[str, float]:
    budgets = {}
    for key in ("ttft_p95_ms", "tpot_p95_ms", "e2e_p95_ms"):
        if (constraints or {}).get(key) is not None:
            budgets[key] = float(constraints[key])  # type: ignore[index]
    return budgets


def _distributions(constraints: dict[str, Any] | None) -> dict[str, Any]:
    """Input and output length distributions from the constraints (average, p95, max)."""
    c = constraints or {}
    return {
        "input_distribution": distribution(
            c.get("avg_input_tokens"), c.get("p95_input_tokens"), c.get("max_input_tokens")
        ),
        "output_distribution": distribution(
            c.get("avg_output_tokens"), c.get("p95_output_tokens"), c.get("max_output_tokens")
        ),
    }


def plan_concurrency_stress(constraints: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "concurrency": int(_get(constraints, "peak_concurrency", 64)),
        "duration_s": 300.0,
        "warmup_s": 10.0,
        "ramp_up_s": 0.0,
        "input_tokens": int(_get(constraints, "avg_input_tokens", 512)),
        "output_tokens": int(_get(constraints, "avg_output_tokens", 128)),
        **_distributions(constraints),
        "abort_fraction": 0.05,  # requests closed mid-stream on purpose
        "settle_s": 30.0,  # after the load: time allowed for KV usage to return to baseline
        # open loop at the constraints' request rate (Poisson arrivals, requests/s); None: closed loop
        "rate": float(constraints["request_rate"]) if (constraints or {}).get("request_rate") else None,
        # requests with at least this many input tokens form the "long" traffic group (None: the
        # constraints' p95 input, else benchmarks.traces.stats.LONG_INPUT_TOKENS)
        "long_input_tokens": (constraints or {}).get("p95_input_tokens"),
        **_budgets(constraints),
    }


LONG_OUTPUT_TOKENS = 32
DEFAULT_MAX_MODEL_LEN = 131072  # Llama-3.1's context: the ladder's top when nothing else says


TRUNCATION_TOLERANCE = 0.9  # an engine reporting fewer prompt tokens than this share of the rung truncated it


def context_ladder(top: int, engine_limit: int | None = None, start: int = LADDER[0]) -> list[int]:
    """Rungs doubling from 16K below `top`, the engine's own limit where it is below `top`, then
    `top` itself: the requirement is always sent exactly, even past the engine's limit (that rung
    then fails with the engine's error, which is the finding). A top at or below 16K climbs a
    quarter and a half of it first."""
    if top < 1:
        raise PlanError(f"params.rungs: the ladder's top must be a positive token count, got {top!r}")
    rungs = set()
    if top <= start:
        rungs.update(r for r in (top // 4, top // 2) if r >= 1)
    rung = start
    while rung < top:
        if engine_limit is None or rung <= engine_limit:
            rungs.add(rung)
        rung *= 2
    if engine_limit is not None and 0 < engine_limit < top:
        rungs.add(engine_limit)
    rungs.add(top)
    return sorted(rungs)


def plan_long_context(
    constraints: dict[str, Any] | None = None, max_model_len: int | None = None, max_context: int | None = None
) -> dict[str, Any]:
    """The ladder climbs to the constraints' max input (its exact value is the last rung), with the
    engine's max_model_len (minus the output) as a rung where it is lower; `max_context`
    (validate --max-context) replaces the requirement. Without either: up to the engine's limit."""
    output = LONG_OUTPUT_TOKENS
    required = (constraints or {}).get("max_input_tokens")
    engine_limit = int(max_model_len) - output if max_model_len else None
    if max_context is not None and int(max_context) < 1:
        raise PlanError(f"params.max_context: must be a positive token count, got {max_context!r}")
    top = int(max_context or required or engine_limit or DEFAULT_MAX_MODEL_LEN - output)
    rungs = context_ladder(top, engine_limit)
    return {
        "rungs": rungs,
        "required_tokens": top,
        "max_model_len": max_model_len,
        "output_tokens": output,
        "repeats": 1,
        "kv_capacity_tokens": None,  # from the capacity model: KV usage ratio -> tokens per request
        # enough short streams that >= MIN_SAMPLES of them overlap each long request (when the peak allows)
        "background_concurrency": max(min(int(_get(constraints, "peak_concurrency", 16)), 16), 1),
        "background_input_tokens": min(int(_get(constraints, "avg_input_tokens", 256)), 2048),
        "background_output_tokens": 32,
        "background_lead_s": 5.0,  # short traffic alone before the long request (its baseline)
        "background_timeout_s": 60.0,  # a short request stalled longer than this is a failure
        "with_background": True,
        **_budgets(constraints),
    }


def plan_swap_recovery(constraints: dict[str, Any] | None = None) -> dict[str, Any]:
    """Sessions resumed after the idle period, each with a history of `history_tokens` (the
    conversation's earlier turns); the pressure's size comes from the KV capacity at run time
    (params.kv_capacity_tokens, else the engine's own statement in its metrics)."""
    avg_input = int(_get(constraints, "avg_input_tokens", 512))
    turns = max(int(_get(constraints, "average_turns", 4)), 2)
    sessions = max(int(_get(constraints, "concurrent_sessions", 32)), MIN_SAMPLES)
    return {
        "sessions": sessions,  # idle, then resumed after the pressure (percentiles need >= 20)
        "warm_sessions": sessions,  # resumed right after turn 1: the still-resident reference
        "never_swap_sessions": int(_get(constraints, "never_swap_sessions", 0)),  # kept active, resumed last
        "history_tokens": min(avg_input * (turns - 1), int(_get(constraints, "max_input_tokens", 32768)) // 2),
        "turn_input_tokens": avg_input,
        "output_tokens": 32,
        "idle_s": float(_get(constraints, "idle_seconds_between_turns", 60.0)),
        "kv_capacity_tokens": None,  # the candidate's KV capacity (validation plan); else the engine's metrics
        "pressure_factor": 1.5,  # unique tokens pushed through the pool while the sessions idle, x capacity
        "pressure_concurrency": int(_get(constraints, "peak_concurrency", 32)),
        "pressure_input_tokens": None,  # None: from the capacity (larger requests, fewer of them)
        "max_pressure_requests": 5000,
        "active_turn_gap_s": 0.2,  # the never-swap sessions' pause between their turns
        "parallel": 16,  # first turns in flight at once
        "resume_parallel": 1,  # timed turns (warm, resume, recompute) in flight: 1 = each TTFT its own cost
        "seed": 1234,
        "divergence_tolerance_token": 16,
        "max_resume_over_recompute": 0.8,  # resume TTFT p50 / recompute TTFT p50 above it: no benefit
        "allow_cache_reset": True,  # False: never clear the engine's prefix cache (recompute: unique prompts)
        "settle_s": 15.0,
        **_budgets(constraints),
    }


def plan_prefix_reuse(constraints: dict[str, Any] | None = None) -> dict[str, Any]:
    avg_input = int(_get(constraints, "avg_input_tokens", 1024))
    return {
        "requests": 256,
        "concurrency": min(int(_get(constraints, "peak_concurrency", 32)), 256),
        "prefix_tokens": max(int(avg_input * 0.75), 16),
        "suffix_tokens": max(avg_input - int(avg_input * 0.75), 8),
        "output_tokens": int(_get(constraints, "avg_output_tokens", 64)),
        "kv_capacity_tokens": None,  # from the capacity model, for the "own allocation" comparison
        **_budgets(constraints),
    }


SOAK_S = 3600.0  # the plan's soak: the articles speak of hours
SOAK_MULTI_TURN_S = 4 * 3600.0  # multi-turn sessions (scenario C): caches persist, fragmentation builds slowly


def _multi_turn(constraints: dict[str, Any] | None) -> bool:
    c = constraints or {}
    return bool(c.get("multi_turn")) or float(c.get("average_turns") or 0) >= 2 or c.get("scenario") == "C"


def plan_stability(constraints: dict[str, Any] | None = None) -> dict[str, Any]:
    """A 1 h soak at steady load (4 h recommended for multi-turn), warm-up excluded, request lengths
    drawn from the constraints' distribution with mixed outputs, so fragmentation can appear."""
    recommended = SOAK_MULTI_TURN_S if _multi_turn(constraints) else SOAK_S
    return {
        "concurrency": max(int(_get(constraints, "peak_concurrency", 32)) // 2, 1),
        "duration_s": SOAK_S,
        "recommended_duration_s": recommended,
        "warmup_s": 60.0,  # excluded: caches fill and the first prefills pile up
        "window_s": 300.0,
        "input_tokens": int(_get(constraints, "avg_input_tokens", 512)),
        "output_tokens": int(_get(constraints, "avg_output_tokens", 128)),
        **_distributions(constraints),
        "max_drift_pct": 25.0,
        "max_kv_slope_per_hour": 0.05,  # KV usage (share of the pool) gained per hour at steady load
        "max_gpu_memory_slope_mib_per_hour": 512.0,
        "max_preemption_rate_ratio": 2.0,  # late preemptions per second / early, beyond one extra per window
        "max_fragmentation_rise": 0.05,  # fragmentation ratio late minus early (engines that export it)
        "metrics_interval_s": 1.0,
        **_budgets(constraints),
    }


def plan_overload(constraints: dict[str, Any] | None = None) -> dict[str, Any]:
    """Steps from the target load up to 3x it, then back down to the target (the recovery step).
    With the constraints' request rate the steps are open-loop rates (Poisson), else concurrencies."""
    rate = (constraints or {}).get("request_rate")
    return {
        "target_concurrency": int(_get(constraints, "peak_concurrency", 64)),
        "rate": float(rate) if rate else None,  # requests/s at the first step; None: closed loop
        "step_factors": [1.0, 1.5, 2.0, 2.5, 3.0],  # of the target, on the way up (stops at errors)
        "down_factors": [1.0],  # after the top, back down; the last one is the recovery step
        "step_duration_s": 30.0,
        "recovery_s": 60.0,  # how long the recovery step runs (the time to recover is measured in it)
        "recovery_bound_s": 30.0,  # recovered within this after the overload ends, or it fails
        "input_tokens": int(_get(constraints, "avg_input_tokens", 512)),
        "output_tokens": int(_get(constraints, "avg_output_tokens", 128)),
        **_distributions(constraints),
        "max_error_rate": MAX_ERROR_RATE,
        **_budgets(constraints),
    }


def plan_trace_replay(constraints: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "trace": None,  # the trace file (validate --trace FILE); its format is detected unless given
        "format": None,
        "speedup": 1.0,  # 2: the same traffic in half the time (twice the rate)
        "sample": None,  # replay the first N requests only
        **_budgets(constraints),
    }


# ---------------------------------------------------------------- shared machinery


class Reporter:
    """Maps each phase's progress onto the whole test and checks the cancel hook."""

    def __init__(self, progress: Callable[[dict[str, Any]], Any] | None, cancel: Any) -> None:
        self.progress = progress
        self.cancel = cancel
        self.done = 0
        self.ttft_p50: float | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvselect-report")

    def cancelled(self) -> bool:
        if self.cancel is None:
            return False
        return bool(self.cancel.is_set() if hasattr(self.cancel, "is_set") else self.cancel())

    def phase(self, name: str, start: float, end: float, base_done: int = 0) -> Callable[[dict[str, Any]], None]:
        def report(payload: dict[str, Any]) -> None:
            self.done = base_done + int(payload.get("requests_done") or 0)
            if payload.get("ttft_p50_ms") is not None:
                self.ttft_p50 = payload["ttft_p50_ms"]
            if self.progress is not None:
                self.progress(
                    payload
                    | {
                        "phase": name,
                        "percent": round(start + (end - start) * float(payload.get("percent") or 0) / 100.0, 1),
                        "requests_done": self.done,
                    }
                )

        return report

    async def emit(self, name: str, percent: float) -> None:
        if self.progress is not None:
            payload = {
                "phase": name,
                "percent": round(percent, 1),
                "requests_done": self.done,
                "ttft_p50_ms": self.ttft_p50,
            }
            await asyncio.get_running_loop().run_in_executor(self._executor, self.progress, payload)

    async def ticking(self, name: str, start: float, end: float, awaitable: Any, expected_s: float) -> Any:
        """Await `awaitable` while reporting progress every second (phases not driven by run_load)."""
        task = asyncio.ensure_future(awaitable)
        begin = time.perf_counter()
        while True:
            done, _ = await asyncio.wait({task}, timeout=1.0)
            if done:
                return task.result()
            if self.cancelled():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                raise _Cancelled()
            fraction = min((time.perf_counter() - begin) / max(expected_s, 1e-3), 0.99)
            await self.emit(name, start + (end - start) * fraction)

    def close(self) -> None:
        self._executor.shutdown(wait=False)


class _Cancelled(Exception):
    pass


class _Session:
    """A test's client, metrics sampler and GPU sampler, sharing one time zero."""

    def __init__(self, target: Target, keep_text: bool = False, metrics_interval_s: float = 1.0) -> None:
        if target.allowed_hosts is not None:
            check_target(target.endpoint_url, target.allowed_hosts)
            if target.metrics_url:
                check_target(target.metrics_url, target.allowed_hosts)
        self.target = target
        self.time_zero = time.perf_counter()
        self.client = OpenAIClient(
            target.endpoint_url,
            target.model,
            api_key=target.api_key,
            request_timeout_s=target.request_timeout_s,
            keep_text=keep_text,
            keep_alive=target.engine != "llamacpp",
        )
        headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else None
        self.metrics = MetricsSampler(
            target.metrics_url,
            target.engine if target.engine != "simulator" else "auto",
            interval_s=metrics_interval_s,
            time_zero=self.time_zero,
            headers=headers,
        )
        self.gpu = GpuSampler(interval_s=max(metrics_interval_s, 0.2), time_zero=self.time_zero)
        self.prompts: PromptFactory | None = None

    async def __aenter__(self) -> "_Session":
        await self.client.open()
        self.prompts = await calibrate(self.client, api=self.target.api)
        await self.metrics.start()
        await self.gpu.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.metrics.stop()
            await self.gpu.__aexit__(*exc)
        finally:
            await self.client.close()

    def spec(self, prompt: str | None = None, max_tokens: int = 64, **kwargs: Any) -> RequestSpec:
        target = self.target
        if target.cache_prompt is not None:
            kwargs["extra_body"] = {"cache_prompt": target.cache_prompt, **(kwargs.get("extra_body") or {})}
        return RequestSpec(
            api=target.api,
            prompt=prompt,
            max_tokens=max_tokens,
            ignore_eos=target.ignore_eos,
            max_tokens_field=target.max_tokens_field,
            **kwargs,
        )  # type: ignore[arg-type]

    def now(self) -> float:
        return time.perf_counter() - self.time_zero

    async def kv_now(self) -> dict[str, float] | None:
        return await self.metrics.sample_once()


MAX_ERROR_RATE = 0.01  # above it a latency verdict fails (selection.domain.scoring's max_error_rate too)


def _verdict(
    name: str,
    passed: bool | None,
    detail: str,
    value: Any = None,
    threshold: Any = None,
    n: int | None = None,
    status: str | None = None,
    interval: Any = None,
) -> dict[str, Any]:
    if status is None:
        status = PASS if passed is True else FAIL if passed is False else NOT_JUDGED
    return verdict(name, status, detail, value, threshold, n, interval)


def _budget_verdicts(
    point: LoadPoint, params: dict[str, Any], label: str = "", records: list[RequestRecord] | None = None
) -> list[dict[str, Any]]:
    """Latency p95 of the successful `records` against its budget, with sample size and bootstrap
    interval (benchmarks.harness.verdicts). A point whose error rate exceeds `max_error_rate`
    (default MAX_ERROR_RATE, as scoring's) fails whatever its p95; a client-bound point's failure is
    inconclusive. Without `records` (a point read back from a file) the point's own p95 is judged."""
    verdicts = []
    reasons = (
        ((point.extra or {}).get("client_bound_reasons") or ["the client did not hold the load"])
        if (point.client_bound)
        else []
    )
    max_errors = float(params.get("max_error_rate", MAX_ERROR_RATE))
    too_many_errors = point.error_rate is not None and point.error_rate > max_errors
    ok = [r for r in records or [] if r.ok]
    for key, stats, attr in (
        ("ttft_p95_ms", point.ttft_ms, "ttft_ms"),
        ("tpot_p95_ms", point.tpot_ms, "tpot_ms"),
        ("e2e_p95_ms", point.e2e_ms, "e2e_ms"),
    ):
        budget = params.get(key)
        if budget is None:
            continue
        name = f"{key.replace('_p95_ms', '')}_p95_within_budget" + (f"[{label}]" if label else "")
        what = attr.replace("_ms", "").upper()
        if records is not None:
            judged = judge_percentile(
                name,
                [getattr(r, attr) for r in ok],
                95,
                float(budget),
                what,
                client_bound_reasons=reasons,
                client_slack_ms=client_slack_ms(point) if attr != "tpot_ms" else None,
                load_held=load_held(point),
            )
        elif stats.p95 is None:
            judged = _verdict(
                name, None, f"no completed requests to measure {key}", None, budget, status=INSUFFICIENT_DATA
            )
        else:
            n = point.requests_completed
            status = INSUFFICIENT_DATA if (n or 0) < MIN_SAMPLES else compare(stats.p95, None, float(budget))
            detail = f"{what} p95 {stats.p95:.1f} ms (n={n}) vs budget {budget:g} ms"
            if reasons and status in (PASS, FAIL):
                status = INCONCLUSIVE
                detail += f"; inconclusive (client-bound): {'; '.join(reasons)}"
            judged = _verdict(name, None, detail, stats.p95, budget, n, status)
        if too_many_errors and judged["status"] != INSUFFICIENT_DATA:
            judged = verdict(
                name,
                FAIL,
                judged["detail"] + f", but {point.error_rate:.1%} of requests failed (at most {max_errors:.1%} "
                "allowed): a latency over the few that succeeded is not a pass",
                judged["value"],
                budget,
                judged["n"],
                judged["interval"],
            )
        verdicts.append(judged)
    return verdicts


def client_slack_ms(point: LoadPoint) -> float | None:
    """The most latency a client-bound client could have added to a request: its send lateness,
    event-loop lag and late reads (p99 / max as measured); None when none was measured."""
    extra = point.extra or {}
    figures = [extra.get(k) for k in ("send_lateness_ms_p99", "loop_lag_ms_p99", "late_read_max_ms")]
    known = [float(f) for f in figures if f is not None]
    return max(known) if known else None


def load_held(point: LoadPoint) -> bool:
    """Whether the client applied the load it was asked for: closed loop, at least 95 % of the
    concurrency held; open loop, under 1 % of sends late (an unset load counts as held)."""
    extra = point.extra or {}
    if point.concurrency:
        return (point.achieved_concurrency or 0) >= 0.95 * point.concurrency
    late = extra.get("late_sends_fraction")
    return late is None or late < 0.01


def _errors_verdict(points: list[LoadPoint], name: str = "zero_errors") -> dict[str, Any]:
    failed = sum(p.requests_failed or 0 for p in points)
    total = failed + sum(p.requests_completed or 0 for p in points)
    classes: dict[str, int] = {}
    for p in points:
        for k, v in (p.extra.get("errors_by_class") or {}).items():
            classes[k] = classes.get(k, 0) + v
    if total == 0:
        return _verdict(name, None, "no request completed or failed", 0, 0, 0, INSUFFICIENT_DATA)
    detail = (
        f"no failed requests of {total}"
        if not failed
        else f"{failed} of {total} requests failed: " + ", ".join(f"{k} {v}" for k, v in sorted(classes.items()))
    )
    return _verdict(name, failed == 0, detail, failed, 0, total)


def _series_in(recording: MetricsRecording, name: str, start: float, end: float) -> list[float]:
    return [v for t, v in recording.series.get(name, []) if start <= t <= end]


def _build_result(
    test: str,
    session: _Session,
    params: dict[str, Any],
    points: list[LoadPoint],
    outcomes: list[LoadOutcome],
    verdicts: list[dict[str, Any]],
    notes: list[str],
    partial: bool,
    extra_meta: dict[str, Any] | None = None,
) -> NormalizedResult:
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for index, outcome in enumerate(outcomes):
        rows.extend(requests_rows(outcome, point_index=index, time_zero=session.time_zero))
    from benchmarks.result import REQUEST_COLUMNS

    frame = pd.DataFrame(rows, columns=list(REQUEST_COLUMNS)) if rows else None
    timeseries: dict[str, list[list[float]]] = {}
    for name, values in session.metrics.recording.series.items():
        timeseries[name] = values
    for name, values in session.gpu.recording.series.items():
        timeseries[name] = values
    metadata = {
        "target": session.target.describe(),
        "engine": session.metrics.recording.engine or session.target.engine,
        "model": session.target.model,
        "params": params,
        "prompts": session.prompts.describe() if session.prompts else None,
        "engine_metrics": session.metrics.recording.to_dict(),
        "gpu": session.gpu.recording.to_dict(),
        "raw_metric_names": sorted(session.metrics.recording.raw)[:500],
        # where TTFT/ITL times came from: kernel receive stamps, or the client's loop (user space)
        "client_clock": session.client.timestamping(),
    }
    if extra_meta:
        metadata.update(extra_meta)
    from benchmarks.result import DEFINITIONS

    return NormalizedResult(
        tool=TOOL,
        format=FORMAT,
        tool_version=HARNESS_VERSION,
        evidence=session.target.evidence_label,  # type: ignore[arg-type]
        test=test,
        metadata=metadata,
        definitions=dict(DEFINITIONS),
        points=points,
        requests=frame,
        timeseries=timeseries,
        verdicts=verdicts,
        notes=notes,
        partial=partial,
    )


async def _settle(
    session: _Session, baseline: dict[str, float] | None, settle_s: float, reporter: Reporter, phase: str, pct: float
) -> dict[str, Any]:
    """After a load: wait until nothing runs and KV usage is back to its baseline (or time runs out)."""
    start = time.perf_counter()
    last: dict[str, float] | None = None
    while time.perf_counter() - start < settle_s and not reporter.cancelled():
        last = await session.kv_now()
        if last is None:
            break
        running = (last.get("running") or 0) + (last.get("waiting") or 0)
        kv = last.get("kv_usage_ratio")
        base = (baseline or {}).get("kv_usage_ratio")
        if running == 0 and (kv is None or base is None or kv <= base + KV_BASELINE_TOLERANCE):
            break
        await reporter.emit(phase, pct)
        await asyncio.sleep(0.5)
    return {"after": last, "waited_s": round(time.perf_counter() - start, 2)}


def _kv_verdicts(
    baseline: dict[str, float] | None, settled: dict[str, Any], engine: str | None
) -> list[dict[str, Any]]:
    after = settled.get("after")
    if after is None:
        return [_verdict("kv_back_to_baseline_after_aborts", None, "the engine exports no metrics: cannot judge")]
    verdicts = []
    running = after.get("running")
    if running is not None:
        waiting = after.get("waiting") or 0
        verdicts.append(
            _verdict(
                "requests_released_after_aborts",
                running + waiting == 0,
                f"{running:g} running, {waiting:g} waiting {settled['waited_s']} s after the load",
                running + waiting,
                0,
            )
        )
    kv, base = after.get("kv_usage_ratio"), (baseline or {}).get("kv_usage_ratio")
    if kv is None or base is None:
        verdicts.append(_verdict("kv_back_to_baseline_after_aborts", None, "the engine exports no KV usage metric"))
    else:
        detail = f"KV usage {kv:.3f} vs baseline {base:.3f} (tolerance {KV_BASELINE_TOLERANCE})"
        if engine == "llamacpp" and kv > base + KV_BASELINE_TOLERANCE:
            detail += "; llama.cpp slots keep finished requests' cache for reuse, so usage stays up by design"
        verdicts.append(
            _verdict("kv_back_to_baseline_after_aborts", kv <= base + KV_BASELINE_TOLERANCE, detail, kv, base)
        )
    return verdicts


def _require(params: dict[str, Any], key: str, kind: type, minimum: float = 0) -> Any:
    value = params.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < minimum:
        raise PlanError(f"params.{key}: must be a number >= {minimum}, got {value!r}")
    return kind(value)


# ---------------------------------------------------------------- 1. concurrency stress


async def run_concurrency_stress(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    concurrency = _require(params, "concurrency", int, 1)
    duration = _require(params, "duration_s", float, 0.1)
    input_tokens = _require(params, "input_tokens", int, 1)
    output_tokens = _require(params, "output_tokens", int, 1)
    abort_fraction = float(params.get("abort_fraction") or 0.0)
    lengths = _trace_lengths(params, input_tokens, output_tokens)
    rate = _rate(params)
    reporter = Reporter(progress, cancel)
    notes: list[str] = []
    async with _Session(target) as session:
        baseline = await session.kv_now()
        prompts = session.prompts
        assert prompts is not None
        abort_every = int(round(1 / abort_fraction)) if abort_fraction > 0 else 0

        def make(index: int) -> RequestSpec:
            abort = abort_every and index % abort_every == abort_every - 1
            request_input, request_output = lengths(index)
            return session.spec(
                prompts.text(request_input, seed=index),
                request_output,
                request_id=f"stress-{index}",
                abort_after_tokens=max(request_output // 4, 1) if abort else None,
            )

        config = LoadConfig(
            mode="open" if rate else "closed",
            concurrency=None if rate else concurrency,
            rate=rate,
            duration_s=duration,
            warmup_s=float(params.get("warmup_s") or 0.0),
            ramp_up_s=float(params.get("ramp_up_s") or 0.0),
            drain_timeout_s=float(params.get("drain_timeout_s") or 120.0),
        )
        outcome = await run_load(session.client, make, config, cancel=cancel, progress=reporter.phase("load", 0, 90))
        point = summarize(outcome, label=f"{rate:g} req/s" if rate else f"c={concurrency}", slo=_slo(params))
        window = (outcome.measure_start - session.time_zero, outcome.measure_end - session.time_zero)
        _attach_engine_stats(point, session.metrics.recording, *window)
        settled = {"after": None, "waited_s": 0}
        if not outcome.cancelled:
            settled = await _settle(session, baseline, float(params.get("settle_s") or 30.0), reporter, "settle", 95)
    verdicts = _budget_verdicts(point, params, records=outcome.records) + [_errors_verdict([point])]
    bound_note = (
        f"; inconclusive (client-bound): {'; '.join(outcome.client_bound_reasons)}" if outcome.client_bound else ""
    )
    if rate:  # open loop: the engine cannot hold a rate, the client sends it; what it achieved is reported
        sent = point.extra.get("achieved_rate")
        status = INCONCLUSIVE if outcome.client_bound else PASS if (sent or 0) >= 0.9 * rate else FAIL
        detail = f"sent {sent or 0:.2f} of {rate:g} requests/s (Poisson), {_held_text(point)} in flight on average"
        verdicts.append(_verdict("rate_held", None, detail + bound_note, sent, rate, len(outcome.records), status))
    else:
        held = point.achieved_concurrency
        if outcome.client_bound:
            status = INCONCLUSIVE  # the client, not the engine, failed to keep the load
        else:
            status = PASS if (held or 0) >= 0.95 * concurrency else FAIL
        verdicts.append(
            _verdict(
                "concurrency_held",
                None,
                f"held {held or 0:.1f} of {concurrency} on average" + bound_note,
                held,
                concurrency,
                point.requests_completed,
                status,
            )
        )
    groups = _group_points(outcome, lengths, params, session) if _lengths_vary(params, lengths) else []
    for group_point, part in groups:
        verdicts.extend(_budget_verdicts(group_point, params, label=group_point.label, records=part.records))
    if abort_every:
        verdicts.extend(_kv_verdicts(baseline, settled, session.metrics.recording.engine))
    if outcome.cancelled:
        notes.append("cancelled: partial data")
    reporter.close()
    empty = [LoadOutcome(config=outcome.config, run_start=outcome.run_start) for _ in groups]  # rows sit at point 0
    result = _build_result(
        "concurrency_stress",
        session,
        params,
        [point] + [group_point for group_point, _part in groups],
        [outcome] + empty,
        verdicts,
        notes,
        outcome.cancelled,
        {"kv_baseline": baseline, "kv_after": settled.get("after"), **_lengths_meta(lengths)},
    )
    result.metadata["observed"] = _stress_observed(point, [g for g, _part in groups], rate, concurrency)
    if groups:
        result.metadata["traffic_groups"] = {
            "long_input_tokens": _long_threshold(params),
            "definition": "long: input tokens >= long_input_tokens; short: the rest (requests are single-turn)",
            "requests": {p.label: (p.requests_completed or 0) + (p.requests_failed or 0) for p, _part in groups},
        }
    return result


def _stress_observed(point: LoadPoint, groups: list[LoadPoint], rate: float | None, concurrency: int) -> dict[str, Any]:
    """The stress test's observed sentence and figures (metadata.observed)."""
    n = (point.requests_completed or 0) + (point.requests_failed or 0)
    load = (
        f"sent {point.extra.get('achieved_rate') or 0:.1f} of {rate:g} req/s open loop"
        if rate
        else f"held {point.achieved_concurrency or 0:.1f} of {concurrency}"
    )
    ttft = point.ttft_ms.p95
    parts = [
        load,
        f"TTFT p95 {ttft:.0f} ms" if ttft is not None else "TTFT p95 n/a",
        f"{point.requests_failed or 0} of {n} failed",
    ]
    kv = point.extra.get("kv_usage_ratio_max")
    if kv is not None:
        parts.append(f"KV peak {kv:.0%}")
    for group in groups:
        gn = (group.requests_completed or 0) + (group.requests_failed or 0)
        value = group.ttft_ms.p95
        parts.append(f"{group.label} TTFT p95 " + (f"{value:.0f} ms" if value is not None else "n/a") + f" (n={gn})")
    return {
        "line": "; ".join(parts) + f" (n={n})",
        "requests": n,
        "ttft_p95_ms": ttft,
        "error_rate": point.error_rate,
        "achieved_concurrency": point.achieved_concurrency,
        "achieved_rate": point.extra.get("achieved_rate"),
        "kv_usage_ratio_max": kv,
        "groups": {
            g.label: {"n": (g.requests_completed or 0) + (g.requests_failed or 0), "ttft_p95_ms": g.ttft_ms.p95}
            for g in groups
        },
    }


def _held_text(point: LoadPoint) -> str:
    held = point.achieved_concurrency
    return "n/a" if held is None else f"{held:.1f}"


def _rate(params: dict[str, Any]) -> float | None:
    """params.rate: requests/s for an open loop (Poisson), None for a closed loop."""
    rate = params.get("rate")
    if rate is None:
        return None
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not rate > 0 or not math.isfinite(rate):
        raise PlanError(f"params.rate: must be a positive number of requests/s or null (closed loop), got {rate!r}")
    return float(rate)


def _long_threshold(params: dict[str, Any]) -> int:
    from benchmarks.traces.stats import LONG_INPUT_TOKENS

    value = params.get("long_input_tokens")
    if value is None:
        return int(LONG_INPUT_TOKENS)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 1:
        raise PlanError(f"params.long_input_tokens: must be a positive number of tokens or null, got {value!r}")
    return int(value)


def _lengths_vary(params: dict[str, Any], lengths: Callable[[int], tuple[int, int]]) -> bool:
    """Traffic groups mean something only when request lengths are drawn (a distribution or a trace)."""
    return bool(params.get("length_trace") or getattr(lengths, "source", None))


def _group_points(
    outcome: LoadOutcome, lengths: Callable[[int], tuple[int, int]], params: dict[str, Any], session: _Session
) -> list[tuple[LoadPoint, LoadOutcome]]:
    """One point per traffic group present among the measured requests (short and long by their
    drawn input length; stress requests are single-turn, so no multi-turn group), as the trace
    replay reports them (`_replay_points`)."""
    threshold = _long_threshold(params)
    by_group: dict[str, list[RequestRecord]] = {group: [] for group in GROUPS}
    for record in outcome.records:
        try:
            index = int(str(record.request_id).rsplit("-", 1)[-1])
        except ValueError:
            continue
        by_group["long" if lengths(index)[0] >= threshold else "short"].append(record)
    out = []
    for group in GROUPS:
        records = by_group[group]
        if not records:
            continue
        part = LoadOutcome(
            config=outcome.config,
            records=records,
            run_start=outcome.run_start,
            measure_start=outcome.measure_start,
            measure_end=outcome.measure_end,
            client_bound=outcome.client_bound,
            client_bound_reasons=list(outcome.client_bound_reasons),
        )
        group_point = summarize(part, label=group, slo=_slo(params))
        group_point.extra["traffic_group"] = group
        group_point.extra["long_input_tokens"] = threshold
        out.append((group_point, part))
    return out


def _trace_lengths(params: dict[str, Any], input_tokens: int, output_tokens: int) -> Callable[[int], tuple[int, int]]:
    """(input, output) tokens of request `index`: the trace's (params.length_trace), else drawn from
    the constraints' distribution (params.input_distribution, benchmarks.harness.lengths), else fixed."""
    if not params.get("length_trace"):
        return length_sampler(params, input_tokens, output_tokens)
    try:
        return lengths_from_trace(
            params["length_trace"], params.get("length_trace_format"), int(params.get("length_trace_sample") or 10_000)
        )
    except ValueError as exc:
        raise PlanError(f"params.length_trace: {exc}") from exc


def _lengths_meta(lengths: Callable[[int], tuple[int, int]]) -> dict[str, Any]:
    source = getattr(lengths, "source", None)
    return {"lengths": source} if source else {}


def _slo(params: dict[str, Any]) -> dict[str, float] | None:
    slo = {}
    if params.get("ttft_p95_ms") is not None:
        slo["ttft_ms"] = float(params["ttft_p95_ms"])
    if params.get("tpot_p95_ms") is not None:
        slo["tpot_ms"] = float(params["tpot_p95_ms"])
    return slo or None


def _attach_engine_stats(point: LoadPoint, recording: MetricsRecording, start: float, end: float) -> None:
    for name in ("kv_usage_ratio", "running", "waiting", "kv_used_tokens"):
        values = _series_in(recording, name, start, end)
        if values:
            point.extra[f"{name}_max"] = max(values)
            point.extra[f"{name}_mean"] = sum(values) / len(values)
    pre = _series_in(recording, "preemptions", start, end)
    if pre:
        point.extra["preemptions"] = pre[-1] - pre[0]
    hits = _series_in(recording, "prefix_hits", start, end)
    queries = _series_in(recording, "prefix_queries", start, end)
    if len(hits) >= 2 and len(queries) >= 2 and queries[-1] > queries[0]:
        point.extra["prefix_hit_ratio"] = (hits[-1] - hits[0]) / (queries[-1] - queries[0])


# ---------------------------------------------------------------- 2. long context


async def run_long_context(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    """Climb the context ladder: per rung the long request alone (TTFT, its KV footprint, the
    engine's error when it fails), then again beside short traffic (the short requests' TTFT and
    TPOT before vs during; a short request stalled past its timeout is a failure, never dropped).
    The verdict on the requirement needs the required length itself to have been sent and served."""
    rungs = [int(r) for r in params.get("rungs") or []]
    if not rungs or any(r < 1 for r in rungs):
        raise PlanError(f"params.rungs: must be a non-empty list of positive token counts, got {params.get('rungs')!r}")
    rungs = sorted(set(rungs))
    output_tokens = _require(params, "output_tokens", int, 1)
    repeats = max(int(params.get("repeats") or 1), 1)
    with_bg = bool(params.get("with_background"))
    if with_bg:
        _require(params, "background_concurrency", int, 1)
        _require(params, "background_timeout_s", float, 0.1)
    capacity = params.get("kv_capacity_tokens")
    if capacity is not None and (not isinstance(capacity, (int, float)) or capacity <= 0):
        raise PlanError(f"params.kv_capacity_tokens: must be a positive token count or null, got {capacity!r}")
    reporter = Reporter(progress, cancel)
    points: list[LoadPoint] = []
    outcomes: list[LoadOutcome] = []
    notes: list[str] = []
    largest_ok: int | None = None
    failed_rung: int | None = None
    failure_error: str | None = None
    partial = False
    modes = ["alone"] + (["with_background"] if with_bg else [])
    steps = len(rungs) * len(modes)
    async with _Session(target) as session:
        prompts = session.prompts
        assert prompts is not None
        step = 0
        try:
            for rung in rungs:
                rung_ok = True
                for mode in modes:
                    if reporter.cancelled():
                        raise _Cancelled()
                    pct0, pct1 = 100 * step / steps, 100 * (step + 1) / steps
                    step += 1
                    label = f"{rung_label(rung)} {mode}"
                    point, outcome = await _long_rung(
                        session, prompts, rung, output_tokens, repeats, mode, params, reporter, label, pct0, pct1
                    )
                    points.append(point)
                    outcomes.append(outcome)
                    served = (point.requests_failed or 0) == 0 and (point.requests_completed or 0) > 0
                    truncated = _truncated(outcome.records, rung)
                    if truncated:
                        served = False
                        point.extra["truncated"] = truncated
                        failure_error = failure_error or truncated
                    if not served and failure_error is None:
                        failure_error = next((r.error for r in outcome.records if r.error), None)
                    rung_ok = rung_ok and served
                    if not rung_ok:
                        break  # a rung the engine refused alone is not retried beside short traffic
                if rung_ok:
                    largest_ok = rung
                else:
                    failed_rung = rung
                    notes.append(
                        f"rung {rung} failed"
                        + (f" with the engine's error: {failure_error}" if failure_error else "")
                        + "; larger rungs not attempted"
                    )
                    break
        except _Cancelled:
            partial = True
            notes.append("cancelled: partial data")
    required = int(params.get("required_tokens") or rungs[-1])
    verdicts = [_largest_rung_verdict(required, rungs, largest_ok, failed_rung, failure_error, points)]
    verdicts.append(_errors_verdict(points))
    for point in points:
        if point.label.endswith("with_background") and "background" in point.extra:
            verdicts.append(_isolation_verdict(point, params))
    observed = _long_context_observed(points, largest_ok, required, failed_rung, failure_error)
    reporter.close()
    return _build_result(
        "long_context",
        session,
        params,
        points,
        outcomes,
        verdicts,
        notes,
        partial,
        {"largest_successful_rung": largest_ok, "required_tokens": required, "observed": observed},
    )


def _truncated(records: list[RequestRecord], rung: int) -> str | None:
    """The engine served a shorter prompt than sent (llama.cpp's context shift truncates silently):
    the rung was not served at its length."""
    reported = [r.prompt_tokens for r in records if r.ok and r.prompt_tokens is not None]
    if reported and min(reported) < TRUNCATION_TOLERANCE * rung:
        return f"the engine reported {min(reported)} prompt tokens for a {rung}-token prompt: it truncated the input"
    return None


def rung_label(tokens: int) -> str:
    """16384 -> "16K"; a length that is not a whole number of K keeps its exact count."""
    return f"{tokens // 1024}K" if tokens >= 1024 and tokens % 1024 == 0 else str(tokens)


def _largest_rung_verdict(
    required: int,
    rungs: list[int],
    largest_ok: int | None,
    failed_rung: int | None,
    failure_error: str | None,
    points: list[LoadPoint],
) -> dict[str, Any]:
    """Pass only when a rung of at least the required length was sent and served: a ladder that
    stopped short of the requirement proves nothing about it (not exercised); one that failed on
    the way is a failure, with the engine's error."""
    served = sum(
        p.requests_completed or 0
        for p in points
        if p.label.endswith("alone") and (p.extra.get("input_tokens_requested") or 0) >= required
    )
    if largest_ok is not None and largest_ok >= required:
        return verdict(
            "largest_rung_succeeds",
            PASS,
            f"the required {required} tokens were sent and served (largest rung {largest_ok}, "
            f"{served} request(s) at or above the requirement)",
            largest_ok,
            required,
            served,
        )
    if failed_rung is not None:
        return verdict(
            "largest_rung_succeeds",
            FAIL,
            f"rung {failed_rung} failed"
            + (f" with the engine's error: {failure_error}" if failure_error else "")
            + f"; largest successful input {largest_ok or 0} tokens, required {required}",
            largest_ok,
            required,
            served,
        )
    return verdict(
        "largest_rung_succeeds",
        NOT_EXERCISED,
        f"the required {required} tokens were never sent (rungs {rungs}"
        + (f", largest served {largest_ok}" if largest_ok else "")
        + "): add the requirement as the last rung",
        largest_ok,
        required,
        served,
    )


def _isolation_verdict(point: LoadPoint, params: dict[str, Any]) -> dict[str, Any]:
    """The short requests' widest gap between tokens (`_stall_ms`) while the long request ran, p95
    against max(2 x before, the TTFT budget: a frozen stream waits for a token like a first one);
    a short request that failed or stalled past its timeout during it fails the rung."""
    bg = point.extra["background"]
    name = f"short_traffic_isolated[{point.label}]"
    during = bg["during_stall_ms_values"]
    before_p95 = bg["before"]["stall_ms"].get("p95")
    budget = float(params.get("ttft_p95_ms") or 0)  # a frozen stream is a wait for a token like a first one
    limit = max(2.0 * before_p95 if before_p95 else 0.0, budget)
    failed = bg["during"]["failed"]
    if not limit:
        return verdict(
            name,
            FAIL if failed else INSUFFICIENT_DATA,
            f"no short request streamed before the long one and no TTFT budget: nothing to compare "
            f"({len(during)} during, {failed} failed)",
            None,
            None,
            len(during) + failed,
        )
    what = (
        "short requests' widest gap between tokens during the long request "
        f"(before: p95 {before_p95 or 0:.1f} ms, n={bg['before']['n']})"
    )
    judged = judge_percentile(name, during, 95, limit, what)
    if failed:
        return verdict(
            name,
            FAIL,
            f"{failed} short request(s) failed or stalled past {bg['timeout_s']:g} s while the long request ran "
            f"({'; '.join(bg['during']['errors'][:3])}); " + judged["detail"],
            judged["value"],
            limit,
            len(during) + failed,
            judged["interval"],
        )
    return judged


def _long_context_observed(
    points: list[LoadPoint],
    largest_ok: int | None,
    required: int,
    failed_rung: int | None,
    failure_error: str | None,
) -> dict[str, Any]:
    """The one-sentence summary of what the ladder saw, with its figures."""
    rungs: list[dict[str, Any]] = []
    for point in points:
        if not point.label.endswith("alone"):
            continue
        rung = int(point.extra.get("input_tokens_requested") or 0)
        bg = next((p.extra.get("background") for p in points if p.label == f"{rung_label(rung)} with_background"), None)
        rungs.append(
            {
                "rung": rung,
                "ttft_ms": point.ttft_ms.p50,
                "kv_tokens_per_request": point.extra.get("kv_tokens_per_request"),
                "served": (point.requests_failed or 0) == 0
                and (point.requests_completed or 0) > 0
                and not point.extra.get("truncated"),
                "short_ttft_p95_before_ms": bg["before"]["ttft_ms"].get("p95") if bg else None,
                "short_ttft_p95_during_ms": bg["during"]["ttft_ms"].get("p95") if bg else None,
                "short_tpot_p95_before_ms": bg["before"]["tpot_ms"].get("p95") if bg else None,
                "short_tpot_p95_during_ms": bg["during"]["tpot_ms"].get("p95") if bg else None,
                "short_stall_p95_before_ms": bg["before"]["stall_ms"].get("p95") if bg else None,
                "short_stall_p95_during_ms": bg["during"]["stall_ms"].get("p95") if bg else None,
                "short_during_n": bg["during"]["n"] if bg else None,
                "short_failed_during": bg["during"]["failed"] if bg else None,
            }
        )
    parts = []
    for item in rungs:
        if not item["served"]:
            continue
        text = f"{rung_label(item['rung'])} TTFT {_ms(item['ttft_ms'])}"
        if item["kv_tokens_per_request"] is not None:
            text += f", KV {item['kv_tokens_per_request']:.0f} tok"
        if item["short_during_n"] is not None:
            text += (
                f", short requests before -> during: TTFT p95 {_ms(item['short_ttft_p95_before_ms'])} -> "
                f"{_ms(item['short_ttft_p95_during_ms'])}, TPOT p95 {_ms(item['short_tpot_p95_before_ms'])} -> "
                f"{_ms(item['short_tpot_p95_during_ms'])}, widest token gap p95 "
                f"{_ms(item['short_stall_p95_before_ms'])} -> {_ms(item['short_stall_p95_during_ms'])}"
                f" (n={item['short_during_n']}"
                + (f", {item['short_failed_during']} stalled/failed" if item["short_failed_during"] else "")
                + ")"
            )
        parts.append(text)
    line = f"largest rung served {largest_ok or 0} of {required} required tokens"
    if failed_rung is not None:
        line += f"; rung {failed_rung} failed" + (f" ({failure_error[:120]})" if failure_error else "")
    if parts:
        line += "; " + "; ".join(parts)
    return {
        "line": line,
        "largest_successful_rung": largest_ok,
        "required_tokens": required,
        "failed_rung": failed_rung,
        "failure_error": failure_error,
        "rungs": rungs,
    }


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"


async def _short_traffic(
    session: _Session,
    prompts: PromptFactory,
    params: dict[str, Any],
    stop: asyncio.Event,
    records: list[RequestRecord],
) -> None:
    """Closed-loop short requests until `stop`; each is bounded by the timeout, and one that stalls
    past it is recorded as a timeout failure (never cancelled away and dropped)."""
    concurrency = int(params.get("background_concurrency") or 4)
    bg_in = int(params.get("background_input_tokens") or 256)
    bg_out = int(params.get("background_output_tokens") or 32)
    timeout = float(params.get("background_timeout_s") or 60.0)
    counter = iter(range(10**9))

    async def worker() -> None:
        while not stop.is_set():
            index = next(counter)
            spec = session.spec(
                prompts.text(bg_in, seed=10_000 + index), bg_out, request_id=f"bg-{index}", tag="background"
            )
            record = RequestRecord()
            records.append(record)
            try:
                await asyncio.wait_for(session.client.send(spec, record), timeout)
            except asyncio.TimeoutError:
                record.error_class = "timeout"
                record.error = f"short request stalled past its {timeout:g} s timeout"
                record.end_time = time.perf_counter()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def _stall_ms(record: RequestRecord) -> float | None:
    """A decoding request's widest gap between two streamed chunks: a long prefill that is not
    chunked freezes every decode for its whole length, which shows here (TPOT averages the freeze
    away). New arrivals' TTFT during the long prefill is reported beside it, not judged: engines
    schedule running prefills first, chunked or not. None before two chunks arrived."""
    times = [t for t in ([record.first_token_time] if record.first_token_time else []) + record.chunk_times]
    gaps = [(b - a) * 1000.0 for a, b in zip(times, times[1:], strict=False) if b >= a]
    return max(gaps) if gaps else None


def _short_stats(records: list[RequestRecord]) -> dict[str, Any]:
    ok = [r for r in records if r.ok]
    return {
        "n": len(ok),
        "failed": len(records) - len(ok),
        "errors": sorted({(r.error or r.error_class or "")[:160] for r in records if not r.ok}),
        "ttft_ms": Stats.from_values([r.ttft_ms for r in ok]).__dict__,
        "tpot_ms": Stats.from_values([r.tpot_ms for r in ok]).__dict__,
        "stall_ms": Stats.from_values([_stall_ms(r) for r in ok]).__dict__,
    }


async def _kv_peak_once(session: _Session, into: dict[str, float]) -> None:
    sample = await session.kv_now()
    for key in ("kv_usage_ratio", "kv_used_tokens"):
        if sample and sample.get(key) is not None:
            into[key] = max(into.get(key, 0.0), float(sample[key]))


async def _kv_peak(session: _Session, done: asyncio.Event, into: dict[str, float]) -> None:
    """Poll the engine's KV gauges while the long request runs (the sampler's 1 s may miss it)."""
    while not done.is_set():
        sample = await session.kv_now()
        if sample is None:
            return
        for key in ("kv_usage_ratio", "kv_used_tokens"):
            if sample.get(key) is not None:
                into[key] = max(into.get(key, 0.0), float(sample[key]))
        try:
            await asyncio.wait_for(done.wait(), 0.1)
        except asyncio.TimeoutError:
            pass


async def _long_rung(
    session: _Session,
    prompts: PromptFactory,
    rung: int,
    output_tokens: int,
    repeats: int,
    mode: str,
    params: dict[str, Any],
    reporter: Reporter,
    label: str,
    pct0: float,
    pct1: float,
) -> tuple[LoadPoint, LoadOutcome]:
    outcome = LoadOutcome(config=LoadConfig(mode="closed", concurrency=1, max_requests=repeats))
    outcome.run_start = session.time_zero
    stop_bg = asyncio.Event()
    bg_task = None
    short: list[RequestRecord] = []
    lead = float(params.get("background_lead_s") or 5.0)
    if mode == "with_background":
        bg_task = asyncio.ensure_future(_short_traffic(session, prompts, params, stop_bg, short))
        await reporter.ticking(label, pct0, pct0 + (pct1 - pct0) * 0.2, asyncio.sleep(lead), lead)
    before_kv = await session.kv_now() if mode == "alone" else None
    peak: dict[str, float] = {}
    done = asyncio.Event()
    peak_task = asyncio.ensure_future(_kv_peak(session, done, peak)) if before_kv is not None else None
    outcome.measure_start = time.perf_counter()
    try:
        for repeat in range(repeats):
            spec = session.spec(
                prompts.text(rung, seed=rung * 100 + repeat + (1 if mode != "alone" else 0)),
                output_tokens,
                request_id=f"long-{rung}-{mode}-{repeat}",
                tag=label,
            )
            record = RequestRecord()
            try:
                await reporter.ticking(
                    label, pct0, pct1, session.client.send(spec, record), expected_s=max(rung / 2000.0, 2.0)
                )
            finally:
                outcome.records.append(record)
    finally:
        outcome.measure_end = time.perf_counter()
        done.set()
        stop_bg.set()
        if peak_task is not None:
            await peak_task
            # one more look: a request shorter than the 0.1 s polling, on an engine that keeps its
            # cache after it (llama.cpp slots), still shows; an engine that frees it shows its baseline
            await _kv_peak_once(session, peak)
        if bg_task is not None:
            if reporter.cancelled():
                bg_task.cancel()
            # in-flight short requests finish or time out (counted as failures), never cancelled away
            await asyncio.gather(bg_task, return_exceptions=True)
    point = summarize(outcome, label=label)
    point.concurrency = 1
    point.extra["input_tokens_requested"] = rung
    point.extra["prompt_tokens_reported"] = [r.prompt_tokens for r in outcome.records]
    point.extra["errors"] = [r.error for r in outcome.records if r.error][:5]
    _attach_engine_stats(
        point,
        session.metrics.recording,
        outcome.measure_start - session.time_zero,
        outcome.measure_end - session.time_zero + 1.0,
    )
    if before_kv is not None:
        point.extra["kv_tokens_per_request"] = _kv_delta_tokens(before_kv, peak, params.get("kv_capacity_tokens"))
        point.extra["kv_usage_ratio_before"] = before_kv.get("kv_usage_ratio")
        point.extra["kv_usage_ratio_peak"] = peak.get("kv_usage_ratio")
    if bg_task is not None:
        long_start, long_end = outcome.measure_start, outcome.measure_end
        concurrency = int(params.get("background_concurrency") or 4)
        # before: finished before the long request began, past the first round (sent all at once)
        before = [r for r in short[concurrency:] if (r.end_time or math.inf) <= long_start] or [
            r for r in short if (r.end_time or math.inf) <= long_start
        ]
        # during: in flight at some moment of the long request (waiting for a token or decoding)
        during = [r for r in short if r.send_time < long_end and (r.end_time or math.inf) > long_start]
        stats = {
            "requests": len(short),
            "timeout_s": float(params.get("background_timeout_s") or 60.0),
            "before": _short_stats(before),
            "during": _short_stats(during),
        }
        stats["during_stall_ms_values"] = [_stall_ms(r) for r in during if r.ok and _stall_ms(r) is not None]
        point.extra["background"] = stats
        point.extra["background_requests"] = len(short)
        point.extra["background_ttft_p95_before_ms"] = stats["before"]["ttft_ms"]["p95"]
        point.extra["background_ttft_p95_during_ms"] = stats["during"]["ttft_ms"]["p95"]
        point.extra["background_failed"] = sum(1 for r in short if not r.ok)
    return point, outcome


def _kv_delta_tokens(before: dict[str, float], peak: dict[str, float], capacity: Any) -> float | None:
    """KV tokens the long request took: the rise of the engine's token gauge, else of its usage
    ratio times the capacity (params.kv_capacity_tokens); None when neither is known."""
    if peak.get("kv_used_tokens") is not None and before.get("kv_used_tokens") is not None:
        return max(peak["kv_used_tokens"] - before["kv_used_tokens"], 0.0)
    if capacity and peak.get("kv_usage_ratio") is not None and before.get("kv_usage_ratio") is not None:
        return max(peak["kv_usage_ratio"] - before["kv_usage_ratio"], 0.0) * float(capacity)
    return None


# ---------------------------------------------------------------- 3. swap-out and recovery


async def run_swap_recovery(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    """Idle sessions under enough pressure that their KV cannot stay resident, then resumed.

    Phases: warm sessions (turn 1 then turn 2 at once: still resident), the idle sessions' turn 1,
    pressure (unique prompts, `pressure_factor` x the KV capacity) while the never-swap sessions
    keep talking, the idle sessions' resume, the never-swap sessions' resume (last), a recompute of
    the idle sessions' resume with the cache cleared (the eviction-free reference continuation),
    then the KV release. Eviction is observed, never assumed (benchmarks.harness.swap)."""
    sessions_n = _require(params, "sessions", int, 1)
    warm_n = _require(params, "warm_sessions", int, 1) if params.get("warm_sessions") is not None else sessions_n
    never_n = _require(params, "never_swap_sessions", int, 0) if params.get("never_swap_sessions") else 0
    history_tokens = _require(params, "history_tokens", int, 1) if params.get("history_tokens") is not None else 512
    turn_tokens = _require(params, "turn_input_tokens", int, 1)
    output_tokens = _require(params, "output_tokens", int, 1)
    idle_s = _require(params, "idle_s", float, 0)
    factor = _require(params, "pressure_factor", float, 0) if params.get("pressure_factor") is not None else 1.5
    tolerance = int(params.get("divergence_tolerance_token", 16))
    if tolerance < 0:
        raise PlanError(f"params.divergence_tolerance_token: must be >= 0, got {tolerance!r}")
    max_ratio = float(params.get("max_resume_over_recompute") or 0.8)
    capacity_param = params.get("kv_capacity_tokens")
    if capacity_param is not None:
        capacity_param = _require(params, "kv_capacity_tokens", int, 1)
    seed = int(params.get("seed") or 1234)
    parallel = max(int(params.get("parallel") or 16), 1)
    resume_parallel = max(int(params.get("resume_parallel") or 1), 1)
    pressure_c = int(params.get("pressure_concurrency") or 0)
    gap_s = float(params.get("active_turn_gap_s") or 0.2)
    reporter = Reporter(progress, cancel)
    notes: list[str] = []
    partial = False
    greedy = {"temperature": 0.0, "seed": seed}
    warm_ids = list(range(warm_n))
    idle_ids = list(range(warm_n, warm_n + sessions_n))
    never_ids = list(range(warm_n + sessions_n, warm_n + sessions_n + never_n))
    history: dict[int, list[tuple[str, str]]] = {}  # session -> [(user, reply)] completed turns
    labels = ("turn1", "warm", "resume", "never_swap", "recompute")
    planned_requests = {
        "turn1": warm_n + sessions_n + never_n,
        "warm": warm_n,
        "resume": sessions_n,
        "never_swap": max(never_n, 1),
        "recompute": sessions_n,
    }
    outcomes = {
        label: LoadOutcome(
            config=LoadConfig(
                mode="closed",
                concurrency=parallel if label == "turn1" else resume_parallel,
                max_requests=planned_requests[label],
            )
        )
        for label in labels
    }
    records: dict[str, dict[int, RequestRecord]] = {label: {} for label in labels}
    snapshots: dict[str, dict[str, float] | None] = {}
    pressure_outcome: LoadOutcome | None = None
    sizing: dict[str, Any] = {}
    recompute_method: str | None = None
    settled: dict[str, Any] = {"after": None, "waited_s": 0}
    active_turns = 0
    async with _Session(target, keep_text=True) as session:
        prompts = session.prompts
        assert prompts is not None
        baseline = await session.kv_now()
        for outcome in outcomes.values():
            outcome.run_start = session.time_zero
        semaphore = asyncio.Semaphore(parallel)
        measured = asyncio.Semaphore(resume_parallel)  # timed turns: each TTFT is its own cost, not a queue's

        def turn_spec(sid: int, user: str, label: str, extra_body: dict[str, Any] | None = None) -> RequestSpec:
            request_id = f"s{sid}-t{len(history.get(sid, [])) + 1}-{label}"
            if target.api == "chat":
                messages: list[dict[str, str]] = []
                for said, reply in history.get(sid, []):
                    messages += [{"role": "user", "content": said}, {"role": "assistant", "content": reply}]
                messages.append({"role": "user", "content": user})
                return session.spec(
                    None,
                    output_tokens,
                    messages=messages,
                    request_id=request_id,
                    tag=label,
                    extra_body=dict(extra_body or {}),
                    **greedy,
                )
            text = "".join(f"{said} {reply}" for said, reply in history.get(sid, [])) + user
            return session.spec(
                text, output_tokens, request_id=request_id, tag=label, extra_body=dict(extra_body or {}), **greedy
            )

        def first_user(sid: int) -> str:
            return prompts.text(history_tokens, seed=seed + sid)

        def next_user(sid: int, tokens: int = turn_tokens) -> str:
            return prompts.text(tokens, seed=seed + 100_000 * (len(history.get(sid, [])) + 1) + sid)

        async def send(sid: int, spec: RequestSpec, label: str, remember: str | None = None) -> RequestRecord:
            async with semaphore if label == "turn1" else measured:
                record = RequestRecord()
                try:
                    await session.client.send(spec, record)
                finally:
                    records[label][sid] = record
                    outcomes[label].records.append(record)
            if remember is not None and record.ok:
                history.setdefault(sid, []).append((remember, record.text))
            return record

        async def phase(label: str, jobs: list[Any], pct0: float, pct1: float) -> None:
            outcome = outcomes[label]
            outcome.measure_start = outcome.measure_start or time.perf_counter()
            await reporter.ticking(label, pct0, pct1, asyncio.gather(*jobs), expected_s=max(len(jobs) / parallel, 1.0))
            outcome.measure_end = time.perf_counter()

        async def first_turn(sid: int) -> None:
            user = first_user(sid)
            await send(sid, turn_spec(sid, user, "turn1"), "turn1", remember=user)

        stop_active = asyncio.Event()
        active: list[asyncio.Future] = []

        async def keep_active(sid: int) -> None:
            """A never-swap session keeps talking (short turns) while the others idle."""
            nonlocal active_turns
            while not stop_active.is_set() and not reporter.cancelled():
                user = next_user(sid, min(turn_tokens, 32))
                record = RequestRecord()
                await session.client.send(turn_spec(sid, user, "active"), record)
                if record.ok:
                    history.setdefault(sid, []).append((user, record.text))
                    active_turns += 1
                try:
                    await asyncio.wait_for(stop_active.wait(), timeout=gap_s)
                except asyncio.TimeoutError:
                    pass

        try:
            await phase("turn1", [first_turn(i) for i in warm_ids + never_ids], 0, 10)
            snapshots["warm_start"] = await session.kv_now()
            await phase(
                "warm", [send(i, turn_spec(i, next_user(i), "warm"), "warm") for i in warm_ids if i in history], 10, 15
            )
            snapshots["warm_end"] = await session.kv_now()
            await phase("turn1", [first_turn(i) for i in idle_ids], 15, 25)
            ok_idle = [i for i in idle_ids if i in history]
            # sizing: the KV the idle sessions hold against the pool
            # the larger of the planned capacity and the engine's own statement: the pressure must
            # exceed the real pool, and a capacity model may under-estimate it
            recording = session.metrics.recording
            stated = (recording.kv_capacity or {}).get("tokens")
            stated_source = (recording.kv_capacity or {}).get("source")
            if not stated:  # neither stated nor planned: the engine's used tokens over its usage ratio
                stated = swap.capacity_from_usage(
                    recording.series.get("kv_used_tokens", []), recording.series.get("kv_usage_ratio", [])
                )
                stated_source = "kv_used_tokens / kv_usage_ratio during the first turns" if stated else None
            capacity = max(int(stated or 0), int(capacity_param or 0)) or None
            source = (
                stated_source
                if stated and stated >= (capacity_param or 0)
                else ("params.kv_capacity_tokens" if capacity_param else None)
            )
            idle_kv = len(ok_idle) * (history_tokens + output_tokens)
            p_in = params.get("pressure_input_tokens")
            if p_in is None:
                share = (capacity or 0) // max(2 * max(pressure_c, 1), 1)
                p_in = int(min(max(share, turn_tokens), 8192))
                if target.max_model_len:
                    p_in = max(min(p_in, target.max_model_len - output_tokens - 16), 1)
            else:
                p_in = _require(params, "pressure_input_tokens", int, 1)
            planned = swap.pressure_plan(
                capacity, idle_kv, factor, p_in + output_tokens, int(params.get("max_pressure_requests") or 5000)
            )
            sizing = {
                "kv_capacity_tokens": capacity,
                "kv_capacity_source": source,
                "kv_capacity_planned": capacity_param,
                "kv_capacity_stated": stated,
                "idle_sessions": len(ok_idle),
                "idle_kv_tokens": idle_kv,
                "idle_kv_share_of_capacity": planned["idle_kv_share_of_capacity"],
                "history_tokens": history_tokens,
                "pressure_factor": factor,
                "pressure_input_tokens": p_in,
                "pressure_requests_planned": planned["requests"],
                "pressure_tokens_planned": planned["tokens"],
            }
            if planned.get("capped"):
                notes.append("pressure capped by params.max_pressure_requests: it may not cover the KV capacity")
            if capacity is None:
                notes.append(
                    "no KV capacity (params.kv_capacity_tokens or the engine's metrics): the pressure ran for "
                    "idle_s only; the eviction verdict says whether that was enough"
                )
            snapshots["pressure_start"] = await session.kv_now()
            active.extend(asyncio.ensure_future(keep_active(i)) for i in never_ids if i in history)
            idle_start = time.perf_counter()
            warm_cached = [r.cached_tokens for r in records["warm"].values() if r.ok]
            no_reuse = bool(warm_cached) and all(c == 0 for c in warm_cached)  # reported, and always 0
            if no_reuse:
                notes.append("the warm sessions got 0 cached tokens: the engine keeps no KV between turns, no pressure")
            elif pressure_c > 0 and (planned["requests"] or idle_s > 0):
                pressure_outcome = await run_load(
                    session.client,
                    lambda i: session.spec(
                        prompts.text(p_in, seed=900_000 + i), output_tokens, request_id=f"pressure-{i}", tag="pressure"
                    ),
                    LoadConfig(
                        mode="closed",
                        concurrency=pressure_c,
                        max_requests=planned["requests"],
                        duration_s=None if planned["requests"] else idle_s,
                        drain_timeout_s=120.0,
                    ),
                    cancel=cancel,
                    progress=reporter.phase("pressure", 25, 65),
                )
                if pressure_outcome.cancelled:
                    raise _Cancelled()
            left = idle_s - (time.perf_counter() - idle_start)
            if left > 0:
                await reporter.ticking("idle", 65, 70, asyncio.sleep(left), left)
            snapshots["resume_start"] = await session.kv_now()
            await phase("resume", [send(i, turn_spec(i, next_user(i), "resume"), "resume") for i in ok_idle], 70, 80)
            snapshots["resume_end"] = await session.kv_now()
            stop_active.set()
            await asyncio.gather(*active)
            await phase(
                "never_swap",
                [send(i, turn_spec(i, next_user(i), "never_swap"), "never_swap") for i in never_ids if i in history],
                80,
                85,
            )
            recompute_method = await _clear_cache(session) if params.get("allow_cache_reset", True) else None
            extra_body = None
            if recompute_method is None and target.engine == "llamacpp":
                recompute_method, extra_body = "cache_prompt=false", {"cache_prompt": False}
            if recompute_method is not None:
                jobs = [send(i, turn_spec(i, next_user(i), "recompute", extra_body), "recompute") for i in ok_idle]
            else:
                recompute_method = "unique prompt of the same length (no cache reset on this engine)"
                same = history_tokens + output_tokens + turn_tokens
                jobs = [
                    send(i, session.spec(prompts.text(same, seed=700_000 + i), output_tokens), "recompute")
                    for i in ok_idle
                ]
            await phase("recompute", jobs, 85, 95)
            settled = await _settle(session, baseline, float(params.get("settle_s") or 15.0), reporter, "settle", 97)
        except _Cancelled:
            partial = True
            notes.append("cancelled: partial data")
            stop_active.set()
            for task in active:
                task.cancel()
            await asyncio.gather(*active, return_exceptions=True)
    points = []
    for label in labels:
        outcome = outcomes[label]
        point = summarize(outcome, label=label)
        if outcome.measure_start:
            _attach_engine_stats(
                point,
                session.metrics.recording,
                outcome.measure_start - session.time_zero,
                outcome.measure_end - session.time_zero,
            )
        points.append(point)
    pressure_point = None
    if pressure_outcome is not None:
        pressure_point = summarize(pressure_outcome, label="pressure")
        _attach_engine_stats(
            pressure_point,
            session.metrics.recording,
            pressure_outcome.measure_start - session.time_zero,
            pressure_outcome.measure_end - session.time_zero,
        )
        points.append(pressure_point)
    cpu = [v for _, v in session.metrics.recording.series.get("cpu_kv_usage_ratio", [])]
    eviction = swap.observe_eviction(
        [records["warm"][i].cached_tokens for i in records["warm"] if records["warm"][i].ok],
        [records["resume"][i].cached_tokens for i in records["resume"] if records["resume"][i].ok],
        snapshots,
        max(cpu) if cpu else None,
        {label: _ttfts(records[label]) for label in ("warm", "resume", "recompute")},
    )
    eviction["idle_kv_tokens"] = sizing.get("idle_kv_tokens")
    eviction["kv_capacity_tokens"] = sizing.get("kv_capacity_tokens")
    eviction["pressure_requests"] = len(pressure_outcome.records) if pressure_outcome else 0
    resume = _resume_figures(records, recompute_method)
    continuation = _continuation(records, recompute_method, tolerance)
    never = _never_swap(records, never_ids)
    verdicts = _swap_verdicts(eviction, resume, continuation, never, max_ratio, baseline, settled, session)
    verdicts.append(_errors_verdict([p for p in points if p.label != "pressure"]))
    budget = _budget_verdicts(points[2], params, label="resume", records=outcomes["resume"].records)
    if not eviction["observed"]:
        budget = [
            verdict(
                v["name"], NOT_EXERCISED, "no eviction observed: " + v["detail"], v["value"], v["threshold"], v["n"]
            )
            for v in budget
        ]
    verdicts.extend(budget)
    if pressure_point is not None and (pressure_point.requests_failed or 0):
        notes.append(f"{pressure_point.requests_failed} pressure requests failed (the pressure's own errors)")
    observed = _swap_observed_line(eviction, resume, continuation, never, sizing)
    reporter.close()
    return _build_result(
        "swap_recovery",
        session,
        params,
        points,
        [outcomes[label] for label in labels] + ([pressure_outcome] if pressure_outcome else []),
        verdicts,
        notes,
        partial,
        {
            "sizing": sizing,
            "eviction": eviction,
            "resume": resume,
            "continuation": continuation,
            "never_swap": never,
            "kv_baseline": baseline,
            "kv_after": settled.get("after"),
            "active_turns": active_turns,
            "observed": observed,
        },
    )


async def _clear_cache(session: _Session) -> str | None:
    """Clear the engine's prefix cache (vLLM `POST /reset_prefix_cache`, behind
    VLLM_SERVER_DEV_MODE in some versions; SGLang `POST /flush_cache`); the path that worked, or None."""
    for path in ("/reset_prefix_cache", "/flush_cache"):
        try:
            status, _ = await session.client.post_json(path, {}, timeout_s=30.0)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            continue
        if 200 <= status < 300:
            return f"POST {path}"
    return None


def _ttfts(records: dict[int, RequestRecord]) -> list[float]:
    return [r.ttft_ms for r in records.values() if r.ok and r.ttft_ms is not None]


def _phase_figures(values: list[float]) -> dict[str, Any]:
    interval = percentile_interval(values, 50) if len(values) >= 2 else None
    return Stats.from_values(values).__dict__ | {"n": len(values), "p50_interval": interval and list(interval)}


def _resume_figures(records: dict[str, dict[int, RequestRecord]], recompute_method: str | None) -> dict[str, Any]:
    """Warm, resumed and recomputed TTFT of the same history length; swap-in cost = resumed - warm,
    benefit = recompute - resumed, each with a bootstrap interval of the p50 difference."""
    warm, resumed, recomputed = _ttfts(records["warm"]), _ttfts(records["resume"]), _ttfts(records["recompute"])
    figures: dict[str, Any] = {
        "warm_ttft_ms": _phase_figures(warm),
        "resume_ttft_ms": _phase_figures(resumed),
        "recompute_ttft_ms": _phase_figures(recomputed),
        "recompute_method": recompute_method,
    }
    for name, top, bottom in (("swap_in_cost_ms", resumed, warm), ("recompute_benefit_ms", recomputed, resumed)):
        value = swap.median_difference(top, bottom)
        figures[name] = {
            "p50": value,
            "interval": swap.difference_interval(top, bottom),
            "n": min(len(top), len(bottom)),
        }
    for name, top, bottom in (("resume_over_recompute", resumed, recomputed), ("resume_over_warm", resumed, warm)):
        ratio = swap.median_ratio(top, bottom)
        interval = ratio_interval(top, bottom) if ratio is not None else None
        figures[name] = {"value": ratio, "interval": interval and list(interval), "n": min(len(top), len(bottom))}
    return figures


def _continuation(
    records: dict[str, dict[int, RequestRecord]], recompute_method: str | None, tolerance: int
) -> dict[str, Any]:
    """Each resumed session's output against the same history's output with the cache cleared."""
    same_history = recompute_method is not None and not recompute_method.startswith("unique")
    summary: dict[str, Any] = {"reference": recompute_method if same_history else None, "tolerance_token": tolerance}
    if not same_history:
        return summary | {"compared": 0}
    reference, resumed = records["recompute"], records["resume"]
    compared = {
        sid: swap.compare_continuation(reference[sid].text, resumed[sid].text, tolerance)
        for sid in resumed
        if resumed[sid].ok and sid in reference and reference[sid].ok
    }
    divergences = [c["first_divergence"] for c in compared.values() if c["first_divergence"] is not None]
    return summary | {
        "compared": len(compared),
        "identical": sum(1 for c in compared.values() if c["identical"]),
        "late_divergence": sum(1 for c in compared.values() if c["ok"] and not c["identical"]),
        "failed_sessions": sorted(sid for sid, c in compared.items() if not c["ok"])[:20],
        "failed": sum(1 for c in compared.values() if not c["ok"]),
        "garbage": sum(1 for c in compared.values() if c["garbage"]),
        "first_divergence_min": min(divergences) if divergences else None,
        "matching_fraction_mean": (sum(c["matching_fraction"] for c in compared.values()) / len(compared))
        if compared
        else None,
    }


def _never_swap(records: dict[str, dict[int, RequestRecord]], never_ids: list[int]) -> dict[str, Any]:
    """The never-swap sessions' last resume against the warm sessions: cached share of the prompt
    (when the engine reports cached tokens), else TTFT within 1.5x the warm p50 (+20 ms)."""
    warm = [r for r in records["warm"].values() if r.ok]
    warm_ttft = Stats.from_values([r.ttft_ms for r in warm]).p50
    shares = [r.cached_tokens / r.prompt_tokens for r in warm if r.cached_tokens is not None and r.prompt_tokens]
    warm_share = statistics.median(shares) if shares else None
    sessions = []
    for sid in never_ids:
        record = records["never_swap"].get(sid)
        if record is None or not record.ok:
            sessions.append({"session": sid, "ok": False, "warm": False})
            continue
        share = (
            record.cached_tokens / record.prompt_tokens
            if record.cached_tokens is not None and record.prompt_tokens
            else None
        )
        if share is not None and warm_share:
            came_back_warm = share >= 0.8 * warm_share
        elif warm_ttft is not None and record.ttft_ms is not None:
            came_back_warm = record.ttft_ms <= max(1.5 * warm_ttft, warm_ttft + 20.0)
        else:
            came_back_warm = None
        sessions.append(
            {"session": sid, "ok": True, "ttft_ms": record.ttft_ms, "cached_share": share, "warm": came_back_warm}
        )
    return {
        "sessions": len(never_ids),
        "warm_count": sum(1 for s in sessions if s.get("warm")),
        "warm_ttft_p50_ms": warm_ttft,
        "warm_cached_share": warm_share,
        "ttft_ms": Stats.from_values([s.get("ttft_ms") for s in sessions]).__dict__,
        "per_session": sessions,
    }


def _swap_verdicts(
    eviction: dict[str, Any],
    resume: dict[str, Any],
    continuation: dict[str, Any],
    never: dict[str, Any],
    max_ratio: float,
    baseline: dict[str, float] | None,
    settled: dict[str, Any],
    session: _Session,
) -> list[dict[str, Any]]:
    observed = eviction["observed"]
    resumed_n = eviction["sessions"]
    sized = (
        f"the idle sessions' histories needed {eviction['idle_kv_tokens']} KV tokens of a "
        f"{eviction['kv_capacity_tokens']}-token pool; {eviction['pressure_requests']} pressure requests"
        if eviction.get("kv_capacity_tokens")
        else f"KV capacity unknown; {eviction['pressure_requests']} pressure requests"
    )
    if observed:
        exercised = verdict(
            "eviction_exercised",
            PASS,
            "; ".join(eviction["how"]) + f" ({sized})",
            eviction.get("evicted_sessions"),
            None,
            resumed_n,
        )
    elif eviction.get("cache_reuse_seen") is False:
        exercised = verdict(
            "eviction_exercised",
            NOT_EXERCISED,
            "the engine reused no KV between turns (the warm sessions got 0 cached tokens): every resume "
            f"recomputes, there is nothing to evict ({sized})",
            0,
            None,
            resumed_n,
        )
    else:
        exercised = verdict(
            "eviction_exercised",
            NOT_EXERCISED,
            f"no eviction or offload observed: cached tokens on resume p50 {eviction['cached_tokens_resume_p50']} "
            f"vs warm {eviction['cached_tokens_warm_p50']}, no offload series moved ({sized}); "
            "raise params.pressure_factor or give params.kv_capacity_tokens",
            0,
            None,
            resumed_n,
        )
    verdicts = [exercised]
    ratio = resume["resume_over_recompute"]
    figures = (
        f"resume TTFT p50 {_ms(resume['resume_ttft_ms']['p50'])} vs recompute {_ms(resume['recompute_ttft_ms']['p50'])}"
        f" vs warm {_ms(resume['warm_ttft_ms']['p50'])} (recompute: {resume['recompute_method']})"
    )
    if not observed:
        status = NOT_EXERCISED
        detail = "no eviction observed, so the resume cost says nothing about swapping: " + figures
    elif ratio["value"] is None:
        status, detail = NOT_JUDGED, "no resume or recompute TTFT: " + figures
    elif ratio["n"] < MIN_SAMPLES:
        status = INSUFFICIENT_DATA
        detail = f"{figures} from {ratio['n']} sessions: at least {MIN_SAMPLES} are needed to judge it"
    else:
        status = compare(ratio["value"], ratio["interval"], max_ratio)
        low, high = ratio["interval"] or (ratio["value"], ratio["value"])
        detail = (
            f"{figures}: ratio {ratio['value']:.2f} (95% CI {low:.2f}–{high:.2f}, n={ratio['n']}) vs <= {max_ratio:g}"
        )
        if status == INCONCLUSIVE:
            detail += ": the interval straddles the threshold"
        elif status == FAIL:
            detail += ": resuming an evicted session costs as much as recomputing it (no offload benefit)"
    verdicts.append(
        verdict(
            "resume_cheaper_than_recompute", status, detail, ratio["value"], max_ratio, ratio["n"], ratio["interval"]
        )
    )
    tolerance = continuation["tolerance_token"]
    caveat = (
        f"greedy decoding (temperature 0, fixed seed); real GPUs are not bit-deterministic, so a divergence at or "
        f"after token {tolerance} is reported, not failed"
    )
    compared = continuation.get("compared") or 0
    if continuation.get("reference") is None:
        status, detail = NOT_JUDGED, "no eviction-free reference: the engine offers no cache reset"
    elif not compared:
        status, detail = NOT_JUDGED, "no resumed session to compare with its reference"
    else:
        detail = (
            f"{continuation['identical']} of {compared} resumed sessions identical to the reference "
            f"({continuation['reference']}), {continuation['late_divergence']} diverged late, "
            f"{continuation['failed']} failed"
            + (f" (sessions {continuation['failed_sessions']})" if continuation["failed"] else "")
            + (
                f"; first divergence at token {continuation['first_divergence_min']}"
                if continuation["first_divergence_min"] is not None
                else "; no divergence"
            )
            + f", matching {continuation['matching_fraction_mean']:.0%} on average; {caveat}"
        )
        status = PASS if not continuation["failed"] else FAIL
        if not observed:
            status, detail = NOT_EXERCISED, "no eviction observed, so no session came back from one: " + detail
    verdicts.append(verdict("continuation_identical", status, detail, continuation.get("failed"), 0, compared))
    if never["sessions"]:
        warm_count, total = never["warm_count"], never["sessions"]
        detail = (
            f"{warm_count} of {total} never-swap sessions (kept active, resumed last) came back warm: TTFT p50 "
            f"{_ms(never['ttft_ms']['p50'])} vs warm {_ms(never['warm_ttft_p50_ms'])}"
        )
        if never["warm_cached_share"] is not None:
            shares = [s.get("cached_share") for s in never["per_session"] if s.get("cached_share") is not None]
            detail += f", cached share {min(shares, default=0):.2f}+ vs warm {never['warm_cached_share']:.2f}"
        status = PASS if warm_count == total else FAIL
        if not observed:
            status, detail = NOT_EXERCISED, "no eviction observed, so staying warm proves nothing: " + detail
        verdicts.append(verdict("never_swap_sessions_warm", status, detail, warm_count, total, total))
    verdicts.append(_released_verdict(baseline, settled, session.metrics.recording.engine))
    return verdicts


def _released_verdict(baseline: dict[str, float] | None, settled: dict[str, Any], engine: str | None) -> dict[str, Any]:
    after = settled.get("after")
    kv, base = (after or {}).get("kv_usage_ratio"), (baseline or {}).get("kv_usage_ratio")
    if kv is None or base is None:
        return verdict("idle_kv_released", NOT_JUDGED, "the engine exports no KV usage metric")
    busy = (after.get("running") or 0) + (after.get("waiting") or 0)
    released = kv <= base + KV_BASELINE_TOLERANCE and busy == 0
    detail = (
        f"KV usage {kv:.3f} vs baseline {base:.3f} (tolerance {KV_BASELINE_TOLERANCE}) {settled['waited_s']} s after "
        f"every session closed; {busy:g} requests still running or waiting"
    )
    if engine == "llamacpp" and not released:
        detail += "; llama.cpp slots keep finished requests' cache for reuse, so usage stays up by design"
    return verdict("idle_kv_released", PASS if released else FAIL, detail, kv, base + KV_BASELINE_TOLERANCE)


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"


def _swap_observed_line(
    eviction: dict[str, Any],
    resume: dict[str, Any],
    continuation: dict[str, Any],
    never: dict[str, Any],
    sizing: dict[str, Any],
) -> dict[str, Any]:
    """metadata["observed"]: one sentence with the key figures and sample sizes, and the figures."""
    n = resume["resume_ttft_ms"]["n"]
    if eviction["observed"]:
        evicted = eviction.get("evicted_sessions")
        what = (
            f"evicted {evicted} of {eviction['sessions']} idle sessions"
            if evicted
            else f"offloaded the {eviction['sessions']} idle sessions' KV"
            if eviction["offloaded"]
            else f"evictions seen (not counted per session) for {eviction['sessions']} idle sessions"
        )
    elif eviction.get("cache_reuse_seen") is False:
        what = f"no KV kept between turns for {eviction['sessions']} idle sessions (every resume recomputes)"
    else:
        what = f"no eviction of {eviction['sessions']} idle sessions"
    capacity = sizing.get("kv_capacity_tokens")
    held = (
        f" (their histories needed {sizing.get('idle_kv_tokens')} of {capacity} KV tokens; "
        f"{eviction['pressure_requests']} pressure requests; preemptions +{eviction.get('preemptions') or 0:g})"
        if capacity
        else f" ({eviction['pressure_requests']} pressure requests; KV capacity unknown)"
    )
    line = (
        f"{what}{held}; resume TTFT p50 {_ms(resume['resume_ttft_ms']['p50'])} vs warm "
        f"{_ms(resume['warm_ttft_ms']['p50'])} vs recompute {_ms(resume['recompute_ttft_ms']['p50'])} (n={n})"
    )
    if continuation.get("compared"):
        line += f"; continuation identical in {continuation['identical']} of {continuation['compared']}"
    if never["sessions"]:
        line += f"; never-swap {never['warm_count']} of {never['sessions']} warm"
    return {
        "line": line,
        "eviction_observed": eviction["observed"],
        "evicted_sessions": eviction.get("evicted_sessions"),
        "idle_sessions": eviction["sessions"],
        "idle_kv_tokens": sizing.get("idle_kv_tokens"),
        "kv_capacity_tokens": capacity,
        "resume_ttft_p50_ms": resume["resume_ttft_ms"]["p50"],
        "warm_ttft_p50_ms": resume["warm_ttft_ms"]["p50"],
        "recompute_ttft_p50_ms": resume["recompute_ttft_ms"]["p50"],
        "resume_over_recompute": resume["resume_over_recompute"]["value"],
        "continuation_identical": continuation.get("identical"),
        "continuation_compared": continuation.get("compared"),
        "never_swap_warm": never["warm_count"],
        "n": n,
    }


# ---------------------------------------------------------------- 4. prefix reuse

# caching on must hold at most this share of the KV that caching off (or the theory of every request
# holding its own prompt) holds: "clearly below", the article's verdict
PREFIX_MEMORY_MAX_SHARE = 0.8
PREFIX_SAMPLE_INTERVAL_S = 0.25  # KV usage is sampled this often during the prefix test (a short load)
PREFIX_HELD_PERCENTILE = 90  # the judged "held KV": this percentile of the samples (max is one sample)
MIN_KV_SAMPLES = 5  # fewer KV samples of a run: insufficient data to judge its memory


def prefix_off_target(target: Target, endpoint_url: str | None = None, metrics_url: str | None = None) -> Target | None:
    """The prefix-caching-off variant of `target`: a second endpoint started with caching off (vLLM
    --no-enable-prefix-caching, SGLang --disable-radix-cache), or for llama.cpp the same endpoint
    with `cache_prompt: false` on every request; None when neither exists (the off figure is then
    the capacity model's theory only)."""
    if endpoint_url:
        base = endpoint_url.rstrip("/")
        return replace(target, endpoint_url=base, metrics_url=metrics_url or f"{base}/metrics", cache_prompt=None)
    if target.engine == "llamacpp":
        return replace(target, cache_prompt=False)
    return None


def _kv_token_samples(
    recording: MetricsRecording, start: float, end: float, capacity: float | None
) -> tuple[list[float], str | None]:
    """KV tokens in use over a window: the engine's token gauge, else its usage ratio x the capacity."""
    tokens = _series_in(recording, "kv_used_tokens", start, end)
    if tokens:
        return tokens, "engine token count"
    ratios = _series_in(recording, "kv_usage_ratio", start, end)
    if ratios and capacity:
        return [r * float(capacity) for r in ratios], f"usage ratio x capacity {float(capacity):.0f} tokens"
    return [], None


def _kv_tokens_of(sample: dict[str, float] | None, capacity: float | None, source: str | None) -> float:
    """KV tokens in use in one metrics sample, read the way the load's samples were (0 without one)."""
    if not sample or source is None:
        return 0.0
    if source == "engine token count":
        return float(sample.get("kv_used_tokens") or 0.0)
    ratio = sample.get("kv_usage_ratio")
    return float(ratio) * float(capacity) if ratio is not None and capacity else 0.0


def _held(samples: list[float]) -> float | None:
    return float(np.percentile(samples, PREFIX_HELD_PERCENTILE)) if samples else None


async def run_prefix_reuse(
    target: Target,
    params: dict[str, Any],
    cancel: Any = None,
    progress: Callable[[dict[str, Any]], Any] | None = None,
    off_target: Target | None = None,
) -> NormalizedResult:
    """The same shared-prefix load against `target` (prefix caching on) and, if given, `off_target`
    (caching off): peak KV tokens (engine metric, or usage x params.kv_capacity_tokens), TTFT and
    throughput of both, against the theory of every request allocating its own prompt. Caching on
    passes when its KV is clearly below the theory and below the off run; without an off run the
    on-vs-off verdict is not exercised (never a pass) and the off figure is theory only."""
    requests = _require(params, "requests", int, 1)
    concurrency = _require(params, "concurrency", int, 1)
    prefix = _require(params, "prefix_tokens", int, 1)
    suffix = _require(params, "suffix_tokens", int, 1)
    output_tokens = _require(params, "output_tokens", int, 1)
    capacity = params.get("kv_capacity_tokens")
    if capacity is not None and (not isinstance(capacity, (int, float)) or isinstance(capacity, bool) or capacity <= 0):
        raise PlanError(f"params.kv_capacity_tokens: must be a positive number of tokens, got {capacity!r}")
    interval_s = float(params.get("sample_interval_s") or PREFIX_SAMPLE_INTERVAL_S)
    reporter = Reporter(progress, cancel)
    points: list[LoadPoint] = []
    outcomes: list[LoadOutcome] = []
    samples: dict[str, list[float]] = {}
    notes: list[str] = []
    partial = False
    in_flight = min(concurrency, requests)
    own = in_flight * (prefix + suffix + output_tokens)  # every request allocates its own prompt and output
    shared_once = prefix + in_flight * (suffix + output_tokens)  # the least caching can hold
    configs = [("prefix_on", target)] + ([("prefix_off", off_target)] if off_target is not None else [])
    sessions: list[_Session] = []
    for n, (label, tgt) in enumerate(configs):
        session = _Session(tgt)
        session.metrics.interval_s = interval_s
        async with session:
            sessions.append(session)
            prompts = session.prompts
            assert prompts is not None
            # the shared prefix is warm before the load, as a deployed system prompt is: without it
            # the first wave of requests all prefill it at once and the peak says nothing of reuse
            await session.client.send(
                session.spec(prompts.shared_prefix(prefix, suffix, seed=-1), 1, request_id=f"{label}-warm")
            )
            baseline = await session.kv_now()
            outcome = await run_load(
                session.client,
                lambda i, prompts=prompts, label=label, session=session: session.spec(
                    prompts.shared_prefix(prefix, suffix, seed=i), output_tokens, request_id=f"{label}-{i}"
                ),
                LoadConfig(mode="closed", concurrency=concurrency, max_requests=requests),
                cancel=cancel,
                progress=reporter.phase(label, 100 * n / len(configs), 100 * (n + 1) / len(configs)),
            )
            await asyncio.sleep(min(interval_s, 1.0))  # one more sample after the last request
            point = summarize(outcome, label=label, slo=_slo(params))
            window = (outcome.measure_start - session.time_zero, outcome.measure_end - session.time_zero + 1.0)
            _attach_engine_stats(point, session.metrics.recording, *window)
            raw, source = _kv_token_samples(session.metrics.recording, *window, capacity)
            # the KV the load added: an engine that keeps finished prompts resident (llama.cpp's slots,
            # or the "on" run's leftovers when "off" is the same server) would otherwise count them
            base_tokens = _kv_tokens_of(baseline, capacity, source)
            kv = [max(value - base_tokens, 0.0) for value in raw]
            samples[label] = kv
            cached = [r.cached_tokens for r in outcome.records if r.cached_tokens is not None]
            point.extra.update(
                usage_cached_tokens_mean=(sum(cached) / len(cached)) if cached else None,
                own_allocation_tokens=own,
                shared_once_tokens=shared_once,
                kv_tokens_peak=max(kv) if kv else None,
                kv_tokens_held=_held(kv),
                kv_token_samples=len(kv),
                kv_tokens_source=source,
                kv_baseline_ratio=(baseline or {}).get("kv_usage_ratio"),
                kv_baseline_tokens=base_tokens,
                kv_tokens_peak_raw=max(raw) if raw else None,
                cache_prompt=tgt.cache_prompt,
            )
            points.append(point)
            outcomes.append(outcome)
            if outcome.cancelled:
                partial = True
                notes.append("cancelled: partial data")
                break
    on = points[0]
    off = points[1] if len(points) == 2 else None
    verdicts = [_errors_verdict(points)] + _budget_verdicts(on, params, label="prefix_on", records=outcomes[0].records)
    verdicts.append(_kv_vs_theory(samples.get("prefix_on", []), own))
    verdicts.append(_kv_vs_off(samples.get("prefix_on", []), samples.get("prefix_off"), off is not None))
    verdicts.append(_prefix_hits(on, prefix, suffix))
    on_ttft = [r.ttft_ms for r in outcomes[0].records if r.ok and r.ttft_ms is not None]
    observed = _prefix_observed(on, off, own, shared_once, on_ttft, outcomes)
    reporter.close()
    result = _build_result("prefix_reuse", sessions[0], params, points, outcomes, verdicts, notes, partial)
    result.metadata["observed"] = observed
    if off is None:
        notes.append(
            "No prefix-caching-off run: the off figure is the capacity model's theory (every request allocates "
            "its own prompt), not a measurement."
        )
    if len(sessions) == 2:
        result.metadata["off_target"] = sessions[1].target.describe()
        for name, values in sessions[1].metrics.recording.series.items():
            result.timeseries[f"prefix_off.{name}"] = values
    return result


def _kv_vs_theory(on: list[float], own: int) -> dict[str, Any]:
    name, limit = "kv_below_theory", PREFIX_MEMORY_MAX_SHARE
    if not on:
        return _verdict(
            name,
            None,
            "no KV token count from the engine (give params.kv_capacity_tokens to convert its usage ratio)",
            None,
            limit,
            0,
        )
    held = _held(on)
    assert held is not None
    if len(on) < MIN_KV_SAMPLES:
        return _verdict(
            name,
            None,
            f"{len(on)} KV samples during the load: at least {MIN_KV_SAMPLES} are needed to judge it",
            held / own,
            limit,
            len(on),
            INSUFFICIENT_DATA,
        )
    band = percentile_interval(on, PREFIX_HELD_PERCENTILE)
    interval = None if band is None else (band[0] / own, band[1] / own)
    status = compare(held / own, interval, limit)
    detail = (
        f"KV held with caching on {held:.0f} tokens (p{PREFIX_HELD_PERCENTILE} of {len(on)} samples, peak "
        f"{max(on):.0f}) = {held / own:.2f} of the theory {own} tokens if every request allocated its own"
        + (f" (95% CI {interval[0]:.2f}–{interval[1]:.2f})" if interval else "")
        + f"; at most {limit:.2f} to pass"
    )
    if status == INCONCLUSIVE:
        detail += ": the interval straddles the threshold"
    return _verdict(name, None, detail, held / own, limit, len(on), status, interval)


def _kv_vs_off(on: list[float], off: list[float] | None, off_ran: bool) -> dict[str, Any]:
    name, limit = "kv_below_prefix_off", PREFIX_MEMORY_MAX_SHARE
    if not off_ran:
        return _verdict(
            name,
            None,
            "no prefix-caching-off run (a second endpoint started with caching off, or llama.cpp's cache_prompt: "
            "false): on vs off was not exercised and the off figure is theory only",
            None,
            limit,
            0,
            NOT_EXERCISED,
        )
    if not on or not off:
        return _verdict(name, None, "no KV token count from the engine on one of the two runs", None, limit, 0)
    held_on, held_off = _held(on), _held(off)
    assert held_on is not None and held_off is not None
    n = min(len(on), len(off))
    if n < MIN_KV_SAMPLES or held_off <= 0:
        return _verdict(
            name,
            None,
            f"{len(on)} and {len(off)} KV samples (on, off), off held {held_off:.0f} tokens: at least "
            f"{MIN_KV_SAMPLES} samples each and a non-zero off figure are needed",
            None if held_off <= 0 else held_on / held_off,
            limit,
            n,
            INSUFFICIENT_DATA,
        )
    ratio = held_on / held_off
    interval = ratio_interval(on, off, PREFIX_HELD_PERCENTILE)
    status = compare(ratio, interval, limit)
    detail = (
        f"KV held with caching on {held_on:.0f} vs off {held_off:.0f} tokens (p{PREFIX_HELD_PERCENTILE} of "
        f"{len(on)} and {len(off)} samples; peaks {max(on):.0f} vs {max(off):.0f}): on/off {ratio:.2f}"
        + (f" (95% CI {interval[0]:.2f}–{interval[1]:.2f})" if interval else "")
        + f"; at most {limit:.2f} to pass"
    )
    if status == INCONCLUSIVE:
        detail += ": the interval straddles the threshold"
    return _verdict(name, None, detail, ratio, limit, n, status, interval)


def _prefix_hits(on: LoadPoint, prefix: int, suffix: int) -> dict[str, Any]:
    """Supporting evidence: the engine's prefix-hit ratio (or cached tokens in the usage) on the on run."""
    hit = on.extra.get("prefix_hit_ratio")
    if hit is None and on.extra.get("usage_cached_tokens_mean") is not None:
        hit = on.extra["usage_cached_tokens_mean"] / (prefix + suffix)
    shared = prefix / (prefix + suffix)
    needed = PREFIX_REUSE_MIN_SHARE * shared  # the one threshold: reported, stated and applied
    return _verdict(
        "prefix_reused",
        None if hit is None else hit >= needed,
        "no prefix-hit metric or cached-token usage from the engine"
        if hit is None
        else f"prefix hit ratio {hit:.2f} vs threshold {needed:.3g} "
        f"({PREFIX_REUSE_MIN_SHARE:.0%} of the prompt's shared share {shared:.2f})",
        hit,
        needed,
        on.requests_completed,
    )


def _prefix_observed(
    on: LoadPoint,
    off: LoadPoint | None,
    own: int,
    shared_once: int,
    on_ttft: list[float],
    outcomes: list[LoadOutcome],
) -> dict[str, Any]:
    """The figures of the prefix test and its one-sentence summary (metadata["observed"])."""
    peak_on = on.extra.get("kv_tokens_peak")
    peak_off = off.extra.get("kv_tokens_peak") if off is not None else None
    basis = "measured_off" if peak_off else "theory"
    reference = peak_off or own
    saving = None if peak_on is None else 1.0 - float(peak_on) / float(reference)
    theory_saving = 1.0 - shared_once / own
    ttft_ratio = ttft_interval = None
    if off is not None and on.ttft_ms.p50 and off.ttft_ms.p50:
        ttft_ratio = on.ttft_ms.p50 / off.ttft_ms.p50
        off_ttft = [r.ttft_ms for r in outcomes[1].records if r.ok and r.ttft_ms is not None]
        ttft_interval = ratio_interval(on_ttft, off_ttft, 50)
        on.extra["ttft_p50_on_over_off"] = ttft_ratio

    def tokens(value: Any) -> str:
        return "n/a" if value is None else f"{value:,.0f}"

    def ms(value: Any) -> str:
        return "n/a" if value is None else f"{value:.0f} ms"

    def rate(value: Any) -> str:
        return "n/a" if value is None else f"{value:,.0f} tok/s"

    line = f"peak KV with caching on {tokens(peak_on)} tokens vs " + (
        f"off {tokens(peak_off)} (measured)" if off is not None else "off not run (theory only)"
    )
    line += f" vs theory {own:,} if every request allocated its own"
    if saving is not None:
        line += f"; memory saving {saving:.0%} vs {'the off run' if basis == 'measured_off' else 'theory'}"
    line += f"; TTFT p50 on {ms(on.ttft_ms.p50)}"
    if off is not None:
        line += f" vs off {ms(off.ttft_ms.p50)}"
    line += f"; throughput on {rate(on.output_token_throughput)}"
    if off is not None:
        line += f" vs off {rate(off.output_token_throughput)}"
    line += f" (n={on.requests_completed or 0}" + (f"/{off.requests_completed or 0}" if off is not None else "") + ")"
    return {
        "line": line,
        "off_run": off is not None,
        "kv_peak_on_tokens": peak_on,
        "kv_peak_off_tokens": peak_off,
        "kv_held_on_tokens": on.extra.get("kv_tokens_held"),
        "kv_held_off_tokens": off.extra.get("kv_tokens_held") if off is not None else None,
        "theory_own_allocation_tokens": own,
        "theory_shared_once_tokens": shared_once,
        "memory_saving": saving,
        "memory_saving_basis": basis if saving is not None else None,
        "theoretical_saving": theory_saving,
        "ttft_p50_on_ms": on.ttft_ms.p50,
        "ttft_p50_off_ms": off.ttft_ms.p50 if off is not None else None,
        "ttft_p50_on_over_off": ttft_ratio,
        "ttft_p50_on_over_off_interval": list(ttft_interval) if ttft_interval else None,
        "throughput_on_tok_s": on.output_token_throughput,
        "throughput_off_tok_s": off.output_token_throughput if off is not None else None,
        "requests_on": on.requests_completed,
        "requests_off": off.requests_completed if off is not None else None,
        "kv_samples_on": on.extra.get("kv_token_samples"),
        "kv_samples_off": off.extra.get("kv_token_samples") if off is not None else None,
    }


# ---------------------------------------------------------------- 5. long-run stability


async def run_stability(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    """Steady closed-loop load after an excluded warm-up, lengths from the constraints'
    distribution. Judged: drift of TTFT/TPOT p50 and p99 (last window vs first, bootstrap
    intervals), KV usage slope at steady load, GPU memory slope (NVML), preemption-rate trend and
    the engine's fragmentation signal where it exports one."""
    concurrency = _require(params, "concurrency", int, 1)
    duration = _require(params, "duration_s", float, 0.1)
    window = _require(params, "window_s", float, 0.01)
    if window * 2 > duration:
        raise PlanError(f"params.window_s: must be at most half of duration_s ({duration:g}), got {window:g}")
    warmup = float(params.get("warmup_s") or 0.0)
    if warmup < 0:
        raise PlanError(f"params.warmup_s: must be a number >= 0, got {warmup!r}")
    input_tokens = _require(params, "input_tokens", int, 1)
    output_tokens = _require(params, "output_tokens", int, 1)
    max_drift = float(params.get("max_drift_pct") or 25.0)
    interval = float(params.get("metrics_interval_s") or 1.0)
    lengths = _trace_lengths(params, input_tokens, output_tokens)
    reporter = Reporter(progress, cancel)
    notes: list[str] = []
    async with _Session(target, metrics_interval_s=interval) as session:
        prompts = session.prompts
        assert prompts is not None
        outcome = await run_load(
            session.client,
            lambda i: session.spec(prompts.text(lengths(i)[0], seed=i), lengths(i)[1], request_id=f"stab-{i}"),
            LoadConfig(
                mode="closed", concurrency=concurrency, duration_s=duration, warmup_s=warmup, drain_timeout_s=60.0
            ),
            cancel=cancel,
            progress=reporter.phase("load", 0, 100),
        )
    overall = summarize(outcome, label="all", slo=_slo(params))
    start = outcome.measure_start
    steady_end = outcome.load_end or outcome.measure_end  # the load stopped issuing here (then the drain)
    if outcome.cancelled:
        steady_end = min(steady_end, outcome.measure_end)
    last_start = max(steady_end - window, start + window)
    windows = {
        "first_window": (start, start + window),
        "last_window": (last_start, max(steady_end, last_start)),
    }
    window_records = {
        label: [r for r in outcome.records if t0 <= r.send_time < t1] for label, (t0, t1) in windows.items()
    }
    points = [overall]
    for label, (t0, t1) in windows.items():
        part = LoadOutcome(
            config=outcome.config,
            records=window_records[label],
            run_start=outcome.run_start,
            measure_start=t0,
            measure_end=t1,
            achieved_concurrency=None,
            client_bound=outcome.client_bound,
        )
        point = summarize(part, label=label)
        _attach_engine_stats(point, session.metrics.recording, t0 - session.time_zero, t1 - session.time_zero)
        points.append(point)
    _attach_engine_stats(overall, session.metrics.recording, start - session.time_zero, steady_end - session.time_zero)
    verdicts = [_errors_verdict([overall])]
    early_ok = [r for r in window_records["first_window"] if r.ok]
    late_ok = [r for r in window_records["last_window"] if r.ok]
    drift: dict[str, Any] = {}
    for metric, q in (("ttft_ms", 50), ("ttft_ms", 99), ("tpot_ms", 50), ("tpot_ms", 99)):
        judged = _drift_verdict(
            f"{metric.replace('_ms', '')}_p{q}_drift",
            [getattr(r, metric) for r in early_ok],
            [getattr(r, metric) for r in late_ok],
            q,
            max_drift,
            metric.replace("_ms", "").upper(),
        )
        drift[f"{metric}_p{q}_drift_pct"] = judged["value"]
        drift[f"{metric}_p{q}_drift_interval"] = judged["interval"]
        verdicts.append(judged)
    recording = session.metrics.recording
    steady = (start - session.time_zero, steady_end - session.time_zero)
    kv_verdict, kv_figures = _kv_slope_verdict(recording, steady, params)
    verdicts.append(kv_verdict)
    drift.update(kv_figures)
    gpu_verdict, gpu_figures = _gpu_memory_verdict(session.gpu.recording, steady, params)
    verdicts.append(gpu_verdict)
    drift.update(gpu_figures)
    shifted = {k: (a - session.time_zero, b - session.time_zero) for k, (a, b) in windows.items()}
    pre_verdict, pre_figures = _preemption_trend_verdict(recording, shifted, params)
    verdicts.append(pre_verdict)
    drift.update(pre_figures)
    frag_verdict, frag_figures = _fragmentation_verdict(recording, shifted, params)
    verdicts.append(frag_verdict)
    drift.update(frag_figures)
    verdicts.extend(_budget_verdicts(overall, params, records=outcome.records))
    overall.extra.update({k: v for k, v in drift.items() if not k.endswith("_interval")})
    soak_note = _soak_note(params, duration)
    if soak_note:
        notes.append(soak_note)
    if outcome.cancelled:
        notes.append("cancelled: partial data")
    observed = _stability_observed(
        params, concurrency, duration, warmup, outcome, early_ok, late_ok, drift, soak_note, session.gpu.recording
    )
    reporter.close()
    return _build_result(
        "stability",
        session,
        params,
        points,
        [outcome],
        verdicts,
        notes,
        outcome.cancelled,
        {
            "drift": drift,
            "warmup_excluded": {"seconds": warmup, "requests": len(outcome.warmup)},
            "observed": observed,
            **_lengths_meta(lengths),
        },
    )


def _soak_note(params: dict[str, Any], duration: float) -> str | None:
    """The label of a soak shorter than the plan's hour, or than the 4 h it recommends for
    multi-turn sessions: never silent."""
    recommended = float(params.get("recommended_duration_s") or SOAK_S)
    kind = "short demo soak" if params.get("soak_label") == "demo" else "short soak"
    extra = f" ({recommended / 3600:g} h recommended for multi-turn sessions)" if recommended > SOAK_S else ""
    if duration < SOAK_S:
        return f"{kind} of {duration:g} s: not the {SOAK_S / 3600:g} h the plan asks for{extra}"
    if duration < recommended:
        return f"soak of {duration / 3600:.2g} h: {recommended / 3600:g} h recommended for multi-turn sessions"
    return None


def _drift_verdict(
    name: str, early: list[float | None], late: list[float | None], q: float, max_drift: float, what: str
) -> dict[str, Any]:
    """p`q` late / early as a drift in %, with a bootstrap interval over both windows' requests."""
    a = [float(v) for v in early if v is not None and math.isfinite(v)]
    b = [float(v) for v in late if v is not None and math.isfinite(v)]
    n = len(a) + len(b)
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES:
        return verdict(
            name,
            INSUFFICIENT_DATA,
            f"{what} p{q:g} drift: {len(a)} requests in the first window and {len(b)} in the last; "
            f"at least {MIN_SAMPLES} in each are needed to judge it (limit {max_drift:g} %)",
            None,
            max_drift,
            n,
        )
    base, now = float(np.percentile(a, q)), float(np.percentile(b, q))
    if base <= 0:
        return verdict(name, INSUFFICIENT_DATA, f"{what} p{q:g} of the first window is 0", None, max_drift, n)
    value = (now / base - 1.0) * 100.0
    ratio = ratio_interval(b, a, q)
    interval = None if ratio is None else ((ratio[0] - 1.0) * 100.0, (ratio[1] - 1.0) * 100.0)
    status = compare(value, interval, max_drift)
    detail = (
        f"{what} p{q:g} {base:.1f} -> {now:.1f} ms ({value:+.1f} %"
        + (f", 95% CI {interval[0]:+.1f}–{interval[1]:+.1f} %" if interval else "")
        + f"; n={len(a)} first, {len(b)} last window) vs <= {max_drift:g} %"
    )
    if status == INCONCLUSIVE:
        detail += ": the interval straddles the limit"
    return verdict(name, status, detail, value, max_drift, n, interval)


def _slope_interval(series: list[list[float]]) -> tuple[float, tuple[float, float]] | None:
    """Least-squares slope (per second) with its 95 % interval (slope +- 1.96 standard errors)."""
    if len(series) < 3:
        return None
    t = np.asarray([p[0] for p in series], dtype=float)
    v = np.asarray([p[1] for p in series], dtype=float)
    if np.ptp(t) == 0:
        return None
    slope, intercept = np.polyfit(t, v, 1)
    residuals = v - (slope * t + intercept)
    se = math.sqrt(float(np.sum(residuals**2)) / (len(t) - 2) / float(np.sum((t - t.mean()) ** 2)))
    return float(slope), (float(slope - 1.96 * se), float(slope + 1.96 * se))


MIN_SLOPE_SAMPLES = 10


def _kv_slope_verdict(
    recording: MetricsRecording, steady: tuple[float, float], params: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """KV usage slope over the steady load (warm-up excluded): a leak, or fragmentation that holds
    blocks, shows as KV usage climbing while the load stays the same."""
    limit = float(params.get("max_kv_slope_per_hour") or 0.05)
    series = [p for p in recording.series.get("kv_usage_ratio", []) if steady[0] <= p[0] <= steady[1]]
    name = "kv_usage_slope"
    if not recording.series.get("kv_usage_ratio"):
        return verdict(name, NOT_JUDGED, "the engine exports no KV usage metric"), {"kv_usage_slope_per_hour": None}
    fit = _slope_interval(series) if len(series) >= MIN_SLOPE_SAMPLES else None
    if fit is None:
        return (
            verdict(
                name,
                INSUFFICIENT_DATA,
                f"{len(series)} KV usage samples at steady load: at least {MIN_SLOPE_SAMPLES} are needed",
                None,
                limit,
                len(series),
            ),
            {"kv_usage_slope_per_hour": None},
        )
    slope, (low, high) = fit
    value, interval = slope * 3600.0, (low * 3600.0, high * 3600.0)
    status = compare(value, interval, limit)
    detail = (
        f"KV usage {value:+.3f} of the pool per hour at steady load (95% CI {interval[0]:+.3f}–{interval[1]:+.3f}, "
        f"{len(series)} samples over {series[-1][0] - series[0][0]:.0f} s) vs <= {limit:g}"
    )
    if status == INCONCLUSIVE:
        detail += ": the interval straddles the limit (a longer soak narrows it)"
    first, last = series[0][1], series[-1][1]
    return verdict(name, status, detail, value, limit, len(series), interval), {
        "kv_usage_slope_per_hour": value,
        "kv_usage_slope_interval": list(interval),
        "kv_usage_first": first,
        "kv_usage_last": last,
    }


def _gpu_memory_verdict(
    gpu: Any, steady: tuple[float, float], params: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """GPU memory slope from NVML (memory outside the KV pool: allocator growth, leaks)."""
    limit = float(params.get("max_gpu_memory_slope_mib_per_hour") or 512.0)
    name = "gpu_memory_slope"
    if not gpu.available:
        return (
            verdict(
                name, NOT_JUDGED, f"no NVML on the client machine: GPU memory not measured ({gpu.reason or 'no GPU'})"
            ),
            {"gpu_memory_slope_mib_per_hour": None},
        )
    slopes = []
    for key, values in gpu.series.items():
        if not key.endswith("_memory_used_mib"):
            continue
        fit = _slope_interval([p for p in values if steady[0] <= p[0] <= steady[1]])
        if fit is not None:
            slopes.append((key, fit))
    if not slopes:
        return (
            verdict(name, INSUFFICIENT_DATA, "too few GPU memory samples at steady load", None, limit),
            {"gpu_memory_slope_mib_per_hour": None},
        )
    key, (slope, (low, high)) = max(slopes, key=lambda item: item[1][0])
    value, interval = slope * 3600.0, (low * 3600.0, high * 3600.0)
    status = compare(value, interval, limit)
    samples = len(gpu.series[key])
    detail = (
        f"{key.replace('_memory_used_mib', '')} memory {value:+.0f} MiB per hour at steady load "
        f"(95% CI {interval[0]:+.0f}–{interval[1]:+.0f}) vs <= {limit:g} MiB/h"
    )
    return verdict(name, status, detail, value, limit, samples, interval), {
        "gpu_memory_slope_mib_per_hour": value,
        "gpu_memory_slope_interval": list(interval),
    }


def _counter_rate(recording: MetricsRecording, name: str, window: tuple[float, float]) -> tuple[float, float] | None:
    """(increase, seconds) of a cumulative counter over the window; None without two samples."""
    values = [p for p in recording.series.get(name, []) if window[0] <= p[0] <= window[1]]
    if len(values) < 2 or values[-1][0] <= values[0][0]:
        return None
    return max(values[-1][1] - values[0][1], 0.0), values[-1][0] - values[0][0]


def _preemption_trend_verdict(
    recording: MetricsRecording, windows: dict[str, tuple[float, float]], params: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Preemptions per second in the last window against the first: a pool shrinking under a leak or
    fragmentation preempts more as the soak goes on. One extra preemption per window is tolerated."""
    ratio_limit = float(params.get("max_preemption_rate_ratio") or 2.0)
    name = "preemption_rate_trend"
    if "preemptions" not in recording.series:
        return (
            verdict(name, NOT_JUDGED, "the engine exports no preemption counter"),
            {"preemptions_per_min_first": None, "preemptions_per_min_last": None},
        )
    early = _counter_rate(recording, "preemptions", windows["first_window"])
    late = _counter_rate(recording, "preemptions", windows["last_window"])
    if early is None or late is None:
        return (
            verdict(name, INSUFFICIENT_DATA, "fewer than two preemption-counter samples in a window"),
            {"preemptions_per_min_first": None, "preemptions_per_min_last": None},
        )
    early_rate, late_rate = early[0] / early[1], late[0] / late[1]
    allowed = early_rate * ratio_limit + 1.0 / late[1]
    figures = {"preemptions_per_min_first": early_rate * 60.0, "preemptions_per_min_last": late_rate * 60.0}
    detail = (
        f"preemptions {early[0]:.0f} in the first window ({early_rate * 60:.1f}/min) -> {late[0]:.0f} in the last "
        f"({late_rate * 60:.1f}/min) vs <= {ratio_limit:g} x the first rate + 1 per window"
    )
    status = PASS if late_rate <= allowed else FAIL
    return verdict(name, status, detail, late_rate * 60.0, allowed * 60.0, int(early[0] + late[0])), figures


def _fragmentation_verdict(
    recording: MetricsRecording, windows: dict[str, tuple[float, float]], params: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The engine's own fragmentation gauge, late window against the first (a bootstrap interval of
    the difference of means). Real engines export none: not judged, and the KV slope stands in."""
    limit = float(params.get("max_fragmentation_rise") or 0.05)
    name = "fragmentation_stable"
    if "fragmentation_ratio" not in recording.series:
        return (
            verdict(
                name,
                NOT_JUDGED,
                "the engine exports no fragmentation metric (vLLM, SGLang and llama.cpp have none); "
                "the KV usage slope at steady load stands in for it",
            ),
            {"fragmentation_first": None, "fragmentation_last": None},
        )
    early = _series_in(recording, "fragmentation_ratio", *windows["first_window"])
    late = _series_in(recording, "fragmentation_ratio", *windows["last_window"])
    if len(early) < 2 or len(late) < 2:
        return (
            verdict(name, INSUFFICIENT_DATA, f"{len(early)} and {len(late)} fragmentation samples in the windows"),
            {"fragmentation_first": None, "fragmentation_last": None},
        )
    a, b = np.asarray(early), np.asarray(late)
    value = float(b.mean() - a.mean())
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    diffs = b[rng.integers(0, b.size, (1000, b.size))].mean(axis=1) - a[rng.integers(0, a.size, (1000, a.size))].mean(
        axis=1
    )
    interval = (float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5)))
    status = compare(value, interval, limit)
    detail = (
        f"fragmentation {a.mean():.3f} -> {b.mean():.3f} ({value:+.3f}, 95% CI {interval[0]:+.3f}–{interval[1]:+.3f}; "
        f"{a.size} and {b.size} samples) vs a rise <= {limit:g}"
    )
    return verdict(name, status, detail, value, limit, int(a.size + b.size), interval), {
        "fragmentation_first": float(a.mean()),
        "fragmentation_last": float(b.mean()),
    }


def _stability_observed(
    params: dict[str, Any],
    concurrency: int,
    duration: float,
    warmup: float,
    outcome: LoadOutcome,
    early: list[RequestRecord],
    late: list[RequestRecord],
    drift: dict[str, Any],
    soak_note: str | None,
    gpu: Any,
) -> dict[str, Any]:
    """The one-sentence summary of the soak, with its figures."""

    def pct(key: str) -> str:
        value = drift.get(key)
        return "n/a" if value is None else f"{value:+.0f} %"

    def p(records: list[RequestRecord], attr: str, q: float) -> float | None:
        values = [getattr(r, attr) for r in records if getattr(r, attr) is not None]
        return float(np.percentile(values, q)) if values else None

    ttft_early, ttft_late = p(early, "ttft_ms", 99), p(late, "ttft_ms", 99)
    tpot_early, tpot_late = p(early, "tpot_ms", 99), p(late, "tpot_ms", 99)
    slope = drift.get("kv_usage_slope_per_hour")
    parts = [
        (soak_note + "; " if soak_note else "")
        + f"c={concurrency} for {duration:g} s after a {warmup:g} s warm-up ({len(outcome.warmup)} requests excluded), "
        f"{len(outcome.records)} measured requests (n={len(early)} first, {len(late)} last window)",
        f"TTFT p99 {_ms(ttft_early)} -> {_ms(ttft_late)} ({pct('ttft_ms_p99_drift_pct')}), "
        f"TPOT p99 {_ms(tpot_early)} -> {_ms(tpot_late)} ({pct('tpot_ms_p99_drift_pct')})",
        "KV usage slope "
        + (
            "n/a"
            if slope is None
            else f"{slope * 100:+.1f} points/h (95% CI {drift['kv_usage_slope_interval'][0] * 100:+.1f} to "
            f"{drift['kv_usage_slope_interval'][1] * 100:+.1f})"
        ),
    ]
    if drift.get("preemptions_per_min_first") is not None:
        parts.append(
            f"preemptions {drift['preemptions_per_min_first']:.1f} -> {drift['preemptions_per_min_last']:.1f}/min"
        )
    if drift.get("fragmentation_first") is not None:
        parts.append(f"fragmentation {drift['fragmentation_first']:.3f} -> {drift['fragmentation_last']:.3f}")
    if drift.get("gpu_memory_slope_mib_per_hour") is not None:
        parts.append(f"GPU memory {drift['gpu_memory_slope_mib_per_hour']:+.0f} MiB/h")
    else:
        parts.append("GPU memory not measured (no NVML)")
    return {
        "line": "; ".join(parts),
        "soak_note": soak_note,
        "duration_s": duration,
        "recommended_duration_s": float(params.get("recommended_duration_s") or SOAK_S),
        "warmup_s": warmup,
        "warmup_requests": len(outcome.warmup),
        "requests": len(outcome.records),
        "first_window_n": len(early),
        "last_window_n": len(late),
        "ttft_p99_first_ms": ttft_early,
        "ttft_p99_last_ms": ttft_late,
        "tpot_p99_first_ms": tpot_early,
        "tpot_p99_last_ms": tpot_late,
        **{k: v for k, v in drift.items() if not k.endswith("_interval")},
        "gpu_available": bool(gpu.available),
    }


# ---------------------------------------------------------------- 6. overload and rejection


async def run_overload(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    """Step the load from the target up to 3x (or until errors), then back down; judge the
    sustainable level, what happened past it and the time to recover (benchmarks.harness.overload)."""
    target_concurrency = _require(params, "target_concurrency", int, 1)
    rate = _rate(params)
    up_factors = _factors(params, "step_factors")
    down_factors = _factors(params, "down_factors")
    step_s = _require(params, "step_duration_s", float, 0.1)
    recovery_s = _require(params, "recovery_s", float, 0.1)
    bound_s = _require(params, "recovery_bound_s", float, 0)
    input_tokens = _require(params, "input_tokens", int, 1)
    output_tokens = _require(params, "output_tokens", int, 1)
    max_errors = float(params.get("max_error_rate", MAX_ERROR_RATE))
    lengths = _trace_lengths(params, input_tokens, output_tokens)
    base = float(rate) if rate else float(target_concurrency)
    unit = "req/s" if rate else "concurrent"

    def level_of(factor: float) -> float:
        return round(base * factor, 3) if rate else float(max(int(round(base * factor)), 1))

    plan_steps = [("up", level_of(f)) for f in up_factors] + [("down", level_of(f)) for f in down_factors]
    total_s = step_s * (len(plan_steps) - 1) + recovery_s
    reporter = Reporter(progress, cancel)
    notes: list[str] = []
    points: list[LoadPoint] = []
    outcomes: list[LoadOutcome] = []
    steps: list[overload.Step] = []
    partial = False
    session = _Session(target)
    session.metrics.interval_s = min(1.0, max(step_s / 10.0, 0.2))  # enough samples per short step
    index_base = 0
    async with session:
        prompts = session.prompts
        assert prompts is not None
        climbing_done = False
        elapsed = 0.0
        for position, (direction, level) in enumerate(plan_steps):
            if direction == "up" and climbing_done:
                continue
            if reporter.cancelled():
                partial = True
                break
            recovery = direction == "down" and position == len(plan_steps) - 1
            duration = recovery_s if recovery else step_s
            offset = index_base

            def make(index: int, offset: int = offset, label: str = f"{direction}-{level:g}") -> RequestSpec:
                request_input, request_output = lengths(offset + index)
                return session.spec(
                    prompts.text(request_input, seed=offset + index),
                    request_output,
                    request_id=f"overload-{label}-{index}",
                )

            config = (
                LoadConfig(mode="open", rate=level, duration_s=duration, drain_timeout_s=max(bound_s, step_s))
                if rate
                else LoadConfig(
                    mode="closed", concurrency=int(level), duration_s=duration, drain_timeout_s=max(bound_s, step_s)
                )
            )
            pct0, pct1 = 100 * elapsed / total_s, 100 * min(elapsed + duration, total_s) / total_s
            elapsed += duration
            outcome = await run_load(
                session.client,
                make,
                config,
                cancel=cancel,
                progress=reporter.phase(f"{direction} {level:g}", pct0, pct1),
            )
            index_base += len(outcome.records) + len(outcome.warmup)
            arrow = "↑" if direction == "up" else "↓"
            label = f"{arrow} {level:g} req/s" if rate else f"{arrow} c={level:g}"
            point = summarize(outcome, label=label, slo=_slo(params))
            window = (outcome.measure_start - session.time_zero, outcome.measure_end - session.time_zero)
            _attach_engine_stats(point, session.metrics.recording, *window)
            step = _overload_step(point, outcome, params, direction, level, max_errors)
            point.extra.update(
                direction=direction,
                level=level,
                level_unit=unit,
                recovery_step=recovery,
                load_end_s=(outcome.load_end or outcome.measure_end) - session.time_zero,
            )
            points.append(point)
            outcomes.append(outcome)
            steps.append(step)
            if outcome.cancelled:
                partial = True
                notes.append("cancelled: partial data")
                break
            if direction == "up" and (
                (point.error_rate or 0.0) > max_errors or outcome.stopped_early or step.failures.get("crash")
            ):
                climbing_done = True  # up to 3x or until errors
                notes.append(f"stopped climbing at {level:g} {unit}: {point.error_rate or 0:.1%} of requests failed")
            if outcome.stopped_early:
                notes.append(f"the engine stopped answering at {level:g} {unit}: {outcome.stopped_early}")
                break
    verdicts, figures = _overload_verdicts(steps, points, outcomes, params, session, base, unit, bound_s)
    reporter.close()
    result = _build_result(
        "overload",
        session,
        params,
        points,
        outcomes,
        verdicts,
        notes,
        partial,
        {"overload": figures, **_lengths_meta(lengths)},
    )
    result.metadata["observed"] = {
        "line": _overload_line(figures, unit),
        **{k: v for k, v in figures.items() if k != "steps"},
    }
    derived = result.metadata.setdefault("derived", {})
    if figures.get("handling_level") is not None:
        derived["overload_handling"] = figures["handling_level"]
    if figures.get("sustainable") is not None and figures.get("mode") == "closed":
        derived["sustainable_concurrency"] = figures["sustainable"]
    return result


def _factors(params: dict[str, Any], key: str) -> list[float]:
    factors = params.get(key)
    if (
        not isinstance(factors, list)
        or not factors
        or any(not isinstance(f, (int, float)) or isinstance(f, bool) or not f > 0 for f in factors)
    ):
        raise PlanError(f"params.{key}: must be a non-empty list of positive multiples of the target, got {factors!r}")
    return [float(f) for f in factors]


def _overload_step(
    point: LoadPoint, outcome: LoadOutcome, params: dict[str, Any], direction: str, level: float, max_errors: float
) -> overload.Step:
    """The step's budget judgement (n and interval per budget, in point.extra["budget"]) and figures."""
    reasons = (
        (point.extra.get("client_bound_reasons") or ["the client did not hold the load"]) if point.client_bound else []
    )
    ok = [r for r in outcome.records if r.ok and not r.aborted]
    judged = []
    for key, attr in (("ttft_p95_ms", "ttft_ms"), ("tpot_p95_ms", "tpot_ms"), ("e2e_p95_ms", "e2e_ms")):
        if params.get(key) is not None:
            judged.append(
                judge_percentile(
                    f"{key.replace('_p95_ms', '')}_p95_within_budget",
                    [getattr(r, attr) for r in ok],
                    95,
                    float(params[key]),
                    attr.replace("_ms", "").upper(),
                    client_bound_reasons=reasons,
                )
            )
    finished = (point.requests_completed or 0) + (point.requests_failed or 0)
    if (point.error_rate or 0.0) > max_errors and finished >= MIN_SAMPLES:
        status = FAIL
    elif judged:
        status = overload.worst_status(v["status"] for v in judged)
    else:  # no latency budget: the error rate alone decides, from enough requests
        status = PASS if finished >= MIN_SAMPLES else INSUFFICIENT_DATA
    failures = overload.failure_kinds(outcome.records)
    point.extra["budget"] = judged
    point.extra["budget_status"] = status
    point.extra["failures_by_kind"] = failures
    offered = len(outcome.records)
    completion = (point.requests_completed or 0) / offered if outcome.config.mode == "open" and offered else None
    point.extra["completion_ratio"] = completion
    return overload.Step(
        level=level,
        direction=direction,
        status=status,
        requests=finished,
        failures=failures,
        ttft_p95_ms=point.ttft_ms.p95,
        throughput=point.request_throughput,
        completion_ratio=completion,
        waiting_max=point.extra.get("waiting_max"),
        stopped_early=outcome.stopped_early,
    )


def _overload_verdicts(
    steps: list[overload.Step],
    points: list[LoadPoint],
    outcomes: list[LoadOutcome],
    params: dict[str, Any],
    session: _Session,
    base: float,
    unit: str,
    bound_s: float,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    verdicts: list[dict[str, Any]] = []
    if not steps:
        return [_verdict("sustainable_load_meets_target", None, "no step ran", status=INSUFFICIENT_DATA)], {}
    first, first_point = steps[0], points[0]
    sustainable = overload.sustainable_level(steps)
    ttft_first = next((v for v in first_point.extra.get("budget") or [] if v["name"].startswith("ttft")), None)
    detail = (
        f"sustainable {sustainable:g} {unit} (highest step within the latency budget with at most "
        f"{float(params.get('max_error_rate', MAX_ERROR_RATE)):.0%} errors) vs target {base:g}"
        if sustainable is not None
        else f"the first step ({first.level:g} {unit}) did not meet the budget: {first.status.replace('_', ' ')}"
    )
    if ttft_first:
        detail += f"; at the target: {ttft_first['detail']}"
    verdicts.append(
        _verdict(
            "sustainable_load_meets_target",
            None,
            detail,
            sustainable,
            base,
            first.requests,
            first.status,
        )
        | {"interval": (ttft_first or {}).get("interval")}
    )
    reference = float(params["ttft_p95_ms"]) if params.get("ttft_p95_ms") else first.ttft_p95_ms
    behaviour, reasons = overload.classify(steps, reference)
    past = [s for s in steps if s.direction == "up" and (sustainable is None or s.level > sustainable)]
    past_n = sum(s.requests for s in past)
    if behaviour is None:
        status = NOT_EXERCISED  # the engine was never pushed past what it sustains
    else:
        status = PASS if behaviour in overload.GRACEFUL else FAIL
    verdicts.append(
        _verdict(
            "overload_handled_gracefully",
            None,
            (f"past the sustainable load: {behaviour}; " if behaviour else "") + "; ".join(reasons),
            behaviour,
            "rejection or bounded queueing",
            past_n,
            status,
        )
    )
    # recovery: from the end of the top step's load, in the last (recovery) step
    recovery = None
    top_index = max((i for i, s in enumerate(steps) if s.direction == "up"), default=0)
    last = len(steps) - 1
    if steps[last].direction == "down" and last > top_index:
        load_end = points[top_index].extra["load_end_s"]
        until = outcomes[last].measure_end - session.time_zero
        baselines, tolerances = {}, {}
        for name, tolerance in (("waiting", 0.0), ("kv_usage_ratio", KV_BASELINE_TOLERANCE)):
            value = first_point.extra.get(f"{name}_max")
            if value is not None:
                baselines[name], tolerances[name] = float(value), tolerance
        recovery = overload.recovery_time(
            load_end,
            outcomes[last].records,
            first.ttft_p95_ms,
            session.metrics.recording.series,
            baselines,
            tolerances,
            until,
            time_zero=session.time_zero,
        )
        recovery["baseline"] = {"ttft_p95_ms": first.ttft_p95_ms, **baselines}
    recovered = None if recovery is None else recovery["recovered_s"]
    n_recovery = steps[last].requests if recovery is not None else 0
    if behaviour is None:
        status, detail = NOT_EXERCISED, "no overload happened: nothing to recover from"
    elif behaviour == overload.CRASH:
        status, detail = FAIL, "the engine crashed: it did not come back"
    elif recovery is None:
        status, detail = INSUFFICIENT_DATA, "no step back down ran after the overload"
    elif n_recovery < overload.RECOVERY_WINDOW:
        status, detail = INSUFFICIENT_DATA, f"{n_recovery} requests in the recovery step"
    elif recovered is None:
        lagging = [k for k, v in recovery["parts_s"].items() if v is None]
        status, detail = (
            FAIL,
            f"not back to the first step's level ({', '.join(lagging)}) by the end of the recovery step",
        )
    else:
        status = PASS if recovered <= bound_s else FAIL
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in recovery["parts_s"].items() if v is not None)
        detail = f"back to the first step's level {recovered:.1f} s after the overload ended ({parts})"
    verdicts.append(_verdict("recovered_within_bound", None, detail, recovered, bound_s, n_recovery, status))
    figures = {
        "mode": "open" if params.get("rate") else "closed",
        "unit": unit,
        "target": base,
        "sustainable": sustainable,
        "top": max((s.level for s in steps if s.direction == "up"), default=None),
        "behaviour": behaviour,
        "handling_level": None if behaviour is None else overload.HANDLING_LEVEL[behaviour],
        "reasons": reasons,
        "recovery_s": recovered,
        "recovery": recovery,
        "steps": [
            {
                "label": p.label,
                "direction": s.direction,
                "level": s.level,
                "status": s.status,
                "n": s.requests,
                "ttft_p95_ms": s.ttft_p95_ms,
                "error_rate": p.error_rate,
                "failures": s.failures,
                "waiting_max": s.waiting_max,
            }
            for s, p in zip(steps, points, strict=True)
        ],
    }
    return verdicts, figures


def _overload_line(figures: dict[str, Any], unit: str) -> str:
    """One sentence of what the overload test observed (the record and the closing note)."""
    if not figures:
        return "no overload step ran"
    steps = figures["steps"]
    sustainable = figures["sustainable"]
    first_status = steps[0]["status"] if steps else None
    if sustainable is not None:
        parts = [f"sustainable {sustainable:g} {unit} of target {figures['target']:g}"]
    elif first_status == FAIL:
        parts = [f"target {figures['target']:g} {unit} not sustained"]
    else:  # inconclusive (client-bound, or the interval straddles the budget) or too few requests
        parts = [f"target {figures['target']:g} {unit} sustainability {str(first_status).replace('_', ' ')}"]
    top = next((s for s in reversed(steps) if s["direction"] == "up"), None)
    if top is not None:
        errors = sum(top["failures"].values())
        parts.append(
            f"at {top['level']:g} TTFT p95 "
            + (f"{top['ttft_p95_ms']:.0f} ms" if top["ttft_p95_ms"] is not None else "n/a")
            + f", {errors} of {top['n']} failed"
        )
    parts.append(f"past it: {figures['behaviour'] or 'not reached'}")
    if figures.get("recovery_s") is not None:
        parts.append(f"recovered in {figures['recovery_s']:.1f} s")
    elif figures.get("behaviour"):
        parts.append("did not recover")
    return "; ".join(parts) + f" ({len(steps)} steps, n={sum(s['n'] for s in steps)})"


# ---------------------------------------------------------------- trace replay


async def run_trace_replay(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    """The production trace, open loop on its own clock (benchmarks.harness.trace_replay), per traffic group."""
    if not params.get("trace"):
        raise PlanError("params.trace: the trace file to replay is required (validate --trace FILE)")
    try:
        plan = load_plan(params["trace"], params.get("format"), params.get("speedup") or 1.0, params.get("sample"))
    except ValueError as exc:
        raise PlanError(f"params.trace: {exc}") from exc
    if plan.requests == 0:
        raise PlanError("params.trace: the trace has no request to replay (every row failed)")
    reporter = Reporter(progress, cancel)
    notes: list[str] = []
    async with _Session(target, keep_text=plan.has_history) as session:
        prompts = session.prompts
        assert prompts is not None
        builder = PromptBuilder(prompts, target.api, plan.block_tokens)

        def make_spec(turn, prompt) -> RequestSpec:
            return session.spec(
                prompt.text, turn.output_tokens, messages=prompt.messages, request_id=turn.request_id, tag=turn.group
            )

        replayed = await run_replay(
            session.client, plan, make_spec, builder, cancel=cancel, progress=reporter.phase("replay", 0, 100)
        )
    points, outcomes = _replay_points(replayed, plan, params, session)
    lateness = replayed.lateness_p99_ms()
    verdicts = [_errors_verdict(points[:1])]
    for point, outcome in zip(points[1:], outcomes[1:], strict=True):
        verdicts.extend(_budget_verdicts(point, params, label=point.label, records=outcome.records))
    verdicts.append(
        _verdict(
            "arrivals_on_time",
            None if lateness is None else lateness <= LATE_SEND_MS,
            "no request was sent"
            if lateness is None
            else f"send lateness p99 {lateness:.2f} ms against the trace's clock (limit {LATE_SEND_MS:g} ms)",
            lateness,
            LATE_SEND_MS,
        )
    )
    if replayed.cancelled:
        notes.append("cancelled: partial data")
    if replayed.unsent:
        notes.append(f"{replayed.unsent} turns were never sent")
    reporter.close()
    return _build_result(
        "trace_replay",
        session,
        params,
        points,
        outcomes,
        verdicts,
        notes,
        replayed.cancelled,
        {
            "replay": plan.describe(),
            "send_lateness_ms_p99": lateness,
            "send_lateness_ms": {f"p{q}": _percentile_of(replayed.lateness_ms, q) for q in (50, 90, 99, 99.9)}
            | {"max": max(replayed.lateness_ms, default=None), "sends": len(replayed.lateness_ms)},
        },
    )


def _replay_points(
    replayed: ReplayOutcome, plan, params: dict[str, Any], session: _Session
) -> tuple[list[LoadPoint], list[LoadOutcome]]:
    """One point for the whole replay, then one per traffic group present; request rows under their group."""
    duration = replayed.duration_s
    config = LoadConfig(mode="open", rate=plan.requests / duration if duration > 0 else None, duration_s=duration)
    everything = LoadOutcome(
        config=config,
        records=[record for _turn, record in replayed.records],
        run_start=replayed.start,
        measure_start=replayed.start,
        measure_end=replayed.end,
        achieved_concurrency=replayed.in_flight_area / duration if duration > 0 else None,
        peak_concurrency=replayed.peak_in_flight,
        cancelled=replayed.cancelled,
    )
    everything.achieved_rate = len(everything.records) / duration if duration > 0 else None
    everything.send_lateness_ms_p99 = replayed.lateness_p99_ms()
    if replayed.lateness_ms:
        everything.late_sends_fraction = sum(1 for x in replayed.lateness_ms if x > LATE_SEND_MS) / len(
            replayed.lateness_ms
        )
    everything.loop_lag_ms_p99 = _percentile_of(replayed.loop_lag_ms, 99)
    slo = _slo(params)
    points = [summarize(everything, label="all", slo=slo)]
    outcomes = [LoadOutcome(config=config, run_start=replayed.start)]  # the request rows sit under their group
    window = (replayed.start - session.time_zero, replayed.end - session.time_zero)
    _attach_engine_stats(points[0], session.metrics.recording, *window)
    for group in GROUPS:
        records = [record for turn, record in replayed.records if turn.group == group]
        if not records:
            continue
        part = LoadOutcome(
            config=config,
            records=records,
            run_start=replayed.start,
            measure_start=replayed.start,
            measure_end=replayed.end,
            cancelled=replayed.cancelled,
        )
        point = summarize(part, label=group, slo=slo)
        point.extra["requests_planned"] = plan.group_counts()[group]
        points.append(point)
        outcomes.append(part)
    return points, outcomes


def _percentile_of(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(max(math.ceil(q / 100.0 * len(ordered)) - 1, 0), len(ordered) - 1)]


# ---------------------------------------------------------------- 7. model switch


SWITCH_MODES = ("endpoint", "restart")
SWITCH_PHASES = ("before", "switched", "rolled_back")
SWITCH_ERROR_BACKOFF_S = 0.05  # a worker whose request failed waits this long: a down engine answers at once


def plan_model_switch(constraints: dict[str, Any] | None = None) -> dict[str, Any]:
    avg_input = int(_get(constraints, "avg_input_tokens", 512))
    sharing = float(_get(constraints, "prefix_sharing_ratio", 0.5))
    return {
        "concurrency": min(max(int(_get(constraints, "peak_concurrency", 16)) // 2, 1), 64),  # steady, not peak
        "input_tokens": avg_input,
        # a shared system prompt, so the cache-hit drop at the switch shows (a new KV format starts cold)
        "prefix_tokens": max(min(int(avg_input * sharing), avg_input - 1), 0),
        "output_tokens": min(int(_get(constraints, "avg_output_tokens", 128)), 256),
        "before_s": 60.0,  # steady load on the current recipe
        "switched_s": 60.0,  # on the new recipe (endpoint B, or after the restart)
        "after_s": 60.0,  # after the rollback
        # endpoint: traffic moves to params.switch_endpoint and back (two deployments behind your
        # gateway); restart: the simulator's POST /admin/restart. None: endpoint when one is given,
        # else restart on the simulator
        "switch_mode": "",
        "switch_endpoint": "",
        "switch_model": "",  # the served model name on switch_endpoint (default: the candidate's)
        "switch_metrics_url": "",  # default: <switch_endpoint>/metrics
        "restart_config": {},  # simulator settings of the new version, e.g. {"kv_bytes_per_token": 262144}
        "restart_downtime_s": None,  # None: the simulator's own setting
        "restart_graceful": None,
        "recovery_requests": 10,  # the budget holds again at the first run of this many good requests
        "max_switch_errors": 0,
        "max_recovery_s": 30.0,
        **_budgets(constraints),
    }


def _switch_mode(target: Target, params: dict[str, Any]) -> str:
    mode = params.get("switch_mode") or ("endpoint" if params.get("switch_endpoint") else None)
    if mode is None:
        if target.engine != "simulator":
            raise PlanError(
                "params.switch_endpoint: give the second deployment's endpoint (the new model or engine "
                "version) to move traffic to and back; kvselect runs no switch command against a real engine"
            )
        mode = "restart"
    if mode not in SWITCH_MODES:
        raise PlanError(f"params.switch_mode: must be one of {', '.join(SWITCH_MODES)}, got {mode!r}")
    if mode == "endpoint" and not params.get("switch_endpoint"):
        raise PlanError("params.switch_endpoint: required when params.switch_mode is 'endpoint'")
    if mode == "restart" and target.engine != "simulator":
        raise PlanError(
            "params.switch_mode: 'restart' uses the simulator's POST /admin/restart; for a real engine give "
            "params.switch_endpoint (the new version deployed beside the current one)"
        )
    if not isinstance(params.get("restart_config") or {}, dict):
        raise PlanError(
            f"params.restart_config: must be an object of simulator settings, got {params['restart_config']!r}"
        )
    return mode


def _switch_phase_of(record: RequestRecord, events: dict[str, float], zero: float, restart: bool) -> str:
    """The phase a request counts in: the one it was sent in, except that on a restart a request still
    in flight at the next event (cut, or held while the engine restarted) counts in that event's phase,
    not before it. Between two endpoints nothing goes down: a request stays where it was sent."""
    name = record.tag
    if not restart:
        return name
    ended = (record.end_time or record.send_time) - zero
    if name == "before" and "switch" in events and ended >= events["switch"]:
        name = "switched"
    if name == "switched" and "rollback" in events and ended >= events["rollback"]:
        name = "rolled_back"
    return name


def _good_for_budget(record: RequestRecord, params: dict[str, Any]) -> bool:
    """A request that succeeded within the per-request latency budgets (TTFT, TPOT)."""
    if not record.ok or record.aborted:
        return False
    ttft, tpot = params.get("ttft_p95_ms"), params.get("tpot_p95_ms")
    if ttft is not None and (record.ttft_ms is None or record.ttft_ms > float(ttft)):
        return False
    return tpot is None or record.tpot_ms is None or record.tpot_ms <= float(tpot)


def _recovery_s(records: list[RequestRecord], event: float, params: dict[str, Any], window: int) -> float | None:
    """Seconds from `event` to the first request of the first run of `window` consecutive requests that
    succeeded within the per-request budgets (TTFT, TPOT); None when no such run came."""
    ordered = sorted(records, key=lambda r: r.send_time)
    run = 0
    for index, record in enumerate(ordered):
        run = run + 1 if _good_for_budget(record, params) else 0
        if run == window:
            return max(ordered[index - window + 1].send_time - event, 0.0)
    return None


def _downtime_s(records: list[RequestRecord]) -> float:
    """Total time requests failed: each run of failures counts from its first send to the next success's send."""
    ordered = sorted(records, key=lambda r: r.send_time)
    total, since = 0.0, None
    for record in ordered:
        if not record.ok:
            since = record.send_time if since is None else since
        elif since is not None:
            total += record.send_time - since
            since = None
    if since is not None:
        total += max((r.end_time or r.send_time) for r in ordered) - since
    return total


def _stall_s(records: list[RequestRecord], event: float) -> float:
    """The longest wait without a successful completion, from `event` on (a held switch shows here)."""
    ends = sorted(r.end_time for r in records if r.ok and r.end_time is not None and r.end_time >= event)
    if not ends:
        return 0.0
    gaps = [ends[0] - event] + [b - a for a, b in zip(ends, ends[1:], strict=False)]
    return max(gaps)


def _hit_ratio(records: list[RequestRecord]) -> float | None:
    """Mean share of the prompt the engine served from its cache (usage.cached_tokens), or None."""
    shares = [
        r.cached_tokens / r.prompt_tokens for r in records if r.ok and r.cached_tokens is not None and r.prompt_tokens
    ]
    return sum(shares) / len(shares) if shares else None


async def run_model_switch(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    """Steady load on the candidate, a switch to the new version (endpoint B, or the simulator's
    restart) and back: errors, downtime, time until the budget holds again, KV spike, cache-hit drop."""
    concurrency = _require(params, "concurrency", int, 1)
    input_tokens = _require(params, "input_tokens", int, 1)
    output_tokens = _require(params, "output_tokens", int, 1)
    prefix_tokens = int(params.get("prefix_tokens") or 0)
    if not 0 <= prefix_tokens < input_tokens:
        raise PlanError(f"params.prefix_tokens: must be in [0, input_tokens), got {prefix_tokens!r}")
    durations = {
        "before": _require(params, "before_s", float, 0.1),
        "switched": _require(params, "switched_s", float, 0.1),
        "rolled_back": _require(params, "after_s", float, 0.1),
    }
    window = _require(params, "recovery_requests", int, 1)
    mode = _switch_mode(target, params)
    if mode == "endpoint" and target.allowed_hosts is not None:
        for key in ("switch_endpoint", "switch_metrics_url"):
            if params.get(key):
                try:
                    check_target(params[key], target.allowed_hosts)
                except ValueError as exc:
                    raise PlanError(f"params.{key}: {exc}") from exc
    reporter = Reporter(progress, cancel)
    notes: list[str] = []
    total_s = sum(durations.values())
    phase = {"name": "before"}
    events: dict[str, float] = {}
    sent: list[RequestRecord] = []
    triggers: list[dict[str, Any]] = []
    second: MetricsSampler | None = None
    async with _Session(target) as session:
        prompts = session.prompts
        assert prompts is not None
        client_b = None
        if mode == "endpoint":
            client_b = OpenAIClient(
                params["switch_endpoint"],
                params.get("switch_model") or target.model,
                api_key=target.api_key,
                request_timeout_s=target.request_timeout_s,
                keep_alive=target.engine != "llamacpp",
            )
            await client_b.open()
            headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else None
            metrics_b = params.get("switch_metrics_url") or params["switch_endpoint"].rstrip("/") + "/metrics"
            engine = target.engine if target.engine != "simulator" else "auto"
            second = MetricsSampler(metrics_b, engine, time_zero=session.time_zero, headers=headers)
            await second.start()

        async def trigger(event: str) -> None:
            events[event] = session.now()
            phase["name"] = "switched" if event == "switch" else "rolled_back"
            if mode == "restart":
                body: dict[str, Any] = {"config": dict(params.get("restart_config") or {}) if event == "switch" else {}}
                if params.get("restart_downtime_s") is not None:
                    body["downtime_s"] = float(params["restart_downtime_s"])
                if params.get("restart_graceful") is not None:
                    body["graceful"] = bool(params["restart_graceful"])
                try:
                    status, answer = await session.client.post_json("/admin/restart", body)
                except Exception as exc:  # the hook's failure is reported, never the test's crash
                    status, answer = None, {"error": f"{type(exc).__name__}: {exc}"}
                triggers.append({"event": event, "status": status, "answer": answer})
                if status != 202:
                    notes.append(f"{event}: the simulator refused the restart ({status}): {answer}")

        def make(index: int, name: str) -> RequestSpec:
            text = (
                prompts.shared_prefix(prefix_tokens, input_tokens - prefix_tokens, seed=index)
                if prefix_tokens
                else prompts.text(input_tokens, seed=index)
            )
            return session.spec(text, output_tokens, request_id=f"switch-{index}", tag=name)

        stop = asyncio.Event()

        async def worker(first: int) -> None:
            index = first
            while not stop.is_set():
                name = phase["name"]
                client = client_b if (name == "switched" and client_b is not None) else session.client
                record = RequestRecord()
                sent.append(record)
                await client.send(make(index, name), record)
                index += concurrency
                if not record.ok:
                    await asyncio.sleep(SWITCH_ERROR_BACKOFF_S)

        async def controller() -> None:
            begin = time.perf_counter()
            marks = (("switch", durations["before"]), ("rollback", durations["before"] + durations["switched"]))
            pending = list(marks)
            reported = -1.0
            try:
                while time.perf_counter() - begin < total_s and not reporter.cancelled():
                    elapsed = time.perf_counter() - begin
                    if pending and elapsed >= pending[0][1]:
                        await trigger(pending.pop(0)[0])
                    if elapsed - reported >= 0.5:  # progress twice a second; the events on time to 50 ms
                        reporter.done = len(sent)
                        await reporter.emit(phase["name"], min(elapsed / total_s * 100.0, 99.0))
                        reported = elapsed
                    await asyncio.sleep(0.05)
            finally:
                if "switch" in events and "rollback" not in events and mode == "restart":
                    await trigger("rollback")  # never leave the engine on the new version
                stop.set()

        workers = [asyncio.ensure_future(worker(i)) for i in range(concurrency)]
        await controller()
        cancelled = reporter.cancelled()
        if cancelled:
            for task in workers:
                task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        if second is not None:
            await second.stop()
        if client_b is not None:
            await client_b.close()
    end = session.now()
    records = [r for r in sent if r.send_time > 0 and r.error_class != "cancelled"]
    by_phase: dict[str, list[RequestRecord]] = {name: [] for name in SWITCH_PHASES}
    for record in records:
        by_phase[_switch_phase_of(record, events, session.time_zero, mode == "restart")].append(record)
    bounds = {
        "before": (0.0, events.get("switch", end)),
        "switched": (events.get("switch", end), events.get("rollback", end)),
        "rolled_back": (events.get("rollback", end), end),
    }
    config = LoadConfig(mode="closed", concurrency=concurrency, duration_s=total_s)
    points: list[LoadPoint] = []
    outcomes: list[LoadOutcome] = []
    for name in SWITCH_PHASES:
        t0, t1 = bounds[name]
        part = LoadOutcome(
            config=config,
            records=by_phase[name],
            run_start=session.time_zero,
            measure_start=session.time_zero + t0,
            measure_end=session.time_zero + t1,
            cancelled=cancelled,
        )
        point = summarize(part, label=name, slo=_slo(params))
        recording = second.recording if (name == "switched" and second is not None) else session.metrics.recording
        _attach_engine_stats(point, recording, t0, t1)
        point.extra["hit_ratio_usage"] = _hit_ratio(by_phase[name])
        points.append(point)
        outcomes.append(part)
    figures = _switch_figures(by_phase, events, session, second, params, window, bounds)
    verdicts = _budget_verdicts(points[0], params, label="before", records=by_phase["before"])
    baseline_failed = any(v["status"] == FAIL for v in verdicts)
    verdicts.append(_switch_errors_verdict(by_phase, figures, params))
    for name, event, label in (
        ("switched", "switch", "budget_recovered_after_switch"),
        ("rolled_back", "rollback", "budget_recovered_after_rollback"),
    ):
        verdicts.append(
            _recovery_verdict(
                label,
                by_phase[name],
                figures[f"{event}_recovery_s"],
                params,
                window,
                baseline_failed,
                event in events,
                bounds[name][1] - bounds[name][0],
            )
        )
    refused = [t for t in triggers if t["status"] != 202]
    if refused:  # the engine never switched: nothing about a switch was observed
        verdicts = [
            verdict(
                v["name"],
                NOT_EXERCISED,
                v["detail"] + f"; the restart was refused ({refused[0]['status']}), so no switch happened",
                v["value"],
                v["threshold"],
                v["n"],
                v["interval"],
            )
            if v["status"] == PASS and not v["name"].endswith("[before]")
            else v
            for v in verdicts
        ]
    if cancelled:
        notes.append("cancelled: partial data")
    reporter.close()
    result = _build_result(
        "model_switch",
        session,
        params,
        points,
        outcomes,
        verdicts,
        notes,
        cancelled,
        {
            "switch": {
                "mode": mode,
                "switch_at_s": events.get("switch"),
                "rollback_at_s": events.get("rollback"),
                "switch_endpoint": params.get("switch_endpoint"),
                "triggers": triggers,
                "timeline": _switch_timeline(records, session.time_zero),
                **figures,
            },
            "observed": _switch_observed(mode, params, figures, by_phase),
        },
    )
    if second is not None:
        for name, values in second.recording.series.items():
            result.timeseries[f"switched.{name}"] = values
    return result


def _switch_figures(
    by_phase: dict[str, list[RequestRecord]],
    events: dict[str, float],
    session: _Session,
    second: MetricsSampler | None,
    params: dict[str, Any],
    window: int,
    bounds: dict[str, tuple[float, float]],
) -> dict[str, Any]:
    zero = session.time_zero
    figures: dict[str, Any] = {}
    for name, event in (("switched", "switch"), ("rolled_back", "rollback")):
        at = events.get(event)
        records = by_phase[name]
        figures[f"{event}_errors"] = sum(1 for r in records if not r.ok)
        figures[f"{event}_requests"] = len(records)
        figures[f"{event}_downtime_s"] = _downtime_s(records) if records else None
        figures[f"{event}_stall_s"] = _stall_s(records, zero + at) if at is not None and records else None
        figures[f"{event}_recovery_s"] = (
            _recovery_s(records, zero + at, params, window) if at is not None and records else None
        )
    figures["rollback_s"] = figures["rollback_recovery_s"]  # the rollback's time until the budget holds again
    recording = session.metrics.recording
    before = _series_in(recording, "kv_usage_ratio", *bounds["before"])
    switched_recording = second.recording if second is not None else recording
    after = _series_in(switched_recording, "kv_usage_ratio", *bounds["switched"])
    figures["kv_usage_before_mean"] = sum(before) / len(before) if before else None
    figures["kv_usage_switched_peak"] = max(after) if after else None
    figures["kv_spike"] = (
        figures["kv_usage_switched_peak"] - figures["kv_usage_before_mean"] if before and after else None
    )
    figures["hit_ratio_before"] = _hit_ratio(by_phase["before"])
    first_after = sorted((r for r in by_phase["switched"] if r.ok), key=lambda r: r.send_time)[:window]
    figures["hit_ratio_after_switch"] = _hit_ratio(first_after)
    figures["hit_drop"] = (
        figures["hit_ratio_before"] - figures["hit_ratio_after_switch"]
        if figures["hit_ratio_before"] is not None and figures["hit_ratio_after_switch"] is not None
        else None
    )
    return figures


SWITCH_TIMELINE_POINTS = 1500  # the chart's requests at most (every nth kept, the failed ones always)


def _switch_timeline(records: list[RequestRecord], zero: float) -> list[list[Any]]:
    """[send time s, TTFT ms or None, ok] per request in send order, thinned for the chart."""
    ordered = sorted(records, key=lambda r: r.send_time)
    every = max(len(ordered) // SWITCH_TIMELINE_POINTS, 1)
    return [
        [round(r.send_time - zero, 4), None if r.ttft_ms is None else round(r.ttft_ms, 2), bool(r.ok)]
        for index, r in enumerate(ordered)
        if not r.ok or index % every == 0
    ]


def _switch_errors_verdict(
    by_phase: dict[str, list[RequestRecord]], figures: dict[str, Any], params: dict[str, Any]
) -> dict[str, Any]:
    allowed = int(params.get("max_switch_errors") or 0)
    errors = figures["switch_errors"] + figures["rollback_errors"]
    n = figures["switch_requests"] + figures["rollback_requests"]
    down = (figures["switch_downtime_s"] or 0.0) + (figures["rollback_downtime_s"] or 0.0)
    detail = (
        f"{errors} of {n} requests failed across the switch and the rollback (at most {allowed} allowed); "
        f"requests failed for {down:.2f} s in all"
    )
    if n == 0:
        return _verdict(
            "switch_errors", None, "no request was sent after the switch", None, allowed, 0, INSUFFICIENT_DATA
        )
    return _verdict("switch_errors", errors <= allowed, detail, errors, allowed, n)


def _recovery_verdict(
    name: str,
    records: list[RequestRecord],
    recovery: float | None,
    params: dict[str, Any],
    window: int,
    baseline_failed: bool,
    happened: bool,
    span_s: float,
) -> dict[str, Any]:
    limit = float(params.get("max_recovery_s") or 30.0)
    n = len(records)
    what = "the switch" if name.endswith("switch") else "the rollback"
    if not happened:
        return _verdict(name, None, f"{what} never happened (cancelled first)", None, limit, n, NOT_EXERCISED)
    budget = (
        ", ".join(
            f"{k.replace('_p95_ms', '').upper()} <= {params[k]:g} ms"
            for k in ("ttft_p95_ms", "tpot_p95_ms")
            if params.get(k) is not None
        )
        or "no latency budget: errors only"
    )
    if recovery is None and n < window and (any(_good_for_budget(r, params) for r in records) or span_s <= limit):
        return _verdict(
            name, None, f"{n} requests after {what}: at least {window} are needed", None, limit, n, INSUFFICIENT_DATA
        )
    if recovery is None:  # no run of good requests: none within budget for longer than allowed
        status = FAIL
        detail = f"no run of {window} good requests ({budget}) in the {span_s:.1f} s after {what} (n={n})"
    else:
        status = PASS if recovery <= limit else FAIL
        detail = f"the budget ({budget}) held again {recovery:.2f} s after {what} (limit {limit:g} s, n={n})"
    if baseline_failed and status != PASS:
        status = INCONCLUSIVE
        detail += "; the budget did not hold before the switch either"
    return _verdict(name, None, detail, recovery, limit, n, status)


def _switch_observed(
    mode: str, params: dict[str, Any], figures: dict[str, Any], by_phase: dict[str, list[RequestRecord]]
) -> dict[str, Any]:
    def seconds(value: float | None) -> str:
        return "never" if value is None else f"{value:.2f} s"

    def ratio(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1%}"

    errors = figures["switch_errors"] + figures["rollback_errors"]
    down = (figures["switch_downtime_s"] or 0.0) + (figures["rollback_downtime_s"] or 0.0)
    how = "endpoint pair" if mode == "endpoint" else "restart"
    line = (
        f"switch by {how}: {errors} errors, requests failing {down:.2f} s, longest stall "
        f"{seconds(figures['switch_stall_s'])}; budget held again {seconds(figures['switch_recovery_s'])} after the "
        f"switch and {seconds(figures['rollback_recovery_s'])} after the rollback; KV usage "
        f"{ratio(figures['kv_usage_before_mean'])} before, peak {ratio(figures['kv_usage_switched_peak'])} after; "
        f"cache hit {ratio(figures['hit_ratio_before'])} before vs {ratio(figures['hit_ratio_after_switch'])} right "
        f"after (n={len(by_phase['before'])}/{len(by_phase['switched'])}/{len(by_phase['rolled_back'])})"
    )
    keys = (
        "switch_errors",
        "rollback_errors",
        "switch_downtime_s",
        "rollback_downtime_s",
        "switch_stall_s",
        "switch_recovery_s",
        "rollback_recovery_s",
        "kv_usage_before_mean",
        "kv_usage_switched_peak",
        "kv_spike",
        "hit_ratio_before",
        "hit_ratio_after_switch",
        "hit_drop",
    )
    return {"line": line, "mode": mode, **{key: figures[key] for key in keys}} | {
        f"requests_{name}": len(records) for name, records in by_phase.items()
    }


# ---------------------------------------------------------------- 8. tenant isolation


def plan_isolation(constraints: dict[str, Any] | None = None) -> dict[str, Any]:
    tenants = max(int(_get(constraints, "tenants", 2)), 2)
    rate = float(_get(constraints, "request_rate", 4.0)) / tenants
    return {
        "tenant_a_rate": round(min(max(rate, 0.5), 50.0), 2),  # A's interactive requests per second (open loop)
        "tenant_a_input_tokens": min(int(_get(constraints, "avg_input_tokens", 512)), 4096),
        "tenant_a_output_tokens": min(int(_get(constraints, "avg_output_tokens", 128)), 256),
        "tenant_b_concurrency": min(max(int(_get(constraints, "peak_concurrency", 16)) // 4, 2), 16),
        "tenant_b_input_tokens": min(int(_get(constraints, "max_input_tokens", 32768)), 32768),
        "tenant_b_output_tokens": 64,
        "alone_s": 30.0,  # A alone: its baseline
        "flood_lead_s": 5.0,  # B floods this long before A's measured window
        "flood_s": 30.0,  # A under B's flood
        # send the `priority` field (vLLM --scheduling-policy priority: lower first); the validation
        # plan turns it on when the candidate's launch flags enable priority scheduling
        "use_priority": False,
        "tenant_a_priority": 0,
        "tenant_b_priority": 10,
        # A's TTFT p95 under the flood over alone; by default judged only without a TTFT budget (even a
        # priority scheduler slows A down while B's long prefills share each step: the budget decides)
        "max_ttft_slowdown": None if _get(constraints, "ttft_p95_ms", None) is not None else 10.0,
        **_budgets(constraints),
    }


async def run_isolation(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    """Tenant A's short interactive traffic alone, then under tenant B's flood of long requests."""
    rate = _require(params, "tenant_a_rate", float, 0.01)
    a_input = _require(params, "tenant_a_input_tokens", int, 1)
    a_output = _require(params, "tenant_a_output_tokens", int, 1)
    b_concurrency = _require(params, "tenant_b_concurrency", int, 1)
    b_input = _require(params, "tenant_b_input_tokens", int, 1)
    b_output = _require(params, "tenant_b_output_tokens", int, 1)
    alone_s = _require(params, "alone_s", float, 0.1)
    lead_s = _require(params, "flood_lead_s", float, 0)
    flood_s = _require(params, "flood_s", float, 0.1)
    use_priority = bool(params.get("use_priority"))
    reporter = Reporter(progress, cancel)
    notes: list[str] = []
    total = alone_s + lead_s + flood_s
    async with _Session(target) as session:
        prompts = session.prompts
        assert prompts is not None

        def tenant_body(tenant: str) -> dict[str, Any]:
            body: dict[str, Any] = {"user": f"kvselect-tenant-{tenant}"}
            if use_priority:
                body["priority"] = int(params.get(f"tenant_{tenant}_priority") or 0)
            return body

        def make_a(index: int, phase: str) -> RequestSpec:
            return session.spec(
                prompts.text(a_input, seed=index),
                a_output,
                request_id=f"tenant-a-{phase}-{index}",
                tag=f"tenant_a_{phase}",
                extra_body=tenant_body("a"),
            )

        head = min(32, b_input)
        body = prompts.text(b_input - head, seed=10_000_000) if b_input > head else ""

        def make_b(index: int) -> RequestSpec:
            # a different head makes every request miss the prefix cache, and the body built once keeps
            # the client's loop free for tenant A's sends (a 32K-token prompt takes a while to build)
            return session.spec(
                prompts.text(head, seed=10_000_001 + index) + body,
                b_output,
                request_id=f"tenant-b-{index}",
                tag="tenant_b",
                extra_body=tenant_body("b"),
            )

        def a_config(duration: float) -> LoadConfig:
            return LoadConfig(mode="open", rate=rate, duration_s=duration, drain_timeout_s=120.0, seed=7)

        alone = await run_load(
            session.client,
            lambda i: make_a(i, "alone"),
            a_config(alone_s),
            cancel=cancel,
            progress=reporter.phase("tenant A alone", 0, 100 * alone_s / total),
        )
        flood = b_outcome = None
        if not alone.cancelled:
            client_b = OpenAIClient(
                target.endpoint_url,
                target.model,
                api_key=target.api_key,
                request_timeout_s=target.request_timeout_s,
                keep_alive=target.engine != "llamacpp",
            )
            await client_b.open()
            b_stop = asyncio.Event()
            b_task = asyncio.ensure_future(
                run_load(
                    client_b,
                    make_b,
                    LoadConfig(
                        mode="closed",
                        concurrency=b_concurrency,
                        duration_s=lead_s + flood_s + 3600.0,
                        drain_timeout_s=0.5,
                        stop_after_s_without_success=None,
                    ),
                    cancel=lambda: b_stop.is_set() or reporter.cancelled(),
                )
            )
            try:
                waited = time.perf_counter()
                while time.perf_counter() - waited < lead_s and not reporter.cancelled():
                    await asyncio.sleep(0.1)
                flood = await run_load(
                    session.client,
                    lambda i: make_a(i, "flood"),
                    a_config(flood_s),
                    cancel=cancel,
                    progress=reporter.phase("tenant A under flood", 100 * (alone_s + lead_s) / total, 100),
                )
            finally:
                b_stop.set()
                b_outcome = await b_task
                await client_b.close()
    cancelled = alone.cancelled or bool(flood and flood.cancelled) or reporter.cancelled()
    points, outcomes = [], []
    for label, outcome in (("tenant_a_alone", alone), ("tenant_a_flood", flood), ("tenant_b_flood", b_outcome)):
        if outcome is None:
            continue
        point = summarize(outcome, label=label, slo=_slo(params) if label.startswith("tenant_a") else None)
        _attach_engine_stats(
            point,
            session.metrics.recording,
            outcome.measure_start - session.time_zero,
            outcome.measure_end - session.time_zero,
        )
        points.append(point)
        outcomes.append(outcome)
    figures = _isolation_figures(alone, flood, b_outcome, b_concurrency)
    verdicts = _isolation_verdicts(points, alone, flood, b_outcome, figures, params, b_concurrency)
    if cancelled:
        notes.append("cancelled: partial data")
    reporter.close()
    scheduling = "priority" if use_priority else "fcfs"
    return _build_result(
        "isolation",
        session,
        params,
        points,
        outcomes,
        verdicts,
        notes,
        cancelled,
        {
            "isolation": {"scheduling": scheduling, **figures},
            # scoring's concurrency-control criterion reads A's p95 under the flood with its interval
            "derived_intervals": {"isolation_ttft_p95_ms": figures["a_ttft_p95_flood_interval"]},
            "observed": _isolation_observed(figures, scheduling, b_input, b_concurrency),
        },
    )


def _ok_values(outcome: LoadOutcome | None, attr: str) -> list[float]:
    if outcome is None:
        return []
    return [getattr(r, attr) for r in outcome.records if r.ok and not r.aborted and getattr(r, attr) is not None]


def _isolation_figures(
    alone: LoadOutcome, flood: LoadOutcome | None, b_outcome: LoadOutcome | None, b_concurrency: int
) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for phase, outcome in (("alone", alone), ("flood", flood)):
        for metric in ("ttft_ms", "tpot_ms"):
            values = _ok_values(outcome, metric)
            figures[f"a_{metric.replace('_ms', '')}_p95_{phase}_ms"] = (
                float(np.percentile(values, 95)) if values else None
            )
            figures[f"a_{metric.replace('_ms', '')}_n_{phase}"] = len(values)
        ttft = _ok_values(outcome, "ttft_ms")
        interval = percentile_interval(ttft, 95) if len(ttft) >= MIN_SAMPLES else None
        figures[f"a_ttft_p95_{phase}_interval"] = None if interval is None else list(interval)
        figures[f"a_errors_{phase}"] = sum(1 for r in (outcome.records if outcome else []) if not r.ok)
    alone_ttft, flood_ttft = _ok_values(alone, "ttft_ms"), _ok_values(flood, "ttft_ms")
    slowdown = None
    interval = None
    if alone_ttft and flood_ttft:
        base = float(np.percentile(alone_ttft, 95))
        slowdown = float(np.percentile(flood_ttft, 95)) / base if base > 0 else None
        interval = ratio_interval(flood_ttft, alone_ttft, q=95.0)
    figures["a_ttft_p95_slowdown"] = slowdown
    figures["a_ttft_p95_slowdown_interval"] = None if interval is None else list(interval)
    held = b_outcome.achieved_concurrency if b_outcome is not None else None
    figures["b_held_concurrency"] = held
    figures["b_requests_completed"] = sum(1 for r in (b_outcome.records if b_outcome else []) if r.ok)
    figures["b_requests_failed"] = sum(
        1 for r in (b_outcome.records if b_outcome else []) if not r.ok and r.error_class != "cancelled"
    )
    ended = figures["b_requests_completed"] + figures["b_requests_failed"]
    # B's requests held the engine: in flight most of the time, and not refused at once (a request
    # answered 400 or 429 is "in flight" for a moment only, yet loads nothing)
    figures["flood_exercised"] = (
        held is not None and held >= 0.5 * b_concurrency and (not ended or figures["b_requests_failed"] <= ended / 2)
    )
    return figures


def _isolation_verdicts(
    points: list[LoadPoint],
    alone: LoadOutcome,
    flood: LoadOutcome | None,
    b_outcome: LoadOutcome | None,
    figures: dict[str, Any],
    params: dict[str, Any],
    b_concurrency: int,
) -> list[dict[str, Any]]:
    held = figures["b_held_concurrency"]
    exercised = figures["flood_exercised"]
    verdicts = [
        _verdict(
            "flood_held",
            None,
            f"tenant B held {held or 0:.1f} of {b_concurrency} long requests in flight on average "
            f"({figures['b_requests_completed']} completed, {figures['b_requests_failed']} failed)",
            held,
            b_concurrency,
            (figures["b_requests_completed"] + figures["b_requests_failed"]),
            PASS if exercised else NOT_EXERCISED,
        )
    ]
    flood_point = next((p for p in points if p.label == "tenant_a_flood"), None)
    if flood_point is None or flood is None:
        verdicts.append(
            _verdict("tenant_a_protected", None, "tenant A never ran under the flood", status=NOT_EXERCISED)
        )
        return verdicts
    judged = [_errors_verdict([flood_point], name="zero_errors[tenant_a_flood]")]
    judged += _budget_verdicts(flood_point, params, label="tenant_a_flood", records=flood.records)
    limit = params.get("max_ttft_slowdown")
    alone_ttft, flood_ttft = _ok_values(alone, "ttft_ms"), _ok_values(flood, "ttft_ms")
    n = min(len(alone_ttft), len(flood_ttft))
    slowdown, interval = figures["a_ttft_p95_slowdown"], figures["a_ttft_p95_slowdown_interval"]
    if limit is None:
        detail = (
            "no slowdown limit (params.max_ttft_slowdown): the TTFT budget decides"
            if slowdown is None
            else f"tenant A TTFT p95 under the flood is {slowdown:.2f}x alone; no limit set "
            "(params.max_ttft_slowdown): the TTFT budget decides"
        )
        judged.append(verdict("tenant_a_ttft_slowdown", NOT_JUDGED, detail, slowdown, None, n, interval))
    else:
        limit = float(limit)
        if n < MIN_SAMPLES or slowdown is None:
            status = INSUFFICIENT_DATA
            detail = (
                f"TTFT p95 ratio from {len(flood_ttft)} and {len(alone_ttft)} requests: "
                f"at least {MIN_SAMPLES} each are needed"
            )
        else:
            status = compare(slowdown, interval, limit)
            detail = (
                f"tenant A TTFT p95 under the flood is {slowdown:.2f}x alone"
                + (f" (95% CI {interval[0]:.2f}–{interval[1]:.2f})" if interval else "")
                + f", n={len(flood_ttft)}/{len(alone_ttft)}, vs <= {limit:g}x"
            )
            if status == INCONCLUSIVE:
                detail += ": the interval straddles the limit"
        judged.append(verdict("tenant_a_ttft_slowdown", status, detail, slowdown, limit, n, interval))
    if not exercised:  # an unloaded engine protects nobody: these observed no isolation
        judged = [
            verdict(
                v["name"],
                NOT_EXERCISED,
                v["detail"] + "; tenant B's flood did not load the engine",
                v["value"],
                v["threshold"],
                v["n"],
                v["interval"],
            )
            if v["status"] == PASS
            else v
            for v in judged
        ]
    return verdicts + judged


def _isolation_observed(figures: dict[str, Any], scheduling: str, b_input: int, b_concurrency: int) -> dict[str, Any]:
    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.0f} ms"

    slowdown = figures["a_ttft_p95_slowdown"]
    interval = figures["a_ttft_p95_slowdown_interval"]
    line = (
        f"tenant A TTFT p95 {ms(figures['a_ttft_p95_alone_ms'])} alone (n={figures['a_ttft_n_alone']}) vs "
        f"{ms(figures['a_ttft_p95_flood_ms'])} under tenant B's flood (n={figures['a_ttft_n_flood']})"
        + ("" if slowdown is None else f", x{slowdown:.1f}")
        + ("" if not interval else f" (95% CI {interval[0]:.1f}–{interval[1]:.1f})")
        + f"; TPOT p95 {ms(figures['a_tpot_p95_alone_ms'])} vs {ms(figures['a_tpot_p95_flood_ms'])}; "
        f"B held {figures['b_held_concurrency'] or 0:.1f} of {b_concurrency} requests of {b_input} tokens; "
        f"scheduling {scheduling}"
    )
    return {"line": line, "scheduling": scheduling, **{k: v for k, v in figures.items()}}


PLANNERS: dict[str, Callable[..., dict[str, Any]]] = {
    "concurrency_stress": plan_concurrency_stress,
    "long_context": plan_long_context,
    "swap_recovery": plan_swap_recovery,
    "prefix_reuse": plan_prefix_reuse,
    "stability": plan_stability,
    "overload": plan_overload,
    "trace_replay": plan_trace_replay,
    "model_switch": plan_model_switch,
    "isolation": plan_isolation,
}
RUNNERS: dict[str, Callable[..., Any]] = {
    "concurrency_stress": run_concurrency_stress,
    "long_context": run_long_context,
    "swap_recovery": run_swap_recovery,
    "prefix_reuse": run_prefix_reuse,
    "stability": run_stability,
    "overload": run_overload,
    "trace_replay": run_trace_replay,
    "model_switch": run_model_switch,
    "isolation": run_isolation,
}


def plan(test: str, constraints: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    if test not in PLANNERS:
        raise PlanError(f"test: must be one of {', '.join(PLANNERS)}, got {test!r}")
    return PLANNERS[test](constraints, **kwargs)


async def run_test(test: str, target: Target, params: dict[str, Any], **kwargs: Any) -> NormalizedResult:
    """Run one of the validation tests (the six, and the trace replay) by its ingest-API name."""
    if test not in RUNNERS:
        raise PlanError(f"test: must be one of {', '.join(RUNNERS)}, got {test!r}")
    return await RUNNERS[test](target, params, **kwargs)


def run_test_sync(test: str, target: Target, params: dict[str, Any], **kwargs: Any) -> NormalizedResult:
    """Blocking wrapper for Celery tasks and the CLI (runs its own event loop)."""
    return run_async(run_test(test, target, params, **kwargs))
