"""Engine metrics read: Prometheus text parsed, each engine's names mapped to kvselect's canonical
series, histograms, the KV capacity an engine states, and kvSelect's simulator mark.

A leaf (prometheus_client's parser, no HTTP): the candidate probes (`identity`) read an engine's
metrics with it without loading the scraper (`metrics`, aiohttp) into the web processes
(tests/architecture/test_lean_imports.py). prometheus_client itself (its package loads the registry
and the process collectors) is imported by the first parse, not with the URL conf (issue 39). The
series themselves are described in `metrics`.
"""

from __future__ import annotations

from typing import Any

# canonical -> candidate metric names (counter names without `_total`), first found wins.
ENGINE_MAPS: dict[str, dict[str, list[str]]] = {
    "vllm": {
        "kv_usage_ratio": ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
        "cpu_kv_usage_ratio": ["vllm:kv_offload_cpu_cache_usage_perc", "vllm:cpu_cache_usage_perc"],
        "prefix_hits": ["vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"],
        "prefix_queries": ["vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"],
        "prefix_hit_ratio_gauge": ["vllm:gpu_prefix_cache_hit_rate"],
        "running": ["vllm:num_requests_running"],
        "waiting": ["vllm:num_requests_waiting"],
        "swapped": ["vllm:num_requests_swapped"],
        "preemptions": ["vllm:num_preemptions"],
        "swap_out": ["vllm:kv_offload_store_bytes"],
        "swap_in": ["vllm:kv_offload_load_bytes"],
    },
    "sglang": {
        "kv_usage_ratio": ["sglang:token_usage", "sglang:full_token_usage"],
        "kv_used_tokens": ["sglang:kv_used_tokens", "sglang:num_used_tokens"],
        "prefix_hits": ["sglang:cached_tokens"],
        "prefix_queries": ["sglang:prompt_tokens"],
        "prefix_hit_ratio_gauge": ["sglang:cache_hit_rate"],
        "running": ["sglang:num_running_reqs"],
        "waiting": ["sglang:num_queue_reqs"],
        "preemptions": ["sglang:num_retracted_reqs", "sglang:total_retracted_reqs"],
        # the hierarchical cache's backups to host memory are the offload; evicted tokens are dropped
        "swap_out": ["sglang:hicache_backup_tokens"],
        "swap_in": ["sglang:load_back_tokens"],
        "evicted": ["sglang:evicted_tokens"],
        "cpu_kv_usage_ratio": [],
    },
    "lmdeploy": {
        "kv_usage_ratio": ["lmdeploy:gpu_cache_usage_perc"],
        "prefix_hits": ["lmdeploy:cached_tokens"],
        "prefix_queries": ["lmdeploy:prompt_tokens"],
        "prefix_hit_ratio_gauge": ["lmdeploy:prefix_cache_hit_rate"],
        "running": ["lmdeploy:num_requests_running"],
        "waiting": ["lmdeploy:num_requests_waiting"],
    },
    "tgi": {
        "running": ["tgi_batch_current_size"],
        "waiting": ["tgi_queue_size"],
        "kv_used_tokens": ["tgi_batch_current_max_tokens"],
    },
    "trtllm": {
        "kv_usage_ratio": ["trtllm_kv_cache_utilization"],
        "cpu_kv_usage_ratio": ["trtllm_kv_cache_host_utilization"],
        "prefix_hits": ["trtllm_kv_cache_reused_blocks"],
        "prefix_misses": ["trtllm_kv_cache_missed_blocks"],
        "prefix_hit_ratio_gauge": ["trtllm_kv_cache_hit_rate"],
        "running": ["trtllm_num_requests_running"],
        "waiting": ["trtllm_num_requests_waiting"],
        "preemptions": ["trtllm_num_paused_requests"],
        "swap_out": ["trtllm_kv_cache_offload_bytes"],
        "swap_in": ["trtllm_kv_cache_onboard_bytes"],
    },
    "llamacpp": {
        "kv_usage_ratio": ["llamacpp:kv_cache_usage_ratio"],
        "kv_used_tokens": ["llamacpp:kv_cache_tokens"],
        "prefix_hits": ["llamacpp:prompt_tokens_cached"],
        "prefix_misses": ["llamacpp:prompt_tokens"],  # excludes cached tokens
        # the prompt tokens it processed (0.3.9 has no cached counter: hits = tokens sent - processed)
        "prompt_tokens_processed": ["llamacpp:prompt_tokens"],
        "running": ["llamacpp:requests_processing"],
        "waiting": ["llamacpp:requests_deferred"],
    },
}
# signals found under the same name whatever the engine: the simulator's fragmentation gauge (no
# real engine exports fragmentation: vLLM, SGLang and llama.cpp have no such metric)
SHARED_SIGNALS: dict[str, list[str]] = {"fragmentation_ratio": ["kvsim:fragmentation_ratio"]}
ENGINE_ALIASES = {
    "tensorrt-llm": "trtllm",
    "tensorrt_llm": "trtllm",
    "trt-llm": "trtllm",
    "llama.cpp": "llamacpp",
    "llama-cpp": "llamacpp",
    "llama_cpp": "llamacpp",
    "text-generation-inference": "tgi",
}
PREFIXES = {
    "vllm:": "vllm",
    "sglang:": "sglang",
    "lmdeploy:": "lmdeploy",
    "tgi_": "tgi",
    "trtllm_": "trtllm",
    "llamacpp:": "llamacpp",
}
CANONICAL_SERIES = (
    "kv_usage_ratio",
    "prefix_hit_ratio",
    "running",
    "waiting",
    "preemptions",
    "kv_used_tokens",
    "cpu_kv_usage_ratio",
    "swap_out",
    "swap_in",
    "prompt_tokens_processed",
)
# canonical histogram -> per engine, the histogram's base name (seconds), first found wins: the time
# each request waited in the engine's queue before it was scheduled (vLLM's request_queue_time, SGLang's
# queue_time, LMDeploy's and TensorRT-LLM's request_queue_time, TGI's request_queue_duration; the
# simulator exports vLLM's). llama.cpp exports none (only the number of deferred requests).
HISTOGRAMS: dict[str, dict[str, list[str]]] = {
    "queue_wait": {
        "vllm": ["vllm:request_queue_time_seconds"],
        "sglang": ["sglang:queue_time_seconds", "sglang:queue_time_s"],
        "lmdeploy": ["lmdeploy:request_queue_time_seconds"],
        "trtllm": ["trtllm_request_queue_time_seconds"],
        "tgi": ["tgi_request_queue_duration"],
    },
}
_RATIO_KEYS = {"kv_usage_ratio", "cpu_kv_usage_ratio", "prefix_hit_ratio_gauge", "fragmentation_ratio"}


def normalize_engine(engine: str | None) -> str:
    name = (engine or "auto").strip().lower()
    return ENGINE_ALIASES.get(name, name)


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by name, with `_total` stripped from counter samples (names differ by version)."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name.endswith("_created"):
                continue
            if name.endswith("_total"):
                name = name[: -len("_total")]
            samples.setdefault(name, []).append((dict(sample.labels), float(sample.value)))
    return samples


def detect_engine(names: Any) -> str | None:
    counts: dict[str, int] = {}
    for name in names:
        for prefix, engine in PREFIXES.items():
            if name.startswith(prefix):
                counts[engine] = counts.get(engine, 0) + 1
    return max(counts, key=counts.__getitem__) if counts else None


SIMULATOR_INFO = "kvsim_info"
SIMULATED_LABEL = "SIMULATED"


def simulator_mark(samples: dict[str, list[tuple[dict[str, str], float]]]) -> bool:
    """True when the metrics carry the simulator's own mark (`kvsim_info{evidence="SIMULATED"}`)."""
    return any(labels.get("evidence") == SIMULATED_LABEL for labels, _value in samples.get(SIMULATOR_INFO, []))


EVIDENCE_HEADER = "X-Kvsim-Evidence"


def map_samples(samples: dict[str, list[tuple[dict[str, str], float]]], engine: str) -> dict[str, float]:
    """Canonical values (ratios averaged over label sets, e.g. data-parallel engines; counts summed)."""
    values: dict[str, float] = {}
    for canonical, candidates in (ENGINE_MAPS.get(engine, {}) | SHARED_SIGNALS).items():
        for name in candidates:
            found = samples.get(name)
            if found:
                numbers = [v for labels, v in found if "le" not in labels and "quantile" not in labels]
                if not numbers:
                    continue
                values[canonical] = sum(numbers) / len(numbers) if canonical in _RATIO_KEYS else sum(numbers)
                break
    if "prefix_misses" in values and "prefix_hits" in values and "prefix_queries" not in values:
        values["prefix_queries"] = values["prefix_hits"] + values.pop("prefix_misses")
    values.pop("prefix_misses", None)
    return values


def read_histograms(samples: dict[str, list[tuple[dict[str, str], float]]], engine: str) -> dict[str, dict[str, Any]]:
    """Each canonical histogram the engine exports (`HISTOGRAMS`), summed over its label sets:
    {canonical: {metric, buckets: [[le, cumulative count], ...] (ascending, +Inf last), sum, count}}."""
    found: dict[str, dict[str, Any]] = {}
    for canonical, per_engine in HISTOGRAMS.items():
        for name in per_engine.get(engine, []):
            buckets: dict[float, float] = {}
            for labels, value in samples.get(f"{name}_bucket", []):
                try:
                    le = float(labels.get("le", "nan"))
                except ValueError:
                    continue
                if le == le:  # not NaN
                    buckets[le] = buckets.get(le, 0.0) + value
            if not buckets:
                continue
            found[canonical] = {
                "metric": name,
                "buckets": sorted([le, count] for le, count in buckets.items()),
                "sum": sum(v for _labels, v in samples.get(f"{name}_sum", [])),
                "count": sum(v for _labels, v in samples.get(f"{name}_count", [])),
            }
            break
    return found


def histogram_delta(first: dict[str, Any], last: dict[str, Any]) -> dict[str, Any] | None:
    """The observations a cumulative histogram gained between two scrapes (a reset, as after an engine
    restart, gives None): buckets [[le, count]], sum, count."""
    before = dict((le, count) for le, count in first.get("buckets") or [])
    buckets = []
    for le, count in last.get("buckets") or []:
        gained = count - before.get(le, 0.0)
        if gained < 0:
            return None
        buckets.append([le, gained])
    count = float(last.get("count") or 0.0) - float(first.get("count") or 0.0)
    if count < 0:
        return None
    return {"buckets": buckets, "sum": float(last.get("sum") or 0.0) - float(first.get("sum") or 0.0), "count": count}


def histogram_quantile(q: float, buckets: list[list[float]]) -> tuple[float, float, float] | None:
    """Prometheus's histogram_quantile over cumulative buckets [[le, count], ...] (+Inf last): the
    estimate (linear inside its bucket) and the bucket's bounds, which hold the true quantile (the
    bucket's lower bound is 0 for the first; an estimate in the +Inf bucket is its lower bound, with
    an infinite upper bound). None without observations."""
    if not buckets:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower_le, lower_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return lower_le, lower_le, float("inf")
            if count == lower_count:
                return le, lower_le, le
            estimate = lower_le + (le - lower_le) * (rank - lower_count) / (count - lower_count)
            return estimate, lower_le, le
        lower_le, lower_count = le, count
    return None


def kv_capacity(samples: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, Any] | None:
    """The KV tokens the engine allocated, from the metrics that state it, with where it came from."""
    for labels, _value in samples.get("vllm:cache_config_info", []):
        blocks, size = labels.get("num_gpu_blocks"), labels.get("block_size")
        if blocks and size and blocks.isdigit() and size.isdigit():
            return {
                "tokens": int(blocks) * int(size),
                "source": f"vllm:cache_config_info num_gpu_blocks {blocks} x block_size {size}",
            }
    found = [v for _, v in samples.get("sglang:max_total_num_tokens", []) if v > 0]
    if found:
        return {"tokens": int(max(found)), "source": "sglang:max_total_num_tokens"}
    blocks = [v for _, v in samples.get("trtllm_kv_cache_max_blocks", [])]
    per_block = [v for _, v in samples.get("trtllm_kv_cache_tokens_per_block", [])]
    if blocks and per_block and blocks[0] > 0 and per_block[0] > 0:
        return {
            "tokens": int(blocks[0] * per_block[0]),
            "source": "trtllm_kv_cache_max_blocks x trtllm_kv_cache_tokens_per_block",
        }
    return None


def map_trtllm_json(stats: Any) -> dict[str, float]:
    """TensorRT-LLM `/metrics` JSON (list of IterationStats, newest last) into canonical values."""
    if isinstance(stats, list):
        stats = stats[-1] if stats else {}
    if not isinstance(stats, dict):
        return {}
    values: dict[str, float] = {}
    kv = stats.get("kvCacheStats") or {}
    used, total = kv.get("usedNumBlocks"), kv.get("maxNumBlocks")
    if isinstance(used, (int, float)) and isinstance(total, (int, float)) and total > 0:
        values["kv_usage_ratio"] = used / total
    if isinstance(kv.get("tokensPerBlock"), (int, float)) and isinstance(used, (int, float)):
        values["kv_used_tokens"] = used * kv["tokensPerBlock"]
    if isinstance(kv.get("reusedBlocks"), (int, float)) and isinstance(kv.get("missedBlocks"), (int, float)):
        values["prefix_hits"] = float(kv["reusedBlocks"])
        values["prefix_queries"] = float(kv["reusedBlocks"] + kv["missedBlocks"])
    if isinstance(kv.get("cacheHitRate"), (int, float)):
        values["prefix_hit_ratio_gauge"] = float(kv["cacheHitRate"])
    for key, canonical in (("numActiveRequests", "running"), ("numQueuedRequests", "waiting")):
        if isinstance(stats.get(key), (int, float)):
            values[canonical] = float(stats[key])
    paused = (stats.get("inflightBatchingStats") or {}).get("numPausedRequests")
    if isinstance(paused, (int, float)):
        values["preemptions"] = float(paused)
    return values
