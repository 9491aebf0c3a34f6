"""guidellm's JSON report (`benchmarks.json`), every layout from 0.3 to 0.8: one load point per
benchmark, per-request records counted against the measurement window (see the package's docstring)."""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.formats.base import Source
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
    refused,
    request_frame,
    stats_from_array,
)
from benchmarks.formats.guidellm.definitions import DEFINITIONS, worker_metadata
from benchmarks.result import CANCELLED, LoadPoint, NormalizedResult, Stats
from selection.domain.messages import Message
from selection.domain.messages import marked as _

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

# run notes (English in `notes`; the message beside it for pages in any language)
OUTSIDE_WINDOW = _(
    "point %(index)s: %(n)s request records lie outside guidellm's measurement window (warm-up, cool-down or after "
    "its end) and are left out, as guidellm's own totals leave them out"
)
SAMPLED_RECORDS = _(
    "point %(index)s: the file holds %(held)s of the %(counted)s requests guidellm counted (sampled); TPOT "
    "(kvselect definition) not derivable from guidellm's token-weighted aggregates"
)
TOTALS_MISSING = _("point %(index)s: guidellm's request totals are missing; TPOT not derived from its records")


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
        why = _("unsupported guidellm report version %(version)s (known: 1, 2)")
        raise refused("metadata.version", why, version=repr(version))
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
        worker_metadata(bench["worker"], result)
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
        result.add_note(Message(OUTSIDE_WINDOW, {"index": index, "n": left_out}))
    complete = totals_known and all(by_status.get(k, 0) == v for k, v in expected.items())
    ok = frame[frame["ok"]]
    if complete and ok["tpot_ms"].notna().any():
        point.tpot_ms = stats_from_array(ok["tpot_ms"].to_numpy(dtype=float))
    elif not complete:
        held = sum(by_status.values())
        result.add_note(
            Message(SAMPLED_RECORDS, {"index": index, "held": held, "counted": sum(expected.values())})
            if totals_known
            else Message(TOTALS_MISSING, {"index": index})
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
