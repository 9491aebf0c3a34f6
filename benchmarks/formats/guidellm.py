"""guidellm reports, every layout from 0.3 to 0.8, as JSON (`benchmarks.json`) or CSV.

Layouts: `{benchmarks}` (<=0.3), `{args, benchmarks}` (0.4), `{metadata v1, args, benchmarks}`
(0.5-0.6), `{metadata v2, config, benchmarks[, conclusions]}` (0.7-0.8). Each benchmark is one
load point. Definition mapping (REFERENCE 1.8):
- `time_to_first_token_ms` = kvselect TTFT.
- `request_latency` is in **seconds** -> e2e_ms x1000.
- `time_per_output_token_ms` = (last token - start)/tokens INCLUDES TTFT: not kvselect TPOT; kept
  in `extra["guidellm_time_per_output_token_ms"]`.
- `inter_token_latency_ms` = per request (last - first)/(tokens - 1) = kvselect TPOT per request,
  but its distribution is token-weighted: the mean equals kvselect's per-token ITL mean exactly,
  percentiles are neither, so itl_ms gets the mean only and tpot_ms comes from per-request records
  when the file holds every request (`--metrics sample_size` trims them).

Records vs totals (0.7-0.8): `requests.*` hold more records than `request_totals` counts (warm-up,
cool-down, requests made after the window). A record is counted iff its `info.timings.request_start`
is before `scheduler_metrics.measure_end_time` and its `request_end` is null or after
`measure_start_time` (exact for every status in real 0.7.4 and 0.8.1 files); only counted records
enter the per-request table. `incomplete` records are requests guidellm cancelled when the run
ended: marked cancelled, not failures, not SLO misses. Achieved concurrency = every counted
record's [request_start_time, request_end_time] clipped to the window / the window (reproduces
guidellm's `request_concurrency.total.mean`).
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

import numpy as np

from benchmarks.formats.base import Format, FormatError, Source
from benchmarks.formats.common import (
    cap_depth,
    expect_list,
    expect_object,
    finish,
    get_int,
    get_list,
    get_number,
    get_object,
    held_concurrency,
    join,
    mean_only,
    number,
    request_frame,
    stats_from_array,
)
from benchmarks.result import CANCELLED, LoadPoint, NormalizedResult, Stats
from selection.domain.messages import Message


def _(text: str) -> str:  # marks the refusals' templates for makemessages; the upload page translates them
    return text


DEFINITIONS = {
    "ttft_ms": "guidellm time_to_first_token_ms: first token iteration - request start (same as kvselect)",
    "tpot_ms": "guidellm has no kvselect TPOT aggregate: its time_per_output_token_ms (kept in "
    "extra.guidellm_time_per_output_token_ms) is (last token - request start)/output tokens in 0.7-0.8, i.e. "
    "INCLUDES TTFT, and (last - first token)/output tokens in 0.3 (divides by n, not n - 1); kvselect TPOT "
    "taken from per-request inter_token_latency_ms when every request is in the file",
    "itl_ms": "guidellm inter_token_latency_ms: per request (last - first token)/(tokens - 1), distribution weighted "
    "by tokens; its mean is the per-token ITL mean (kept), its percentiles are not (dropped)",
    "e2e_ms": "guidellm request_latency (seconds, converted): request start -> request end",
    "request_throughput": "guidellm requests_per_second.successful.mean over the measurement window",
    "achieved_concurrency": "requests in flight (any status) over guidellm's measurement window, from its request "
    "records (= its request_concurrency.total.mean)",
    "output_token_throughput": "guidellm output_tokens_per_second.successful.mean (time distribution)",
    "goodput": "guidellm 0.8 request_goodput (errored requests count as non-conforming) against config.slo",
}
LAYOUTS = {
    "benchmarks": "guidellm <=0.3 ({benchmarks})",
    "args": "guidellm 0.4 ({args, benchmarks})",
    "metadata1": "guidellm 0.5-0.6 ({metadata v1, args, benchmarks})",
    "metadata2": "guidellm 0.7-0.8 ({metadata v2, config, benchmarks})",
}
# LoadPoint attribute <- the mean of guidellm's successful-request distribution of that metric
MEAN_METRICS = (
    ("request_throughput", "requests_per_second"),
    ("output_token_throughput", "output_tokens_per_second"),
    ("input_token_throughput", "prompt_tokens_per_second"),
    ("goodput", "request_goodput"),
)
PERCENTILE_ORDER = ("p001", "p01", "p05", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "p999")


# --- JSON ---------------------------------------------------------------------------------------


def sniff_json(source: Source) -> str | Message | None:
    if source.head.lstrip()[:1] != "{":
        return Message(_("not a JSON object"))
    doc = source.doc_with('"benchmarks"')
    if not isinstance(doc, dict):
        return Message(_("not a JSON object"))
    if "benchmarks" not in doc:
        return Message(_("no top-level 'benchmarks' key"))
    benchmarks = doc["benchmarks"]
    if not isinstance(benchmarks, list):
        return None  # recognised; parse names the bad type
    extra = set(doc) - {"benchmarks", "args", "metadata", "config", "conclusions"}
    versioned = isinstance(doc.get("metadata"), dict) and "guidellm_version" in doc["metadata"]
    if extra and not versioned:  # a newer guidellm may add keys; an unversioned stranger may not
        return Message(_("unexpected top-level keys %(keys)s for a guidellm report"), {"keys": str(sorted(extra)[:5])})
    if benchmarks and isinstance(benchmarks[0], dict) and "metrics" not in benchmarks[0]:
        return Message(_("benchmarks[0] has no 'metrics'"))
    return None


def _layout(doc: dict[str, Any]) -> str:
    metadata = doc.get("metadata")
    if metadata is not None:
        metadata = expect_object(metadata, "metadata")
        version = metadata.get("version")
        if version == 1:
            return "metadata1"
        if version == 2:
            return "metadata2"
        raise FormatError(f"metadata.version: unsupported guidellm report version {version!r} (known: 1, 2)")
    if "args" in doc:
        return "args"
    return "benchmarks"


def parse_json(source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    doc = expect_object(source.json, "(root)")
    layout = _layout(doc)
    benchmarks = get_list(doc, "benchmarks", "", required=True)
    result = NormalizedResult(tool="guidellm", format="guidellm", definitions=dict(DEFINITIONS))
    result.metadata["layout"] = LAYOUTS[layout]
    metadata = doc.get("metadata") or {}
    result.tool_version = (
        metadata.get("guidellm_version") if isinstance(metadata.get("guidellm_version"), str) else None
    )
    if isinstance(metadata.get("platform"), str):
        result.metadata["platform"] = metadata["platform"]
    run_config = doc.get("config") if layout == "metadata2" else doc.get("args")
    if run_config is not None:
        run_config = expect_object(run_config, "config" if layout == "metadata2" else "args")
        _config_metadata(run_config, result)
    if isinstance(doc.get("conclusions"), list) and doc["conclusions"]:
        result.metadata["conclusions"] = cap_depth(doc["conclusions"], 4)
    frames = []
    for index, bench in enumerate(benchmarks):
        point, frame = _benchmark(bench, f"benchmarks[{index}]", index, result)
        result.points.append(point)
        if frame is not None:
            frames.append(frame)
    if frames:
        import pandas as pd

        result.requests = pd.concat(frames, ignore_index=True)
    return finish(result, slo)


def _config_metadata(config: dict[str, Any], result: NormalizedResult) -> None:
    spec = config.get("spec") if isinstance(config.get("spec"), dict) else config
    backend = spec.get("backend") if isinstance(spec.get("backend"), dict) else None
    if backend:
        for key in ("target", "model", "kind"):
            if isinstance(backend.get(key), str) and backend[key]:
                result.metadata.setdefault("backend_" + key if key != "model" else "model", backend[key])
    for key in ("target", "model", "backend_type", "backend"):
        if isinstance(config.get(key), str) and config[key]:
            result.metadata.setdefault(key if key != "backend" else "backend_kind", config[key])
    labels = (config.get("metadata") or {}).get("labels") if isinstance(config.get("metadata"), dict) else None
    if isinstance(labels, dict) and labels:
        result.metadata["labels"] = cap_depth(labels, 3)


def _worker_metadata(worker: dict[str, Any], result: NormalizedResult) -> None:
    """guidellm <=0.3 kept the backend in each benchmark's `worker`."""
    for src, dst in (
        ("backend_model", "model"),
        ("backend_target", "backend_target"),
        ("backend_type", "backend_kind"),
    ):
        if isinstance(worker.get(src), str) and worker[src]:
            result.metadata.setdefault(dst, worker[src])


def _distribution(metrics: dict[str, Any], name: str, path: str, status: str = "successful") -> dict[str, Any] | None:
    block = metrics.get(name)
    if block is None:
        return None
    block = expect_object(block, join(path, name))
    if status in block or "total" in block:
        inner = block.get(status)
        return None if inner is None else expect_object(inner, join(join(path, name), status))
    return block  # a bare DistributionSummary


def _stats(dist: dict[str, Any] | None, path: str, scale: float = 1.0) -> Stats:
    if dist is None:
        return Stats()
    percentiles = dist.get("percentiles")
    if percentiles is not None:
        percentiles = expect_object(percentiles, join(path, "percentiles"))
    else:
        percentiles = {}

    def value(v: Any, p: str) -> float | None:
        n = number(v, p)
        return None if n is None else n * scale

    count = dist.get("count")
    if isinstance(count, (int, float)) and not isinstance(count, bool) and count == 0:
        return Stats()
    p50 = percentiles.get("p50", dist.get("median"))
    return Stats(
        mean=value(dist.get("mean"), join(path, "mean")),
        p50=value(p50, join(path, "percentiles.p50")),
        p90=value(percentiles.get("p90"), join(path, "percentiles.p90")),
        p95=value(percentiles.get("p95"), join(path, "percentiles.p95")),
        p99=value(percentiles.get("p99"), join(path, "percentiles.p99")),
        max=value(dist.get("max"), join(path, "max")),
    )


def _strategy(bench: dict[str, Any], path: str) -> dict[str, Any]:
    for holder in ("config", "args"):
        block = bench.get(holder)
        if isinstance(block, dict) and isinstance(block.get("strategy"), dict):
            return block["strategy"]
    if isinstance(bench.get("strategy"), dict):
        return bench["strategy"]
    return {}


def _benchmark(bench: Any, path: str, index: int, result: NormalizedResult) -> tuple[LoadPoint, Any]:
    bench = expect_object(bench, path)
    metrics = get_object(bench, "metrics", path, required=True)
    mpath = join(path, "metrics")
    point = _requested_point(bench, metrics, path)
    _metric_figures(point, metrics, mpath)
    config = bench.get("config")
    if isinstance(config, dict) and isinstance(config.get("slo"), dict):
        point.extra["goodput_slo_ms"] = cap_depth(config["slo"], 2)
    warnings = bench.get("warnings")
    if isinstance(warnings, list) and warnings:
        point.extra["warnings"] = cap_depth(warnings, 3)

    if isinstance(bench.get("worker"), dict) and "model" not in result.metadata:
        _worker_metadata(bench["worker"], result)
    if isinstance(config, dict) and isinstance(config.get("backend"), dict):
        backend = config["backend"]
        for src, dst in (("model", "model"), ("target", "backend_target")):
            if isinstance(backend.get(src), str) and backend[src]:
                result.metadata.setdefault(dst, backend[src])
    window = _measure_window(bench, path)
    records = _requests(bench, path, index, window)
    frame = None
    if records is not None:
        frame = _use_records(records, window, point, index, result)
    if point.achieved_concurrency is None:
        point.achieved_concurrency = _reported_concurrency(metrics, mpath)
    return point, frame


def _requested_point(bench: dict[str, Any], metrics: dict[str, Any], path: str) -> LoadPoint:
    """The point's requested load (from the strategy) and its request totals."""
    mpath = join(path, "metrics")
    strategy = _strategy(bench, path)
    kind = strategy.get("type_") if isinstance(strategy.get("type_"), str) else "unknown"
    concurrency = None
    rate = None
    if kind == "synchronous":
        concurrency = 1.0
    elif kind == "concurrent":
        concurrency = number(strategy.get("streams"), join(path, "config.strategy.streams"))
    elif kind in ("constant", "poisson", "async"):
        rate = number(strategy.get("rate"), join(path, "config.strategy.rate"))
    cap = (
        number(strategy.get("max_concurrency"), join(path, "config.strategy.max_concurrency"))
        if kind == "throughput"
        else None
    )
    label = (
        kind
        + (f"@{concurrency:g}" if concurrency is not None and kind != "synchronous" else "")
        + (f"@{rate:g}" if rate is not None else "")
    )
    totals = metrics.get("request_totals", bench.get("request_totals"))
    completed = failed = incomplete = None
    if totals is not None:
        totals = expect_object(totals, join(mpath, "request_totals"))
        completed = get_int(totals, "successful", join(mpath, "request_totals"))
        failed = get_int(totals, "errored", join(mpath, "request_totals"))
        incomplete = get_int(totals, "incomplete", join(mpath, "request_totals"))
    point = LoadPoint(
        label=label,
        concurrency=concurrency,
        request_rate=rate,
        duration_s=get_number(bench, "duration", path),
        requests_completed=completed,
        requests_failed=failed,
    )
    if incomplete:
        point.extra["requests_incomplete"] = incomplete
        point.extra["cancelled_in_flight"] = incomplete  # guidellm's "incomplete": cancelled when the run ended
    if cap is not None:  # throughput mode: a cap on in-flight requests, not a requested concurrency
        point.extra["max_concurrency"] = cap
    return point


def _metric_figures(point: LoadPoint, metrics: dict[str, Any], mpath: str) -> None:
    """Latency statistics and mean figures from guidellm's aggregates (its ITL and TPOT are token-weighted:
    only the ITL mean is kvselect's, both are kept in extra)."""
    point.ttft_ms = _stats(
        _distribution(metrics, "time_to_first_token_ms", mpath), join(mpath, "time_to_first_token_ms.successful")
    )
    point.e2e_ms = _stats(
        _distribution(metrics, "request_latency", mpath), join(mpath, "request_latency.successful"), 1000.0
    )
    itl = _stats(
        _distribution(metrics, "inter_token_latency_ms", mpath), join(mpath, "inter_token_latency_ms.successful")
    )
    point.itl_ms = mean_only(itl.mean)
    if not itl.is_empty():
        point.extra["guidellm_itl_token_weighted_ms"] = itl.__dict__.copy()
    tpot_incl = _stats(
        _distribution(metrics, "time_per_output_token_ms", mpath), join(mpath, "time_per_output_token_ms.successful")
    )
    if not tpot_incl.is_empty():
        point.extra["guidellm_time_per_output_token_ms"] = tpot_incl.__dict__.copy()
    for attribute, metric in MEAN_METRICS:
        distribution = _distribution(metrics, metric, mpath)
        if distribution is not None:
            setattr(point, attribute, number(distribution.get("mean"), join(mpath, f"{metric}.successful.mean")))
    if "slo_attainment" in metrics:
        point.slo_attainment = get_number(metrics, "slo_attainment", mpath)


def _use_records(
    records: Any, window: tuple[float, float] | None, point: LoadPoint, index: int, result: NormalizedResult
) -> Any:
    """The per-request frame; when it holds every request guidellm counted, TPOT and the held concurrency
    come from it."""
    frame, counted, spans = records
    completed, failed = point.requests_completed, point.requests_failed
    incomplete = point.extra.get("requests_incomplete")
    by_status = {status: int(counted[status].sum()) for status in counted}
    totals_known = completed is not None
    expected = {"successful": completed or 0, "errored": failed or 0, "incomplete": incomplete or 0}
    left_out = sum(len(mask) - int(mask.sum()) for mask in counted.values())
    if window is not None and left_out:
        result.notes.append(
            f"point {index}: {left_out} request records lie outside guidellm's measurement window (warm-up, "
            "cool-down or after its end) and are left out, as guidellm's own totals leave them out"
        )
    complete = totals_known and all(by_status.get(k, 0) == v for k, v in expected.items())
    ok = frame[frame["ok"]]
    if complete and ok["tpot_ms"].notna().any():
        point.tpot_ms = stats_from_array(ok["tpot_ms"].to_numpy(dtype=float))
    elif not complete:
        held = sum(by_status.values())
        result.notes.append(
            f"point {index}: the file holds {held} of the {sum(expected.values())} requests guidellm counted "
            "(sampled); TPOT (kvselect definition) not derivable from guidellm's token-weighted aggregates"
            if totals_known
            else f"point {index}: guidellm's request totals are missing; TPOT not derived from its records"
        )
    if complete and window is not None:
        point.achieved_concurrency = held_concurrency(spans[0], spans[1], window)
        point.extra["achieved_concurrency_source"] = (
            "guidellm request records, each clipped to the measurement window (requests in flight, any status)"
        )
    return frame


def _reported_concurrency(metrics: dict[str, Any], mpath: str) -> float | None:
    """guidellm's own mean request concurrency (all requests, else successful ones)."""
    concurrency_dist = metrics.get("request_concurrency")
    if isinstance(concurrency_dist, dict) and isinstance(concurrency_dist.get("total"), dict):
        return number(concurrency_dist["total"].get("mean"), join(mpath, "request_concurrency.total.mean"))
    distribution = _distribution(metrics, "request_concurrency", mpath)
    if distribution is not None:
        return number(distribution.get("mean"), join(mpath, "request_concurrency.successful.mean"))
    return None


def _measure_window(bench: dict[str, Any], path: str) -> tuple[float, float] | None:
    """guidellm's measurement window (0.7+: scheduler_metrics.measure_start/end_time)."""
    scheduler = bench.get("scheduler_metrics")
    if not isinstance(scheduler, dict):
        return None
    spath = join(path, "scheduler_metrics")
    start = get_number(scheduler, "measure_start_time", spath)
    end = get_number(scheduler, "measure_end_time", spath)
    return (start, end) if start is not None and end is not None and end > start else None


def _counted(record: dict[str, Any], rp: str, window: tuple[float, float] | None) -> bool:
    """Whether guidellm's totals count a record: it started before the window's end and did not
    end before its start (`info.timings.request_start/request_end`; checked against every record
    of real 0.7.4 and 0.8.1 files, warm-up and cool-down included)."""
    if window is None:
        return True
    info = record.get("info")
    timings = info.get("timings") if isinstance(info, dict) else None
    if not isinstance(timings, dict):
        return True
    tpath = join(join(rp, "info"), "timings")
    started = get_number(timings, "request_start", tpath)
    ended = get_number(timings, "request_end", tpath)
    if started is None:
        return False  # never sent
    return started < window[1] and (ended is None or ended > window[0])


REQUEST_ROW = (
    "request_id",
    "start",
    "end",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "prompt_tokens",
    "output_tokens",
    "ok",
    "error",
)


def _record_row(record: dict[str, Any], rp: str, status: str) -> tuple[Any, ...]:
    """One request record's `REQUEST_ROW` values (guidellm's own figures, else derived from its timestamps)."""
    info = record.get("info") if isinstance(record.get("info"), dict) else {}
    rid = record.get("request_id")
    started = get_number(record, "request_start_time", rp)
    if started is None:
        started = get_number(record, "start_time", rp)
    ended = get_number(record, "request_end_time", rp)
    if ended is None:
        ended = get_number(record, "end_time", rp)
    latency = get_number(record, "request_latency", rp)
    if latency is None:
        end = get_number(record, "end_time", rp)
        latency = end - started if end is not None and started is not None else None
    ttft = get_number(record, "time_to_first_token_ms", rp)
    if ttft is None:
        first = get_number(record, "first_token_time", rp)
        ttft = (first - started) * 1000 if first is not None and started is not None else None
    output_tokens = get_number(record, "output_tokens", rp)
    itl = get_number(record, "inter_token_latency_ms", rp)
    if itl is None:
        first = get_number(record, "first_token_time", rp)
        last = get_number(record, "last_token_time", rp)
        if first is not None and last is not None and output_tokens and output_tokens > 1:
            itl = (last - first) * 1000 / (output_tokens - 1)
    prompt_tokens = get_number(record, "prompt_tokens", rp)
    error = info.get("error") if info else record.get("error")
    message = error if isinstance(error, str) else None
    if status == "incomplete":  # guidellm cancels the requests still in flight when a run ends
        error_text = f"{CANCELLED}: {message}" if message else CANCELLED
    else:
        error_text = message or (status if status != "successful" else None)
    return (
        rid if isinstance(rid, str) else None,
        started,
        ended,
        ttft,
        itl if status == "successful" else None,
        None if latency is None else latency * 1000,
        prompt_tokens,
        output_tokens,
        status == "successful",
        error_text,
    )


def _requests(bench: dict[str, Any], path: str, index: int, window: tuple[float, float] | None) -> Any:
    """The per-request frame of the records guidellm counted, which records were counted per
    status, and each counted record's [start, end] (for the concurrency held)."""
    requests = bench.get("requests")
    if requests is None:
        return None
    rpath = join(path, "requests")
    requests = expect_object(requests, rpath)
    start = get_number(bench, "start_time", path)
    rows: dict[str, list[Any]] = {k: [] for k in REQUEST_ROW}
    counted: dict[str, np.ndarray] = {}
    for status in ("successful", "errored", "incomplete"):
        records = requests.get(status)
        if records is None:
            continue
        records = expect_list(records, join(rpath, status))
        mask = np.zeros(len(records), dtype=bool)
        for i, record in enumerate(records):
            rp = f"{join(rpath, status)}[{i}]"
            record = expect_object(record, rp)
            if not _counted(record, rp, window):
                continue
            mask[i] = True
            for column, value in zip(REQUEST_ROW, _record_row(record, rp, status), strict=True):
                rows[column].append(value)
        counted[status] = mask
    n = len(rows["ok"])
    if n == 0 and not counted:
        return None

    def col(name: str) -> np.ndarray:
        return np.array([np.nan if v is None else v for v in rows[name]], dtype=float)

    starts = col("start")
    ends = col("end")
    if window is not None:  # a request cut at the end has no end time of its own: it ran to the end
        ends = np.where(np.isnan(ends) & np.isfinite(starts), window[1], ends)
    origin = start if start is not None else (np.nanmin(starts) if np.isfinite(starts).any() else 0.0)
    tpot = col("tpot_ms")
    frame = request_frame(
        {
            "point": np.full(n, index, dtype=np.int32),
            "request_id": np.array(rows["request_id"], dtype=object),
            "start_s": starts - origin,
            "ttft_ms": col("ttft_ms"),
            "tpot_ms": tpot,
            "itl_ms_mean": tpot,
            "e2e_ms": col("e2e_ms"),
            "prompt_tokens": col("prompt_tokens"),
            "output_tokens": col("output_tokens"),
            "ok": np.array(rows["ok"], dtype=bool),
            "error": np.array(rows["error"], dtype=object),
        },
        n,
    )
    return frame, counted, (starts, ends)


# --- CSV ----------------------------------------------------------------------------------------


def _csv_rows(source: Source) -> list[list[str]]:
    try:
        return list(csv.reader(io.StringIO(source.text)))
    except csv.Error as error:
        raise FormatError(f"unreadable CSV: {error}") from None


def sniff_csv(source: Source) -> str | Message | None:
    first = source.head.split("\n", 1)[0]
    if first.startswith("Type,Run Id,Id,Name,"):
        return None  # guidellm <=0.3: one header row
    if not (first.startswith("Run Info,") or first.startswith("Benchmark,")):
        return Message(
            _(
                "first CSV header row does not start with guidellm's 'Run Info'/'Benchmark' group "
                "(or 0.3's 'Type,Run Id')"
            )
        )
    return None


V03_LIST = "[min, 0.1, 1, 5, 10, 25, 75, 90, 95, 99, max]"
V03_ORDER = ("min", "p001", "p01", "p05", "p10", "p25", "p75", "p90", "p95", "p99", "max")


def _parse_csv_v03(rows: list[list[str]], slo: dict[str, Any] | None) -> NormalizedResult:
    """guidellm <=0.3 CSV: one header row, `Successful <metric> mean|median|std dev|[list]` columns."""
    header = rows[0]
    result = NormalizedResult(tool="guidellm", format="guidellm-csv", definitions=dict(DEFINITIONS))
    result.metadata["layout"] = "guidellm <=0.3 CSV (one header row)"
    for index, row in enumerate(r for r in rows[1:] if any(c.strip() for c in r)):
        line = index + 2
        if len(row) != len(header):
            raise FormatError(f"CSV line {line}: has {len(row)} columns, the header has {len(header)}")
        result.points.append(_v03_point(dict(zip(header, row, strict=False)), line, result))
    if not result.points:
        raise FormatError("CSV: no benchmark rows after the header row")
    return finish(result, slo)


def _v03_number(cells: dict[str, str], column: str, line: int, scale: float = 1.0) -> float | None:
    value = _csv_number({(column, "", ""): cells.get(column, "")}, (column, "", ""), line)
    return None if value is None else value * scale


def _v03_stats(cells: dict[str, str], metric: str, line: int, scale: float = 1.0) -> Stats:
    """`Successful <metric> mean|median|[list]`: the list holds the percentiles in `V03_ORDER`."""
    base = f"Successful {metric}"
    out = Stats(
        mean=_v03_number(cells, f"{base} mean", line, scale), p50=_v03_number(cells, f"{base} median", line, scale)
    )
    raw = cells.get(f"{base} {V03_LIST}")
    if raw:
        try:
            values = json.loads(raw)
        except ValueError:
            raise FormatError(f"CSV line {line}, column {base} {V03_LIST}: expected a JSON list") from None
        if not isinstance(values, list) or len(values) != len(V03_ORDER):
            raise FormatError(f"CSV line {line}, column {base} {V03_LIST}: expected {len(V03_ORDER)} values")
        for ours in ("p90", "p95", "p99", "max"):
            v = number(values[V03_ORDER.index(ours)], f"CSV line {line}, column {base} {V03_LIST}")
            setattr(out, ours, None if v is None else v * scale)
    return out


def _v03_point(cells: dict[str, str], line: int, result: NormalizedResult) -> LoadPoint:
    """One benchmark row of a guidellm <=0.3 CSV."""

    def num(column: str, scale: float = 1.0) -> float | None:
        return _v03_number(cells, column, line, scale)

    def stats(metric: str, scale: float = 1.0) -> Stats:
        return _v03_stats(cells, metric, line, scale)

    name = cells.get("Name", "")
    kind, _, value = name.partition("@")
    point = LoadPoint(label=name or f"row {line}", duration_s=num("Duration"))
    try:
        if kind == "synchronous":
            point.concurrency = 1.0
        elif kind in ("concurrent", "throughput") and value:
            point.concurrency = float(value)
        elif kind in ("constant", "poisson", "async") and value:
            point.request_rate = float(value)
    except ValueError:
        raise FormatError(f"CSV line {line}, column Name: unreadable strategy {name!r}") from None
    completed, failed = num("Successful Requests"), num("Errored Requests")
    point.requests_completed = None if completed is None else int(completed)
    point.requests_failed = None if failed is None else int(failed)
    point.ttft_ms = stats("Time to first token ms")
    point.e2e_ms = stats("Request latency", 1000.0)
    itl = stats("Inter token latency ms")
    point.itl_ms = mean_only(itl.mean)
    if not itl.is_empty():
        point.extra["guidellm_itl_token_weighted_ms"] = itl.__dict__.copy()
    tpot = stats("Time per output token ms")
    if not tpot.is_empty():
        point.extra["guidellm_time_per_output_token_ms"] = tpot.__dict__.copy()
    point.request_throughput = num("Successful Requests per second mean")
    point.achieved_concurrency = num("Successful Request concurrency mean")
    point.output_token_throughput = num("Successful Output tokens per second mean")
    worker_raw = cells.get("Worker")
    if worker_raw and "model" not in result.metadata:
        try:
            worker = json.loads(worker_raw)
        except ValueError:
            worker = None
        if isinstance(worker, dict):
            _worker_metadata(worker, result)
    return point


def parse_csv(source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    rows = _csv_rows(source)
    if rows and rows[0][:4] == ["Type", "Run Id", "Id", "Name"]:
        return _parse_csv_v03(rows, slo)
    if len(rows) < 3:
        raise FormatError(f"CSV: expected three header rows (group, metric, statistic), found {len(rows)} rows")
    width = len(rows[0])
    for r, row in enumerate(rows[:3]):
        if len(row) != width:
            raise FormatError(f"CSV header row {r + 1}: has {len(row)} columns, row 1 has {width}")
    keys = list(zip(rows[0], rows[1], rows[2], strict=False))
    result = NormalizedResult(tool="guidellm", format="guidellm-csv", definitions=dict(DEFINITIONS))
    result.metadata["layout"] = "guidellm CSV (three header rows)"
    data_rows = [row for row in rows[3:] if any(cell.strip() for cell in row)]
    for index, row in enumerate(data_rows):
        line = index + 4
        if len(row) != width:
            raise FormatError(f"CSV line {line}: has {len(row)} columns, the header has {width}")
        cells = {key: value for key, value in zip(keys, row, strict=False)}
        result.points.append(_csv_point(cells, line, result, index))
    if not result.points:
        raise FormatError("CSV: no benchmark rows after the three header rows")
    return finish(result, slo)


def _csv_number(cells: dict[tuple[str, str, str], str], key: tuple[str, str, str], line: int) -> float | None:
    raw = cells.get(key)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise FormatError(
            f"CSV line {line}, column {' / '.join(k for k in key if k)}: expected a number, got {raw[:40]!r}"
        ) from None
    if not math.isfinite(value):
        raise FormatError(
            f"CSV line {line}, column {' / '.join(k for k in key if k)}: expected a finite number, got {raw!r}"
        )
    return value


def _csv_stats(cells: dict[tuple[str, str, str], str], group: str, metric: str, line: int, scale: float = 1.0) -> Stats:
    mean = _csv_number(cells, (group, metric, "Mean"), line)
    median = _csv_number(cells, (group, metric, "Median"), line)
    stats = Stats(mean=None if mean is None else mean * scale, p50=None if median is None else median * scale)
    raw = cells.get((group, metric, "Percentiles"))
    if raw:
        try:
            values = json.loads(raw)
        except ValueError:
            raise FormatError(
                f"CSV line {line}, column {group} / {metric} / Percentiles: expected a JSON list, got {raw[:40]!r}"
            ) from None
        if not isinstance(values, list) or len(values) != len(PERCENTILE_ORDER):
            raise FormatError(
                f"CSV line {line}, column {group} / {metric} / Percentiles: expected {len(PERCENTILE_ORDER)} values "
                "(p001..p999)"
            )
        mapping = dict(zip(PERCENTILE_ORDER, values, strict=False))
        for ours in ("p90", "p95", "p99"):
            value = number(
                mapping[ours],
                f"CSV line {line}, column {group} / {metric} / Percentiles[{PERCENTILE_ORDER.index(ours)}]",
            )
            setattr(stats, ours, None if value is None else value * scale)
    return stats


def _csv_point(cells: dict[tuple[str, str, str], str], line: int, result: NormalizedResult, row: int) -> LoadPoint:
    strategy = cells.get(("Benchmark", "Strategy", ""), "")
    kind, _, value = strategy.partition("@")
    if not value:  # 0.4-0.7 write the bare kind; the profile holds the streams/rates run
        value, strategy = _profile_setting(cells, kind, row, value, strategy)
    concurrency = rate = None
    try:
        if kind == "synchronous":
            concurrency = 1.0
        elif kind in ("concurrent", "throughput") and value:
            concurrency = float(value)
        elif kind in ("constant", "poisson", "async") and value:
            rate = float(value)
    except ValueError:
        raise FormatError(f"CSV line {line}, column Benchmark / Strategy: unreadable strategy {strategy!r}") from None
    completed = _csv_number(cells, ("Request Counts", "Successful", ""), line)
    failed = _csv_number(cells, ("Request Counts", "Errored", ""), line)
    point = LoadPoint(
        label=strategy or f"row {line}",
        concurrency=concurrency,
        request_rate=rate,
        duration_s=_csv_number(cells, ("Timings", "Duration", "Sec"), line),
        requests_completed=None if completed is None else int(completed),
        requests_failed=None if failed is None else int(failed),
    )
    point.ttft_ms = _csv_stats(cells, "Time to First Token", "Successful ms", line)
    point.e2e_ms = _csv_stats(cells, "Request Latency", "Successful Sec", line, 1000.0)
    itl = _csv_stats(cells, "Inter Token Latency", "Successful ms", line)
    point.itl_ms = mean_only(itl.mean)
    if not itl.is_empty():
        point.extra["guidellm_itl_token_weighted_ms"] = itl.__dict__.copy()
    tpot_incl = _csv_stats(cells, "Time per Output Token", "Successful ms", line)
    if not tpot_incl.is_empty():
        point.extra["guidellm_time_per_output_token_ms"] = tpot_incl.__dict__.copy()
    point.request_throughput = _csv_number(cells, ("Server Throughput", "Successful Requests/Sec", "Mean"), line)
    # requests in flight of every status, as the JSON's request_concurrency.total (the CSV has one
    # column per status; the sum of their means is the total's mean)
    held = [
        _csv_number(cells, ("Server Throughput", f"{status} Concurrency", "Mean"), line)
        for status in ("Successful", "Incomplete", "Errored")
    ]
    point.achieved_concurrency = None if held[0] is None else sum(v for v in held if v is not None)
    incomplete = _csv_number(cells, ("Request Counts", "Incomplete", ""), line)
    if incomplete:
        point.extra["requests_incomplete"] = int(incomplete)
        point.extra["cancelled_in_flight"] = int(incomplete)
    point.output_token_throughput = _csv_number(
        cells, ("Token Throughput", "Successful Output Tokens/Sec", "Mean"), line
    )
    point.input_token_throughput = _csv_number(cells, ("Token Throughput", "Successful Input Tokens/Sec", "Mean"), line)
    point.goodput = _csv_number(cells, ("Server Throughput", "Successful Goodput/Sec", "mean"), line)
    point.slo_attainment = _csv_number(cells, ("Server Throughput", "SLO Attainment", ""), line)
    _csv_run_metadata(cells, result)
    return point


def _profile_setting(
    cells: dict[tuple[str, str, str], str], kind: str, row: int, value: str, strategy: str
) -> tuple[str, str]:
    """The streams/rate of benchmark `row` from the run's profile (0.4-0.7 write the bare kind), as
    the strategy's value and label; both unchanged when the profile does not say."""
    try:
        profile = json.loads(cells.get(("Run Info", "Profile", ""), "") or "null")
    except ValueError:
        profile = None
    setting = None
    done = profile.get("completed_strategies") if isinstance(profile, dict) else None
    if isinstance(done, list) and row < len(done) and isinstance(done[row], dict):
        setting = done[row].get("streams") if kind == "concurrent" else done[row].get("rate")
    elif isinstance(profile, dict) and profile.get("kind") == kind:
        # 0.7: no completed_strategies; the profile lists the streams (or rates), one per benchmark row
        listed = profile.get("streams") if kind == "concurrent" else profile.get("rate")
        listed = listed if isinstance(listed, list) else [listed]
        if row < len(listed):
            setting = listed[row]
    if isinstance(setting, (int, float)) and not isinstance(setting, bool):
        value = str(setting)
        strategy = f"{kind}@{setting:g}"
    return value, strategy


def _csv_run_metadata(cells: dict[tuple[str, str, str], str], result: NormalizedResult) -> None:
    """guidellm's version, the platform and the backend, from the first row that gives them."""
    meta_raw = cells.get(("Runtime Info", "Metadata", ""))
    if meta_raw and result.tool_version is None:
        try:
            meta = json.loads(meta_raw)
        except ValueError:
            meta = None
        if isinstance(meta, dict) and isinstance(meta.get("guidellm_version"), str):
            result.tool_version = meta["guidellm_version"]
            if isinstance(meta.get("platform"), str):
                result.metadata["platform"] = meta["platform"]
    backend_raw = cells.get(("Run Info", "Backend", ""))
    if backend_raw and "backend_target" not in result.metadata:
        try:
            backend = json.loads(backend_raw)
        except ValueError:
            backend = None
        if isinstance(backend, dict):
            for key in ("target", "model", "kind"):
                if isinstance(backend.get(key), str) and backend[key]:
                    result.metadata["backend_" + key if key != "model" else "model"] = backend[key]


FORMATS = [
    Format("guidellm", "guidellm", "guidellm benchmarks.json (report layouts 0.3-0.8)", sniff_json, parse_json),
    Format("guidellm-csv", "guidellm", "guidellm CSV export (three header rows)", sniff_csv, parse_csv),
]
