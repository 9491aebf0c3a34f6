"""The metric blocks and the `Metric,avg,...` CSV that aiperf and genai-perf both write.

genai-perf's summary JSON and CSV are aiperf's ancestors: one block per metric tag
`{unit, avg, p1..p99, min, max, std[, count, sum]}`, and a CSV whose first table is
`Metric,avg,min,max,p99,...` followed by `Metric,Value` tables. Both parsers read them here.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from benchmarks.formats.base import FormatError, Source, type_name
from benchmarks.formats.common import (
    CSV_LINE,
    UNREADABLE_CSV,
    at,
    coded,
    expect_object,
    finish,
    number,
    pooled_itl_mean,
    refused,
)
from benchmarks.result import LoadPoint, NormalizedResult, Stats
from selection.domain.messages import Message
from selection.domain.messages import marked as _

TIME_UNITS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1000.0, "sec": 1000.0, "seconds": 1000.0}
STAT_MAP = {"mean": "avg", "p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99", "max": "max"}
# Rows only aiperf writes: they tell its CSV from genai-perf's.
AIPERF_CSV_MARKERS = ("Inter Chunk Latency", "Credit", "Error Request Count", "Error Input Sequence Length")
CSV_LATENCY = {"Time to First Token": "ttft_ms", "Inter Token Latency": "tpot_ms", "Request Latency": "e2e_ms"}
# rows whose `sum` column the per-token ITL mean is derived from (aiperf's decode duration = latency - TTFT)
SUM_ROWS = ("Decode Duration", "Output Sequence Length")
TIMED = ("Decode Duration",)

# run notes (English in `notes`; the message beside it for pages in any language)
NO_RUN_CONFIGURATION = _("CSV export carries no run configuration; the requested concurrency/rate is unknown")
EVERY_REQUEST_FAILED = _("every request failed: no latency rows in the CSV")
CANCELLED_UNKNOWN = _(
    "the CSV does not say which errors were requests the client cancelled (the JSON export does): all are counted "
    "as failed"
)


# Places in the `Metric,avg,...` table (table 1) and the `Metric,Value` tables: a line and its metric's name.
TABLE_ROW = _("CSV table 1 line %(line)s (%(name)s)")
TABLE_CELL = _("CSV table 1 line %(line)s (%(name)s), column %(column)s")
VALUE_ROW = _("CSV Metric,Value table line %(line)s (%(name)s)")


def unit_scale(unit: Any, path: str | Message) -> float:
    if not isinstance(unit, str):
        raise refused(path, _("expected a unit string, got %(type)s"), type=type_name(unit))
    scale = TIME_UNITS.get(unit.strip().lower())
    if scale is None:
        raise refused(path, _("unknown time unit %(unit)s (expected ns, us, ms or sec)"), unit=repr(unit))
    return scale


def metric_block(doc: dict[str, Any], tag: str) -> dict[str, Any] | None:
    value = doc.get(tag)
    if value is None:
        return None
    return expect_object(value, tag)


def latency_stats(doc: dict[str, Any], tag: str) -> Stats:
    block = metric_block(doc, tag)
    if block is None:
        return Stats()
    scale = unit_scale(block.get("unit"), f"{tag}.unit")
    values = {}
    for ours, theirs in STAT_MAP.items():
        v = number(block.get(theirs), f"{tag}.{theirs}")
        values[ours] = None if v is None else v * scale
    return Stats(**values)


def metric_avg(doc: dict[str, Any], tag: str) -> float | None:
    block = metric_block(doc, tag)
    return None if block is None else number(block.get("avg"), f"{tag}.avg")


def metric_sum(doc: dict[str, Any], tag: str, scale: float = 1.0, count: float | None = None) -> float | None:
    block = metric_block(doc, tag)
    if block is None:
        return None
    total = number(block.get("sum"), f"{tag}.sum")
    if total is None:
        avg = number(block.get("avg"), f"{tag}.avg")
        count = number(block.get("count"), f"{tag}.count") or count
        total = avg * count if avg is not None and count is not None else None
    return None if total is None else total * scale


def csv_tables(text: str) -> list[list[list[str]]]:
    tables: list[list[list[str]]] = [[]]
    for row in csv.reader(io.StringIO(text)):
        if not row or not any(cell.strip() for cell in row):
            if tables[-1]:
                tables.append([])
            continue
        tables[-1].append(row)
    return [t for t in tables if t]


def unit_of(name: str) -> tuple[str, str | None]:
    if name.endswith(")") and "(" in name:
        base, _, unit = name.rpartition("(")
        return base.strip(), unit[:-1]
    return name.strip(), None


# `Metric,Value` rows that set a LoadPoint figure as they are
VALUE_FIGURES = {
    "request throughput": "request_throughput",
    "output token throughput": "output_token_throughput",
    "input token throughput": "input_token_throughput",
    "goodput": "goodput",
    "request goodput": "goodput",
    "goodrequestfraction": "slo_attainment",
}


def parse_metric_csv(
    source: Source, slo: dict[str, Any] | None, tool: str, definitions: dict[str, str]
) -> NormalizedResult:
    """The `Metric,avg,...` CSV table (plus its `Metric,Value` tables) that aiperf and genai-perf both write."""
    try:
        tables = csv_tables(source.text)
    except csv.Error as error:
        raise FormatError(Message(UNREADABLE_CSV, coded({"error": str(error)}))) from None
    if not tables:
        raise refused("CSV", _("empty"))
    header = tables[0][0]
    if header[:2] != ["Metric", "avg"]:
        why = _("expected header 'Metric,avg,...', got %(header)s")
        raise refused(at(_("CSV table 1")), why, header=repr(",".join(header[:3])))
    result = NormalizedResult(tool=tool, format=f"{tool}-csv", definitions=dict(definitions))
    point = LoadPoint(label=tool)
    sums = _read_stat_table(tables[0], point)
    error_rate = None
    for table in tables[1:]:
        if table[0][:2] == ["Metric", "Value"]:
            error_rate = _read_value_table(table, point, error_rate)
    _complete_point(point, result, error_rate, sums)
    result.add_note(Message(NO_RUN_CONFIGURATION))
    result.points.append(point)
    return finish(result, slo)


def _read_stat_table(table: list[list[str]], point: LoadPoint) -> dict[str, float]:
    """The latency statistics and effective concurrency of the `Metric,avg,...` table into `point`; returns
    the `sum` column of the rows the per-token ITL mean is derived from."""
    header = table[0]
    sums: dict[str, float] = {}
    for line, row in enumerate(table[1:], start=2):
        if len(row) != len(header):
            why = _("has %(n)s columns, header has %(width)s")
            raise refused(at(_("CSV table 1 line %(line)s"), line=line), why, n=len(row), width=len(header))
        name, unit = unit_of(row[0])
        cells = dict(zip(header, row, strict=False))
        if name in SUM_ROWS:
            total = _cell(cells, "sum", line, row[0])
            if total is not None:
                sums[name] = total * (unit_scale(unit, at(TABLE_ROW, line=line, name=row[0])) if name in TIMED else 1.0)
        if name == "Effective Concurrency":  # aiperf: time-weighted requests in flight
            point.achieved_concurrency = _cell(cells, "avg", line, row[0])
            continue
        target = CSV_LATENCY.get(name)
        if target is None and name != "Inter Chunk Latency":
            continue
        scale = unit_scale(unit, at(TABLE_ROW, line=line, name=row[0]))
        values = {}
        for ours, theirs in STAT_MAP.items():
            v = _cell(cells, theirs, line, row[0])
            values[ours] = None if v is None else v * scale
        if target is None:
            point.extra["itl_chunk_ms"] = values
        else:
            setattr(point, target, Stats(**values))
    return sums


def _read_value_table(table: list[list[str]], point: LoadPoint, error_rate: float | None) -> float | None:
    """One `Metric,Value` table into `point`; returns the request error rate (a fraction) if it gives one."""
    for line, row in enumerate(table[1:], start=2):
        if len(row) < 2:
            raise refused(at(_("CSV Metric,Value table line %(line)s"), line=line), _("expected two columns"))
        name, unit = unit_of(row[0])
        try:
            value = float(row[1])
        except ValueError:
            where = at(VALUE_ROW, line=line, name=row[0])
            raise refused(where, _("expected a number, got %(type)s"), type=repr(row[1][:30])) from None
        if not math.isfinite(value):
            raise refused(at(VALUE_ROW, line=line, name=row[0]), _("expected a finite number"))
        key = name.lower()
        if key in VALUE_FIGURES:
            setattr(point, VALUE_FIGURES[key], value)
        elif key == "benchmark duration":
            point.duration_s = value * unit_scale(unit or "sec", at(CSV_LINE, line=line)) / 1000.0
        elif key in ("request count", "completed requests"):
            point.requests_completed = int(value)
        elif key == "completed requests (success + error)":
            point.extra["requests_total"] = int(value)
        elif key == "error request count":
            point.requests_failed = int(value)
            point.extra["error_request_count"] = int(value)
        elif key == "request error rate":
            error_rate = value / 100.0 if unit == "%" else value
    return error_rate


def _complete_point(
    point: LoadPoint, result: NormalizedResult, error_rate: float | None, sums: dict[str, float]
) -> None:
    """What the rows give together: an all-failed run, the failed count, the per-token ITL mean."""
    if point.ttft_ms.is_empty() and point.e2e_ms.is_empty():
        if "error_request_count" not in point.extra:
            why = _("no Time to First Token or Request Latency row, nor an Error Request Count")
            raise refused("CSV", why)
        result.add_note(Message(EVERY_REQUEST_FAILED))
        if point.requests_completed is None:
            point.requests_completed = 0
    if error_rate is not None:
        point.error_rate = error_rate
        if point.requests_failed is None and error_rate == 0 and point.requests_completed is not None:
            point.requests_failed = 0  # aiperf writes no Error Request Count row when nothing failed
    if point.requests_failed:
        result.add_note(Message(CANCELLED_UNKNOWN))
    decode, osl, count = sums.get("Decode Duration"), sums.get("Output Sequence Length"), point.requests_completed
    if point.itl_ms.is_empty() and decode is not None and osl is not None and count:
        # per-token ITL mean = total decode time (latency - TTFT) / total token gaps, exact for any chunking
        point.itl_ms = Stats(mean=pooled_itl_mean(decode, 0.0, osl - count))


def _cell(cells: dict[str, str], column: str, line: int, name: str) -> float | None:
    raw = cells.get(column, "")
    if raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        where = at(TABLE_CELL, line=line, name=name, column=column)
        raise refused(where, _("expected a number, got %(type)s"), type=repr(raw[:30])) from None
    if not math.isfinite(value):
        where = at(TABLE_CELL, line=line, name=name, column=column)
        raise refused(where, _("expected a finite number, got %(value)s"), value=repr(raw))
    return value
