"""LLMPerf (ray-project/llmperf): `<model>_<in>_<out>_summary.json` (a flattened dict, results
version "2023-08-31") and `..._individual_responses.json`.

Seconds everywhere (`_s` suffix). LLMPerf's `inter_token_latency_s` = (TTFT + sum of gaps)/chunks,
which INCLUDES TTFT and is per chunk: neither kvselect ITL nor TPOT, kept in extra. From the
individual responses kvselect TPOT is derived per request as (e2e - ttft)/(output tokens - 1).
"""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from benchmarks.formats.base import Format, Source
from benchmarks.formats.common import (
    expect_list,
    expect_object,
    finish,
    get_number,
    mean_only,
    per_request_tpot,
    pooled_itl_mean,
    request_frame,
    stats_from_array,
)
from benchmarks.result import LoadPoint, NormalizedResult, Stats
from selection.domain.messages import Code, Message
from selection.domain.messages import marked as _

DEFINITIONS = {
    "ttft_ms": "llmperf ttft_s: first content chunk - start (seconds)",
    "e2e_ms": "llmperf end_to_end_latency_s (seconds)",
    "tpot_ms": "not in the summary; from individual responses: (e2e - ttft)/(output tokens - 1)",
    "itl_ms": "llmperf inter_token_latency_s = (TTFT + sum of chunk gaps)/chunks includes TTFT: not mapped "
    "(kept in extra.llmperf_itl_incl_ttft_ms); mean derived from individual responses when present",
    "request_throughput": "llmperf num_completed_requests_per_min / 60",
}
QUANTILES = {
    "p50": "quantiles_p50",
    "p90": "quantiles_p90",
    "p95": "quantiles_p95",
    "p99": "quantiles_p99",
    "mean": "mean",
    "max": "max",
}

# run notes (English in `notes`; the message beside it for pages in any language)
ITL_DERIVED = _("%(metric)s derived from mean e2e, mean TTFT and mean output tokens")
NO_TIMESTAMPS = _("individual responses carry no timestamps: duration and throughput unknown")


def _stats(doc: dict[str, Any], metric: str) -> Stats:
    values = {}
    for ours, suffix in QUANTILES.items():
        key = f"results_{metric}_{suffix}"
        v = get_number(doc, key, "")
        values[ours] = None if v is None else v * 1000.0
    return Stats(**values)


def sniff_summary(source: Source) -> str | Message | None:
    if source.head.lstrip()[:1] != "{":
        return Message(_("not a JSON object"))
    doc = source.doc_with('"num_concurrent_requests"', '"results_')
    if not isinstance(doc, dict):
        return Message(_("not a JSON object"))
    if not any(k.startswith("results_") for k in doc) or "num_concurrent_requests" not in doc:
        return Message(_("no flattened results_* keys / num_concurrent_requests"))
    return None


def parse_summary(source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    doc = expect_object(source.json, "(root)")
    result = NormalizedResult(tool="llmperf", format="llmperf", definitions=dict(DEFINITIONS))
    version = doc.get("version")
    result.metadata["results_version"] = version if isinstance(version, str) else None
    if isinstance(doc.get("model"), str):
        result.metadata["model"] = doc["model"]
    for key in ("mean_input_tokens", "stddev_input_tokens", "mean_output_tokens", "stddev_output_tokens"):
        v = get_number(doc, key, "")
        if v is not None:
            result.metadata.setdefault("workload", {})[key] = v
    concurrency = get_number(doc, "num_concurrent_requests", "", required=True)
    completed = get_number(doc, "results_num_completed_requests", "")
    failed = get_number(doc, "results_number_errors", "")
    point = LoadPoint(
        label=f"concurrency={concurrency:g}",
        concurrency=concurrency,
        requests_completed=None if completed is None else int(completed),
        requests_failed=None if failed is None else int(failed),
    )
    point.ttft_ms = _stats(doc, "ttft_s")
    point.e2e_ms = _stats(doc, "end_to_end_latency_s")
    itl = _stats(doc, "inter_token_latency_s")
    if not itl.is_empty():
        point.extra["llmperf_itl_incl_ttft_ms"] = itl.__dict__.copy()
    per_min = get_number(doc, "results_num_completed_requests_per_min", "")
    point.request_throughput = None if per_min is None else per_min / 60.0
    point.output_token_throughput = get_number(doc, "results_mean_output_throughput_token_per_s", "")
    point.error_rate = get_number(doc, "results_error_rate", "")
    if point.request_throughput and completed:
        point.duration_s = completed / point.request_throughput
    frequency = doc.get("results_error_code_frequency")
    if isinstance(frequency, str) and frequency.strip() not in ("", "{}"):
        try:
            parsed = ast.literal_eval(frequency)  # a stringified Python dict
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            parsed = None
        if isinstance(parsed, dict):
            point.extra["error_code_frequency"] = {str(k): v for k, v in parsed.items() if isinstance(v, (int, float))}
    out_mean = get_number(doc, "results_number_output_tokens_mean", "")
    if point.e2e_ms.mean is not None and point.ttft_ms.mean is not None and out_mean and completed:
        # mean-based estimate is exact for the pooled per-token mean only with equal lengths: note it
        point.itl_ms = mean_only(
            pooled_itl_mean(point.e2e_ms.mean * completed, point.ttft_ms.mean * completed, (out_mean - 1) * completed)
        )
        result.add_note(Message(ITL_DERIVED, {"metric": Code("itl_ms.mean")}))
    result.points.append(point)
    return finish(result, slo)


def sniff_responses(source: Source) -> str | Message | None:
    if source.head.lstrip()[:1] != "[":
        return Message(_("not a JSON list"))
    doc = source.doc_with('"ttft_s"')
    if not isinstance(doc, list) or not doc or not isinstance(doc[0], dict):
        return Message(_("not a list of response records"))
    if not {"ttft_s", "end_to_end_latency_s"} <= set(doc[0]):
        return Message(_("records lack ttft_s/end_to_end_latency_s"))
    return None


def parse_responses(source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    records = expect_list(source.json, "(root)")
    n = len(records)
    ttft, e2e, out, inp = (np.full(n, np.nan) for _ in range(4))
    ok = np.ones(n, dtype=bool)
    errors: list[Any] = [None] * n
    for i, record in enumerate(records):
        path = f"[{i}]"
        record = expect_object(record, path)
        code = record.get("error_code")
        if code is not None:
            ok[i] = False
            errors[i] = f"{code}: {record.get('error_msg') or ''}".strip()
        for array, key in (
            (ttft, "ttft_s"),
            (e2e, "end_to_end_latency_s"),
            (out, "number_output_tokens"),
            (inp, "number_input_tokens"),
        ):
            v = get_number(record, key, path, required=key in ("ttft_s", "end_to_end_latency_s"))
            array[i] = np.nan if v is None else v
    ttft_ms = np.where(ok, ttft * 1000.0, np.nan)
    e2e_ms = np.where(ok, e2e * 1000.0, np.nan)
    tpot = per_request_tpot(e2e_ms, ttft_ms, out)
    frame = request_frame(
        {
            "ttft_ms": ttft_ms,
            "tpot_ms": tpot,
            "itl_ms_mean": tpot,
            "e2e_ms": e2e_ms,
            "prompt_tokens": inp,
            "output_tokens": out,
            "ok": ok,
            "error": np.array(errors, dtype=object),
        },
        n,
    )
    result = NormalizedResult(tool="llmperf", format="llmperf-responses", definitions=dict(DEFINITIONS))
    point = LoadPoint(label="llmperf", requests_completed=int(ok.sum()), requests_failed=int((~ok).sum()))
    point.ttft_ms = stats_from_array(ttft_ms[ok])
    point.tpot_ms = stats_from_array(tpot[ok])
    point.e2e_ms = stats_from_array(e2e_ms[ok])
    valid = ok & np.isfinite(out) & (out >= 1)
    if valid.any():
        point.itl_ms = mean_only(
            pooled_itl_mean(float(e2e_ms[valid].sum()), float(ttft_ms[valid].sum()), float((out[valid] - 1).sum()))
        )
    result.add_note(Message(NO_TIMESTAMPS))
    result.points.append(point)
    result.requests = frame
    return finish(result, slo)


FORMATS = [
    Format("llmperf", "llmperf", "LLMPerf *_summary.json (flattened results)", sniff_summary, parse_summary),
    Format("llmperf-responses", "llmperf", "LLMPerf *_individual_responses.json", sniff_responses, parse_responses),
]
