"""guidellm's CSV export: 0.3's one header row and the three header rows of later versions."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from benchmarks.formats.base import FormatError, Source
from benchmarks.formats.common import (
    CSV_COLUMN,
    CSV_LINE,
    UNREADABLE_CSV,
    at,
    coded,
    finish,
    mean_only,
    number,
    refused,
)
from benchmarks.formats.guidellm.definitions import DEFINITIONS, PERCENTILE_ORDER, worker_metadata
from benchmarks.result import LoadPoint, NormalizedResult, Stats
from selection.domain.messages import Message
from selection.domain.messages import marked as _


def _csv_rows(source: Source) -> list[list[str]]:
    try:
        return list(csv.reader(io.StringIO(source.text)))
    except csv.Error as error:
        raise FormatError(Message(UNREADABLE_CSV, coded({"error": str(error)}))) from None


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


UNREADABLE_STRATEGY = _("unreadable strategy %(strategy)s")
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
            why = _("has %(n)s columns, the header has %(width)s")
            raise refused(at(CSV_LINE, line=line), why, n=len(row), width=len(header))
        result.points.append(_v03_point(dict(zip(header, row, strict=False)), line, result))
    if not result.points:
        raise refused("CSV", _("no benchmark rows after the header row"))
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
            raise refused(at(CSV_COLUMN, line=line, column=f"{base} {V03_LIST}"), _("expected a JSON list")) from None
        if not isinstance(values, list) or len(values) != len(V03_ORDER):
            where = at(CSV_COLUMN, line=line, column=f"{base} {V03_LIST}")
            raise refused(where, _("expected %(n)s values"), n=len(V03_ORDER))
        for ours in ("p90", "p95", "p99", "max"):
            v = number(values[V03_ORDER.index(ours)], at(CSV_COLUMN, line=line, column=f"{base} {V03_LIST}"))
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
        raise refused(at(CSV_COLUMN, line=line, column="Name"), UNREADABLE_STRATEGY, strategy=repr(name)) from None
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
            worker_metadata(worker, result)
    return point


def parse_csv(source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    rows = _csv_rows(source)
    if rows and rows[0][:4] == ["Type", "Run Id", "Id", "Name"]:
        return _parse_csv_v03(rows, slo)
    if len(rows) < 3:
        why = _("expected three header rows (group, metric, statistic), found %(n)s rows")
        raise refused("CSV", why, n=len(rows))
    width = len(rows[0])
    for r, row in enumerate(rows[:3]):
        if len(row) != width:
            where = at(_("CSV header row %(row)s"), row=r + 1)
            raise refused(where, _("has %(n)s columns, row 1 has %(width)s"), n=len(row), width=width)
    keys = list(zip(rows[0], rows[1], rows[2], strict=False))
    result = NormalizedResult(tool="guidellm", format="guidellm-csv", definitions=dict(DEFINITIONS))
    result.metadata["layout"] = "guidellm CSV (three header rows)"
    data_rows = [row for row in rows[3:] if any(cell.strip() for cell in row)]
    for index, row in enumerate(data_rows):
        line = index + 4
        if len(row) != width:
            why = _("has %(n)s columns, the header has %(width)s")
            raise refused(at(CSV_LINE, line=line), why, n=len(row), width=width)
        cells = {key: value for key, value in zip(keys, row, strict=False)}
        result.points.append(_csv_point(cells, line, result, index))
    if not result.points:
        raise refused("CSV", _("no benchmark rows after the three header rows"))
    return finish(result, slo)


def _csv_number(cells: dict[tuple[str, str, str], str], key: tuple[str, str, str], line: int) -> float | None:
    raw = cells.get(key)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        where = at(CSV_COLUMN, line=line, column=" / ".join(k for k in key if k))
        raise refused(where, _("expected a number, got %(type)s"), type=repr(raw[:40])) from None
    if not math.isfinite(value):
        where = at(CSV_COLUMN, line=line, column=" / ".join(k for k in key if k))
        raise refused(where, _("expected a finite number, got %(value)s"), value=repr(raw))
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
            where = at(CSV_COLUMN, line=line, column=f"{group} / {metric} / Percentiles")
            raise refused(where, _("expected a JSON list, got %(value)s"), value=repr(raw[:40])) from None
        if not isinstance(values, list) or len(values) != len(PERCENTILE_ORDER):
            where = at(CSV_COLUMN, line=line, column=f"{group} / {metric} / Percentiles")
            raise refused(where, _("expected %(n)s values (p001..p999)"), n=len(PERCENTILE_ORDER))
        mapping = dict(zip(PERCENTILE_ORDER, values, strict=False))
        for ours in ("p90", "p95", "p99"):
            value = number(
                mapping[ours],
                at(CSV_COLUMN, line=line, column=f"{group} / {metric} / Percentiles[{PERCENTILE_ORDER.index(ours)}]"),
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
        where = at(CSV_COLUMN, line=line, column="Benchmark / Strategy")
        raise refused(where, UNREADABLE_STRATEGY, strategy=repr(strategy)) from None
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
