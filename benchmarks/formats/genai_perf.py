"""genai-perf (triton-inference-server/perf_analyzer): `profile_export_genai_perf.json` (+ its CSV)
and perf_analyzer's raw `profile_export.json` (nanosecond timestamps).

genai-perf's metric blocks are aiperf's ancestors (`{unit, avg, p1..p99, min, max, std}`), with the
same definitions: its `inter_token_latency` = (latency - TTFT)/(OSL - 1) = kvselect TPOT. Summary
blocks have no `count`/`sum`, so kvselect's ITL mean is derived from avg x request_count.
The raw export has per-request timestamps but no token counts: TTFT and e2e are exact, TPOT and
ITL are not derivable (missing, not zero).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.formats.base import Format, Source
from benchmarks.formats.common import (
    cap_depth,
    expect_list,
    expect_object,
    finish,
    get_list,
    get_object,
    join,
    mean_only,
    number,
    pooled_itl_mean,
    request_frame,
    stats_from_array,
)
from benchmarks.formats.metric_table import (
    AIPERF_CSV_MARKERS,
    latency_stats,
    metric_avg,
    parse_metric_csv,
)
from benchmarks.result import LoadPoint, NormalizedResult
from selection.domain.messages import Message
from selection.domain.messages import marked as _

DEFINITIONS = {
    "ttft_ms": "genai-perf time_to_first_token: first response - request start",
    "tpot_ms": "genai-perf inter_token_latency = (request_latency - TTFT)/(OSL - 1) per request (= kvselect TPOT)",
    "itl_ms": "genai-perf has no per-token ITL distribution; kvselect ITL mean derived as (avg latency - avg TTFT) x "
    "requests / (total OSL - requests)",
    "e2e_ms": "genai-perf request_latency: request start -> last response",
    "request_throughput": "genai-perf request_throughput: request_count / (last response - first request)",
    "output_token_throughput": "genai-perf output_token_throughput: total OSL / duration",
    "goodput": "genai-perf request_goodput (only with --goodput)",
}
RAW_DEFINITIONS = {
    "ttft_ms": "perf_analyzer raw: response_timestamps[0] - timestamp (ns)",
    "e2e_ms": "perf_analyzer raw: response_timestamps[-1] - timestamp (ns)",
    "tpot_ms": "not derivable: the raw export has no token counts",
    "itl_ms": "not derivable: the raw export has no token counts",
    "request_throughput": "requests completed / window_boundaries span",
}


def sniff_json(source: Source) -> str | Message | None:
    if source.head.lstrip()[:1] != "{":
        return Message(_("not a JSON object"))
    doc = source.doc_with('"request_latency"', '"time_to_first_token"')
    if not isinstance(doc, dict):
        return Message(_("not a JSON object"))
    if any(k in doc for k in ("aiperf_version", "schema_version", "benchmark_id")):
        return Message(_("has aiperf provenance keys"))
    block = doc.get("request_latency") or doc.get("time_to_first_token")
    if not isinstance(block, dict) or "unit" not in block or "avg" not in block:
        return Message(_("no genai-perf metric block {unit, avg, ...} for request_latency/time_to_first_token"))
    return None


def parse_json(source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    doc = expect_object(source.json, "(root)")
    result = NormalizedResult(tool="genai-perf", format="genai-perf", definitions=dict(DEFINITIONS))
    point = LoadPoint(label="genai-perf")
    point.ttft_ms = latency_stats(doc, "time_to_first_token")
    point.tpot_ms = latency_stats(doc, "inter_token_latency")
    point.e2e_ms = latency_stats(doc, "request_latency")
    point.request_throughput = metric_avg(doc, "request_throughput")
    point.output_token_throughput = metric_avg(doc, "output_token_throughput")
    point.goodput = metric_avg(doc, "request_goodput")
    count = metric_avg(doc, "request_count")
    point.requests_completed = None if count is None else int(count)
    osl = metric_avg(doc, "output_sequence_length")
    if count and osl is not None and point.e2e_ms.mean is not None and point.ttft_ms.mean is not None:
        point.itl_ms = mean_only(
            pooled_itl_mean(point.e2e_ms.mean * count, point.ttft_ms.mean * count, (osl - 1) * count)
        )
    config = doc.get("input_config")
    if isinstance(config, dict):
        names = config.get("model_names") or config.get("model")
        if isinstance(names, list) and names:
            result.metadata["model"] = str(names[0])
        elif isinstance(names, str):
            result.metadata["model"] = names
        perf = config.get("perf_analyzer") if isinstance(config.get("perf_analyzer"), dict) else {}
        stimulus = perf.get("stimulus") if isinstance(perf.get("stimulus"), dict) else {}
        for holder in (stimulus, config):
            c, r = holder.get("concurrency"), holder.get("request_rate")
            if isinstance(c, (int, float)) and not isinstance(c, bool) and point.concurrency is None:
                point.concurrency = float(c)
            if isinstance(r, (int, float)) and not isinstance(r, bool) and point.request_rate is None:
                point.request_rate = float(r)
        result.metadata["input_config"] = cap_depth(config, 5)
    if isinstance(doc.get("telemetry_stats"), dict):
        result.metadata["telemetry_stats"] = cap_depth(doc["telemetry_stats"], 4)
    result.points.append(point)
    return finish(result, slo)


def sniff_raw(source: Source) -> str | Message | None:
    if source.head.lstrip()[:1] != "{":
        return Message(_("not a JSON object"))
    doc = source.doc_with('"experiments"')
    if not isinstance(doc, dict) or "experiments" not in doc:
        return Message(_("no 'experiments' key (perf_analyzer profile_export.json)"))
    return None


def parse_raw(source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    doc = expect_object(source.json, "(root)")
    experiments = get_list(doc, "experiments", "", required=True)
    result = NormalizedResult(tool="perf_analyzer", format="perf-analyzer-raw", definitions=dict(RAW_DEFINITIONS))
    version = doc.get("version")
    result.tool_version = version if isinstance(version, str) else None
    for key in ("service_kind", "endpoint"):
        if isinstance(doc.get(key), str):
            result.metadata[key] = doc[key]
    frames = []
    import pandas as pd

    for index, experiment in enumerate(experiments):
        path = f"experiments[{index}]"
        experiment = expect_object(experiment, path)
        setting = get_object(experiment, "experiment", path) or {}
        mode, value = setting.get("mode"), number(setting.get("value"), join(path, "experiment.value"))
        point = LoadPoint(label=f"{mode}={value:g}" if value is not None else str(mode))
        if mode == "concurrency":
            point.concurrency = value
        elif mode == "request_rate":
            point.request_rate = value
        requests = get_list(experiment, "requests", path, required=True)
        n = len(requests)
        # nanosecond epochs (~1.7e18) exceed float64 precision: subtract as integers first
        start_ns: list[int] = []
        ttft = np.full(n, np.nan)
        e2e = np.full(n, np.nan)
        last_ns: list[int] = []
        for i, request in enumerate(requests):
            rp = f"{path}.requests[{i}]"
            request = expect_object(request, rp)
            stamp0 = request.get("timestamp")
            number(stamp0, join(rp, "timestamp"), allow_none=False)
            stamp0 = int(stamp0)
            start_ns.append(stamp0)
            stamps = expect_list(request.get("response_timestamps", []), join(rp, "response_timestamps"))
            for j, stamp in enumerate(stamps):
                number(stamp, f"{join(rp, 'response_timestamps')}[{j}]", allow_none=False)
            if stamps:
                ttft[i] = (int(stamps[0]) - stamp0) / 1e6
                e2e[i] = (int(stamps[-1]) - stamp0) / 1e6
                last_ns.append(int(stamps[-1]))
        ok = np.isfinite(ttft)
        origin = min(start_ns) if start_ns else 0
        start = np.array([s - origin for s in start_ns], dtype=float)
        window = experiment.get("window_boundaries")
        if isinstance(window, list) and len(window) >= 2:
            number(window[0], join(path, "window_boundaries[0]"), allow_none=False)
            number(window[-1], join(path, "window_boundaries[-1]"), allow_none=False)
            w0, w1 = int(window[0]), int(window[-1])
            point.duration_s = (w1 - w0) / 1e9 if w1 > w0 else None
        elif last_ns:
            point.duration_s = (max(last_ns) - origin) / 1e9 or None
        point.requests_completed = int(ok.sum())
        point.requests_failed = int((~ok).sum())
        if point.duration_s:
            point.request_throughput = point.requests_completed / point.duration_s
        point.ttft_ms = stats_from_array(ttft[ok])
        point.e2e_ms = stats_from_array(e2e[ok])
        frames.append(
            request_frame(
                {
                    "point": np.full(n, index, dtype=np.int32),
                    "start_s": start / 1e9,
                    "ttft_ms": ttft,
                    "e2e_ms": e2e,
                    "ok": ok,
                    "error": np.where(ok, None, "no response"),
                },
                n,
            )
        )
        result.points.append(point)
    if frames:
        result.requests = pd.concat(frames, ignore_index=True)
    return finish(result, slo)


def sniff_csv(source: Source) -> str | Message | None:
    first = source.head.split("\n", 1)[0].strip()
    if not first.startswith("Metric,avg,"):
        return Message(_("first line is not the 'Metric,avg,...' table header"))
    if any(marker in source.head for marker in AIPERF_CSV_MARKERS) or ",sum," in first:
        return Message(_("looks like aiperf's CSV"))
    return None


FORMATS = [
    Format("genai-perf", "genai-perf", "genai-perf profile_export_genai_perf.json", sniff_json, parse_json),
    Format(
        "genai-perf-csv",
        "genai-perf",
        "genai-perf profile_export_genai_perf.csv",
        sniff_csv,
        lambda s, slo: parse_metric_csv(s, slo, "genai-perf", DEFINITIONS),
    ),
    Format(
        "perf-analyzer-raw",
        "perf_analyzer",
        "perf_analyzer / genai-perf raw profile_export.json (ns timestamps)",
        sniff_raw,
        parse_raw,
    ),
]
