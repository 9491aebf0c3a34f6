"""aiperf (ai-dynamo/aiperf): `profile_export_aiperf.json` (schema 1.0-1.5, and pre-schema 0.1.x),
its multi-table CSV, and the per-request `profile_export.jsonl`.

Each metric block carries its own `unit`, which is authoritative (ms, sec, ns, tokens/sec...).
Definition mapping: aiperf `inter_token_latency` = (latency - TTFT)/(OSL - 1) per request, i.e.
kvselect **TPOT**; `inter_chunk_latency` is per-chunk and goes to `extra["itl_chunk_ms"]`;
kvselect ITL gets only its exact mean (total decode time / total token gaps).
The JSONL is read with pyarrow against an explicit schema (vectorised; 1M records in seconds).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.formats.base import Format, FormatError, Source, where_in
from benchmarks.formats.common import (
    cancelled_mask,
    cap_depth,
    expect_object,
    finish,
    held_concurrency,
    mean_only,
    number,
    per_request_tpot,
    pooled_itl_mean,
    refused,
    request_frame,
    stats_from_array,
)
from benchmarks.formats.metric_table import (
    AIPERF_CSV_MARKERS,
    latency_stats,
    metric_avg,
    metric_block,
    metric_sum,
    parse_metric_csv,
    unit_scale,
)
from benchmarks.result import CANCELLED, LoadPoint, NormalizedResult
from selection.domain.messages import Code, Message
from selection.domain.messages import marked as _

JSONL = "profile_export.jsonl"
KNOWN_SCHEMAS = ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5")

# run notes (English in `notes`; the message beside it for pages in any language)
NO_SUCCESS = _("no successful request: every latency metric is null")
REPORTED_CANCELLED = _("aiperf reports the run as cancelled/incomplete")
RECOMPUTED = _("summary statistics recomputed from per-request records; throughput over first start -> last end")
NO_REQUESTED_LOAD = _(
    "the requested concurrency or rate is not in %(file)s (it is in %(other)s): the run cannot be judged "
    "client-bound from this file alone"
)


DEFINITIONS = {
    "ttft_ms": "aiperf time_to_first_token: first content response - request start (reasoning counts)",
    "tpot_ms": "aiperf inter_token_latency = (request_latency - TTFT)/(OSL - 1) per request (= kvselect TPOT)",
    "itl_ms": "aiperf inter_chunk_latency is per chunk (kept in extra.itl_chunk_ms); kvselect ITL mean derived as "
    "sum(latency - TTFT)/sum(OSL - 1); ITL percentiles not derivable",
    "e2e_ms": "aiperf request_latency: request start -> last content response",
    "request_throughput": "aiperf request_throughput: request_count / (last response - first request)",
    "output_token_throughput": "aiperf output_token_throughput: total OSL (incl. reasoning) / duration",
    "goodput": "aiperf goodput: requests meeting --goodput SLOs / duration",
}


# --- summary JSON -------------------------------------------------------------------------------


def sniff_json(source: Source) -> str | Message | None:
    if source.head.lstrip()[:1] != "{":
        return Message(_("not a JSON object"))
    if source.is_jsonl:
        return Message(_("newline-delimited records, not a summary"))
    doc = source.doc_with('"aiperf_version"', '"schema_version"', '"benchmark_id"', '"request_latency"')
    if not isinstance(doc, dict):
        return Message(_("not a JSON object"))
    if "aiperf_version" in doc or "schema_version" in doc:
        return None
    if "request_latency" in doc and ("benchmark_id" in doc or {"was_cancelled", "error_summary"} <= set(doc)):
        return None  # aiperf <=0.4 (no schema_version): metric keys + was_cancelled/error_summary
    return Message(
        _("no aiperf_version/schema_version/benchmark_id keys (nor was_cancelled/error_summary of aiperf <=0.4)")
    )


def parse_json(source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    doc = expect_object(source.json, "(root)")
    schema = doc.get("schema_version")
    if schema is not None and (not isinstance(schema, str) or schema not in KNOWN_SCHEMAS):
        why = _("unsupported aiperf schema %(schema)s (this parser reads %(known)s)")
        raise refused("schema_version", why, schema=repr(schema), known=", ".join(KNOWN_SCHEMAS))
    result = NormalizedResult(tool="aiperf", format="aiperf", definitions=dict(DEFINITIONS))
    version = doc.get("aiperf_version")
    result.tool_version = version if isinstance(version, str) else None
    result.metadata["schema_version"] = schema or "none (aiperf <=0.4, before schema_version)"
    result.points.append(_point_from_summary(doc, result))
    _metadata(doc, result)
    return finish(result, slo)


def _point_from_summary(doc: dict[str, Any], result: NormalizedResult) -> LoadPoint:
    point = LoadPoint(label="aiperf")
    point.ttft_ms = latency_stats(doc, "time_to_first_token")
    point.tpot_ms = latency_stats(doc, "inter_token_latency")
    point.e2e_ms = latency_stats(doc, "request_latency")
    chunk = latency_stats(doc, "inter_chunk_latency")
    if not chunk.is_empty():
        point.extra["itl_chunk_ms"] = chunk.__dict__.copy()
    _pooled_itl(doc, point)
    point.request_throughput = metric_avg(doc, "request_throughput")
    point.output_token_throughput = metric_avg(doc, "output_token_throughput")
    point.input_token_throughput = metric_avg(doc, "input_token_throughput")
    point.goodput = metric_avg(doc, "goodput")
    fraction = metric_avg(doc, "good_request_fraction")
    point.slo_attainment = fraction
    duration = metric_block(doc, "benchmark_duration")
    if duration is not None:
        d = number(duration.get("avg"), "benchmark_duration.avg")
        point.duration_s = (
            None if d is None else d * unit_scale(duration.get("unit"), "benchmark_duration.unit") / 1000.0
        )
    _request_counts(doc, point, result)
    concurrency = metric_avg(doc, "effective_concurrency")
    point.achieved_concurrency = concurrency
    _requested_load(doc, point)
    point.label = (
        "aiperf"
        + (f" concurrency={point.concurrency:g}" if point.concurrency else "")
        + (f" rate={point.request_rate:g}" if point.request_rate else "")
    )
    return point


def _pooled_itl(doc: dict[str, Any], point: LoadPoint) -> None:
    """The per-token ITL mean from the latency, TTFT and output-length sums (exact for any chunking)."""
    latency_block = metric_block(doc, "request_latency")
    ttft_block = metric_block(doc, "time_to_first_token")
    count = number((latency_block or {}).get("count"), "request_latency.count")
    if count is None:  # schema 1.0 has no count/sum; every successful request has a latency
        count = metric_avg(doc, "request_count")
    osl = metric_sum(doc, "output_sequence_length", count=count)
    if latency_block and ttft_block and osl is not None and count:
        e2e_sum = metric_sum(
            doc, "request_latency", unit_scale(latency_block.get("unit"), "request_latency.unit"), count
        )
        ttft_sum = metric_sum(
            doc, "time_to_first_token", unit_scale(ttft_block.get("unit"), "time_to_first_token.unit"), count
        )
        point.itl_ms = mean_only(pooled_itl_mean(e2e_sum, ttft_sum, osl - count))


def _request_counts(doc: dict[str, Any], point: LoadPoint, result: NormalizedResult) -> None:
    """Completed and failed requests and the error rate; requests the client cancelled are counted apart."""
    completed = metric_avg(doc, "request_count")
    errors = metric_avg(doc, "error_request_count")
    point.requests_completed = None if completed is None else int(completed)
    error_rate = metric_block(doc, "request_error_rate")
    if error_rate is not None:
        rate = number(error_rate.get("avg"), "request_error_rate.avg")
        if rate is not None:
            point.error_rate = rate / 100.0 if error_rate.get("unit") == "%" else rate
    summary = doc.get("error_summary")
    if errors is None and isinstance(summary, list):
        errors = 0.0
        for i, item in enumerate(summary):
            item = expect_object(item, f"error_summary[{i}]")
            errors += number(item.get("count"), f"error_summary[{i}].count") or 0
    cancelled = _cancellations(summary)
    if cancelled and errors is not None:
        # aiperf counts a request its client cancelled (--request-cancellation-rate) as an error
        # (code 499); kvselect counts it apart: not an engine failure, not an SLO miss
        errors = max(errors - cancelled, 0)
        point.extra["cancelled_in_flight"] = cancelled
        total = (point.requests_completed or 0) + errors
        point.error_rate = errors / total if total else None
        good = metric_avg(doc, "good_request_count")
        if good is not None and total:
            point.slo_attainment = good / total
    point.requests_failed = None if errors is None else int(errors)
    if point.requests_completed is None and errors and metric_block(doc, "request_latency") is None:
        point.requests_completed = 0  # aiperf leaves request_count null when nothing succeeded
        result.add_note(Message(NO_SUCCESS))


def _requested_load(doc: dict[str, Any], point: LoadPoint) -> None:
    """The requested concurrency/rate from the input config (loadgen, profiling phase, top level), else the CLI."""
    config = doc.get("input_config")
    if isinstance(config, dict):
        loadgen = config.get("loadgen") if isinstance(config.get("loadgen"), dict) else {}
        phases = config.get("phases")
        if isinstance(phases, list):  # 0.13: [{name, kind, type, concurrency, ...}, ...]
            profiling = next(
                (p for p in phases if isinstance(p, dict) and "profiling" in (p.get("kind"), p.get("name"))), {}
            )
        else:
            profiling = phases.get("profiling") if isinstance(phases, dict) else {}
        for holder in (loadgen, profiling if isinstance(profiling, dict) else {}, config):
            c = holder.get("concurrency") if isinstance(holder, dict) else None
            r = holder.get("request_rate") if isinstance(holder, dict) else None
            if isinstance(c, (int, float)) and not isinstance(c, bool) and point.concurrency is None:
                point.concurrency = float(c)
            if isinstance(r, (int, float)) and not isinstance(r, bool) and point.request_rate is None:
                point.request_rate = float(r)
    if point.concurrency is None or point.request_rate is None:
        command = (doc.get("run_info") or {}).get("cli_command") if isinstance(doc.get("run_info"), dict) else None
        if isinstance(command, str):
            _from_cli(command, point)


def _cancellations(summary: Any) -> int:
    """Requests aiperf's error_summary lists as cancelled by the client (RequestCancellationError, 499)."""
    count = 0
    for i, item in enumerate(summary if isinstance(summary, list) else []):
        details = item.get("error_details") if isinstance(item, dict) else None
        if not isinstance(details, dict):
            continue
        if details.get("type") == "RequestCancellationError" or details.get("code") == 499:
            count += int(number(item.get("count"), f"error_summary[{i}].count") or 0)
    return count


def _from_cli(command: str, point: LoadPoint) -> None:
    import shlex

    try:
        words = shlex.split(command)
    except ValueError:
        return
    for flag, attr in (("--concurrency", "concurrency"), ("--request-rate", "request_rate")):
        if flag in words and words.index(flag) + 1 < len(words) and getattr(point, attr) is None:
            try:
                setattr(point, attr, float(words[words.index(flag) + 1]))
            except ValueError:
                pass


def _metadata(doc: dict[str, Any], result: NormalizedResult) -> None:
    config = doc.get("input_config")
    if isinstance(config, dict):
        models = config.get("models")
        if isinstance(models, dict) and isinstance(models.get("items"), list) and models["items"]:
            first = models["items"][0]
            if isinstance(first, dict) and isinstance(first.get("name"), str):
                result.metadata["model"] = first["name"]
        elif isinstance(config.get("model_names"), list) and config["model_names"]:
            result.metadata["model"] = str(config["model_names"][0])
        endpoint = config.get("endpoint")
        if isinstance(endpoint, dict) and isinstance(endpoint.get("urls"), list) and endpoint["urls"]:
            result.metadata["endpoint_url"] = str(endpoint["urls"][0])
        elif isinstance(endpoint, dict) and isinstance(endpoint.get("url"), str):
            result.metadata["endpoint_url"] = endpoint["url"]
        if isinstance(endpoint, dict) and isinstance(endpoint.get("model_names"), list) and endpoint["model_names"]:
            result.metadata.setdefault("model", str(endpoint["model_names"][0]))
        result.metadata["input_config"] = cap_depth(config, 5)
    for key in ("benchmark_id", "start_time", "end_time", "was_cancelled", "is_complete"):
        value = doc.get(key)
        if isinstance(value, (str, bool)):
            result.metadata[key] = value
    if isinstance(doc.get("run_info"), dict):
        result.metadata["run_info"] = cap_depth(doc["run_info"], 3)
    telemetry = doc.get("telemetry_data")
    if isinstance(telemetry, dict) and isinstance(telemetry.get("endpoints"), dict) and telemetry["endpoints"]:
        gpus = {}
        for endpoint in telemetry["endpoints"].values():
            if isinstance(endpoint, dict) and isinstance(endpoint.get("gpus"), dict):
                for gpu_id, gpu in endpoint["gpus"].items():
                    if isinstance(gpu, dict):
                        gpus[gpu_id] = {
                            k: gpu[k]
                            for k in ("gpu_name", "gpu_model", "gpu_uuid", "hostname")
                            if isinstance(gpu.get(k), str)
                        }
        if gpus:
            result.metadata["hardware"] = gpus
    if doc.get("was_cancelled") is True or doc.get("is_complete") is False:
        result.partial = True
        result.add_note(Message(REPORTED_CANCELLED))


# --- CSV ----------------------------------------------------------------------------------------


def sniff_csv(source: Source) -> str | Message | None:
    first = source.head.split("\n", 1)[0].strip()
    if not first.startswith("Metric,avg,"):
        return Message(_("first line is not aiperf/genai-perf's 'Metric,avg,...' table header"))
    if not any(marker in source.head for marker in AIPERF_CSV_MARKERS) and ",sum," not in first:
        return Message(_("looks like genai-perf's CSV (no aiperf-only metrics)"))
    return None


# --- per-request JSONL --------------------------------------------------------------------------

JSONL_METRICS = (
    "time_to_first_token",
    "request_latency",
    "inter_token_latency",
    "output_sequence_length",
    "input_sequence_length",
)


def sniff_jsonl(source: Source) -> str | Message | None:
    if source.head.lstrip()[:1] != "{":
        return Message(_("not JSON lines"))
    first = source.first_line_json()
    if not isinstance(first, dict):
        return Message(_("first line is not an object"))
    if not isinstance(first.get("metadata"), dict) or "metrics" not in first:
        return Message(_("first record has no 'metadata'/'metrics' (aiperf profile_export.jsonl)"))
    if "request_start_ns" not in first["metadata"]:
        return Message(_("metadata has no request_start_ns"))
    return None


def _jsonl_schema() -> Any:
    import pyarrow as pa

    metric = lambda t: pa.struct([("value", t), ("unit", pa.string())])  # noqa: E731
    return pa.schema(
        [
            (
                "metadata",
                pa.struct(
                    [
                        ("x_request_id", pa.string()),
                        ("request_start_ns", pa.int64()),
                        ("request_end_ns", pa.int64()),
                        ("benchmark_phase", pa.string()),
                        ("was_cancelled", pa.bool_()),
                    ]
                ),
            ),
            ("metrics", pa.struct([(name, metric(pa.float64())) for name in JSONL_METRICS])),
            ("error", pa.struct([("code", pa.int64()), ("type", pa.string()), ("message", pa.string())])),
        ]
    )


def read_jsonl_table(data: bytes | str) -> Any:
    """The records' table (only the columns kvselect reads), from bytes or a file's path.

    Read as a stream of 1 MiB blocks (`open_json`): memory follows the table, not the file.
    `read_json` held several times the input while parsing the records' long inter-chunk
    latency lists it then drops (about 0.8 GiB for a 1 GiB file of 290,000 records).
    """
    import pyarrow as pa
    import pyarrow.json as pj

    try:
        reader = pj.open_json(
            pa.BufferReader(data) if isinstance(data, (bytes, bytearray)) else data,  # a path: read natively
            read_options=pj.ReadOptions(block_size=1 << 20),
            parse_options=pj.ParseOptions(explicit_schema=_jsonl_schema(), unexpected_field_behavior="ignore"),
        )
        return pa.Table.from_batches(list(reader), schema=reader.schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
        message = str(error).splitlines()[0]
        raise FormatError(where_in(JSONL, Code(message))) from None  # pyarrow's reason, as pyarrow wrote it


def parse_jsonl(source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    table = read_jsonl_table(source.path or source.data)  # a stored file is read in blocks, never whole
    n = table.num_rows
    if n == 0:
        raise refused(JSONL, _("no records"))
    frame, starts, end_ns, keep = _jsonl_frame(table)
    result = NormalizedResult(tool="aiperf", format="aiperf-jsonl", definitions=dict(DEFINITIONS))
    result.metadata["layout"] = "aiperf profile_export.jsonl (per-request records)"
    point = _jsonl_point(frame, starts[keep] / 1e9, np.asarray(end_ns, dtype=float)[keep] / 1e9)
    result.requests = frame
    result.points.append(point)
    result.add_note(Message(RECOMPUTED))
    result.add_note(
        Message(NO_REQUESTED_LOAD, {"file": Code("profile_export.jsonl"), "other": Code("profile_export_aiperf.json")})
    )
    return finish(result, slo)


def _jsonl_frame(table: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    """The per-request frame of every record but warm-up ones, every record's start and end (ns), and
    which records were kept."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    meta = table.column("metadata").combine_chunks()
    metrics = table.column("metrics").combine_chunks()
    error = table.column("error").combine_chunks()
    strings = {
        "metadata.x_request_id": meta.field("x_request_id"),
        "metadata.benchmark_phase": meta.field("benchmark_phase"),
        "error.type": error.field("type"),
        "error.message": error.field("message"),
    }
    strings.update({f"metrics.{name}.unit": metrics.field(name).field("unit") for name in JSONL_METRICS})
    for name, column in strings.items():
        try:
            column.validate(full=True)  # pyarrow does not check UTF-8 while parsing
        except pa.ArrowInvalid:
            raise refused(name, _("not valid UTF-8 text")) from None
    start_ns = meta.field("request_start_ns")
    if start_ns.null_count:
        bad = int(np.flatnonzero(start_ns.is_null().to_numpy(zero_copy_only=False))[0])
        missing = where_in("metadata.request_start_ns", Message(_("missing required key")))
        raise FormatError(where_in(Message(_("line %(n)s"), {"n": bad + 1}), missing))
    phase = meta.field("benchmark_phase")
    keep = pc.fill_null(pc.not_equal(phase, "warmup"), True).to_numpy(zero_copy_only=False)

    ttft = _jsonl_metric_ms(metrics, "time_to_first_token", True)
    e2e = _jsonl_metric_ms(metrics, "request_latency", True)
    tpot_tool = _jsonl_metric_ms(metrics, "inter_token_latency", True)
    osl = _jsonl_metric_ms(metrics, "output_sequence_length", False)
    isl = _jsonl_metric_ms(metrics, "input_sequence_length", False)
    cancelled = pc.fill_null(meta.field("was_cancelled"), False).to_numpy(zero_copy_only=False).astype(bool)
    ok = error.is_null().to_numpy(zero_copy_only=False) & ~cancelled
    end_ns = meta.field("request_end_ns").to_numpy(zero_copy_only=False)
    tpot = np.where(np.isnan(tpot_tool), per_request_tpot(e2e, ttft, osl), tpot_tool)
    starts = start_ns.to_numpy(zero_copy_only=False)
    start_s = (starts - starts.min()) / 1e9
    messages = None
    if error.null_count < n:
        etype = error.field("type").to_numpy(zero_copy_only=False)
        emsg = error.field("message").to_numpy(zero_copy_only=False)
        texts = [f"{t}: {m}" if t else m for t, m in zip(etype, emsg, strict=False)]
        messages = np.where(ok, None, np.array(texts, dtype=object))
    if cancelled.any():  # the client cancelled them (--request-cancellation-rate): not engine failures
        if messages is None:
            messages = np.full(n, None, dtype=object)
        messages[cancelled] = [f"{CANCELLED}: {m}" if m else CANCELLED for m in messages[cancelled]]
    frame = request_frame(
        {
            "point": np.zeros(n, dtype=np.int32),
            "request_id": meta.field("x_request_id").to_numpy(zero_copy_only=False),
            "start_s": start_s,
            "ttft_ms": ttft,
            "tpot_ms": tpot,
            "itl_ms_mean": tpot,
            "e2e_ms": e2e,
            "prompt_tokens": isl,
            "output_tokens": osl,
            "ok": ok,
            "error": messages,
        },
        n,
    )
    if not keep.all():
        frame = frame[keep].reset_index(drop=True)
    return frame, starts, end_ns, keep


def _jsonl_metric_ms(metrics: Any, name: str, time: bool) -> np.ndarray:
    """One metric of every record, in ms when it is a time (one unit across records)."""
    import pyarrow.compute as pc

    column = metrics.field(name)
    values = column.field("value").to_numpy(zero_copy_only=False).astype(float)
    if not time:
        return values
    units = pc.unique(column.field("unit").drop_null()).to_pylist()
    if len(units) > 1:
        raise refused(f"metrics.{name}.unit", _("mixed units %(units)s across records"), units=str(units))
    return values * (unit_scale(units[0], f"metrics.{name}.unit") if units else 1.0)


def _jsonl_point(frame: Any, start_kept: np.ndarray, end_fallback: np.ndarray) -> LoadPoint:
    """The load point recomputed from the kept records (`end_fallback`: their request_end_ns, in s)."""
    okf = frame["ok"].to_numpy(dtype=bool)
    gone = cancelled_mask(frame["error"])
    # a request ends at its last response (aiperf's own duration uses it); one without a latency
    # (failed, cancelled) at its request_end_ns
    end_kept = start_kept + frame["e2e_ms"].to_numpy(dtype=float) / 1000.0
    end_kept = np.where(np.isfinite(end_kept), end_kept, end_fallback)
    duration = float(np.nanmax(end_kept) - start_kept.min()) if len(frame) and np.isfinite(end_kept).any() else None
    point = LoadPoint(
        label="aiperf",
        duration_s=duration,
        requests_completed=int(okf.sum()),
        requests_failed=int((~okf & ~gone).sum()),
    )
    if gone.any():
        point.extra["cancelled_in_flight"] = int(gone.sum())
    point.achieved_concurrency = held_concurrency(start_kept, end_kept)
    if point.achieved_concurrency is not None:
        point.extra["achieved_concurrency_source"] = "request_start_ns/request_end_ns of every record"
    point.ttft_ms = stats_from_array(frame["ttft_ms"].to_numpy(dtype=float)[okf])
    point.tpot_ms = stats_from_array(frame["tpot_ms"].to_numpy(dtype=float)[okf])
    point.e2e_ms = stats_from_array(frame["e2e_ms"].to_numpy(dtype=float)[okf])
    t, e, f = (frame[c].to_numpy(dtype=float)[okf] for c in ("output_tokens", "e2e_ms", "ttft_ms"))
    valid = np.isfinite(t) & np.isfinite(e) & np.isfinite(f) & (t >= 1)
    if valid.any():
        point.itl_ms = mean_only(
            pooled_itl_mean(float(e[valid].sum()), float(f[valid].sum()), float((t[valid] - 1).sum()))
        )
    if duration:
        point.request_throughput = point.requests_completed / duration
        total_out = float(np.nansum(t))
        point.output_token_throughput = total_out / duration if np.isfinite(t).any() else None
        isl = frame["prompt_tokens"].to_numpy(dtype=float)[okf]
        point.input_token_throughput = float(np.nansum(isl)) / duration if np.isfinite(isl).any() else None
    return point


FORMATS = [
    Format("aiperf", "aiperf", "aiperf profile_export_aiperf.json (schema 1.0-1.5)", sniff_json, parse_json),
    Format(
        "aiperf-csv",
        "aiperf",
        "aiperf profile_export_aiperf.csv (several tables)",
        sniff_csv,
        lambda s, slo: parse_metric_csv(s, slo, "aiperf", DEFINITIONS),
    ),
    Format("aiperf-jsonl", "aiperf", "aiperf profile_export.jsonl (per-request records)", sniff_jsonl, parse_jsonl),
]
