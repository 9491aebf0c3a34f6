"""The five KV-cache validation tests of docs/domain.md, run against any OpenAI-compatible endpoint.

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
from dataclasses import dataclass, field
from typing import Any, Callable

import aiohttp

from benchmarks.harness import HARNESS_VERSION, swap
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
        **_budgets(constraints),
    }


def plan_long_context(constraints: dict[str, Any] | None = None, max_model_len: int | None = None) -> dict[str, Any]:
    output = 32
    cap = (max_model_len or int(_get(constraints, "max_input_tokens", LADDER[-1]) + output)) - output
    rungs = [r for r in LADDER if r <= cap] or [cap]
    return {
        "rungs": rungs,
        "output_tokens": output,
        "repeats": 1,
        "background_concurrency": max(min(int(_get(constraints, "peak_concurrency", 8)) // 4, 16), 1),
        "background_input_tokens": min(int(_get(constraints, "avg_input_tokens", 256)), 2048),
        "background_output_tokens": 64,
        "background_lead_s": 5.0,  # short traffic alone before the long request (its baseline)
        "with_background": True,
        "required_tokens": int(_get(constraints, "max_input_tokens", rungs[-1])),
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


def plan_stability(constraints: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "concurrency": max(int(_get(constraints, "peak_concurrency", 32)) // 2, 1),
        "duration_s": 3600.0,
        "window_s": 300.0,
        "input_tokens": int(_get(constraints, "avg_input_tokens", 512)),
        "output_tokens": int(_get(constraints, "avg_output_tokens", 128)),
        "max_drift_pct": 25.0,
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

    def __init__(self, target: Target, keep_text: bool = False) -> None:
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
            time_zero=self.time_zero,
            headers=headers,
        )
        self.gpu = GpuSampler(time_zero=self.time_zero)
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
) -> dict[str, Any]:
    if status is None:
        status = PASS if passed is True else FAIL if passed is False else NOT_JUDGED
    return verdict(name, status, detail, value, threshold, n)


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
                name, [getattr(r, attr) for r in ok], 95, float(budget), what, client_bound_reasons=reasons
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


def _errors_verdict(points: list[LoadPoint], name: str = "zero_errors") -> dict[str, Any]:
    failed = sum(p.requests_failed or 0 for p in points)
    classes: dict[str, int] = {}
    for p in points:
        for k, v in (p.extra.get("errors_by_class") or {}).items():
            classes[k] = classes.get(k, 0) + v
    detail = (
        "no failed requests"
        if not failed
        else f"{failed} failed requests: " + ", ".join(f"{k} {v}" for k, v in sorted(classes.items()))
    )
    return _verdict(name, failed == 0, detail, failed, 0)


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
            mode="closed",
            concurrency=concurrency,
            duration_s=duration,
            warmup_s=float(params.get("warmup_s") or 0.0),
            ramp_up_s=float(params.get("ramp_up_s") or 0.0),
            drain_timeout_s=float(params.get("drain_timeout_s") or 120.0),
        )
        outcome = await run_load(session.client, make, config, cancel=cancel, progress=reporter.phase("load", 0, 90))
        point = summarize(outcome, label=f"c={concurrency}", slo=_slo(params))
        window = (outcome.measure_start - session.time_zero, outcome.measure_end - session.time_zero)
        _attach_engine_stats(point, session.metrics.recording, *window)
        settled = {"after": None, "waited_s": 0}
        if not outcome.cancelled:
            settled = await _settle(session, baseline, float(params.get("settle_s") or 30.0), reporter, "settle", 95)
    verdicts = _budget_verdicts(point, params, records=outcome.records) + [_errors_verdict([point])]
    held = point.achieved_concurrency
    if outcome.client_bound:
        status = INCONCLUSIVE  # the client, not the engine, failed to keep the load
    else:
        status = PASS if (held or 0) >= 0.95 * concurrency else FAIL
    verdicts.append(
        _verdict(
            "concurrency_held",
            None,
            f"held {held or 0:.1f} of {concurrency} on average"
            + (
                f"; inconclusive (client-bound): {'; '.join(outcome.client_bound_reasons)}"
                if outcome.client_bound
                else ""
            ),
            held,
            concurrency,
            point.requests_completed,
            status,
        )
    )
    if abort_every:
        verdicts.extend(_kv_verdicts(baseline, settled, session.metrics.recording.engine))
    if outcome.cancelled:
        notes.append("cancelled: partial data")
    reporter.close()
    return _build_result(
        "concurrency_stress",
        session,
        params,
        [point],
        [outcome],
        verdicts,
        notes,
        outcome.cancelled,
        {"kv_baseline": baseline, "kv_after": settled.get("after"), **_lengths_meta(lengths)},
    )


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
    rungs = [int(r) for r in params.get("rungs") or []]
    if not rungs or any(r < 1 for r in rungs):
        raise PlanError(f"params.rungs: must be a non-empty list of positive token counts, got {params.get('rungs')!r}")
    output_tokens = _require(params, "output_tokens", int, 1)
    repeats = max(int(params.get("repeats") or 1), 1)
    with_bg = bool(params.get("with_background"))
    reporter = Reporter(progress, cancel)
    points: list[LoadPoint] = []
    outcomes: list[LoadOutcome] = []
    notes: list[str] = []
    largest_ok: int | None = None
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
                    label = f"{rung // 1024}K {mode}" if rung >= 1024 else f"{rung} {mode}"
                    point, outcome = await _long_rung(
                        session, prompts, rung, output_tokens, repeats, mode, params, reporter, label, pct0, pct1
                    )
                    points.append(point)
                    outcomes.append(outcome)
                    rung_ok = rung_ok and (point.requests_failed or 0) == 0 and (point.requests_completed or 0) > 0
                if rung_ok:
                    largest_ok = rung
                else:
                    notes.append(f"rung {rung} failed; larger rungs not attempted")
                    break
        except _Cancelled:
            partial = True
            notes.append("cancelled: partial data")
    required = int(params.get("required_tokens") or rungs[-1])
    verdicts = [
        _verdict(
            "largest_rung_succeeds",
            (largest_ok or 0) >= min(required, rungs[-1]),
            f"largest successful input: {largest_ok or 0} tokens; required {min(required, rungs[-1])}",
            largest_ok,
            min(required, rungs[-1]),
        ),
        _errors_verdict([p for p in points]),
    ]
    for point in points:
        if point.label.endswith("with_background"):
            before, during = (
                point.extra.get("background_ttft_p95_before_ms"),
                point.extra.get("background_ttft_p95_during_ms"),
            )
            if before and during:
                limit = max(2.0 * before, float(params.get("ttft_p95_ms") or 0))
                verdicts.append(
                    _verdict(
                        f"short_traffic_isolated[{point.label}]",
                        during <= limit,
                        f"short requests' TTFT p95 {during:.1f} ms during the long request vs {before:.1f} ms before",
                        during,
                        limit,
                    )
                )
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
        {"largest_successful_rung": largest_ok},
    )


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
    if mode == "with_background":
        bg_in = int(params.get("background_input_tokens") or 256)
        bg_out = int(params.get("background_output_tokens") or 64)
        bg_config = LoadConfig(
            mode="closed",
            concurrency=int(params.get("background_concurrency") or 4),
            duration_s=24 * 3600.0,
            drain_timeout_s=5.0,
            progress_interval_s=2.0,
        )
        bg_task = asyncio.ensure_future(
            run_load(
                session.client,
                lambda i: session.spec(
                    prompts.text(bg_in, seed=10_000 + i), bg_out, request_id=f"bg-{i}", tag="background"
                ),
                bg_config,
                cancel=lambda: stop_bg.is_set() or reporter.cancelled(),
            )
        )
        await reporter.ticking(
            label,
            pct0,
            pct0 + (pct1 - pct0) * 0.2,
            asyncio.sleep(float(params.get("background_lead_s") or 5.0)),
            float(params.get("background_lead_s") or 5.0),
        )
    outcome.measure_start = time.perf_counter()
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
    outcome.measure_end = time.perf_counter()
    bg_outcome = None
    if bg_task is not None:
        stop_bg.set()
        bg_outcome = await bg_task
    point = summarize(outcome, label=label)
    point.concurrency = 1
    point.extra["input_tokens_requested"] = rung
    point.extra["prompt_tokens_reported"] = [r.prompt_tokens for r in outcome.records]
    _attach_engine_stats(
        point,
        session.metrics.recording,
        outcome.measure_start - session.time_zero,
        outcome.measure_end - session.time_zero + 1.0,
    )
    if bg_outcome is not None:
        long_start, long_end = outcome.measure_start, outcome.measure_end
        before = [r.ttft_ms for r in bg_outcome.records if r.ok and r.send_time < long_start and r.ttft_ms is not None]
        during = [
            r.ttft_ms
            for r in bg_outcome.records
            if r.ok and r.ttft_ms is not None and r.send_time < long_end and (r.first_token_time or 0) > long_start
        ]
        point.extra["background_requests"] = len(bg_outcome.records)
        point.extra["background_ttft_p95_before_ms"] = Stats.from_values(before).p95
        point.extra["background_ttft_p95_during_ms"] = Stats.from_values(during).p95
        point.extra["background_failed"] = sum(
            1 for r in bg_outcome.records if not r.ok and r.error_class != "cancelled"
        )
    return point, outcome


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


async def run_prefix_reuse(
    target: Target,
    params: dict[str, Any],
    cancel: Any = None,
    progress: Callable[[dict[str, Any]], Any] | None = None,
    off_target: Target | None = None,
) -> NormalizedResult:
    """Shared-prefix load against `target` (prefix caching on) and, if given, `off_target` (off)."""
    requests = _require(params, "requests", int, 1)
    concurrency = _require(params, "concurrency", int, 1)
    prefix = _require(params, "prefix_tokens", int, 1)
    suffix = _require(params, "suffix_tokens", int, 1)
    output_tokens = _require(params, "output_tokens", int, 1)
    reporter = Reporter(progress, cancel)
    points: list[LoadPoint] = []
    outcomes: list[LoadOutcome] = []
    notes: list[str] = []
    partial = False
    configs = [("prefix_on", target)] + ([("prefix_off", off_target)] if off_target is not None else [])
    sessions: list[_Session] = []
    for n, (label, tgt) in enumerate(configs):
        async with _Session(tgt) as session:
            sessions.append(session)
            prompts = session.prompts
            assert prompts is not None
            outcome = await run_load(
                session.client,
                lambda i, prompts=prompts, label=label: session.spec(
                    prompts.shared_prefix(prefix, suffix, seed=i), output_tokens, request_id=f"{label}-{i}"
                ),
                LoadConfig(mode="closed", concurrency=concurrency, max_requests=requests),
                cancel=cancel,
                progress=reporter.phase(label, 100 * n / len(configs), 100 * (n + 1) / len(configs)),
            )
            point = summarize(outcome, label=label, slo=_slo(params))
            _attach_engine_stats(
                point,
                session.metrics.recording,
                outcome.measure_start - session.time_zero,
                outcome.measure_end - session.time_zero + 1.0,
            )
            cached = [r.cached_tokens for r in outcome.records if r.cached_tokens is not None]
            point.extra["usage_cached_tokens_mean"] = (sum(cached) / len(cached)) if cached else None
            own = concurrency * (prefix + suffix + output_tokens)
            point.extra["own_allocation_tokens"] = own
            capacity = params.get("kv_capacity_tokens")
            used = point.extra.get("kv_used_tokens_max")
            if used is None and capacity and point.extra.get("kv_usage_ratio_max") is not None:
                used = point.extra["kv_usage_ratio_max"] * float(capacity)
            point.extra["kv_tokens_peak"] = used
            points.append(point)
            outcomes.append(outcome)
            if outcome.cancelled:
                partial = True
                notes.append("cancelled: partial data")
                break
    on = points[0]
    verdicts = [_errors_verdict(points)] + _budget_verdicts(on, params, label="prefix_on", records=outcomes[0].records)
    used, own = on.extra.get("kv_tokens_peak"), on.extra["own_allocation_tokens"]
    if used is None:
        verdicts.append(
            _verdict(
                "kv_below_own_allocation",
                None,
                "no KV token count from the engine (give params.kv_capacity_tokens to convert its usage ratio)",
            )
        )
    else:
        verdicts.append(
            _verdict(
                "kv_below_own_allocation",
                used < 0.8 * own,
                f"peak KV {used:.0f} tokens vs {own} if every request allocated its own prefix",
                used,
                own,
            )
        )
    hit = on.extra.get("prefix_hit_ratio")
    if hit is None and on.extra.get("usage_cached_tokens_mean") is not None:
        hit = on.extra["usage_cached_tokens_mean"] / (prefix + suffix)
    shared = prefix / (prefix + suffix)
    needed = PREFIX_REUSE_MIN_SHARE * shared  # the one threshold: reported, stated and applied
    verdicts.append(
        _verdict(
            "prefix_reused",
            None if hit is None else hit >= needed,
            "no prefix-hit metric or cached-token usage from the engine"
            if hit is None
            else f"prefix hit ratio {hit:.2f} vs threshold {needed:.3g} "
            f"({PREFIX_REUSE_MIN_SHARE:.0%} of the prompt's shared share {shared:.2f})",
            hit,
            needed,
        )
    )
    if len(points) == 2:
        off = points[1]
        if on.ttft_ms.p50 is not None and off.ttft_ms.p50:
            on.extra["ttft_p50_on_over_off"] = on.ttft_ms.p50 / off.ttft_ms.p50
    reporter.close()
    result = _build_result("prefix_reuse", sessions[0], params, points, outcomes, verdicts, notes, partial)
    if len(sessions) == 2:
        result.metadata["off_target"] = sessions[1].target.describe()
        for name, values in sessions[1].metrics.recording.series.items():
            result.timeseries[f"prefix_off.{name}"] = values
    return result


# ---------------------------------------------------------------- 5. long-run stability


async def run_stability(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    concurrency = _require(params, "concurrency", int, 1)
    duration = _require(params, "duration_s", float, 0.1)
    window = _require(params, "window_s", float, 0.01)
    if window * 2 > duration:
        raise PlanError(f"params.window_s: must be at most half of duration_s ({duration:g}), got {window:g}")
    input_tokens = _require(params, "input_tokens", int, 1)
    output_tokens = _require(params, "output_tokens", int, 1)
    max_drift = float(params.get("max_drift_pct") or 25.0)
    lengths = _trace_lengths(params, input_tokens, output_tokens)
    reporter = Reporter(progress, cancel)
    notes: list[str] = []
    async with _Session(target) as session:
        prompts = session.prompts
        assert prompts is not None
        outcome = await run_load(
            session.client,
            lambda i: session.spec(prompts.text(lengths(i)[0], seed=i), lengths(i)[1], request_id=f"stab-{i}"),
            LoadConfig(mode="closed", concurrency=concurrency, duration_s=duration, drain_timeout_s=60.0),
            cancel=cancel,
            progress=reporter.phase("load", 0, 100),
        )
    overall = summarize(outcome, label="all", slo=_slo(params))
    start = outcome.measure_start
    first_records = [r for r in outcome.records if r.send_time < start + window]
    last_start = max(outcome.measure_end - window, start + window)
    last_records = [
        r for r in outcome.records if r.send_time >= last_start and (r.end_time or 0) <= outcome.measure_end + 1e-6
    ]
    points = [overall]
    for label, records, t0, t1 in (
        ("first_window", first_records, start, start + window),
        ("last_window", last_records, last_start, outcome.measure_end),
    ):
        part = LoadOutcome(
            config=outcome.config,
            records=records,
            run_start=outcome.run_start,
            measure_start=t0,
            measure_end=t1,
            achieved_concurrency=None,
            client_bound=outcome.client_bound,
        )
        point = summarize(part, label=label)
        _attach_engine_stats(point, session.metrics.recording, t0 - session.time_zero, t1 - session.time_zero)
        points.append(point)
    _attach_engine_stats(
        overall, session.metrics.recording, start - session.time_zero, outcome.measure_end - session.time_zero
    )
    first, last = points[1], points[2]
    verdicts = [_errors_verdict([overall])]
    drift: dict[str, float | None] = {}
    for metric, key in (("ttft_ms", "p50"), ("ttft_ms", "p99"), ("tpot_ms", "p50"), ("tpot_ms", "p99")):
        a, b = getattr(getattr(first, metric), key), getattr(getattr(last, metric), key)
        value = (b - a) / a * 100.0 if a and b is not None else None
        drift[f"{metric}_{key}_drift_pct"] = value
        verdicts.append(
            _verdict(
                f"{metric.replace('_ms', '')}_{key}_drift",
                None if value is None else value <= max_drift,
                "not enough requests in a window"
                if value is None
                else f"{value:+.1f} % from the first to the last window",
                value,
                max_drift,
            )
        )
    kv = session.metrics.recording.series.get("kv_usage_ratio", [])
    slope = _slope(kv)
    drift["kv_usage_slope_per_hour"] = None if slope is None else slope * 3600.0
    verdicts.extend(_budget_verdicts(overall, params, records=outcome.records))
    overall.extra.update(drift)
    if outcome.cancelled:
        notes.append("cancelled: partial data")
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
        {"drift": drift, **_lengths_meta(lengths)},
    )


def _slope(series: list[list[float]]) -> float | None:
    """Least-squares slope of value over time (per second)."""
    if len(series) < 3:
        return None
    n = len(series)
    mean_t = sum(t for t, _ in series) / n
    mean_v = sum(v for _, v in series) / n
    var = sum((t - mean_t) ** 2 for t, _ in series)
    if var == 0 or math.isnan(var):
        return None
    return sum((t - mean_t) * (v - mean_v) for t, v in series) / var


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


PLANNERS: dict[str, Callable[..., dict[str, Any]]] = {
    "concurrency_stress": plan_concurrency_stress,
    "long_context": plan_long_context,
    "swap_recovery": plan_swap_recovery,
    "prefix_reuse": plan_prefix_reuse,
    "stability": plan_stability,
    "trace_replay": plan_trace_replay,
}
RUNNERS: dict[str, Callable[..., Any]] = {
    "concurrency_stress": run_concurrency_stress,
    "long_context": run_long_context,
    "swap_recovery": run_swap_recovery,
    "prefix_reuse": run_prefix_reuse,
    "stability": run_stability,
    "trace_replay": run_trace_replay,
}


def plan(test: str, constraints: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    if test not in PLANNERS:
        raise PlanError(f"test: must be one of {', '.join(PLANNERS)}, got {test!r}")
    return PLANNERS[test](constraints, **kwargs)


async def run_test(test: str, target: Target, params: dict[str, Any], **kwargs: Any) -> NormalizedResult:
    """Run one of the validation tests (the five, and the trace replay) by its ingest-API name."""
    if test not in RUNNERS:
        raise PlanError(f"test: must be one of {', '.join(RUNNERS)}, got {test!r}")
    return await RUNNERS[test](target, params, **kwargs)


def run_test_sync(test: str, target: Target, params: dict[str, Any], **kwargs: Any) -> NormalizedResult:
    """Blocking wrapper for Celery tasks and the CLI (runs its own event loop)."""
    return run_async(run_test(test, target, params, **kwargs))
