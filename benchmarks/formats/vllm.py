"""vLLM `vllm bench serve --save-result [--save-detailed]` and the legacy `benchmark_serving.py`.

Flat dict; aggregates `*_ms` in ms, per-request lists (`ttfts`, `itls`, `latencies`) in seconds,
`start_times` are perf_counter values. TPOT and TTFT match kvselect's definitions. vLLM's ITL is
pooled per *chunk*; it is only reported as kvselect ITL (per token) when the per-request data
shows one token per chunk, otherwise only its mean (exact for any chunking) is kept and the
chunk statistics go to `extra["itl_chunk_ms"]`. `--append-result` files (one object per line)
become one load point per object. ≤0.8 wrote `"request_goodput:"` (trailing colon).

Per-request lists are used only when they are whole: ≤0.8 files have no `latencies`, so e2e is
ttft + the listed gaps; their lists hold one gap per chunk (a chunk may carry several tokens), so
their length proves nothing, but their mean TPOT must give back the file's `mean_tpot_ms`. When
it does not (gaps missing) or cannot be checked, the tool's summary figures stay and what they do
not give is missing, with a note.

Large detailed files (>8 MiB) are read with pyarrow and the per-request lists turned into numpy
arrays directly (no Python objects per request).
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.formats.base import Format, FormatError, Source, decode_json, reason_of, type_name
from benchmarks.formats.common import (
    EXPECTED_LIST,
    EXPECTED_NUMBERS,
    EXPECTED_OBJECT,
    EXPECTED_STRING,
    LINE,
    cap_depth,
    expect_object,
    finish,
    get_int,
    get_number,
    held_concurrency,
    join,
    mean_only,
    number,
    per_request_tpot,
    pooled_itl_mean,
    refused,
    request_frame,
    stats_from_array,
)
from benchmarks.result import LoadPoint, NormalizedResult, Stats
from selection.domain.messages import Code, Message
from selection.domain.messages import marked as _

DEFINITIONS = {
    "ttft_ms": "vLLM: first non-empty chunk - request send (same as kvselect)",
    "tpot_ms": "vLLM: per request (latency - ttft)/(output_len - 1), excludes first token (same as kvselect)",
    "itl_ms": "vLLM: every inter-chunk gap of every request pooled (per chunk, not per token); kept as "
    "kvselect ITL only when each chunk carried one token, else only the exact mean",
    "e2e_ms": "vLLM e2el: request send -> last chunk",
    "request_throughput": "vLLM: completed / benchmark duration",
    "achieved_concurrency": "sum of per-request latencies / (last end - first start), from start_times and "
    "latencies; vLLM's max_concurrent_requests counts requests active in a 1-second bucket and is not a concurrency",
    "goodput": "vLLM request_goodput: requests meeting --goodput SLOs / duration (SLOs not saved in the file)",
}

# run notes (English in `notes`; the message beside it for pages in any language)
FAILED_DERIVED = _("point %(index)s: failed requests derived as %(formula)s (file has no '%(key)s')")
NOT_FROM_LISTS = _(
    "point %(index)s: per-request e2e, TPOT and ITL not derived from the inter-token lists: %(why)s; the tool's own "
    "summary figures are kept and the figures they do not give are missing"
)
LISTS_PARTIAL = _("they do not hold every request, so they cannot be checked")
LISTS_NO_MEAN = _("the file has no mean TPOT to check them against")
LISTS_NO_TPOT = _("they give no TPOT")
LISTS_DIFFER = _("their mean TPOT is %(recomputed)s ms, the tool's is %(file_mean)s ms (gaps missing)")
LISTS_DO_NOT_ADD_UP = _(
    "point %(index)s: the inter-token lists of %(n)s requests do not add up to their latency - TTFT: per-request ITL "
    "not derived"
)
LISTS_TRIMMED = _(
    "point %(index)s: per-request lists hold %(n)s of %(total)s requests (trimmed); summary statistics taken from the "
    "tool's aggregates"
)
ITL_PER_CHUNK = _(
    "point %(index)s: per-token ITL missing: the tool's ITL is per chunk (kept in %(key)s) and neither whole "
    "per-request lists nor a mean e2e latency give it per token"
)


KNOWN_KEYS = {
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "ramp_up_strategy",
    "ramp_up_start_rps",
    "ramp_up_end_rps",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "request_goodput:",
    "output_throughput",
    "total_token_throughput",
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "queue_times",
    "generated_texts",
    "errors",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "rtfx",
    "server_queue_times",
    "server_ttfts",
    "best_of",
    "total_input_sequences",
    "input_sequence_throughput",
    "rps_change_events",
    "use_beam_search",
}
_STAT_KEY = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_([a-z0-9_]+)_ms$")


def sniff(source: Source) -> str | Message | None:
    if source.large:
        head = source.head
        if not head.lstrip().startswith("{"):
            return Message(_("not a JSON object"))
        missing = [k for k in ('"model_id"', '"completed"', '"duration"') if k not in head]
        return Message(_("no %(keys)s key near the start"), {"keys": ", ".join(missing)}) if missing else None
    docs = _documents(source, strict=False)
    if docs is None:
        return Message(_("not a JSON object (or newline-separated objects)"))
    doc = docs[0]
    missing = [k for k in ("model_id", "completed", "duration", "request_throughput") if k not in doc]
    if missing:
        return Message(_("missing vLLM keys %(keys)s"), {"keys": str(missing)})
    return None


ENTRIES_BUT_TTFTS = _("has %(entries)s entries but ttfts has %(n)s")


def _documents(source: Source, strict: bool) -> list[dict[str, Any]] | None:
    """The object(s) in the file: one, or several appended by --append-result."""
    try:
        doc = source.json
        if isinstance(doc, dict):
            return [doc]
        if strict:
            raise refused("(root)", EXPECTED_OBJECT, type=type_name(doc))
        return None
    except FormatError as error:
        if "Extra data" not in str(error):
            if strict:
                raise
            return None
    docs = []
    for lineno, line in enumerate(source.text.splitlines(), start=1):
        if line.strip():
            value = decode_json(line, where=Message(LINE, {"n": lineno}))
            if not isinstance(value, dict):
                if not strict:
                    return None
                raise refused(Message(LINE, {"n": lineno}), EXPECTED_OBJECT, type=type_name(value))
            docs.append(value)
    return docs or None


def parse(source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    if source.large:
        docs = [_read_large(source.data)]
    else:
        docs = _documents(source, strict=True)
        if not docs:
            raise refused("(root)", _("no JSON object found"))
    return parse_serving_docs(docs, "vllm", DEFINITIONS, slo)


def parse_serving_docs(
    docs: list[dict[str, Any]], flavour: str, definitions: dict[str, str], slo: dict[str, Any] | None
) -> NormalizedResult:
    """One load point per document (a JSONL file or `--append-result` holds one per rate or concurrency)."""
    result = NormalizedResult(tool=flavour, format=flavour, definitions=dict(definitions))
    frames = []
    for index, doc in enumerate(docs):
        path = "" if len(docs) == 1 else f"line {index + 1}"
        point, frame = parse_serving_doc(doc, path, index, result, flavour=flavour)
        result.points.append(point)
        if frame is not None:
            frames.append(frame)
    if frames:
        import pandas as pd

        result.requests = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return finish(result, slo)


# --- large files via pyarrow ------------------------------------------------------------------

ARRAY_KEYS = ("input_lens", "output_lens", "ttfts", "latencies", "start_times", "errors", "itls")


def _read_large(data: bytes) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.json as pj

    try:
        table = pj.read_json(
            io.BytesIO(data),
            read_options=pj.ReadOptions(block_size=len(data) + 1, use_threads=True),
            parse_options=pj.ParseOptions(newlines_in_values=True),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
        raise refused("(root)", _("unreadable JSON (%(error)s)"), error=str(error).splitlines()[0]) from None
    if table.num_rows != 1:
        raise refused("(root)", _("expected one JSON object, found %(n)s"), n=table.num_rows)
    doc: dict[str, Any] = {}  # per-request lists become ("arrays", numpy...) tuples
    arrays: dict[str, Any] = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if name in ARRAY_KEYS or name in ("generated_texts", "queue_times"):
            arrays[name] = column
            continue
        value = column[0].as_py()
        doc[name] = value
    for name, column in arrays.items():
        if name in ("generated_texts", "queue_times"):
            continue
        if not pa.types.is_list(column.type) and not pa.types.is_large_list(column.type):
            raise refused(name, EXPECTED_LIST, type=str(column.type))
        values = column.values  # the one row's list
        if name == "itls":
            if not (pa.types.is_list(values.type) or pa.types.is_large_list(values.type)):
                raise refused("itls", _("expected a list of lists, got list of %(type)s"), type=str(values.type))
            offsets = values.offsets.to_numpy(zero_copy_only=False)
            counts = np.diff(offsets)
            flat = values.flatten()
            if not (pa.types.is_floating(flat.type) or pa.types.is_integer(flat.type) or pa.types.is_null(flat.type)):
                raise refused("itls", EXPECTED_NUMBERS, type=str(flat.type))
            doc["itls"] = ("arrays", flat.to_numpy(zero_copy_only=False).astype(float, copy=False), counts)
        elif name == "errors":
            if not (pa.types.is_string(values.type) or pa.types.is_null(values.type)):
                raise refused("errors", _("expected strings, got %(type)s"), type=str(values.type))
            doc["errors"] = ("arrays", values)
        else:
            if not (
                pa.types.is_floating(values.type) or pa.types.is_integer(values.type) or pa.types.is_null(values.type)
            ):
                why = _("expected a list of numbers, got list of %(type)s")
                raise refused(name, why, type=str(values.type))
            doc[name] = ("arrays", values.to_numpy(zero_copy_only=False).astype(float, copy=False))
    return doc


# --- shared with SGLang -------------------------------------------------------------------------


def _float_array(doc: dict[str, Any], key: str, path: str) -> np.ndarray | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, tuple) and value and value[0] == "arrays":
        return value[1]
    if not isinstance(value, list):
        raise refused(join(path, key), EXPECTED_LIST, type=type_name(value))
    for i, item in enumerate(value):
        if item is not None and (isinstance(item, bool) or not isinstance(item, (int, float))):
            raise refused(f"{join(path, key)}[{i}]", _("expected a number, got %(type)s"), type=type_name(item))
    return np.array([np.nan if v is None else v for v in value], dtype=float)


def _itl_arrays(doc: dict[str, Any], path: str) -> tuple[np.ndarray, np.ndarray] | None:
    value = doc.get("itls")
    if value is None:
        return None
    if isinstance(value, tuple) and value and value[0] == "arrays":
        return value[1], value[2]
    if not isinstance(value, list):
        raise refused(join(path, "itls"), EXPECTED_LIST, type=type_name(value))
    counts = np.empty(len(value), dtype=np.int64)
    for i, row in enumerate(value):
        if not isinstance(row, list):
            raise refused(f"{join(path, 'itls')}[{i}]", EXPECTED_LIST, type=type_name(row))
        counts[i] = len(row)
    flat = [x for row in value for x in row]
    for i, item in enumerate(flat):
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            # locate the offending row for the message
            row = int(np.searchsorted(np.cumsum(counts), i, side="right"))
            raise refused(f"{join(path, 'itls')}[{row}]", EXPECTED_NUMBERS, type=type_name(item))
    return np.asarray(flat, dtype=float), counts


def _errors(doc: dict[str, Any], path: str, n: int) -> tuple[np.ndarray, list[Any]] | None:
    value = doc.get("errors")
    if value is None:
        return None
    if isinstance(value, tuple) and value and value[0] == "arrays":
        import pyarrow.compute as pc

        arr = value[1]
        ok = pc.fill_null(pc.equal(pc.utf8_length(pc.fill_null(arr, "")), 0), True).to_numpy(zero_copy_only=False)
        if not ok.all():
            messages = np.asarray(arr.to_numpy(zero_copy_only=False), dtype=object)
            messages[ok] = None
        else:
            messages = np.full(len(arr), None, dtype=object)
        return ok, messages
    if not isinstance(value, list):
        raise refused(join(path, "errors"), EXPECTED_LIST, type=type_name(value))
    ok = np.ones(len(value), dtype=bool)
    messages: list[Any] = [None] * len(value)
    for i, item in enumerate(value):
        if item is None or item == "":
            continue
        if not isinstance(item, str):
            raise refused(f"{join(path, 'errors')}[{i}]", EXPECTED_STRING, type=type_name(item))
        ok[i] = False
        messages[i] = item
    return ok, np.asarray(messages, dtype=object)


def stats_for(doc: dict[str, Any], metric: str, path: str) -> Stats:
    """Stats from `mean_<m>_ms`, `median_<m>_ms`, `p<P>_<m>_ms` (whatever percentiles were saved)."""

    def pick(*keys: str) -> float | None:
        for key in keys:
            if key in doc:
                return get_number(doc, key, path)
        return None

    return Stats(
        mean=pick(f"mean_{metric}_ms"),
        p50=pick(f"p50_{metric}_ms", f"median_{metric}_ms"),
        p90=pick(f"p90_{metric}_ms"),
        p95=pick(f"p95_{metric}_ms"),
        p99=pick(f"p99_{metric}_ms"),
        max=pick(f"max_{metric}_ms"),
    )


def _merge(primary: Stats, fallback: Stats) -> Stats:
    return Stats(
        **{
            k: getattr(primary, k) if getattr(primary, k) is not None else getattr(fallback, k)
            for k in ("mean", "p50", "p90", "p95", "p99", "max")
        }
    )


def _rate(value: Any, path: str) -> float | None:
    """Requested rate: number, or inf/"inf"/Infinity (= unbounded -> None), or "trace"."""
    if value is None or value in ("inf", "Infinity", "trace"):
        return None
    if isinstance(value, str):
        raise refused(path, _("expected a number or %(inf)s, got %(value)s"), inf='"inf"', value=repr(value))
    rate = number(value, path, allow_inf=True)
    return None if rate is None or math.isinf(rate) else rate


def parse_serving_doc(
    doc: dict[str, Any], path: str, index: int, result: NormalizedResult, flavour: str
) -> tuple[LoadPoint, Any]:
    """One vLLM or SGLang result object -> a load point and its per-request frame (or None)."""
    expect_object(doc, path or "(root)")
    point, total_output = _summary_point(doc, path, index, result, flavour)
    point.ttft_ms = stats_for(doc, "ttft", path)
    point.tpot_ms = stats_for(doc, "tpot", path)
    itl_chunk = stats_for(doc, "itl", path)
    point.e2e_ms = stats_for(doc, "e2el" if flavour == "vllm" else "e2e_latency", path)
    # per-request arrays (--save-detailed / --output-details)
    lists = _request_lists(doc, path)
    frame, itl_pooled = (None, None) if lists is None else _per_request(lists, doc, path, index, result, point)
    _per_token_itl(point, itl_chunk, itl_pooled, frame, total_output, index, result)
    _collect_metadata(doc, result, flavour)
    return point, frame


def _summary_point(
    doc: dict[str, Any], path: str, index: int, result: NormalizedResult, flavour: str
) -> tuple[LoadPoint, float | None]:
    """The load point the tool's summary figures give, and the file's total output tokens."""
    for key in ("duration", "completed"):
        if key not in doc:
            raise refused(join(path, key), _("missing required key"))
    duration = get_number(doc, "duration", path, required=True)
    completed = get_int(doc, "completed", path, required=True)
    failed = get_int(doc, "failed", path)
    num_prompts = get_int(doc, "num_prompts", path)
    if failed is None and flavour == "vllm" and num_prompts is not None and num_prompts >= completed:
        failed = num_prompts - completed
        result.add_note(
            Message(FAILED_DERIVED, {"index": index, "formula": Code("num_prompts - completed"), "key": Code("failed")})
        )
    rate_value = doc.get("request_rate")
    request_rate = _rate(rate_value, join(path, "request_rate"))
    concurrency = get_number(doc, "max_concurrency", path)
    label_bits = [f"rate={'inf' if request_rate is None else f'{request_rate:g}'}"]
    if concurrency is not None:
        label_bits.append(f"concurrency={concurrency:g}")
    point = LoadPoint(
        label=" ".join(label_bits),
        concurrency=concurrency,
        request_rate=request_rate,
        duration_s=duration,
        requests_completed=completed,
        requests_failed=failed,
        request_throughput=get_number(doc, "request_throughput", path),
        output_token_throughput=get_number(doc, "output_throughput", path),
        input_token_throughput=get_number(doc, "input_throughput", path),
    )
    total_input = get_number(doc, "total_input_tokens", path)
    total_output = get_number(doc, "total_output_tokens", path)
    if point.input_token_throughput is None and total_input is not None and duration:
        point.input_token_throughput = total_input / duration
    _summary_extras(doc, path, flavour, point)
    return point, total_output


def _summary_extras(doc: dict[str, Any], path: str, flavour: str, point: LoadPoint) -> None:
    """Goodput, SGLang's own concurrency and SLO attainment, and the figures kvselect keeps as extras."""
    if flavour == "sglang":
        point.achieved_concurrency = get_number(doc, "concurrency", path)
    goodput_key = (
        "request_goodput" if "request_goodput" in doc else ("request_goodput:" if "request_goodput:" in doc else None)
    )
    if goodput_key:
        point.goodput = get_number(doc, goodput_key, path)
    if flavour == "sglang":
        point.slo_attainment = get_number(doc, "slo_attainment", path)
        if isinstance(doc.get("goodput_slos_ms"), dict):
            point.extra["goodput_slo_ms"] = cap_depth(doc["goodput_slos_ms"])
    for key in (
        "max_output_tokens_per_s",
        "max_concurrent_requests",
        "burstiness",
        "total_throughput",
        "total_token_throughput",
        "accept_length",
        "total_output_tokens_retokenized",
    ):
        if isinstance(doc.get(key), (int, float)) and not isinstance(doc.get(key), bool):
            point.extra[key] = doc[key] if math.isfinite(doc[key]) else None
    if isinstance(doc.get("cache_report"), dict):
        point.extra["cache_report"] = cap_depth(doc["cache_report"])


@dataclass
class _RequestLists:
    """The per-request lists of one result object, one entry per request (checked)."""

    ttfts: np.ndarray
    output_lens: np.ndarray | None
    input_lens: np.ndarray | None
    latencies: np.ndarray | None
    start_times: np.ndarray | None
    itls: tuple[np.ndarray, np.ndarray] | None  # (every gap, flat; gaps per request)

    @property
    def n(self) -> int:
        return len(self.ttfts)


def _request_lists(doc: dict[str, Any], path: str) -> _RequestLists | None:
    """The per-request lists, or None without `ttfts` (every list is type-checked either way)."""
    ttfts = _float_array(doc, "ttfts", path)
    output_lens = _float_array(doc, "output_lens", path)
    input_lens = _float_array(doc, "input_lens", path)
    latencies = _float_array(doc, "latencies", path)
    start_times = _float_array(doc, "start_times", path)
    itls = _itl_arrays(doc, path)
    if ttfts is None:
        return None
    n = len(ttfts)
    for key, array in (
        ("output_lens", output_lens),
        ("input_lens", input_lens),
        ("latencies", latencies),
        ("start_times", start_times),
    ):
        if array is not None and len(array) != n:
            raise refused(join(path, key), ENTRIES_BUT_TTFTS, entries=len(array), n=n)
    if itls is not None and len(itls[1]) != n:
        raise refused(join(path, "itls"), ENTRIES_BUT_TTFTS, entries=len(itls[1]), n=n)
    return _RequestLists(ttfts, output_lens, input_lens, latencies, start_times, itls)


@dataclass
class _RequestFigures:
    """Per-request figures in ms (NaN for failed requests), derived from the lists."""

    ok: np.ndarray
    tokens: np.ndarray
    ttft_ms: np.ndarray
    e2e_ms: np.ndarray
    tpot_ms: np.ndarray
    itl_mean: np.ndarray
    itl_sum_ms: np.ndarray | None


def _itl_sums_ms(itls: tuple[np.ndarray, np.ndarray] | None, n: int) -> np.ndarray | None:
    """Each request's sum of inter-token gaps, in ms."""
    if itls is None:
        return None
    flat, counts = itls
    sums = np.zeros(n)
    if flat.size:
        nonempty = counts > 0
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        sums[nonempty] = np.add.reduceat(flat, starts[nonempty]) if nonempty.any() else 0.0
    return sums * 1000.0


def _request_figures(lists: _RequestLists, ok: np.ndarray) -> _RequestFigures:
    n = lists.n
    ttft_ms = lists.ttfts * 1000.0
    itl_sum_ms = _itl_sums_ms(lists.itls, n)
    tokens = lists.output_lens if lists.output_lens is not None else np.full(n, np.nan)
    if lists.latencies is not None:
        e2e_ms = lists.latencies * 1000.0
    elif itl_sum_ms is not None:
        e2e_ms = ttft_ms + itl_sum_ms
    else:
        e2e_ms = np.full(n, np.nan)
    ttft_ms = np.where(ok, ttft_ms, np.nan)
    e2e_ms = np.where(ok, e2e_ms, np.nan)
    tpot_ms = per_request_tpot(e2e_ms, ttft_ms, tokens)
    itl_mean = np.full(n, np.nan)
    if itl_sum_ms is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            itl_mean = np.where(ok & (tokens > 1), itl_sum_ms / (tokens - 1), np.nan)
    return _RequestFigures(ok, tokens, ttft_ms, e2e_ms, tpot_ms, itl_mean, itl_sum_ms)


def _drop_cut_lists(
    lists: _RequestLists,
    figures: _RequestFigures,
    every_request: bool,
    file_tpot_mean: float | None,
    index: int,
    result: NormalizedResult,
) -> None:
    """Per-request lists are only used when they are whole. A real file keeps one gap per chunk
    (a chunk may hold several tokens), so a short list is not proof of a cut; the check is
    that the lists give back the tool's own mean TPOT."""
    if figures.itl_sum_ms is None:
        return
    if lists.latencies is None:
        consistent, why = _lists_reproduce_tpot(figures.tpot_ms, file_tpot_mean, every_request)
        if not consistent:
            figures.e2e_ms[:] = np.nan
            figures.tpot_ms[:] = np.nan
            figures.itl_mean[:] = np.nan
            result.add_note(Message(NOT_FROM_LISTS, {"index": index, "why": why}))
        return
    e2e_ms, ttft_ms = figures.e2e_ms, figures.ttft_ms
    whole = np.isclose(figures.itl_sum_ms, e2e_ms - ttft_ms, rtol=1e-3, atol=0.5) | ~np.isfinite(e2e_ms)
    if not whole.all():
        figures.itl_mean[:] = np.nan
        result.add_note(Message(LISTS_DO_NOT_ADD_UP, {"index": index, "n": int((~whole).sum())}))


def _pooled_token_itl(lists: _RequestLists, figures: _RequestFigures, every_request: bool) -> Stats | None:
    """Statistics of every gap pooled, when each chunk carried one token (chunk gaps are token gaps)."""
    ok, tokens = figures.ok, figures.tokens
    ok_multi = ok & (tokens > 1) & np.isfinite(figures.itl_mean)
    itls = lists.itls
    if (
        itls is not None
        and every_request
        and ok_multi.any()
        and np.array_equal(itls[1][ok_multi], (tokens[ok_multi] - 1).astype(np.int64))
    ):
        ok_rows = np.repeat(ok, itls[1])
        return stats_from_array(itls[0][ok_rows] * 1000.0)
    return None


def _per_request(
    lists: _RequestLists, doc: dict[str, Any], path: str, index: int, result: NormalizedResult, point: LoadPoint
) -> tuple[Any, Stats | None]:
    """The per-request frame and pooled per-token ITL (or None); whole lists also refine the point's
    statistics and give its achieved concurrency."""
    completed, failed = point.requests_completed, point.requests_failed
    n = lists.n
    errors = _errors(doc, path, n)
    if errors is not None and len(errors[0]) != n:
        raise refused(join(path, "errors"), ENTRIES_BUT_TTFTS, entries=len(errors[0]), n=n)
    ok = (
        errors[0]
        if errors is not None
        else (lists.output_lens > 0 if lists.output_lens is not None else np.ones(n, dtype=bool))
    )
    every_request = n == completed + (failed or 0) or n == int(ok.sum()) == completed
    figures = _request_figures(lists, ok)
    _drop_cut_lists(lists, figures, every_request, point.tpot_ms.mean, index, result)
    itl_pooled = _pooled_token_itl(lists, figures, every_request)
    start_times = lists.start_times
    start_s = start_times - np.nanmin(start_times) if start_times is not None and n else None
    frame = request_frame(
        {
            "point": np.full(n, index, dtype=np.int32),
            "start_s": start_s,
            "ttft_ms": figures.ttft_ms,
            "tpot_ms": figures.tpot_ms,
            "itl_ms_mean": figures.itl_mean,
            "e2e_ms": figures.e2e_ms,
            "prompt_tokens": lists.input_lens,
            "output_tokens": lists.output_lens,
            "ok": ok,
            "error": errors[1] if errors is not None else None,
        },
        n,
    )
    if every_request:
        _use_every_request(lists, figures, point)
    else:
        result.add_note(Message(LISTS_TRIMMED, {"index": index, "n": n, "total": completed + (failed or 0)}))
    return frame, itl_pooled


def _use_every_request(lists: _RequestLists, figures: _RequestFigures, point: LoadPoint) -> None:
    """Lists holding every request fill the statistics the tool did not save, and give the held concurrency."""
    ok = figures.ok
    point.ttft_ms = _merge(point.ttft_ms, stats_from_array(figures.ttft_ms[ok]))
    point.tpot_ms = _merge(point.tpot_ms, stats_from_array(figures.tpot_ms[ok]))
    point.e2e_ms = _merge(point.e2e_ms, stats_from_array(figures.e2e_ms[ok]))
    if lists.start_times is not None and lists.latencies is not None:
        held = held_concurrency(lists.start_times, lists.start_times + lists.latencies)
        if held is not None:
            point.achieved_concurrency = held
            point.extra["achieved_concurrency_source"] = "start_times + latencies of every request"


def _per_token_itl(
    point: LoadPoint,
    itl_chunk: Stats,
    itl_pooled: Stats | None,
    frame: Any,
    total_output: float | None,
    index: int,
    result: NormalizedResult,
) -> None:
    """kvselect's per-token ITL: pooled gaps when chunks are tokens, else only its mean (from whole
    per-request lists, else from the mean e2e latency); the tool's per-chunk ITL goes to extra."""
    if not itl_chunk.is_empty():
        point.extra["itl_chunk_ms"] = itl_chunk.__dict__.copy()
    if itl_pooled is not None:
        point.itl_ms = _merge(itl_chunk, itl_pooled)
        return
    completed, failed = point.requests_completed, point.requests_failed
    if frame is not None and len(frame) == completed + (failed or 0):
        okf = frame["ok"].to_numpy(dtype=bool)
        t = frame["output_tokens"].to_numpy(dtype=float)[okf]
        e = frame["e2e_ms"].to_numpy(dtype=float)[okf]
        f = frame["ttft_ms"].to_numpy(dtype=float)[okf]
        valid = np.isfinite(t) & np.isfinite(e) & np.isfinite(f) & (t >= 1)
        if valid.any() and valid.sum() == okf.sum():
            point.itl_ms = mean_only(
                pooled_itl_mean(float(e[valid].sum()), float(f[valid].sum()), float((t[valid] - 1).sum()))
            )
    e2e, ttft = point.e2e_ms, point.ttft_ms
    if point.itl_ms.is_empty() and e2e.mean is not None and ttft.mean is not None and total_output and completed:
        point.itl_ms = mean_only(pooled_itl_mean(e2e.mean * completed, ttft.mean * completed, total_output - completed))
    if point.itl_ms.is_empty() and not itl_chunk.is_empty():
        result.add_note(Message(ITL_PER_CHUNK, {"index": index, "key": Code("extra.itl_chunk_ms")}))


def _lists_reproduce_tpot(
    tpot_ms: np.ndarray, file_mean: float | None, every_request: bool
) -> tuple[bool, Message | None]:
    """Whether TPOT recomputed from the per-request lists matches the tool's own mean TPOT (then
    no gap is missing from them). Real files agree to rounding (checked on vLLM 0.8.5
    benchmark_serving.py files with 1-6 tokens per chunk: 1e-6 relative)."""
    if not every_request:
        return False, Message(LISTS_PARTIAL)
    if file_mean is None:
        return False, Message(LISTS_NO_MEAN)
    values = tpot_ms[np.isfinite(tpot_ms)]
    if not values.size:
        return False, Message(LISTS_NO_TPOT)
    recomputed = float(values.mean())
    if math.isclose(recomputed, file_mean, rel_tol=1e-3, abs_tol=1e-3):
        return True, None
    return False, Message(LISTS_DIFFER, {"recomputed": f"{recomputed:.4g}", "file_mean": f"{file_mean:.4g}"})


def _collect_metadata(doc: dict[str, Any], result: NormalizedResult, flavour: str) -> None:
    meta = result.metadata
    if flavour == "vllm":
        for key in ("model_id", "tokenizer_id", "backend", "endpoint_type", "label", "date"):
            value = doc.get(key)
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                meta.setdefault(key if key != "model_id" else "model", value)
        pairs = {
            k: v
            for k, v in doc.items()
            if k not in KNOWN_KEYS and not _STAT_KEY.match(k) and (v is None or isinstance(v, (str, int, float, bool)))
        }
        if pairs:
            meta.setdefault("run_metadata", {}).update(cap_depth(pairs))
            for key in ("engine", "gpu", "hardware"):
                if key in pairs:
                    meta.setdefault(key, pairs[key])
        if "request_goodput:" in doc or "best_of" in doc:
            meta["layout"] = "legacy benchmark_serving.py (vLLM <= 0.8)"
        elif "endpoint_type" in doc and "backend" not in doc:
            meta["layout"] = "vllm bench serve (0.9-0.10)"
        else:
            meta.setdefault("layout", "vllm bench serve (>= 0.11)")
    else:
        for key in ("backend", "dataset_name", "tag"):
            value = doc.get(key)
            if isinstance(value, str):
                meta.setdefault(key, value)
        info = doc.get("server_info")
        if isinstance(info, dict):
            meta["server_info"] = cap_depth(info, 4)
            for src, dst in (("version", "engine_version"), ("model_path", "model"), ("served_model_name", "model")):
                if isinstance(info.get(src), str):
                    meta.setdefault(dst, info[src])
            meta.setdefault("engine", "sglang")
        for key in ("random_input_len", "random_output_len", "random_range_ratio", "sharegpt_output_len"):
            if isinstance(doc.get(key), (int, float)) and not isinstance(doc.get(key), bool):
                meta.setdefault("workload", {})[key] = doc[key]


def _sniff_guard(source: Source) -> str | Message | None:
    try:
        return sniff(source)
    except FormatError as error:
        return reason_of(error)


FORMATS = [Format("vllm", "vllm", "vllm bench serve / benchmark_serving.py --save-result JSON", _sniff_guard, parse)]
