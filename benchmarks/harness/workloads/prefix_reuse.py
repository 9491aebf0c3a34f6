"""Test 4, prefix reuse: the same shared-prefix load with prefix caching on and off, against the
theory of every request allocating its own.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from typing import Any, Callable, Mapping

import numpy as np

from benchmarks.harness.cache_model import CacheModel
from benchmarks.harness.estimates import Load, number, request_seconds
from benchmarks.harness.load import (
    LoadConfig,
    LoadOutcome,
    run_load,
    summarize,
)
from benchmarks.harness.metrics import MetricsRecording
from benchmarks.harness.workloads.common import (
    PREFIX_REUSE_MIN_SHARE,
    PlanError,
    Reporter,
    Session,
    Target,
    budget_params,
    budget_verdicts,
    build_result,
    constraint_value,
    errors_verdict,
    make_verdict,
    require_param,
    series_in,
)
from benchmarks.harness.workloads.spec import BUDGET_PARAMS, ParamSpec, TestSpec
from benchmarks.harness.workloads.spec import gettext_noop as _
from benchmarks.harness.workloads.stress import attach_engine_stats, slo_of
from benchmarks.result import SIMULATED, LoadPoint, NormalizedResult
from benchmarks.verdicts import (
    FAIL,
    INCONCLUSIVE,
    INSUFFICIENT_DATA,
    NOT_EXERCISED,
    PASS,
    compare,
    not_applicable,
    percentile_interval,
    ratio_interval,
)

PARAMS = (
    ParamSpec("requests", 256, _("Requests"), "requests"),
    ParamSpec("concurrency", 32, _("Concurrent requests"), "requests"),
    ParamSpec("prefix_tokens", 768, _("Shared prefix (tokens)"), "tokens"),
    ParamSpec("suffix_tokens", 256, _("Unique suffix (tokens)"), "tokens"),
    ParamSpec("output_tokens", 64, _("Output tokens per request"), "tokens"),
    ParamSpec("kv_capacity_tokens", None, _("KV-cache capacity (tokens)"), "tokens"),
    *BUDGET_PARAMS,
)


def estimate_prefix_reuse(params: Mapping[str, Any]) -> Load:
    """The requests in waves of `concurrency`, each with the shared prefix and its own suffix."""
    requests = max(number(params, "requests", 1), 1)
    concurrency = max(number(params, "concurrency", 1), 1)
    prompt = number(params, "prefix_tokens") + number(params, "suffix_tokens")
    seconds = math.ceil(requests / concurrency) * request_seconds(params, prompt)
    return Load(seconds, concurrency, requests, requests * (prompt + number(params, "output_tokens", 64)))


def plan_prefix_reuse(constraints: dict[str, Any] | None = None) -> dict[str, Any]:
    avg_input = int(constraint_value(constraints, "avg_input_tokens", 1024))
    return {
        "requests": 256,
        "concurrency": min(int(constraint_value(constraints, "peak_concurrency", 32)), 256),
        "prefix_tokens": max(int(avg_input * 0.75), 16),
        "suffix_tokens": max(avg_input - int(avg_input * 0.75), 8),
        "output_tokens": int(constraint_value(constraints, "avg_output_tokens", 64)),
        "kv_capacity_tokens": None,  # from the capacity model, for the "own allocation" comparison
        **budget_params(constraints),
    }


# caching on must hold at most this share of the KV that caching off (or the theory of every request
# holding its own prompt) holds: "clearly below", the article's verdict
PREFIX_MEMORY_MAX_SHARE = 0.8


PREFIX_SAMPLE_INTERVAL_S = 0.25  # KV usage is sampled this often during the prefix test (a short load)


PREFIX_HELD_PERCENTILE = 90  # the judged "held KV": this percentile of the samples (max is one sample)


MIN_KV_SAMPLES = 5  # fewer KV samples of a run: insufficient data to judge its memory


# after the load, KV still holding at least this share of the run's peak: the engine keeps finished
# requests resident (llama.cpp's slots keep their prompts), so the KV the load added cannot be told
# from the earlier contents it overwrote and neither memory verdict can be judged
KV_RESIDENT_SHARE = 0.5


STRADDLES = ": the interval straddles the threshold"


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
    tokens = series_in(recording, "kv_used_tokens", start, end)
    if tokens:
        return tokens, "engine token count"
    ratios = series_in(recording, "kv_usage_ratio", start, end)
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
    requests = require_param(params, "requests", int, 1)
    concurrency = require_param(params, "concurrency", int, 1)
    prefix = require_param(params, "prefix_tokens", int, 1)
    suffix = require_param(params, "suffix_tokens", int, 1)
    output_tokens = require_param(params, "output_tokens", int, 1)
    capacity = params.get("kv_capacity_tokens")
    if capacity is not None and (not isinstance(capacity, (int, float)) or isinstance(capacity, bool) or capacity <= 0):
        raise PlanError(f"params.kv_capacity_tokens: must be a positive number of tokens, got {capacity!r}")
    interval_s = float(params.get("sample_interval_s") or PREFIX_SAMPLE_INTERVAL_S)
    reporter = Reporter(progress, cancel)
    points: list[LoadPoint] = []
    outcomes: list[LoadOutcome] = []
    samples: dict[str, list[float]] = {}
    resident: dict[str, tuple[float, float]] = {}  # label -> (KV tokens after the load, its raw peak)
    notes: list[str] = []
    partial = False
    in_flight = min(concurrency, requests)
    own = in_flight * (prefix + suffix + output_tokens)  # every request allocates its own prompt and output
    shared_once = prefix + in_flight * (suffix + output_tokens)  # the least caching can hold
    configs = [("prefix_on", target)] + ([("prefix_off", off_target)] if off_target is not None else [])
    sessions: list[Session] = []
    for n, (label, tgt) in enumerate(configs):
        session = Session(tgt)
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
            after = await session.kv_now()
            point, kv, resident_kv = _prefix_point(
                session, outcome, label, params, baseline, after, capacity, own, shared_once, tgt.cache_prompt
            )
            samples[label] = kv
            if resident_kv is not None:
                resident[label] = resident_kv
            points.append(point)
            outcomes.append(outcome)
            if outcome.cancelled:
                partial = True
                notes.append("cancelled: partial data")
                break
    on = points[0]
    off = points[1] if len(points) == 2 else None
    verdicts = _prefix_verdicts(points, outcomes, params, samples, resident, own, (prefix, suffix), target.cache_model)
    on_ttft = [r.ttft_ms for r in outcomes[0].records if r.ok and r.ttft_ms is not None]
    observed = _prefix_observed(on, off, own, shared_once, on_ttft, outcomes)
    reporter.close()
    result = build_result("prefix_reuse", sessions[0], params, points, outcomes, verdicts, notes, partial)
    if any(s.simulated for s in sessions):  # the caching-off endpoint counts too: nothing simulated passes as measured
        result.evidence = SIMULATED
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


def _prefix_verdicts(
    points: list[LoadPoint],
    outcomes: list[LoadOutcome],
    params: dict[str, Any],
    samples: dict[str, list[float]],
    resident: dict[str, tuple[float, float]],
    own: int,
    lengths: tuple[int, int],
    cache_model: CacheModel | None = None,
) -> list[dict[str, Any]]:
    """Errors, the budget of the caching-on run, the two memory verdicts (not applicable where the
    engine's cache model holds a prefix per slot, unjudged where it keeps KV resident) and the cache
    hits; `lengths` is (prefix, suffix) tokens."""
    on = points[0]
    off = points[1] if len(points) == 2 else None
    verdicts = [errors_verdict(points)] + budget_verdicts(on, params, label="prefix_on", records=outcomes[0].records)
    memory = [
        _kv_vs_theory(samples.get("prefix_on", []), own),
        _kv_vs_off(samples.get("prefix_on", []), samples.get("prefix_off"), off is not None),
    ]
    if cache_model is not None and not cache_model.shares_prefix:
        # per-slot prompt caches (llama.cpp): each slot holds its own copy, nothing to save in memory
        verdicts.extend(
            not_applicable(v["name"], cache_model.per_slot_prefix_reason(), cache_model.source, v["detail"])
            for v in memory
        )
    else:
        verdicts.extend(_unjudged_when_resident(verdict, resident) for verdict in memory)
    verdicts.append(_prefix_hits(on, *lengths))
    return verdicts


def _prefix_point(
    session: Session,
    outcome: LoadOutcome,
    label: str,
    params: dict[str, Any],
    baseline: dict[str, float] | None,
    after: dict[str, float] | None,
    capacity: float | None,
    own: int,
    shared_once: int,
    cache_prompt: bool | None,
) -> tuple[LoadPoint, list[float], tuple[float, float] | None]:
    """One configuration's point with its KV figures; the KV tokens the load added (samples), and
    (KV tokens after the load, its raw peak) when the engine kept the load's KV resident, else None."""
    point = summarize(outcome, label=label, slo=slo_of(params))
    window = (outcome.measure_start - session.time_zero, outcome.measure_end - session.time_zero + 1.0)
    attach_engine_stats(point, session.metrics.recording, *window)
    raw, source = _kv_token_samples(session.metrics.recording, *window, capacity)
    # the KV the load added: an engine that keeps finished prompts resident (llama.cpp's slots,
    # or the "on" run's leftovers when "off" is the same server) would otherwise count them
    base_tokens = _kv_tokens_of(baseline, capacity, source)
    kv = [max(value - base_tokens, 0.0) for value in raw]
    after_tokens = _kv_tokens_of(after, capacity, source)
    resident_kv = (
        (after_tokens, max(raw)) if raw and max(raw) > 0 and after_tokens >= KV_RESIDENT_SHARE * max(raw) else None
    )
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
        kv_tokens_after=after_tokens if source else None,
        cache_prompt=cache_prompt,
    )
    return point, kv, resident_kv


def _unjudged_when_resident(verdict: dict[str, Any], resident: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """A memory verdict an engine's resident KV leaves unjudgeable: inconclusive, saying why. Where
    finished requests stay cached (llama.cpp's slots), a load that reuses a slot overwrites what it
    held, so "the KV the load added" can read far below what the load needed; a pass on it would
    credit a saving never observed."""
    if not resident or verdict["status"] not in (PASS, FAIL, INCONCLUSIVE):
        return verdict
    held = "; ".join(
        f"{label}: {after:.0f} tokens still held after the load (peak {peak:.0f})"
        for label, (after, peak) in resident.items()
    )
    figures = verdict["detail"].removesuffix(STRADDLES)
    detail = (
        f"{figures}. Not judged: the engine keeps finished requests' KV resident ({held}), so the KV a load "
        "adds cannot be told from the earlier contents it overwrites"
    )
    return make_verdict(
        verdict["name"],
        None,
        detail,
        verdict["value"],
        verdict["threshold"],
        verdict["n"],
        INCONCLUSIVE,
        verdict.get("interval"),
    )


def _kv_vs_theory(on: list[float], own: int) -> dict[str, Any]:
    name, limit = "kv_below_theory", PREFIX_MEMORY_MAX_SHARE
    if not on:
        return make_verdict(
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
        return make_verdict(
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
        detail += STRADDLES
    return make_verdict(name, None, detail, held / own, limit, len(on), status, interval)


def _kv_vs_off(on: list[float], off: list[float] | None, off_ran: bool) -> dict[str, Any]:
    name, limit = "kv_below_prefix_off", PREFIX_MEMORY_MAX_SHARE
    if not off_ran:
        return make_verdict(
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
        return make_verdict(name, None, "no KV token count from the engine on one of the two runs", None, limit, 0)
    held_on, held_off = _held(on), _held(off)
    assert held_on is not None and held_off is not None
    n = min(len(on), len(off))
    if n < MIN_KV_SAMPLES or held_off <= 0:
        return make_verdict(
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
        detail += STRADDLES
    return make_verdict(name, None, detail, ratio, limit, n, status, interval)


def _prefix_hits(on: LoadPoint, prefix: int, suffix: int) -> dict[str, Any]:
    """Supporting evidence: the engine's prefix-hit ratio (or cached tokens in the usage) on the on run."""
    hit = on.extra.get("prefix_hit_ratio")
    if hit is None and on.extra.get("usage_cached_tokens_mean") is not None:
        hit = on.extra["usage_cached_tokens_mean"] / (prefix + suffix)
    shared = prefix / (prefix + suffix)
    needed = PREFIX_REUSE_MIN_SHARE * shared  # the one threshold: reported, stated and applied
    return make_verdict(
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


SPEC = TestSpec("prefix_reuse", PARAMS, plan_prefix_reuse, run_prefix_reuse, estimate_prefix_reuse)
