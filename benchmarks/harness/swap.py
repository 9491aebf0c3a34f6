"""Pure parts of the swap-out and recovery test (workloads.run_swap_recovery): how much pressure
evicts the idle sessions, whether an eviction or offload was observed, and whether a resumed
session continued as the eviction-free reference did.

No I/O here: the runner gathers requests and metric snapshots, these functions judge them, so
the rules are unit-tested without an engine.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Sequence

import numpy as np

from benchmarks.verdicts import MIN_SAMPLES, ratio_interval, two_sample_interval
from selection.domain.messages import Message
from selection.domain.messages import marked as _

# the evidence of an eviction or offload (`observe_eviction`'s `how`), as message templates
CACHED_TOKENS_FELL = _(
    "cached tokens (%(via)s): %(evicted)s of %(resumed)s resumed sessions got under %(share)s of the warm "
    "sessions' %(warm)s"
)
VIA_TIMINGS = Message("llama.cpp timings.prompt_n", context="cached tokens source")
VIA_USAGE = Message("usage cached_tokens", context="cached tokens source")
HIT_RATIO_FELL = _("prefix-cache hit ratio %(resume)s on resume vs %(warm)s warm")
EVICTION_COUNTER = _("the engine's eviction counter +%(tokens)s tokens while the sessions idled")
OFFLOAD_COUNTER = _("offload/swap-out counter +%(value)s")
LOAD_BACK = _("load back from the CPU tier +%(value)s during the resume")
CPU_TIER_USAGE = _("CPU-tier KV usage up to %(usage)s")
PREFILLED_AGAIN = _(
    "resume TTFT p50 %(resumed)s ms is %(times)sx the warm %(warm)s ms (95%% CI %(low)s-%(high)sx, n=%(n)s)%(like)s: "
    "the history was prefilled again (the engine reports no cached tokens or prefix hits)"
)
LIKE_RECOMPUTE = _(", like the recompute's %(recomputed)s ms")
RESUME_RECOMPUTED = _("%(evidence)s; the resume recomputed %(recomputed)s of %(prompt)s prompt tokens")

# a resumed session whose cached tokens fall under this share of the warm sessions' counts as evicted
EVICTED_CACHED_SHARE = 0.5
# the resume phase's prefix-hit ratio under this share of the warm phase's: evictions seen by the metric
EVICTED_HIT_RATIO_SHARE = 0.5
# without cache metrics: a resume this many times the warm TTFT (the whole interval), and near the
# recompute's, means the history was prefilled again
RECOMPUTED_OVER_WARM = 1.5


def pressure_plan(
    capacity_tokens: int | None,
    idle_kv_tokens: int,
    pressure_factor: float,
    request_tokens: int,
    max_requests: int,
) -> dict[str, Any]:
    """How many unique pressure requests push `pressure_factor` x the KV capacity through the pool.

    With prefix caching, finished requests stay cached until evicted (LRU), so it is the volume of
    new tokens, not the concurrency, that pushes the idle sessions' blocks out: more than the
    whole pool must pass through while they idle. Without a capacity the pressure runs for the
    idle time only, and the eviction verdict says whether it was enough."""
    if not capacity_tokens:
        return {"requests": None, "tokens": None, "idle_kv_share_of_capacity": None}
    volume = int(capacity_tokens * pressure_factor)
    requests = min(max(math.ceil(volume / max(request_tokens, 1)), 1), max_requests)
    return {
        "requests": requests,
        "tokens": requests * request_tokens,
        "idle_kv_share_of_capacity": idle_kv_tokens / capacity_tokens,
        "capped": requests == max_requests and requests * request_tokens < volume,
    }


def compare_continuation(reference: str, observed: str, tolerance_token: int) -> dict[str, Any]:
    """Token-by-token comparison of a resumed session's output with the eviction-free reference.

    Whitespace tokens (the simulator's tokens are words; real engines tokenise text differently,
    words are what both sides share). `ok` is False on garbage (empty output, one token repeated)
    or on a divergence before `tolerance_token`: greedy decoding on real GPUs is not
    bit-deterministic (batch shapes change reduction order), so a late divergence is reported,
    not failed."""
    ref, obs = reference.split(), observed.split()
    first = next((i for i, (a, b) in enumerate(zip(ref, obs, strict=False)) if a != b), None)
    if first is None and len(ref) != len(obs):
        first = min(len(ref), len(obs))
    longest = max(len(ref), len(obs), 1)
    matching = sum(1 for a, b in zip(ref, obs, strict=False) if a == b) / longest
    garbage = None
    if not obs:
        garbage = "empty output"
    elif len(obs) >= 4 and len(set(obs)) == 1:
        garbage = f"one token repeated ({obs[0]!r} x{len(obs)})"
    return {
        "identical": first is None,
        "first_divergence": first,
        "matching_fraction": matching,
        "garbage": garbage,
        "tokens": len(obs),
        "ok": garbage is None and (first is None or first >= tolerance_token),
    }


def _median(values: Sequence[float | None]) -> float | None:
    data = [float(v) for v in values if v is not None]
    return statistics.median(data) if data else None


def _delta(before: dict[str, float] | None, after: dict[str, float] | None, name: str) -> float | None:
    if not before or not after or before.get(name) is None or after.get(name) is None:
        return None
    return after[name] - before[name]


def _hit_ratio(before: dict[str, float] | None, after: dict[str, float] | None) -> float | None:
    hits, queries = _delta(before, after, "prefix_hits"), _delta(before, after, "prefix_queries")
    if hits is None or not queries or queries <= 0:
        return None
    return hits / queries


def observe_eviction(
    warm_cached: Sequence[int | None],
    resumed_cached: Sequence[int | None],
    snapshots: dict[str, dict[str, float] | None],
    cpu_usage_max: float | None = None,
    ttft_ms: dict[str, Sequence[float]] | None = None,
    cached_source: str | None = None,
    resumed_prompts: Sequence[int | None] = (),
) -> dict[str, Any]:
    """Was an idle session's KV evicted or offloaded? Evidence, strongest first:

    - cached tokens (usage.prompt_tokens_details.cached_tokens, or llama.cpp's `timings`: the
      prompt less the `prompt_n` it processed; `cached_source` says which): a resumed session got far
      fewer than the warm sessions of the same history length (`resumed_prompts`, their prompt
      tokens, give how much of the resume was recomputed);
    - the prefix-cache hit ratio of the resume phase fell far below the warm phase's;
    - KV moved to a CPU/offload tier (offload store/load counters, CPU-tier usage), or dropped by the
      engine's own eviction counter (SGLang's `evicted_tokens`).
    - without either: the resume TTFT (`ttft_ms` {warm, resume, recompute}) is over
      RECOMPUTED_OVER_WARM x the warm one, its whole interval, and at least 0.8 x the recompute's
      (at least MIN_SAMPLES each): the history was prefilled again.
    Preemptions are reported but are no evidence on their own: they preempt running requests, not
    the idle sessions' cache. `snapshots` holds the metric values at warm_start, warm_end,
    pressure_start, resume_start and resume_end (None where the engine exports no metrics)."""
    how: list[Message] = []
    sources: list[str] = []  # what judged each piece of evidence, in the order of `how`
    warm_median = _median(warm_cached)
    resumed_known = [c for c in resumed_cached if c is not None]
    evicted_sessions = None
    if warm_median is not None and warm_median > 0 and resumed_known:
        evicted_sessions = sum(1 for c in resumed_known if c < EVICTED_CACHED_SHARE * warm_median)
        if evicted_sessions:
            sources.append("responses")
            via = VIA_TIMINGS if cached_source == "timings" else VIA_USAGE
            figures = {"via": via, "evicted": evicted_sessions, "resumed": len(resumed_known)}
            figures |= {"share": f"{EVICTED_CACHED_SHARE:.0%}", "warm": f"{warm_median:.0f}"}
            how.append(Message(CACHED_TOKENS_FELL, figures))
    warm_ratio = _hit_ratio(snapshots.get("warm_start"), snapshots.get("warm_end"))
    resume_ratio = _hit_ratio(snapshots.get("resume_start"), snapshots.get("resume_end"))
    if warm_ratio and resume_ratio is not None and resume_ratio < EVICTED_HIT_RATIO_SHARE * warm_ratio:
        how.append(Message(HIT_RATIO_FELL, {"resume": f"{resume_ratio:.2f}", "warm": f"{warm_ratio:.2f}"}))
        sources.append("engine_counters")
    dropped = _delta(snapshots.get("pressure_start"), snapshots.get("resume_start"), "evicted")
    if dropped:
        how.append(Message(EVICTION_COUNTER, {"tokens": f"{dropped:,.0f}"}))
        sources.append("engine_counters")
    store = _delta(snapshots.get("pressure_start"), snapshots.get("resume_end"), "swap_out")
    load = _delta(snapshots.get("resume_start"), snapshots.get("resume_end"), "swap_in")
    if store:
        how.append(Message(OFFLOAD_COUNTER, {"value": f"{store:.3g}"}))
        sources.append("offload_counters")
    if load:
        how.append(Message(LOAD_BACK, {"value": f"{load:.3g}"}))
        sources.append("offload_counters")
    if cpu_usage_max:
        how.append(Message(CPU_TIER_USAGE, {"usage": f"{cpu_usage_max:.3f}"}))
        sources.append("offload_counters")
    metric_evidence = evicted_sessions is not None or warm_ratio is not None
    ttft = ttft_ms or {}
    warm_t, resume_t, recompute_t = ttft.get("warm") or [], ttft.get("resume") or [], ttft.get("recompute") or []
    if not how and not metric_evidence and min(len(warm_t), len(resume_t)) >= MIN_SAMPLES:
        over = ratio_interval(resume_t, warm_t)
        resumed, warm, recomputed = _median(resume_t), _median(warm_t), _median(recompute_t)
        if over and warm and over[0] >= RECOMPUTED_OVER_WARM and (not recomputed or resumed >= 0.8 * recomputed):
            figures = {"resumed": f"{resumed:.0f}", "times": f"{resumed / warm:.1f}", "warm": f"{warm:.0f}"}
            figures |= {"low": f"{over[0]:.1f}", "high": f"{over[1]:.1f}", "n": len(resume_t)}
            like = Message(LIKE_RECOMPUTE, {"recomputed": f"{recomputed:.0f}"}) if recomputed else ""
            how.append(Message(PREFILLED_AGAIN, {**figures, "like": like}))
            sources.append("timing")
    preemptions = _delta(snapshots.get("pressure_start"), snapshots.get("resume_end"), "preemptions")
    offloaded = bool(store or load or cpu_usage_max)
    # the sessions whose KV left the GPU for the offload tier and came back: the engine stored KV out
    # while they idled and loaded it back while they resumed, and they resumed with their cache (not
    # the dropped ones). Not counted per session by the engine: the counters moving in those two
    # windows, and each such session's cached tokens, are the evidence.
    offloaded_sessions = None
    if store and load and warm_median and resumed_known:
        offloaded_sessions = sum(1 for c in resumed_known if c >= EVICTED_CACHED_SHARE * warm_median)
    pairs = [(c, p) for c, p in zip(resumed_cached, resumed_prompts, strict=False) if c is not None and p]
    prompt_total = sum(p for _c, p in pairs)
    recomputed = sum(max(p - c, 0) for c, p in pairs)
    if evicted_sessions and prompt_total:
        figures = {"evidence": how[0], "recomputed": f"{recomputed:,}", "prompt": f"{prompt_total:,}"}
        how[0] = Message(RESUME_RECOMPUTED, figures)
    return {
        "observed": bool(how),
        "how": [str(evidence) for evidence in how],  # English (the API, the CLI); how_messages for pages
        "how_messages": [evidence.to_dict() for evidence in how],
        # what judged it, strongest first: the responses' cached tokens, the engine's own counters, its
        # offload counters; timing only when the engine reports none of them
        "judged_by": sorted(set(sources), key=sources.index),
        "cached_tokens_source": cached_source,
        "resume_prompt_tokens": prompt_total or None,
        "resume_recomputed_tokens": recomputed if prompt_total else None,
        "offloaded": offloaded,
        "evicted_sessions": evicted_sessions,  # released: dropped from the GPU, recomputed on resume
        "offloaded_sessions": offloaded_sessions,  # moved to the offload tier and loaded back on resume
        "sessions": len(resumed_cached),
        "cached_tokens_warm_p50": warm_median,
        "cached_tokens_resume_p50": _median(resumed_cached),
        "prefix_hit_ratio_warm": warm_ratio,
        "prefix_hit_ratio_resume": resume_ratio,
        "offload_store_delta": store,
        "offload_load_delta": load,
        "cpu_kv_usage_max": cpu_usage_max,
        "preemptions": preemptions,
        "cache_reuse_seen": None if warm_median is None else warm_median > 0,
    }


def median_difference(top: Sequence[float], bottom: Sequence[float]) -> float | None:
    if not top or not bottom:
        return None
    return statistics.median(top) - statistics.median(bottom)


def median_ratio(top: Sequence[float], bottom: Sequence[float]) -> float | None:
    if not top or not bottom or not statistics.median(bottom):
        return None
    return statistics.median(top) / statistics.median(bottom)


def difference_interval(top: Sequence[float], bottom: Sequence[float]) -> list[float] | None:
    """Bootstrap interval of median(top) - median(bottom), both resampled (fixed seed, as verdicts)."""
    interval = two_sample_interval(top, bottom, lambda sample: np.median(sample, axis=1), np.subtract)
    return None if interval is None else list(interval)


def capacity_from_usage(used_tokens: Sequence[Sequence[float]], usage_ratio: Sequence[Sequence[float]]) -> int | None:
    """The KV pool in tokens from an engine that states neither, but scrapes both its used tokens
    and its usage ratio (llama.cpp, SGLang): used / ratio of the same scrapes, median over those
    with the pool at least 1% used."""
    ratios = {t: v for t, v in usage_ratio}
    estimates = [used / ratios[t] for t, used in used_tokens if ratios.get(t, 0) >= 0.01 and used > 0]
    return int(statistics.median(estimates)) if estimates else None
