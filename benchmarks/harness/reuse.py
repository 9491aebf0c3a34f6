"""Pure parts of the prefix-reuse test (workloads.run_prefix_reuse): how much of the prompt the
engine took from its cache, by the best evidence the engine gives, and the KV the requests in flight
would need without any sharing (the baseline a caching-on and a caching-off run are judged against).

Evidence of reuse, strongest first (the first one the engine gives judges, and says so):

1. the engine's prefix-cache counters: hits / queries over the run (vLLM `prefix_cache_hits` and
   `prefix_cache_queries`, SGLang `cached_tokens` and `prompt_tokens`, TensorRT-LLM's reused and
   missed blocks, newer llama.cpp `prompt_tokens_cached`);
2. llama.cpp's `llamacpp:prompt_tokens_total`, the prompt tokens it computed: reused = 1 - computed /
   the prompt tokens the requests sent (their usage);
3. the responses' own count: `usage.prompt_tokens_details.cached_tokens` (vLLM, SGLang) or llama.cpp's
   `timings` (the prompt less `prompt_n` it processed, or `cache_n`);
4. timing, only when none of these exists: TTFT with caching on against off.

No I/O here: the runner gathers requests and metric snapshots, these functions judge them.
"""

from __future__ import annotations

from typing import Any, Sequence

from selection.domain.messages import Message
from selection.domain.messages import marked as _

# engines as the metrics name them, shown by their product names in other languages
ENGINE_NAMES = ("vllm", "sglang", "llamacpp", "trtllm", "lmdeploy", "tgi")
# where the share of cached prompt tokens came from (`reuse_share`)
BY_COUNTERS = _("the engine's prefix-cache counters: %(hits)s of %(queries)s queried tokens hit")
BY_ENGINE_COUNTERS = _("the engine's prefix-cache counters (%(engine)s): %(hits)s of %(queries)s queried tokens hit")
BY_PROCESSED = _(
    "the engine computed %(processed)s of the %(sent)s prompt tokens sent "
    "(its prompt-token counter, llamacpp:prompt_tokens_total, against the responses' usage)"
)
BY_RESPONSE_USAGE = _("the responses' usage cached_tokens: %(cached)s of %(prompt)s prompt tokens cached")
BY_RESPONSE_TIMINGS = _("the responses' timings (prompt_n): %(cached)s of %(prompt)s prompt tokens cached")

COUNTERS, PROCESSED, RESPONSES, TIMING = "engine_counters", "engine_processed_counter", "responses", "timing"
SOURCES = (COUNTERS, PROCESSED, RESPONSES, TIMING)

# with caching on, TTFT p50 at most this share of the caching-off one: the prefill was skipped
REUSED_TTFT_RATIO = 0.8


def _delta(before: dict[str, float] | None, after: dict[str, float] | None, name: str) -> float | None:
    if not before or not after or before.get(name) is None or after.get(name) is None:
        return None
    return float(after[name]) - float(before[name])


def reuse_figures(
    records: Sequence[Any], before: dict[str, float] | None, after: dict[str, float] | None
) -> dict[str, Any]:
    """What a run's evidence says about reuse: tokens sent (the responses' usage), the engine's
    counter deltas between `before` and `after` (metric snapshots around the load), and the cached
    tokens the responses reported, with where they came from. `records` are the run's requests."""
    done = [r for r in records if r.ok and not getattr(r, "aborted", False)]
    sent = [r.prompt_tokens for r in done if r.prompt_tokens is not None]
    cached = [(r.cached_tokens, r.prompt_tokens) for r in done if r.cached_tokens is not None and r.prompt_tokens]
    sources = sorted({r.cached_source for r in done if r.cached_tokens is not None and r.cached_source})
    hits, queries = _delta(before, after, "prefix_hits"), _delta(before, after, "prefix_queries")
    return {
        "requests": len(done),
        "prompt_tokens_sent": sum(sent) if sent else None,
        "prompt_tokens_processed": _delta(before, after, "prompt_tokens_processed"),
        "counter_hits": hits,
        "counter_queries": queries,
        "responses_cached_tokens": sum(c for c, _p in cached) if cached else None,
        "responses_prompt_tokens": sum(p for _c, p in cached) if cached else None,
        "responses_with_cached": len(cached),
        "responses_cached_source": ", ".join(sources) or None,
    }


def reuse_share(figures: dict[str, Any], engine: str = "") -> dict[str, Any] | None:
    """The share of the prompt tokens the engine took from its cache, by the strongest evidence in
    `figures` (`reuse_figures`): {share, source, detail, message, n} (`detail` is the English text of
    `message`); None when the engine gives none."""
    hits, queries = figures.get("counter_hits"), figures.get("counter_queries")
    if hits is not None and queries:
        counts = {"hits": f"{hits:,.0f}", "queries": f"{queries:,.0f}"}
        named = Message(engine, context="engine") if engine in ENGINE_NAMES else engine
        message = Message(BY_ENGINE_COUNTERS, {**counts, "engine": named}) if engine else Message(BY_COUNTERS, counts)
        return _evidence(max(0.0, min(1.0, hits / queries)), COUNTERS, message, figures.get("requests"))
    processed, sent = figures.get("prompt_tokens_processed"), figures.get("prompt_tokens_sent")
    if processed is not None and sent:
        message = Message(BY_PROCESSED, {"processed": f"{processed:,.0f}", "sent": f"{sent:,.0f}"})
        return _evidence(max(0.0, min(1.0, 1.0 - processed / sent)), PROCESSED, message, figures.get("requests"))
    cached, prompt = figures.get("responses_cached_tokens"), figures.get("responses_prompt_tokens")
    if cached is not None and prompt:
        via = figures.get("responses_cached_source") or "usage"
        template = BY_RESPONSE_TIMINGS if via == "timings" else BY_RESPONSE_USAGE
        message = Message(template, {"cached": f"{cached:,.0f}", "prompt": f"{prompt:,.0f}"})
        return _evidence(max(0.0, min(1.0, cached / prompt)), RESPONSES, message, figures.get("responses_with_cached"))
    return None


def _evidence(share: float, source: str, message: Message, n: Any) -> dict[str, Any]:
    return {"share": share, "source": source, "detail": str(message), "message": message, "n": n}


def in_flight_need(
    records: Sequence[Any], at: float, planned_prompt: int, capacity: float | None = None
) -> dict[str, Any]:
    """The KV tokens the requests in flight at time `at` (perf_counter seconds) need with no sharing:
    each one's prompt (its usage, else `planned_prompt`) plus the output tokens it had received,
    capped by the pool (`capacity`, None: uncapped), with its inputs. A request counts from its first
    token (its whole prompt is in the cache then) to its end: one still in prefill holds only part of
    its prompt, so leaving it out keeps the need from crediting a saving nobody observed."""
    prompts = outputs = count = 0
    for record in records:
        first = record.first_token_time
        end = record.end_time if record.end_time is not None else float("inf")
        if first is not None and first <= at < end:
            count += 1
            prompts += record.prompt_tokens if record.prompt_tokens is not None else planned_prompt
            outputs += sum(n for t, n in zip(record.chunk_times, record.chunk_tokens, strict=False) if t <= at)
    need = prompts + outputs
    capped = capacity is not None and need > capacity
    return {
        "tokens": float(capacity) if capped else float(need),
        "requests": count,
        "prompt_tokens": prompts,
        "output_tokens": outputs,
        "pool_tokens": capacity,
        "capped_by_pool": capped,
    }


# the samples judged against the need: those with at least this share of the most requests in flight
# (the load at its height; a tail of one or two requests has nothing to share)
AT_HEIGHT_SHARE = 0.75


def at_height(samples: Sequence[tuple[float, dict[str, Any]]]) -> list[tuple[float, dict[str, Any]]]:
    """The (KV held, need) samples taken while the load was at its height (`AT_HEIGHT_SHARE`)."""
    most = max((need["requests"] for _kv, need in samples), default=0)
    if most <= 0:
        return []
    return [(kv, need) for kv, need in samples if need["requests"] >= AT_HEIGHT_SHARE * most and need["tokens"] > 0]
