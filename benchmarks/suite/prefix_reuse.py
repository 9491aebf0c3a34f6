"""Test 4, prefix reuse: its row of the suite."""

from __future__ import annotations

from typing import Any, Mapping

from benchmarks.suite.base import PointFacts, RunFacts, ValidationTest


def _(text: str) -> str:  # named `_` so `makemessages` collects the texts; translated where shown
    return text


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
    cli={"concurrency": "concurrency", "kv_capacity_tokens": "kv_capacity_tokens"},
)
