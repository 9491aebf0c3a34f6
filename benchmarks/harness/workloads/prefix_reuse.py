"""Test 4, prefix reuse: the same shared-prefix load with prefix caching on and off, each from an
emptied cache, against the KV its requests in flight need without sharing; the reuse the engine's
own counters show (benchmarks.harness.reuse); on a per-slot engine the saving is prefill compute.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any, Callable

import numpy as np

from benchmarks.harness import reuse
from benchmarks.harness.cache_model import SLOT_RESIDENT, CacheModel
from benchmarks.harness.load import run_load
from benchmarks.harness.load_config import LoadConfig, LoadOutcome
from benchmarks.harness.load_summary import summarize
from benchmarks.harness.metrics import MetricsRecording
from benchmarks.harness.workloads.common import (
    CANCELLED,
    PREFIX_REUSE_MIN_SHARE,
    PlanError,
    Reporter,
    Session,
    Target,
    budget_verdicts,
    build_result,
    detail_message_of,
    errors_verdict,
    figure_or_na,
    make_verdict,
    ms_or_na,
    require_param,
    reset_cache,
    reset_method,
)
from benchmarks.harness.workloads.spec import TestSpec
from benchmarks.harness.workloads.stress import attach_engine_stats, slo_of
from benchmarks.result import SIMULATED, LoadPoint, NormalizedResult
from benchmarks.suite import prefix_reuse as suite_row
from benchmarks.verdicts import (
    FAIL,
    INCONCLUSIVE,
    INSUFFICIENT_DATA,
    MIN_SAMPLES,
    NOT_EXERCISED,
    NOT_JUDGED,
    PASS,
    compare,
    not_applicable,
    percentile_interval,
    ratio_interval,
    verdict,
)
from benchmarks.verdicts import (
    STRADDLES as STRADDLES_THRESHOLD,
)
from selection.domain.messages import CLAUSE_SEPARATOR, Join, Message, load, to_json
from selection.domain.messages import marked as _

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

# What the prefix test's verdicts say and what it observed, as message templates (pages show them
# in their language; the English text is the API's and the CLI's).
NO_REQUEST_IN_FLIGHT = _("no request in flight during a KV sample")
NEED = _(
    "%(tokens)s tokens for the %(requests)s requests in flight at the peak (prompts %(prompts)s + outputs so far "
    "%(outputs)s)"
)
NEED_CAPPED = _(
    "%(tokens)s tokens for the %(requests)s requests in flight at the peak (prompts %(prompts)s + outputs so far "
    "%(outputs)s, capped by the %(pool)s-token pool)"
)
NO_KV_COUNT = _("no KV token count from the engine (give params.kv_capacity_tokens to convert its usage ratio)")
FEW_KV_SAMPLES = _("%(n)s KV samples with the load at its height: at least %(min)s are needed to judge it")
CI_AFTER_COMMA = _(", 95%% CI %(low)s–%(high)s")
CI_IN_BRACKETS = _(" (95%% CI %(low)s–%(high)s)")
KV_VS_NEED = _(
    "KV held with caching on %(held)s of what the requests in flight need without sharing (p%(q)s of %(n)s "
    "samples with the load at its height%(ci)s); at the peak %(peak)s of %(need)s; at most %(limit)s to pass"
)
NO_OFF_RUN = _(
    "no prefix-caching-off run (a second endpoint started with caching off, or llama.cpp's cache_prompt: "
    "false): on vs off was not exercised"
)
# the run's notes
NO_OFF_RUN_NOTE = _(
    "No prefix-caching-off run: caching on is judged against the KV its requests in flight need without sharing; "
    "on vs off was not measured."
)
NOT_EMPTIED = _("%(run)s: the cache could not be emptied first (%(method)s)")
NO_KV_COUNT_ON_ONE = _("no KV token count from the engine on one of the two runs")
FEW_ON_OFF_SAMPLES = _(
    "%(on)s and %(off)s KV samples (on, off), off held %(held_off)s tokens: at least %(min)s samples each and a "
    "non-zero off figure are needed"
)
KV_VS_OFF = _(
    "KV held with caching on %(on)s vs off %(off)s tokens (p%(q)s of %(n_on)s and %(n_off)s samples; peaks "
    "%(peak_on)s vs %(peak_off)s; both from an emptied cache): on/off %(ratio)s%(ci)s; at most %(limit)s to pass"
)
STILL_HELD = _("%(run)s: %(after)s tokens still held after the load (peak %(peak)s)")
RESIDENT_NOT_JUDGED = _(
    "%(detail)s. Not judged: the engine keeps finished requests' KV resident (%(held)s), so the KV a load adds "
    "cannot be told from the earlier contents it overwrites"
)
REUSED = _(
    "%(share)s of the prompt tokens came from the cache: %(evidence)s; threshold %(needed)s (%(min)s of the "
    "prompt's shared share %(shared)s)"
)
NO_TIMING = _("the engine reports no cached tokens or prefix hits, and no caching-off run gives a timing to compare")
FEW_TIMINGS = _("timing only (the engine reports no cached tokens): %(n)s requests, at least %(min)s are needed")
ON_OFF_RATIO = _(", on/off %(ratio)s")
CI_AND_N = _(" (95%% CI %(low)s–%(high)s, n=%(n)s)")
N_ONLY = _(" (n=%(n)s)")
BY_TIMING = _(
    "timing only (the engine reports no cached tokens or prefix hits): TTFT p50 with caching on %(on)s ms vs off "
    "%(off)s ms%(ratio)s%(ci)s; at most %(limit)s to pass"
)
TIMING_CLIENT_BOUND = _("%(detail)s; inconclusive (client-bound)")
# the two runs, as a detail names them
RUN_NAMES = {
    "prefix_on": Message("prefix_on", context="prefix test run"),
    "prefix_off": Message("prefix_off", context="prefix test run"),
}
# the observed line
PER_SLOT_ON = _(
    "%(engine)s caches a prompt per slot, so caching saves prefill, not memory: with caching on it computed "
    "%(processed)s of %(sent)s prompt tokens sent (%(share)s from the cache)"
)
PER_SLOT_OFF = _("%(line)s, with it off %(processed)s of %(sent)s (%(share)s)")
COMPUTE_SAVED = _("%(line)s: compute saved %(saving)s of the prompt")
HELD_OF_NEED = _(
    "with caching on the requests in flight held %(share)s of the KV they need without sharing (at the peak "
    "%(peak)s of %(need)s)"
)
HELD_OF_NEED_OFF = _("%(line)s, with caching off %(share)s of theirs")
MEMORY_SAVED = _("%(line)s: caching saved %(saving)s of the KV")
MEMORY_SAVED_AT_MOST = _("%(line)s: caching saved %(saving)s of the KV (at most %(best)s with the prefix held once)")
FROM_CACHE = _("%(line)s; %(share)s of the prompt tokens came from the cache")
OBSERVED_ON = _(
    "%(line)s; TTFT p50 on %(ttft)s; throughput on %(rate)s tok/s (n=%(n)s); each run from an emptied cache (%(state)s)"
)
OBSERVED_ON_OFF = _(
    "%(line)s; TTFT p50 on %(ttft)s vs off %(ttft_off)s; throughput on %(rate)s tok/s vs off %(rate_off)s tok/s "
    "(n=%(n)s/%(n_off)s); each run from an emptied cache (%(state)s)"
)


def prefix_off_target(target: Target, endpoint_url: str | None = None, metrics_url: str | None = None) -> Target | None:
    """The prefix-caching-off variant of `target`: a second endpoint started with caching off (vLLM
    --no-enable-prefix-caching, SGLang --disable-radix-cache), or for llama.cpp the same endpoint
    with `cache_prompt: false` on every request; None when neither exists (the off figure is then
    the capacity model's theory only)."""
    if endpoint_url:
        base = endpoint_url.rstrip("/")
        return replace(target, endpoint_url=base, metrics_url=metrics_url or f"{base}/metrics", cache_prompt=None)
    if target.engine == "llamacpp" or (target.cache_model is not None and target.cache_model.kind == SLOT_RESIDENT):
        return replace(target, cache_prompt=False)
    return None


def _kv_token_samples(
    recording: MetricsRecording, start: float, end: float, capacity: float | None
) -> tuple[list[tuple[float, float]], str | None]:
    """(time, KV tokens in use) over a window: the engine's token gauge, else its usage ratio x the
    pool (the engine-stated one when its metrics state it, else the planned capacity)."""
    tokens = [(t, v) for t, v in recording.series.get("kv_used_tokens", []) if start <= t <= end]
    if tokens:
        return tokens, "engine token count"
    ratios = [(t, v) for t, v in recording.series.get("kv_usage_ratio", []) if start <= t <= end]
    if ratios and capacity:
        return [(t, r * float(capacity)) for t, r in ratios], f"usage ratio x pool {float(capacity):.0f} tokens"
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
    (caching off), each from an emptied cache (`reset_cache`: the engine's reset, or fresh slots)
    with the prefix warmed once: the KV held against what the requests in flight need without
    sharing (capped by the pool), the prompt tokens taken from the cache (the engine's counters,
    else the responses' own count), TTFT and throughput. Caching on passes when its KV is clearly
    below that need and below the off run; on an engine that caches per slot (llama.cpp) the memory
    verdicts are not applicable and the saving is prefill compute. Without an off run the on-vs-off
    verdict is not exercised (never a pass)."""
    lengths = _check_params(params)
    interval_s = float(params.get("sample_interval_s") or PREFIX_SAMPLE_INTERVAL_S)
    reporter = Reporter(progress, cancel)
    run = _PrefixRun(params, lengths)
    configs = [("prefix_on", target)] + ([("prefix_off", off_target)] if off_target is not None else [])
    for n, (label, tgt) in enumerate(configs):
        session = Session(tgt)
        session.metrics.interval_s = interval_s
        async with session:
            run.sessions.append(session)
            outcome = await _one_configuration(session, label, run, cancel, reporter.phase(label, *_span(n, configs)))
            if outcome.cancelled:
                run.partial = True
                run.notes.append(Message(CANCELLED))
                break
    reporter.close()
    return _prefix_result(run, target)


def _span(index: int, configs: list) -> tuple[float, float]:
    return 100 * index / len(configs), 100 * (index + 1) / len(configs)


def _check_params(params: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """(requests, concurrency, prefix, suffix, output tokens), each checked (PlanError names the field)."""
    checked = tuple(
        require_param(params, key, int, 1)
        for key in ("requests", "concurrency", "prefix_tokens", "suffix_tokens", "output_tokens")
    )
    capacity = params.get("kv_capacity_tokens")
    if capacity is not None and (not isinstance(capacity, (int, float)) or isinstance(capacity, bool) or capacity <= 0):
        raise PlanError(f"params.kv_capacity_tokens: must be a positive number of tokens, got {capacity!r}")
    return checked  # type: ignore[return-value]


class _PrefixRun:
    """The prefix test's shared state: each configuration's point, outcome, KV samples and cache state."""

    def __init__(self, params: dict[str, Any], lengths: tuple[int, int, int, int, int]) -> None:
        self.params = params
        self.requests, self.concurrency, self.prefix, self.suffix, self.output_tokens = lengths
        self.points: list[LoadPoint] = []
        self.outcomes: list[LoadOutcome] = []
        self.samples: dict[str, list[float]] = {}  # label -> KV tokens the load added, per sample
        self.ratios: dict[str, list[float]] = {}  # label -> KV held / the in-flight need, per sample
        self.resident: dict[str, tuple[float, float]] = {}  # label -> (KV tokens after the load, its raw peak)
        self.sessions: list[Session] = []
        self.notes: list[str | Message] = []
        self.partial = False


async def _one_configuration(session: Session, label: str, run: _PrefixRun, cancel: Any, progress: Any) -> LoadOutcome:
    """One configuration from an emptied cache: reset, warm the prefix once, load, then its point."""
    prompts = session.prompts
    assert prompts is not None
    state = await reset_cache(session)
    # the shared prefix is warm before the load, as a deployed system prompt is: without it the first
    # wave of requests all prefill it at once and the peak says nothing of reuse
    await session.client.send(
        session.spec(prompts.shared_prefix(run.prefix, run.suffix, seed=-1), 1, request_id=f"{label}-warm")
    )
    baseline = await session.kv_now()
    outcome = await run_load(
        session.client,
        lambda i: session.spec(
            prompts.shared_prefix(run.prefix, run.suffix, seed=i), run.output_tokens, request_id=f"{label}-{i}"
        ),
        LoadConfig(mode="closed", concurrency=run.concurrency, max_requests=run.requests),
        cancel=cancel,
        progress=progress,
    )
    await asyncio.sleep(min(session.metrics.interval_s, 1.0))  # one more sample after the last request
    after = await session.kv_now()
    point = _prefix_point(session, outcome, label, run, baseline, after)
    point.extra["cache_state"] = state
    run.points.append(point)
    run.outcomes.append(outcome)
    return outcome


def _prefix_point(
    session: Session,
    outcome: LoadOutcome,
    label: str,
    run: _PrefixRun,
    baseline: dict[str, float] | None,
    after: dict[str, float] | None,
) -> LoadPoint:
    """One configuration's point with its KV figures against the in-flight need, and the reuse the
    engine's counters and the responses show."""
    params = run.params
    point = summarize(outcome, label=label, slo=slo_of(params))
    window = (outcome.measure_start - session.time_zero, outcome.measure_end - session.time_zero + 1.0)
    recording = session.metrics.recording
    attach_engine_stats(point, recording, *window)
    stated = (recording.kv_capacity or {}).get("tokens")
    pool = float(stated or params.get("kv_capacity_tokens") or 0) or None
    raw, source = _kv_token_samples(recording, *window, pool)
    # the KV the load added: an engine that keeps finished prompts resident (llama.cpp's slots, or a
    # server whose cache could not be reset) would otherwise count them
    base_tokens = _kv_tokens_of(baseline, pool, source)
    planned_prompt = run.prefix + run.suffix
    added, paired = [], []
    for t, value in raw:
        kv = max(value - base_tokens, 0.0)
        added.append(kv)
        paired.append((kv, reuse.in_flight_need(outcome.records, session.time_zero + t, planned_prompt, pool)))
    height = reuse.at_height(paired)
    ratios = [kv / need["tokens"] for kv, need in height]
    peak = max(height, key=lambda pair: pair[0], default=None)
    run.samples[label], run.ratios[label] = added, ratios
    after_tokens = _kv_tokens_of(after, pool, source)
    top = max((v for _t, v in raw), default=0.0)
    if raw and top > 0 and after_tokens >= KV_RESIDENT_SHARE * top:
        run.resident[label] = (after_tokens, top)
    need_at_peak = peak[1] if peak else None
    figures = reuse.reuse_figures(outcome.records, baseline, after)
    share = reuse.reuse_share(figures, recording.engine or "")
    point.extra.update(
        usage_cached_tokens_mean=(figures["responses_cached_tokens"] / figures["responses_with_cached"])
        if figures["responses_with_cached"]
        else None,
        # the KV the requests in flight at the peak need with no sharing (capped by the pool), and the
        # least caching can hold for them (the prefix once): the chart's lines and the scoring's bound
        own_allocation_tokens=need_at_peak["tokens"] if need_at_peak else None,
        shared_once_tokens=_shared_once(need_at_peak, run.prefix),
        kv_need_at_peak=need_at_peak,
        kv_tokens_peak=max(added) if added else None,
        kv_tokens_held=_held(added),
        kv_token_samples=len(added),
        kv_tokens_source=source,
        kv_pool_tokens=pool,
        kv_pool_source="engine metrics" if stated else ("params.kv_capacity_tokens" if pool else None),
        kv_baseline_ratio=(baseline or {}).get("kv_usage_ratio"),
        kv_baseline_tokens=base_tokens,
        kv_tokens_peak_raw=top if raw else None,
        kv_tokens_after=after_tokens if source else None,
        kv_over_need_held=_held(ratios),
        cache_prompt=session.target.cache_prompt,
        reuse=figures,
        reuse_share=share["share"] if share else None,
        reuse_source=share["source"] if share else None,
        reuse_detail=share["detail"] if share else None,
        reuse_detail_message=to_json(share["message"]) if share else None,
    )
    return point


def _shared_once(need: dict[str, Any] | None, prefix: int) -> float | None:
    """The least the requests in flight can hold with the prefix shared: their need less every copy of
    the prefix but one."""
    if not need or not need["requests"]:
        return None
    return max(float(need["tokens"]) - (need["requests"] - 1) * prefix, 0.0)


def _prefix_result(run: _PrefixRun, target: Target) -> NormalizedResult:
    """The verdicts, the observed sentence and the result of the finished (or cancelled) test."""
    off = run.points[1] if len(run.points) == 2 else None
    verdicts = _prefix_verdicts(run, target.cache_model)
    observed = _prefix_observed(run, target.cache_model)
    sessions = run.sessions
    result = build_result(
        "prefix_reuse", sessions[0], run.params, run.points, run.outcomes, verdicts, run.notes, run.partial
    )
    if any(s.simulated for s in sessions):  # the caching-off endpoint counts too: nothing simulated passes as measured
        result.evidence = SIMULATED
    result.metadata["observed"] = observed
    if observed.get("saving_ratio") is not None:
        result.metadata["derived"] = {"prefix_saving_ratio": observed["saving_ratio"]}
        # token counts, and KV against the requests actually in flight, do not depend on the client's pace
        result.metadata["pace_independent"] = ["prefix_saving_ratio"]
    if off is None:
        result.add_note(Message(NO_OFF_RUN_NOTE))
    for point in run.points:
        if not (point.extra.get("cache_state") or {}).get("reset"):
            name = RUN_NAMES.get(point.label, point.label)
            result.add_note(Message(NOT_EMPTIED, {"run": name, "method": reset_method(point.extra["cache_state"])}))
    if len(sessions) == 2:
        result.metadata["off_target"] = sessions[1].target.describe()
        for name, values in sessions[1].metrics.recording.series.items():
            result.timeseries[f"prefix_off.{name}"] = values
    return result


def _prefix_verdicts(run: _PrefixRun, cache_model: CacheModel | None) -> list[dict[str, Any]]:
    """Errors, the budget of the caching-on run, the two memory verdicts (not applicable where the
    engine's cache model holds a prefix per slot, unjudged where it keeps KV resident) and the reuse."""
    on = run.points[0]
    off = run.points[1] if len(run.points) == 2 else None
    verdicts = [errors_verdict(run.points)]
    verdicts += budget_verdicts(on, run.params, label="prefix_on", records=run.outcomes[0].records)
    memory = [
        _kv_vs_need(run.ratios.get("prefix_on", []), on),
        _kv_vs_off(run.samples.get("prefix_on", []), run.samples.get("prefix_off"), off is not None),
    ]
    if cache_model is not None and not cache_model.shares_prefix:
        # per-slot prompt caches (llama.cpp): each slot holds its own copy, nothing to save in memory
        verdicts.extend(
            not_applicable(v["name"], cache_model.per_slot_prefix_reason(), cache_model.source, detail_message_of(v))
            for v in memory
        )
    else:
        verdicts.extend(_unjudged_when_resident(verdict, run.resident) for verdict in memory)
    verdicts.append(_prefix_reused(run))
    return verdicts


def _unjudged_when_resident(verdict: dict[str, Any], resident: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """A memory verdict an engine's resident KV leaves unjudgeable: inconclusive, saying why. Where
    finished requests stay cached (llama.cpp's slots), a load that reuses a slot overwrites what it
    held, so "the KV the load added" can read far below what the load needed; a pass on it would
    credit a saving never observed."""
    if not resident or verdict["status"] not in (PASS, FAIL, INCONCLUSIVE):
        return verdict
    held = Join(
        (
            Message(STILL_HELD, {"run": RUN_NAMES.get(label, label), "after": f"{after:.0f}", "peak": f"{peak:.0f}"})
            for label, (after, peak) in resident.items()
        ),
        CLAUSE_SEPARATOR,
    )
    figures = detail_message_of(verdict)
    if isinstance(figures, Message) and figures.msgid == STRADDLES_THRESHOLD:
        figures = figures.params["detail"]
    elif isinstance(figures, str):
        figures = figures.removesuffix(STRADDLES)
    detail = Message(RESIDENT_NOT_JUDGED, {"detail": figures, "held": held})
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


def need_text(need: dict[str, Any] | None) -> str:
    """The no-sharing need at the peak with its inputs, in words."""
    return str(need_message(need))


def need_message(need: dict[str, Any] | None) -> Message:
    """The no-sharing need at the peak with its inputs, as a message."""
    if not need:
        return Message(NO_REQUEST_IN_FLIGHT)
    figures = {
        "tokens": f"{need['tokens']:,.0f}",
        "requests": need["requests"],
        "prompts": f"{need['prompt_tokens']:,}",
        "outputs": f"{need['output_tokens']:,}",
    }
    if need.get("capped_by_pool"):
        return Message(NEED_CAPPED, {**figures, "pool": f"{need['pool_tokens']:,.0f}"})
    return Message(NEED, figures)


def _ci(template: str, interval: Any) -> Message | str:
    return Message(template, {"low": f"{interval[0]:.2f}", "high": f"{interval[1]:.2f}"}) if interval else ""


def _kv_vs_need(ratios: list[float], on: LoadPoint) -> dict[str, Any]:
    """Caching on: the KV held against what the requests in flight need without sharing, per sample."""
    name, limit = "kv_below_theory", PREFIX_MEMORY_MAX_SHARE
    extra = on.extra
    if not extra.get("kv_tokens_source"):
        return make_verdict(
            name,
            None,
            Message(NO_KV_COUNT),
            None,
            limit,
            0,
        )
    if len(ratios) < MIN_KV_SAMPLES:
        return make_verdict(
            name,
            None,
            Message(FEW_KV_SAMPLES, {"n": len(ratios), "min": MIN_KV_SAMPLES}),
            _held(ratios),
            limit,
            len(ratios),
            INSUFFICIENT_DATA,
        )
    held = _held(ratios)
    assert held is not None
    interval = percentile_interval(ratios, PREFIX_HELD_PERCENTILE)
    status = compare(held, interval, limit)
    detail = Message(
        KV_VS_NEED,
        {
            "held": f"{held:.2f}",
            "q": PREFIX_HELD_PERCENTILE,
            "n": len(ratios),
            "ci": _ci(CI_AFTER_COMMA, interval),
            "peak": f"{extra.get('kv_tokens_peak') or 0:,.0f}",
            "need": need_message(extra.get("kv_need_at_peak")),
            "limit": f"{limit:.2f}",
        },
    )
    if status == INCONCLUSIVE:
        detail = Message(STRADDLES_THRESHOLD, {"detail": detail})
    return make_verdict(name, None, detail, held, limit, len(ratios), status, interval)


def _kv_vs_off(on: list[float], off: list[float] | None, off_ran: bool) -> dict[str, Any]:
    name, limit = "kv_below_prefix_off", PREFIX_MEMORY_MAX_SHARE
    if not off_ran:
        return make_verdict(
            name,
            None,
            Message(NO_OFF_RUN),
            None,
            limit,
            0,
            NOT_EXERCISED,
        )
    if not on or not off:
        return make_verdict(name, None, Message(NO_KV_COUNT_ON_ONE), None, limit, 0)
    held_on, held_off = _held(on), _held(off)
    assert held_on is not None and held_off is not None
    n = min(len(on), len(off))
    if n < MIN_KV_SAMPLES or held_off <= 0:
        return make_verdict(
            name,
            None,
            Message(
                FEW_ON_OFF_SAMPLES,
                {"on": len(on), "off": len(off), "held_off": f"{held_off:.0f}", "min": MIN_KV_SAMPLES},
            ),
            None if held_off <= 0 else held_on / held_off,
            limit,
            n,
            INSUFFICIENT_DATA,
        )
    ratio = held_on / held_off
    interval = ratio_interval(on, off, PREFIX_HELD_PERCENTILE)
    status = compare(ratio, interval, limit)
    detail = Message(
        KV_VS_OFF,
        {
            "on": f"{held_on:.0f}",
            "off": f"{held_off:.0f}",
            "q": PREFIX_HELD_PERCENTILE,
            "n_on": len(on),
            "n_off": len(off),
            "peak_on": f"{max(on):.0f}",
            "peak_off": f"{max(off):.0f}",
            "ratio": f"{ratio:.2f}",
            "ci": _ci(CI_IN_BRACKETS, interval),
            "limit": f"{limit:.2f}",
        },
    )
    if status == INCONCLUSIVE:
        detail = Message(STRADDLES_THRESHOLD, {"detail": detail})
    return make_verdict(name, None, detail, ratio, limit, n, status, interval)


def _prefix_reused(run: _PrefixRun) -> dict[str, Any]:
    """The share of the prompt the engine took from its cache with caching on, by the strongest
    evidence it gives (benchmarks.harness.reuse), against half the prompt's shared share; timing
    (TTFT on against off) only when the engine reports nothing."""
    on = run.points[0]
    shared = run.prefix / (run.prefix + run.suffix)
    needed = PREFIX_REUSE_MIN_SHARE * shared  # the one threshold: reported, stated and applied
    share = on.extra.get("reuse_share")
    if share is not None:
        return verdict(
            "prefix_reused",
            PASS if share >= needed else FAIL,
            Message(
                REUSED,
                {
                    "share": f"{share:.0%}",
                    "evidence": load(on.extra.get("reuse_detail_message")) or on.extra["reuse_detail"],
                    "needed": f"{needed:.3g}",
                    "min": f"{PREFIX_REUSE_MIN_SHARE:.0%}",
                    "shared": f"{shared:.2f}",
                },
            ),
            share,
            needed,
            on.requests_completed,
            source=on.extra.get("reuse_source"),
        )
    return _reused_by_timing(run)


def _reused_by_timing(run: _PrefixRun) -> dict[str, Any]:
    """No cache figure from the engine: TTFT p50 with caching on against off (the prefill skipped)."""
    limit = reuse.REUSED_TTFT_RATIO
    if len(run.outcomes) < 2:
        return verdict(
            "prefix_reused",
            NOT_JUDGED,
            Message(NO_TIMING),
            None,
            limit,
            0,
        )
    on_ttft, off_ttft = (
        [r.ttft_ms for r in outcome.records if r.ok and r.ttft_ms is not None] for outcome in run.outcomes[:2]
    )
    n = min(len(on_ttft), len(off_ttft))
    if n < MIN_SAMPLES:
        return verdict(
            "prefix_reused",
            INSUFFICIENT_DATA,
            Message(FEW_TIMINGS, {"n": n, "min": MIN_SAMPLES}),
            None,
            limit,
            n,
            source=reuse.TIMING,
        )
    ratio = float(np.median(on_ttft) / np.median(off_ttft)) if np.median(off_ttft) > 0 else None
    interval = ratio_interval(on_ttft, off_ttft, 50)
    status = INCONCLUSIVE if ratio is None else compare(ratio, interval, limit)
    bound = run.points[0].client_bound or run.points[1].client_bound
    detail = Message(
        BY_TIMING,
        {
            "on": f"{np.median(on_ttft):.0f}",
            "off": f"{np.median(off_ttft):.0f}",
            "ratio": Message(ON_OFF_RATIO, {"ratio": f"{ratio:.2f}"}) if ratio is not None else "",
            "ci": Message(CI_AND_N, {"low": f"{interval[0]:.2f}", "high": f"{interval[1]:.2f}", "n": n})
            if interval
            else Message(N_ONLY, {"n": n}),
            "limit": f"{limit:.2f}",
        },
    )
    if bound and status in (PASS, FAIL):
        status, detail = INCONCLUSIVE, Message(TIMING_CLIENT_BOUND, {"detail": detail})
    return verdict("prefix_reused", status, detail, ratio, limit, n, interval, source=reuse.TIMING)


def _prefix_observed(run: _PrefixRun, cache_model: CacheModel | None) -> dict[str, Any]:
    """The figures of the prefix test and its one-sentence summary (metadata["observed"])."""
    on = run.points[0]
    off = run.points[1] if len(run.points) == 2 else None
    per_slot = cache_model is not None and not cache_model.shares_prefix
    ttft_ratio = ttft_interval = None
    if off is not None and on.ttft_ms.p50 and off.ttft_ms.p50:
        ttft_ratio = on.ttft_ms.p50 / off.ttft_ms.p50
        on_ttft, off_ttft = (
            [r.ttft_ms for r in outcome.records if r.ok and r.ttft_ms is not None] for outcome in run.outcomes[:2]
        )
        ttft_interval = ratio_interval(on_ttft, off_ttft, 50)
        on.extra["ttft_p50_on_over_off"] = ttft_ratio
    saving = _compute_saving(run) if per_slot else _memory_saving(run)
    methods = {
        str(reset_method(p.extra.get("cache_state"))): reset_method(p.extra.get("cache_state")) for p in run.points
    }
    states = sorted(methods)
    figures = {
        "off_run": off is not None,
        "per_slot_cache": per_slot,
        "cache_state": "; ".join(states),
        "cache_state_message": Join([methods[state] for state in states], CLAUSE_SEPARATOR),
        "kv_peak_on_tokens": on.extra.get("kv_tokens_peak"),
        "kv_peak_off_tokens": off.extra.get("kv_tokens_peak") if off is not None else None,
        "kv_held_on_tokens": on.extra.get("kv_tokens_held"),
        "kv_held_off_tokens": off.extra.get("kv_tokens_held") if off is not None else None,
        "kv_over_need_on": on.extra.get("kv_over_need_held"),
        "kv_over_need_off": off.extra.get("kv_over_need_held") if off is not None else None,
        "need_at_peak_on": on.extra.get("kv_need_at_peak"),
        "need_at_peak_off": off.extra.get("kv_need_at_peak") if off is not None else None,
        "theory_own_allocation_tokens": on.extra.get("own_allocation_tokens"),
        "theory_shared_once_tokens": on.extra.get("shared_once_tokens"),
        "reuse_on": on.extra.get("reuse_share"),
        "reuse_off": off.extra.get("reuse_share") if off is not None else None,
        "reuse_source": on.extra.get("reuse_source"),
        "prompt_tokens_sent_on": on.extra["reuse"]["prompt_tokens_sent"],
        "prompt_tokens_processed_on": on.extra["reuse"]["prompt_tokens_processed"],
        "prompt_tokens_sent_off": off.extra["reuse"]["prompt_tokens_sent"] if off is not None else None,
        "prompt_tokens_processed_off": off.extra["reuse"]["prompt_tokens_processed"] if off is not None else None,
        **saving,
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
    line = _observed_line(figures, cache_model)
    del figures["cache_state_message"]  # in the line's message; the figures keep the English text
    figures["line"], figures["line_message"] = str(line), to_json(line)
    return figures


def _memory_saving(run: _PrefixRun) -> dict[str, Any]:
    """The KV caching saved where requests share a prefix: 1 - (on / its need) / (off / its need), each
    against what its requests in flight need (so the two loads compare however many were in flight),
    or 1 - on / its need without an off run; its best (the prefix held once) and the share of it."""
    on = run.points[0]
    off = run.points[1] if len(run.points) == 2 else None
    on_ratio = on.extra.get("kv_over_need_held")
    off_ratio = off.extra.get("kv_over_need_held") if off is not None else None
    need, once = on.extra.get("own_allocation_tokens"), on.extra.get("shared_once_tokens")
    if on_ratio is None:
        return {"memory_saving": None, "memory_saving_basis": None, "theoretical_saving": None, "saving_ratio": None}
    basis = "measured_off" if off_ratio else "in_flight_need"
    saving = 1.0 - on_ratio / off_ratio if off_ratio else 1.0 - on_ratio
    theoretical = 1.0 - once / need if need and once is not None else None
    ratio = max(0.0, min(1.0, saving / theoretical)) if theoretical and theoretical > 0 else None
    return {
        "memory_saving": saving,
        "memory_saving_basis": basis,
        "theoretical_saving": theoretical,
        "saving_ratio": ratio,
        "saving_kind": "memory",
    }


def _compute_saving(run: _PrefixRun) -> dict[str, Any]:
    """The prefill caching saved on a per-slot engine: prompt tokens taken from the cache with caching
    on less with it off (0 without an off run); its best is the prompt's shared share."""
    on = run.points[0]
    off = run.points[1] if len(run.points) == 2 else None
    reused_on = on.extra.get("reuse_share")
    reused_off = (off.extra.get("reuse_share") if off is not None else None) or 0.0
    shared = run.prefix / (run.prefix + run.suffix)
    if reused_on is None:
        return {"compute_saving": None, "theoretical_saving": shared, "saving_ratio": None, "saving_kind": "compute"}
    saving = reused_on - reused_off
    return {
        "compute_saving": saving,
        "memory_saving": None,
        "memory_saving_basis": None,
        "theoretical_saving": shared,
        "saving_ratio": max(0.0, min(1.0, saving / shared)) if shared > 0 else None,
        "saving_kind": "compute",
    }


def _tokens(value: Any) -> str | Message:
    return figure_or_na(value, "{:,.0f}")


def _share(value: Any) -> str | Message:
    return figure_or_na(value, "{:.0%}")


def _observed_line(seen: dict[str, Any], cache_model: CacheModel | None) -> Message:
    """One sentence that explains the on/off comparison: memory against the in-flight need where
    requests share a prefix, prefill compute where the engine caches per slot."""
    if seen["per_slot_cache"]:
        assert cache_model is not None
        line = Message(
            PER_SLOT_ON,
            {
                "engine": cache_model.name,
                "processed": _tokens(seen["prompt_tokens_processed_on"]),
                "sent": _tokens(seen["prompt_tokens_sent_on"]),
                "share": _share(seen["reuse_on"]),
            },
        )
        if seen["off_run"]:
            line = Message(
                PER_SLOT_OFF,
                {
                    "line": line,
                    "processed": _tokens(seen["prompt_tokens_processed_off"]),
                    "sent": _tokens(seen["prompt_tokens_sent_off"]),
                    "share": _share(seen["reuse_off"]),
                },
            )
        if seen.get("compute_saving") is not None:
            line = Message(COMPUTE_SAVED, {"line": line, "saving": f"{seen['compute_saving']:.0%}"})
    else:
        need = seen.get("need_at_peak_on") or {}
        line = Message(
            HELD_OF_NEED,
            {
                "share": _share(seen["kv_over_need_on"]),
                "peak": _tokens(seen["kv_peak_on_tokens"]),
                "need": need_message(need or None),
            },
        )
        if seen["off_run"]:
            line = Message(HELD_OF_NEED_OFF, {"line": line, "share": _share(seen["kv_over_need_off"])})
        if seen.get("memory_saving") is not None:
            saving = {"line": line, "saving": f"{seen['memory_saving']:.0%}"}
            line = (
                Message(MEMORY_SAVED_AT_MOST, {**saving, "best": f"{seen['theoretical_saving']:.0%}"})
                if seen.get("theoretical_saving")
                else Message(MEMORY_SAVED, saving)
            )
        if seen.get("reuse_on") is not None:
            line = Message(FROM_CACHE, {"line": line, "share": _share(seen["reuse_on"])})
    figures = {
        "line": line,
        "ttft": ms_or_na(seen["ttft_p50_on_ms"]),
        "rate": _tokens(seen["throughput_on_tok_s"]),
        "n": seen["requests_on"] or 0,
        "state": seen.get("cache_state_message") or seen["cache_state"],
    }
    if not seen["off_run"]:
        return Message(OBSERVED_ON, figures)
    return Message(
        OBSERVED_ON_OFF,
        {
            **figures,
            "ttft_off": ms_or_na(seen["ttft_p50_off_ms"]),
            "rate_off": _tokens(seen["throughput_off_tok_s"]),
            "n_off": seen["requests_off"] or 0,
        },
    )


SPEC = TestSpec.of(suite_row.TEST, run_prefix_reuse)
