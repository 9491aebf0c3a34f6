"""The capacity an engine actually allocated, read from its start-up log, and how far the plan's
prediction is from it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from selection.domain.capacity.base import CapacityError, GiB

_INT = r"(\d{1,3}(?:,\d{3})+|\d+)"


_LOG_PATTERNS = {
    # vLLM V1 (vllm/v1/core/kv_cache_utils.py) and worker
    "vllm_tokens": re.compile(r"GPU KV cache size:\s*" + _INT + r"\s*tokens"),
    "vllm_concurrency": re.compile(r"Maximum concurrency for\s*" + _INT + r"\s*tokens per request:\s*([\d.]+)x"),
    "vllm_available": re.compile(r"Available KV cache memory:\s*([\d.]+)\s*GiB"),
    "vllm_v0_blocks": re.compile(r"#\s*(?:GPU|cuda) blocks:\s*" + _INT, re.IGNORECASE),
    "vllm_v0_kv_gib": re.compile(r"reserved for KV Cache is\s*([\d.]+)\s*GiB", re.IGNORECASE),
    # SGLang scheduler / memory pool
    "sglang_max_total": re.compile(r"max_total_num_tokens=\s*" + _INT),
    "sglang_allocated": re.compile(
        r"KV Cache is allocated\.\s*#tokens:\s*" + _INT + r"(?:,\s*K size:\s*([\d.]+)\s*GB,\s*V size:\s*([\d.]+)\s*GB)?"
    ),
    # llama.cpp
    "llamacpp_n_ctx": re.compile(r"\bn_ctx\s*=\s*(\d+)"),
    "llamacpp_kv_size": re.compile(r"size\s*=\s*([\d.]+)\s*MiB\s*\(\s*(\d+)\s*cells,\s*(\d+)\s*layers"),
    "llamacpp_kv_buffer": re.compile(r"KV buffer size\s*=\s*([\d.]+)\s*MiB"),
}


def _i(s: str) -> int:
    return int(s.replace(",", ""))


def parse_engine_capacity_log(text: str) -> dict:
    """Pull the capacity an engine actually allocated from its start-up log.

    Returns {engine, kv_cache_tokens, max_concurrency {context: x}, kv_cache_memory_gib,
    num_gpu_blocks, ...}; keys are present only when found; engine is None when nothing matched.
    The last occurrence wins (restarts append to the same log).
    """
    if not isinstance(text, str):
        raise CapacityError("log: must be text")
    out: dict[str, Any] = {"engine": None}
    P = _LOG_PATTERNS
    m = P["vllm_tokens"].findall(text)
    conc = P["vllm_concurrency"].findall(text)
    blocks = P["vllm_v0_blocks"].findall(text)
    if m or conc or blocks:
        out["engine"] = "vllm"
        if m:
            out["kv_cache_tokens"] = _i(m[-1])
        if conc:
            out["max_concurrency"] = {_i(ctx): float(x) for ctx, x in conc}
        if blocks:
            out["num_gpu_blocks"] = _i(blocks[-1])
        avail = P["vllm_available"].findall(text) or P["vllm_v0_kv_gib"].findall(text)
        if avail:
            out["kv_cache_memory_gib"] = float(avail[-1])
        return out
    sg = P["sglang_max_total"].findall(text)
    alloc = P["sglang_allocated"].findall(text)
    if sg or alloc:
        out["engine"] = "sglang"
        out["kv_cache_tokens"] = _i(sg[-1]) if sg else _i(alloc[-1][0])
        if alloc and alloc[-1][1]:
            out["kv_cache_memory_gib"] = round((float(alloc[-1][1]) + float(alloc[-1][2])) * 1e9 / GiB, 3)
        return out
    kvs = P["llamacpp_kv_size"].findall(text)
    nctx = P["llamacpp_n_ctx"].findall(text)
    if kvs or (nctx and "llama" in text):
        out["engine"] = "llamacpp"
        if nctx:
            out["n_ctx"] = int(nctx[-1])
        if kvs:
            mib, cells, layers = kvs[-1]
            out["kv_cache_tokens"] = int(cells)
            out["kv_cache_memory_gib"] = round(float(mib) / 1024, 4)
            out["kv_layers"] = int(layers)
        elif nctx:
            out["kv_cache_tokens"] = int(nctx[-1])
        bufs = P["llamacpp_kv_buffer"].findall(text)
        if bufs and "kv_cache_memory_gib" not in out:
            out["kv_cache_memory_gib"] = round(sum(float(b) for b in bufs) / 1024, 4)
    return out


def compare_predicted_measured(predicted_tokens: float, measured_tokens: float, threshold_pct: float = 10.0) -> dict:
    """Predicted vs measured KV token capacity; more than threshold_pct apart is flagged."""
    for name, v in (("predicted_tokens", predicted_tokens), ("measured_tokens", measured_tokens)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise CapacityError(f"{name}: must be a non-negative number, got {v!r}")
    if measured_tokens == 0:
        diff = 0.0 if predicted_tokens == 0 else math.inf
    else:
        diff = (predicted_tokens - measured_tokens) / measured_tokens * 100
    return {
        "predicted_tokens": predicted_tokens,
        "measured_tokens": measured_tokens,
        "difference_pct": round(diff, 2) if math.isfinite(diff) else None,
        "flagged": (not math.isfinite(diff)) or abs(diff) > threshold_pct,
        "threshold_pct": threshold_pct,
    }
