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
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from benchmarks.harness import HARNESS_VERSION
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
    return {
        "sessions": int(_get(constraints, "concurrent_sessions", 32)),
        "idle_fraction": 0.5,
        "idle_s": float(_get(constraints, "idle_seconds_between_turns", 60.0)),
        "turn_input_tokens": int(_get(constraints, "avg_input_tokens", 256)),
        "output_tokens": 32,
        "pressure_concurrency": int(_get(constraints, "peak_concurrency", 32)),  # traffic while sessions idle
        "pressure_input_tokens": int(_get(constraints, "avg_input_tokens", 512)),
        "seed": 1234,
        "parallel": 16,
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
    sessions_n = _require(params, "sessions", int, 1)
    idle_fraction = float(params.get("idle_fraction") or 0.5)
    idle_s = _require(params, "idle_s", float, 0)
    turn_tokens = _require(params, "turn_input_tokens", int, 1)
    output_tokens = _require(params, "output_tokens", int, 1)
    seed = int(params.get("seed") or 1234)
    parallel = max(int(params.get("parallel") or 16), 1)
    reporter = Reporter(progress, cancel)
    notes: list[str] = []
    partial = False
    idle_ids = set(range(int(round(sessions_n * idle_fraction))))
    greedy = {"temperature": 0.0, "seed": seed}
    first: dict[int, RequestRecord] = {}
    warm: dict[int, RequestRecord] = {}
    resumed: dict[int, RequestRecord] = {}
    outcomes = [
        LoadOutcome(config=LoadConfig(mode="closed", concurrency=parallel, max_requests=sessions_n)) for _ in range(3)
    ]
    pressure_outcome: LoadOutcome | None = None
    async with _Session(target, keep_text=True) as session:
        prompts = session.prompts
        assert prompts is not None
        for outcome in outcomes:
            outcome.run_start = session.time_zero
        semaphore = asyncio.Semaphore(parallel)

        def turn_spec(sid: int, turn: int, tag: str) -> RequestSpec:
            user1 = prompts.text(turn_tokens, seed=seed + sid)
            if turn == 1:
                return session.spec(user1, output_tokens, request_id=f"s{sid}-t1", tag=tag, **greedy)
            reply = first[sid].text
            user2 = prompts.text(turn_tokens, seed=seed + 100_000 + sid)
            if target.api == "chat":
                messages = [
                    {"role": "user", "content": user1},
                    {"role": "assistant", "content": reply},
                    {"role": "user", "content": user2},
                ]
                return session.spec(
                    None, output_tokens, messages=messages, request_id=f"s{sid}-t2-{tag}", tag=tag, **greedy
                )
            return session.spec(user1 + reply + user2, output_tokens, request_id=f"s{sid}-t2-{tag}", tag=tag, **greedy)

        async def send(sid: int, turn: int, tag: str, into: dict[int, RequestRecord], outcome: LoadOutcome) -> None:
            async with semaphore:
                record = RequestRecord()
                try:
                    await session.client.send(turn_spec(sid, turn, tag), record)
                finally:
                    into[sid] = record
                    outcome.records.append(record)

        async def phase(
            ids: list[int],
            turn: int,
            tag: str,
            into: dict[int, RequestRecord],
            outcome: LoadOutcome,
            pct0: float,
            pct1: float,
        ) -> None:
            outcome.measure_start = time.perf_counter()
            await reporter.ticking(
                tag,
                pct0,
                pct1,
                asyncio.gather(*(send(i, turn, tag, into, outcome) for i in ids)),
                expected_s=max(len(ids) / parallel, 1.0),
            )
            outcome.measure_end = time.perf_counter()

        try:
            await phase(list(range(sessions_n)), 1, "turn1", first, outcomes[0], 0, 20)
            ok_ids = [i for i in range(sessions_n) if first[i].ok]
            # Warm continuation right after turn 1 (for every session: the reference text of idle ones).
            await phase(ok_ids, 2, "warm", warm, outcomes[1], 20, 40)
            # Idle period with pressure traffic, so the engine has reason to evict or swap idle caches.
            pressure_c = int(params.get("pressure_concurrency") or 0)
            if idle_s > 0:
                if pressure_c > 0:
                    p_in = int(params.get("pressure_input_tokens") or turn_tokens)
                    pressure_outcome = await run_load(
                        session.client,
                        lambda i: session.spec(
                            prompts.text(p_in, seed=900_000 + i),
                            output_tokens,
                            request_id=f"pressure-{i}",
                            tag="pressure",
                        ),
                        LoadConfig(mode="closed", concurrency=pressure_c, duration_s=idle_s, drain_timeout_s=30.0),
                        cancel=cancel,
                        progress=reporter.phase("idle", 40, 80),
                    )
                    if pressure_outcome.cancelled:
                        raise _Cancelled()
                else:
                    await reporter.ticking("idle", 40, 80, asyncio.sleep(idle_s), idle_s)
            await phase([i for i in ok_ids if i in idle_ids], 2, "resume", resumed, outcomes[2], 80, 100)
        except _Cancelled:
            partial = True
            notes.append("cancelled: partial data")
    labels = ("turn1", "warm", "resume")
    points = [summarize(outcome, label=label) for outcome, label in zip(outcomes, labels, strict=False)]
    for point, outcome in zip(points, outcomes, strict=False):
        _attach_engine_stats(
            point,
            session.metrics.recording,
            outcome.measure_start - session.time_zero,
            outcome.measure_end - session.time_zero,
        )
    warm_idle = [warm[i].ttft_ms for i in idle_ids if i in warm and warm[i].ok]
    resume_ttft = [resumed[i].ttft_ms for i in resumed if resumed[i].ok]
    compared = [i for i in resumed if resumed[i].ok and i in warm and warm[i].ok]
    mismatched = [i for i in compared if resumed[i].text != warm[i].text]
    verdicts = [
        _verdict(
            "continuation_identical",
            (not mismatched) if compared else None,
            f"{len(compared) - len(mismatched)} of {len(compared)} resumed sessions continued exactly as without "
            "the idle period" + (f"; differing sessions: {mismatched[:10]}" if mismatched else ""),
            len(mismatched),
            0,
        ),
        _errors_verdict(points),
    ]
    warm_stats, resume_stats = Stats.from_values(warm_idle), Stats.from_values(resume_ttft)
    extra = {
        "warm_ttft_ms": warm_stats.__dict__,
        "resume_ttft_ms": resume_stats.__dict__,
        "resume_over_warm_ttft_p50": (resume_stats.p50 / warm_stats.p50)
        if resume_stats.p50 and warm_stats.p50
        else None,
        "idle_sessions": len(idle_ids),
        "pressure_requests": len(pressure_outcome.records) if pressure_outcome else 0,
        "cached_tokens_resume": [resumed[i].cached_tokens for i in sorted(resumed)][:200],
    }
    points[2].extra.update({"resume_over_warm_ttft_p50": extra["resume_over_warm_ttft_p50"]})
    verdicts.extend(_budget_verdicts(points[2], params, label="resume", records=outcomes[2].records))
    reporter.close()
    return _build_result("swap_recovery", session, params, points, outcomes, verdicts, notes, partial, extra)


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
