"""inference-perf (kubernetes-sigs/inference-perf): `summary_lifecycle_metrics.json` (and
`stage_N_...`), `per_request_lifecycle_metrics.json`, `summary_prometheus_metrics.json`.

All latencies are **seconds** (the docs table says ms; the values are seconds). Mapping:
`time_per_output_token` = (last - first token)/(tokens - 1) = kvselect TPOT; `inter_token_latency`
pools per-token gaps where tokens of one chunk share a timestamp (many zero gaps): same mean as
kvselect ITL, different percentiles, so only the mean is kept. NTPOT (e2e/tokens, incl. TTFT) goes
to extra. The prometheus summary holds the *engine's* histograms queried via PromQL (server-side
view), kept as its own format so it is never mistaken for client measurements.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.formats.base import Format, FormatError, Source
from benchmarks.formats.common import (
    expect_list,
    expect_object,
    finish,
    get_int,
    get_number,
    get_object,
    join,
    mean_only,
    number,
    per_request_tpot,
    pooled_itl_mean,
    request_frame,
    scaled_stats,
    stats_from_array,
)
from benchmarks.result import LoadPoint, NormalizedResult
from selection.domain.messages import Message
from selection.domain.messages import marked as _

KEYS = {"mean": "mean", "p50": "median", "p90": "p90", "p95": "p95", "p99": "p99", "max": "max"}
DEFINITIONS = {
    "ttft_ms": "inference-perf time_to_first_token (s): first output token - start; content only",
    "tpot_ms": "inference-perf time_per_output_token (s): (last - first token)/(tokens - 1) (= kvselect TPOT)",
    "itl_ms": "inference-perf inter_token_latency (s): per-token gaps pooled, tokens of one chunk share a timestamp "
    "(zero gaps); mean kept (= kvselect ITL mean), percentiles dropped",
    "e2e_ms": "inference-perf request_latency (s)",
    "request_throughput": "inference-perf successes / (max end - min start)",
    "goodput": "inference-perf request_goodput; SLOs configured in seconds",
}
PROM_DEFINITIONS = {
    "ttft_ms": "engine histogram time_to_first_token via PromQL (server-side, excludes network/client)",
    "itl_ms": "engine histogram inter_token_latency via PromQL (server-side per-token gaps)",
    "e2e_ms": "engine histogram request_latency via PromQL (server-side)",
    "tpot_ms": "not mapped: the engine's time_per_output_token histogram is per-iteration gaps (kept in extra)",
}


def _doc(source: Source) -> Any:
    if source.head.lstrip()[:1] not in ("{", "["):
        raise FormatError(Message(_("not JSON")))
    return source.doc_with('"successes"', '"start_time"')


def sniff_summary(source: Source) -> str | Message | None:
    doc = _doc(source)
    if not isinstance(doc, dict) or "successes" not in doc or "load_summary" not in doc:
        return Message(_("no 'load_summary'/'successes' keys"))
    successes = doc["successes"]
    if (
        isinstance(successes, dict)
        and "latency" not in successes
        and ("rate" in successes or "kv_cache_usage_percentage" in successes)
    ):
        return Message(_("this is the prometheus summary (no successes.latency)"))
    return None


def parse_summary(source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    doc = expect_object(source.json, "(root)")
    result = NormalizedResult(tool="inference-perf", format="inference-perf", definitions=dict(DEFINITIONS))
    successes = get_object(doc, "successes", "", required=True)
    failures = get_object(doc, "failures", "") or {}
    load = get_object(doc, "load_summary", "", required=True)
    latency = get_object(successes, "latency", "successes", required=True)
    lpath = "successes.latency"
    point = LoadPoint(
        duration_s=get_number(doc, "benchmark_time_seconds", ""),
        requests_completed=get_int(successes, "count", "successes", required=True),
        requests_failed=get_int(failures, "count", "failures") if failures else 0,
        request_rate=get_number(load, "requested_rate", "load_summary"),
        concurrency=get_number(load, "concurrency", "load_summary"),
    )
    point.label = (
        f"rate={point.request_rate:g}"
        if point.request_rate is not None
        else (f"concurrency={point.concurrency:g}" if point.concurrency else "inference-perf")
    )
    point.ttft_ms = scaled_stats(
        get_object(latency, "time_to_first_token", lpath), join(lpath, "time_to_first_token"), 1000.0, KEYS
    )
    point.tpot_ms = scaled_stats(
        get_object(latency, "time_per_output_token", lpath), join(lpath, "time_per_output_token"), 1000.0, KEYS
    )
    point.e2e_ms = scaled_stats(
        get_object(latency, "request_latency", lpath), join(lpath, "request_latency"), 1000.0, KEYS
    )
    itl = scaled_stats(
        get_object(latency, "inter_token_latency", lpath), join(lpath, "inter_token_latency"), 1000.0, KEYS
    )
    point.itl_ms = mean_only(itl.mean)
    if not itl.is_empty():
        point.extra["itl_pooled_zero_gaps_ms"] = itl.__dict__.copy()
    ntpot = scaled_stats(
        get_object(latency, "normalized_time_per_output_token", lpath),
        join(lpath, "normalized_time_per_output_token"),
        1000.0,
        KEYS,
    )
    if not ntpot.is_empty():
        point.extra["ntpot_ms"] = ntpot.__dict__.copy()
    throughput = get_object(successes, "throughput", "successes") or {}
    point.request_throughput = get_number(throughput, "requests_per_sec", "successes.throughput")
    point.output_token_throughput = get_number(throughput, "output_tokens_per_sec", "successes.throughput")
    point.input_token_throughput = get_number(throughput, "input_tokens_per_sec", "successes.throughput")
    achieved = get_number(load, "achieved_rate", "load_summary")
    if achieved is not None:
        point.extra["achieved_rate"] = achieved
    goodput = get_object(successes, "goodput_metrics", "successes")
    if goodput:
        gpath = "successes.goodput_metrics"
        point.goodput = get_number(goodput, "request_goodput", gpath)
        pct = get_number(goodput, "goodput_percentage", gpath)
        point.slo_attainment = None if pct is None else pct / 100.0
        point.extra["goodput_by_slo_pct"] = {k: v for k, v in goodput.items() if k.endswith("_attainment_percentage")}
    prompt = get_object(successes, "prompt_tokens", "successes")
    if (
        prompt
        and get_number(prompt, "cached", "successes.prompt_tokens") is not None
        and get_number(prompt, "total", "successes.prompt_tokens")
    ):
        point.extra["prompt_cache_hit_fraction"] = prompt["cached"] / prompt["total"]
    by_label = failures.get("by_label") if isinstance(failures, dict) else None
    if isinstance(by_label, dict):
        point.extra["failures_by_label"] = {
            str(k): (v.get("count") if isinstance(v, dict) else None) for k, v in by_label.items()
        }
    result.points.append(point)
    return finish(result, slo)


def sniff_prometheus(source: Source) -> str | Message | None:
    doc = _doc(source)
    if not isinstance(doc, dict) or "successes" not in doc:
        return Message(_("no 'successes' key"))
    successes = doc["successes"]
    if not isinstance(successes, dict) or "latency" in successes:
        return Message(_("successes has client latency blocks (lifecycle summary, not prometheus)"))
    if not any(k in successes for k in ("kv_cache_usage_percentage", "rate", "queue_len")):
        return Message(_("no engine metrics (kv_cache_usage_percentage/rate/queue_len) in successes"))
    return None


def parse_prometheus(source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    doc = expect_object(source.json, "(root)")
    successes = get_object(doc, "successes", "", required=True)
    result = NormalizedResult(
        tool="inference-perf", format="inference-perf-prometheus", definitions=dict(PROM_DEFINITIONS)
    )
    result.metadata["source"] = "engine metrics via PromQL (server-side)"
    point = LoadPoint(label="prometheus", requests_completed=get_int(successes, "count", "successes"))
    point.request_throughput = get_number(successes, "rate", "successes")
    point.ttft_ms = scaled_stats(
        get_object(successes, "time_to_first_token", "successes"), "successes.time_to_first_token", 1000.0, KEYS
    )
    point.itl_ms = scaled_stats(
        get_object(successes, "inter_token_latency", "successes"), "successes.inter_token_latency", 1000.0, KEYS
    )
    point.e2e_ms = scaled_stats(
        get_object(successes, "request_latency", "successes"), "successes.request_latency", 1000.0, KEYS
    )
    output_len = get_object(successes, "output_len", "successes")
    if output_len:
        point.output_token_throughput = get_number(output_len, "rate", "successes.output_len")
    server = {}
    for key, value in successes.items():
        if key in ("count", "rate", "time_to_first_token", "inter_token_latency", "request_latency"):
            continue
        if isinstance(value, dict):
            server[key] = {k: number(v, f"successes.{key}.{k}") for k, v in value.items()}
        else:
            server[key] = number(value, f"successes.{key}")
    point.extra["server"] = server
    result.points.append(point)
    return finish(result, slo)


def sniff_requests(source: Source) -> str | Message | None:
    doc = _doc(source)
    if not isinstance(doc, list):
        return Message(_("not a JSON list of request records"))
    if not doc:
        return Message(_("empty list"))
    first = doc[0]
    if not isinstance(first, dict) or not {"start_time", "end_time", "info"} <= set(first):
        return Message(_("records lack start_time/end_time/info"))
    return None


def parse_requests(source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    records = expect_list(source.json, "(root)")
    n = len(records)
    start, end, ttft_s, prompt, output = (np.full(n, np.nan) for _ in range(5))
    ok = np.ones(n, dtype=bool)
    errors: list[Any] = [None] * n
    for i, record in enumerate(records):
        path = f"[{i}]"
        record = expect_object(record, path)
        start[i] = get_number(record, "start_time", path, required=True)
        end[i] = get_number(record, "end_time", path, required=True)
        info = get_object(record, "info", path) or {}
        ipath = join(path, "info")
        tokens = get_number(info, "input_tokens", ipath)
        prompt[i] = np.nan if tokens is None else tokens
        error = record.get("error")
        if error is not None:
            error = expect_object(error, join(path, "error"))
            ok[i] = False
            errors[i] = f"{error.get('error_type')}: {error.get('error_msg')}"
        response = get_object(info, "response_metrics", ipath)
        if response:
            rpath = join(ipath, "response_metrics")
            out = get_number(response, "output_tokens", rpath)
            output[i] = np.nan if out is None else out
            times = response.get("output_token_times") or response.get("chunk_times") or []
            times = expect_list(times, join(rpath, "output_token_times"))
            if times:
                ttft_s[i] = number(times[0], join(rpath, "output_token_times") + "[0]", allow_none=False) - start[i]
    e2e = (end - start) * 1000.0
    ttft = ttft_s * 1000.0
    tpot = per_request_tpot(e2e, ttft, output)
    frame = request_frame(
        {
            "start_s": start - np.nanmin(start) if n else start,
            "ttft_ms": np.where(ok, ttft, np.nan),
            "tpot_ms": np.where(ok, tpot, np.nan),
            "itl_ms_mean": np.where(ok, tpot, np.nan),
            "e2e_ms": np.where(ok, e2e, np.nan),
            "prompt_tokens": prompt,
            "output_tokens": output,
            "ok": ok,
            "error": np.array(errors, dtype=object),
        },
        n,
    )
    result = NormalizedResult(tool="inference-perf", format="inference-perf-requests", definitions=dict(DEFINITIONS))
    duration = float(np.nanmax(end) - np.nanmin(start)) if n else None
    point = LoadPoint(
        label="inference-perf",
        duration_s=duration or None,
        requests_completed=int(ok.sum()),
        requests_failed=int((~ok).sum()),
    )
    point.ttft_ms = stats_from_array(ttft[ok])
    point.tpot_ms = stats_from_array(tpot[ok])
    point.e2e_ms = stats_from_array(e2e[ok])
    valid = ok & np.isfinite(e2e) & np.isfinite(ttft) & (output >= 1)
    if valid.any():
        point.itl_ms = mean_only(
            pooled_itl_mean(float(e2e[valid].sum()), float(ttft[valid].sum()), float((output[valid] - 1).sum()))
        )
    if point.duration_s:
        point.request_throughput = point.requests_completed / point.duration_s
        if np.isfinite(output[ok]).any():
            point.output_token_throughput = float(np.nansum(output[ok])) / point.duration_s
    result.points.append(point)
    result.requests = frame
    return finish(result, slo)


FORMATS = [
    Format(
        "inference-perf",
        "inference-perf",
        "inference-perf summary_lifecycle_metrics.json / stage_N",
        sniff_summary,
        parse_summary,
    ),
    Format(
        "inference-perf-prometheus",
        "inference-perf",
        "inference-perf summary_prometheus_metrics.json",
        sniff_prometheus,
        parse_prometheus,
    ),
    Format(
        "inference-perf-requests",
        "inference-perf",
        "inference-perf per_request_lifecycle_metrics.json",
        sniff_requests,
        parse_requests,
    ),
]
