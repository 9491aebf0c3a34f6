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
from dataclasses import dataclass, field, replace
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
