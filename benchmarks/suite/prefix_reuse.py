"""Test 4, prefix reuse: its row of the suite (its run: `benchmarks.harness.workloads.prefix_reuse`)."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from benchmarks.harness.estimates import Load, number, request_seconds
from benchmarks.suite.base import CandidateFacts, Figure, PointFacts, PointRow, RunFacts, ValidationTest
from benchmarks.suite.params import BUDGET_PARAMS, ParamSpec, budget_params, constraint_value
from selection.domain.claims import Claim
from selection.domain.messages import marked as _

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


def plan_prefix_reuse(constraints: dict[str, Any] | None = None, facts: CandidateFacts | None = None) -> dict[str, Any]:
    avg_input = int(constraint_value(constraints, "avg_input_tokens", 1024))
    return {
        "requests": 256,
        "concurrency": min(int(constraint_value(constraints, "peak_concurrency", 32)), 256),
        "prefix_tokens": max(int(avg_input * 0.75), 16),
        "suffix_tokens": max(avg_input - int(avg_input * 0.75), 8),
        "output_tokens": int(constraint_value(constraints, "avg_output_tokens", 64)),
        # the candidate's KV capacity, for the "own allocation" comparison (None: the engine's metrics)
        "kv_capacity_tokens": facts.kv_capacity_tokens if facts else None,
        **budget_params(constraints),
    }


def indicators(run: RunFacts) -> dict[str, float]:
    """prefix_saving_ratio = the saving / its best, as the harness writes it into
    `metadata["derived"]`: KV memory against what the requests in flight need without sharing where
    requests share a prefix, prefill compute (prompt tokens from the cache, by the engine's own
    counters) where the engine caches per slot (llama.cpp). For runs before that, derived here: 1 -
    peak KV with caching on / peak KV with caching off (without an off run, against the theory of
    every request allocating its own prompt) over the theoretical saving (the shared prefix held
    once). Never a hit ratio on a prefix-sharing engine: hits without a smaller footprint save no
    memory."""
    saving = prefix_memory_saving(run.points, run.params)
    if saving is None:
        return {}
    return {"prefix_saving_ratio": max(0.0, min(1.0, saving["measured"] / saving["theoretical"]))}


def prefix_memory_saving(points: Mapping[str, PointFacts], params: Mapping[str, Any]) -> dict[str, Any] | None:
    """{measured, theoretical, basis} of a prefix-reuse run: measured = 1 - peak KV on / peak KV off
    (basis "measured_off"), or / the every-request-allocates-its-own theory (basis "theory") when no
    off run was measured; theoretical = 1 - shared prefix held once / theory. None without a peak."""
    on, off = points.get("prefix_on"), points.get("prefix_off")
    extra = (on.extra or {}) if on is not None else {}
    peak_on, own = extra.get("kv_tokens_peak"), extra.get("own_allocation_tokens")
    if peak_on is None or not own:
        return None
    peak_off = (off.extra or {}).get("kv_tokens_peak") if off is not None else None
    shared_once = extra.get("shared_once_tokens")
    if shared_once is None:
        in_flight = min(int(params.get("concurrency") or 1), int(params.get("requests") or 1))
        shared_once = int(params.get("prefix_tokens") or 0) + in_flight * (
            int(params.get("suffix_tokens") or 0) + int(params.get("output_tokens") or 0)
        )
    theoretical = 1.0 - float(shared_once) / float(own)
    if theoretical <= 0:
        return None
    reference = float(peak_off) if peak_off else float(own)
    return {
        "measured": 1.0 - float(peak_on) / reference,
        "theoretical": theoretical,
        "basis": "measured_off" if peak_off else "theory",
    }


SHARES = {  # what the engine's own counters show, as a percentage
    "reuse_on": _("prompt tokens from the cache, prefix caching on"),
    "reuse_off": _("prompt tokens from the cache, prefix caching off"),
    "compute_saving": _("prefill compute saved with prefix caching"),
}


def thresholds(points: Sequence[PointRow], metadata: Mapping[str, Any], planned: Mapping[str, Any]) -> dict[str, Any]:
    """The record's validated prefix-cache hit ratio: caching on's (its first `prefix_on` point)."""
    on = next((p for p in points if p.get("label") == "prefix_on"), None)
    ratio = (on.get("extra") or {}).get("prefix_hit_ratio") if on is not None else None
    return {"prefix_hit_ratio_validated": ratio} if ratio else {}


def figures(points: Sequence[PointRow], metadata: Mapping[str, Any]) -> list[Figure]:
    """Peak KV tokens and TTFT with caching on and off (off "—" when not run), their ratio and the
    savings the test measured."""
    by_label = {str(p.get("label") or ""): p for p in points}
    seen = metadata.get("observed") if isinstance(metadata.get("observed"), Mapping) else {}
    on, off = by_label.get("prefix_on") or {}, by_label.get("prefix_off") or {}
    on_extra, off_extra = on.get("extra") or {}, off.get("extra") or {}
    rows = [
        Figure(
            _("peak KV tokens, prefix caching on"),
            seen.get("kv_peak_on_tokens", on_extra.get("kv_tokens_peak")),
            "tokens",
            seen.get("kv_samples_on", on_extra.get("kv_token_samples")),
        ),
        Figure(
            _("peak KV tokens, prefix caching off"),
            seen.get("kv_peak_off_tokens", off_extra.get("kv_tokens_peak")),
            "tokens",
            seen.get("kv_samples_off", off_extra.get("kv_token_samples")),
        ),
        Figure(
            _("TTFT p50, prefix caching on"),
            seen.get("ttft_p50_on_ms", (on.get("ttft_ms") or {}).get("p50")),
            "ms",
            seen.get("requests_on", on.get("requests_completed")),
        ),
        Figure(
            _("TTFT p50, prefix caching off"),
            seen.get("ttft_p50_off_ms", (off.get("ttft_ms") or {}).get("p50")),
            "ms",
            seen.get("requests_off", off.get("requests_completed")),
        ),
    ]
    if seen.get("ttft_p50_on_over_off") is not None:
        rows.append(
            Figure(
                _("TTFT p50 on / off"),
                seen["ttft_p50_on_over_off"],
                "x",
                seen.get("requests_on"),
                seen.get("ttft_p50_on_over_off_interval"),
            )
        )
    if seen.get("memory_saving") is not None:
        rows.append(Figure(_("memory saving with prefix caching"), 100 * seen["memory_saving"], "%"))
    for key, name in SHARES.items():
        if seen.get(key) is not None:
            rows.append(Figure(name, 100 * seen[key], "%"))
    return rows


# the record's behaviour claims this test's verdicts support (`selection.domain.claims` judges them)
PREFIX_REUSE = Claim(
    "prefix_reuse",
    "prefix_reuse",
    ("prefix_reused",),
    _("the shared prefix is reused (%(evidence)s)"),
    _("prefix reuse is not validated (%(evidence)s)"),
)


TEST = ValidationTest(
    "prefix_reuse",
    4,
    _("Prefix reuse"),
    _(
        "The same load of requests sharing a long system prompt on the engine with prefix caching on and on "
        "the candidate's caching-off endpoint (llama.cpp: cache_prompt false): peak KV tokens, TTFT and "
        "throughput of both against the capacity model's “every request allocates its own” figure. Without "
        "a caching-off endpoint the on-vs-off verdict is not exercised."
    ),
    _("KV memory with a shared prefix against every request allocating its own"),
    ("prefix_on_off", "kv_usage"),
    feeds=("memory",),
    demo={"requests": 64, "concurrency": 16},
    indicators=indicators,
    figure_points={"prefix_saving_ratio": ("prefix_on", "prefix_off")},
    figures=figures,
    cli={"concurrency": "concurrency", "kv_capacity_tokens": "kv_capacity_tokens"},
    off_variant=True,
    params=PARAMS,
    plan=plan_prefix_reuse,
    estimate=estimate_prefix_reuse,
    claims=(PREFIX_REUSE,),
    thresholds=thresholds,
)
