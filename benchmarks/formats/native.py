"""kvselect's own result format (`kvselect.result/1`, written by `NormalizedResult.to_native()`).

Schema (JSON object; every key below, no others):
- `schema` = "kvselect.result/1" (required); `tool` string (required); `tool_version` string|null;
  `evidence` "MEASURED"|"SIMULATED" (required); `test` one of benchmarks.suite.TEST_IDS|null; `format` (ignored).
- `metadata` object (free-form provenance); `definitions` object of strings; `notes` list of
  strings; `partial` boolean; `verdicts` list of `{name: str, passed: bool, ...}`;
  `timeseries` `{series: [[t_s, value], ...]}` with finite numbers.
- `points` (required) list of LoadPoint objects: `label` str, numbers|null for `concurrency,
  request_rate, achieved_concurrency, duration_s, request_throughput, output_token_throughput,
  input_token_throughput, goodput`, fractions 0..1|null for `error_rate, slo_attainment`,
  non-negative integers|null for `requests_completed, requests_failed`, `client_bound` bool|null,
  `ttft_ms, tpot_ms, itl_ms, e2e_ms` objects with any of `mean, p50, p90, p95, p99, max`
  (ms, number|null), `extra` object. Units and definitions: `benchmarks.result.DEFINITIONS`.
- `requests` (optional) columnar `{column: [values...]}`, columns from REQUEST_COLUMNS, equal
  lengths; `point` an index into `points`, `ok` booleans, `request_id/error/finish_reason`
  strings|null, the rest numbers|null.

Validated strictly: unknown keys, wrong types, non-finite numbers and unequal per-request column
lengths are errors naming the path, because the harness and simulator write this format and a
silent mismatch would corrupt evidence.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks import verdicts as verdict_status
from benchmarks.formats.base import Format, Source, type_name
from benchmarks.formats.common import (
    EXPECTED_BOOLEAN,
    EXPECTED_STRING,
    expect_list,
    expect_object,
    finish,
    join,
    number,
    refused,
    request_frame,
)
from benchmarks.result import (
    LATENCY_METRICS,
    NATIVE_SCHEMA,
    REQUEST_COLUMNS,
    STAT_KEYS,
    LoadPoint,
    NormalizedResult,
    Stats,
)
from benchmarks.suite import TEST_IDS
from selection.domain.messages import Message
from selection.domain.messages import marked as _

TOP_KEYS = {
    "schema",
    "tool",
    "tool_version",
    "evidence",
    "test",
    "metadata",
    "definitions",
    "points",
    "timeseries",
    "verdicts",
    "notes",
    "partial",
    "requests",
    "format",
}
REQUIRED = ("schema", "tool", "evidence", "points")
POINT_NUMBERS = (
    "concurrency",
    "request_rate",
    "achieved_concurrency",
    "duration_s",
    "request_throughput",
    "output_token_throughput",
    "input_token_throughput",
    "error_rate",
    "goodput",
    "slo_attainment",
)
POINT_INTS = ("requests_completed", "requests_failed")
POINT_KEYS = set(LoadPoint.__dataclass_fields__)
NUMERIC_COLUMNS = ("start_s", "ttft_ms", "tpot_ms", "itl_ms_mean", "e2e_ms", "prompt_tokens", "output_tokens")


def sniff(source: Source) -> str | Message | None:
    if '"schema"' not in source.head:
        return Message(_("no 'schema' key"))
    doc = source.doc_with('"schema"')
    if not isinstance(doc, dict):
        return Message(_("not a JSON object"))
    schema = doc.get("schema")
    if not isinstance(schema, str) or not schema.startswith("kvselect.result/"):
        return Message(_("schema is %(schema)s, not kvselect.result/N"), {"schema": repr(schema)})
    return None


def _string(doc: dict[str, Any], key: str, path: str, required: bool = False) -> str | None:
    value = doc.get(key)
    if value is None:
        if required:
            if key not in doc:
                raise refused(join(path, key), _("missing required key"))
            raise refused(join(path, key), EXPECTED_STRING, type=type_name(None))
        return None
    if not isinstance(value, str):
        raise refused(join(path, key), EXPECTED_STRING, type=type_name(value))
    return value


def _stats(value: Any, path: str) -> Stats:
    if value is None:
        return Stats()
    value = expect_object(value, path)
    unknown = set(value) - set(STAT_KEYS)
    if unknown:
        why = _("unknown statistic %(name)s (allowed: %(allowed)s)")
        raise refused(path, why, name=repr(sorted(unknown)[0]), allowed=", ".join(STAT_KEYS))
    return Stats(**{k: number(value.get(k), join(path, k)) for k in STAT_KEYS})


def _point(value: Any, path: str) -> LoadPoint:
    value = expect_object(value, path)
    unknown = set(value) - POINT_KEYS
    if unknown:
        raise refused(join(path, sorted(unknown)[0]), _("unknown key"))
    point = LoadPoint()
    label = value.get("label", "")
    if not isinstance(label, str):
        raise refused(join(path, "label"), EXPECTED_STRING, type=type_name(label))
    point.label = label
    for key in POINT_NUMBERS:
        setattr(point, key, number(value.get(key), join(path, key)))
    for key in POINT_INTS:
        n = number(value.get(key), join(path, key))
        if n is not None and (n != int(n) or n < 0):
            raise refused(join(path, key), _("expected a non-negative integer, got %(value)s"), value=repr(value[key]))
        setattr(point, key, None if n is None else int(n))
    for fraction in ("error_rate", "slo_attainment"):
        v = getattr(point, fraction)
        if v is not None and not 0 <= v <= 1:
            raise refused(join(path, fraction), _("must be between 0 and 1, got %(value)s"), value=str(v))
    for metric in LATENCY_METRICS:
        setattr(point, metric, _stats(value.get(metric), join(path, metric)))
    bound = value.get("client_bound")
    if bound is not None and not isinstance(bound, bool):
        raise refused(join(path, "client_bound"), EXPECTED_BOOLEAN, type=type_name(bound))
    point.client_bound = bound
    extra = value.get("extra") or {}
    point.extra = dict(expect_object(extra, join(path, "extra")))
    return point


def _requests(value: Any, n_points: int) -> Any:
    value = expect_object(value, "requests")
    unknown = set(value) - set(REQUEST_COLUMNS)
    if unknown:
        why = _("unknown column (allowed: %(allowed)s)")
        raise refused(f"requests.{sorted(unknown)[0]}", why, allowed=", ".join(REQUEST_COLUMNS))
    lengths = {k: len(expect_list(v, f"requests.{k}")) for k, v in value.items()}
    if not lengths:
        return None
    n = next(iter(lengths.values()))
    for key, length in lengths.items():
        if length != n:
            raise refused(f"requests.{key}", _("has %(rows)s rows, other columns have %(n)s"), rows=length, n=n)
    columns: dict[str, Any] = {}
    for key, items in value.items():
        path = f"requests.{key}"
        if key in NUMERIC_COLUMNS or key == "point":
            for i, item in enumerate(items):
                if item is not None and (isinstance(item, bool) or not isinstance(item, (int, float))):
                    raise refused(f"{path}[{i}]", _("expected a number or null, got %(type)s"), type=type_name(item))
            array = np.array([np.nan if v is None else v for v in items], dtype=float)
            if np.isinf(array).any():
                raise refused(path, _("non-finite number"))
            if key == "point":
                if (
                    np.isnan(array).any()
                    or (array != np.round(array)).any()
                    or (array < 0).any()
                    or (array >= max(n_points, 1)).any()
                ):
                    why = _("every row must name a point index 0..%(last)s")
                    raise refused(path, why, last=n_points - 1)
                array = array.astype(np.int32)
            columns[key] = array
        elif key == "ok":
            for i, item in enumerate(items):
                if not isinstance(item, bool):
                    raise refused(f"{path}[{i}]", EXPECTED_BOOLEAN, type=type_name(item))
            columns[key] = np.array(items, dtype=bool)
        else:
            for i, item in enumerate(items):
                if item is not None and not isinstance(item, str):
                    raise refused(f"{path}[{i}]", _("expected a string or null, got %(type)s"), type=type_name(item))
            columns[key] = np.array(items, dtype=object)
    return request_frame(columns, n)


def _timeseries(doc: dict[str, Any]) -> dict[str, Any]:
    """The `timeseries` object, each series checked to be a list of [t_s, value] number pairs."""
    timeseries = expect_object(doc.get("timeseries") or {}, "timeseries")
    for name, series in timeseries.items():
        for i, pair in enumerate(expect_list(series, f"timeseries.{name}")):
            pair = expect_list(pair, f"timeseries.{name}[{i}]")
            if len(pair) != 2:
                why = _("expected [t_s, value], got %(n)s items")
                raise refused(f"timeseries.{name}[{i}]", why, n=len(pair))
            for j, item in enumerate(pair):
                number(item, f"timeseries.{name}[{i}][{j}]", allow_none=False)
    return timeseries


def _verdicts(doc: dict[str, Any]) -> list[Any]:
    """The `verdicts` list, each checked: a name, and a status and `passed` that agree."""
    verdicts = expect_list(doc.get("verdicts") or [], "verdicts")
    for i, verdict in enumerate(verdicts):
        verdict = expect_object(verdict, f"verdicts[{i}]")
        if not isinstance(verdict.get("name"), str):
            raise refused(f"verdicts[{i}].name", EXPECTED_STRING, type=type_name(verdict.get("name")))
        status = verdict.get("status")
        if status is not None and status not in verdict_status.STATUSES:
            why = _("expected one of %(allowed)s, got %(value)s")
            raise refused(f"verdicts[{i}].status", why, allowed=", ".join(verdict_status.STATUSES), value=repr(status))
        passed = verdict.get("passed")
        if not isinstance(passed, bool) and not (passed is None and status is not None):
            why = _("expected a boolean (or null with a status), got %(type)s")
            raise refused(f"verdicts[{i}].passed", why, type=type_name(passed))
        if status is not None and passed is not (True if status == "pass" else False if status == "fail" else None):
            why = _("%(passed)s contradicts status %(status)s")
            raise refused(f"verdicts[{i}].passed", why, passed=repr(passed), status=repr(status))
    return verdicts


def validate(doc: Any) -> NormalizedResult:
    """A `kvselect.result/1` document -> NormalizedResult, or FormatError naming the bad path."""
    doc = expect_object(doc, "(root)")
    for key in REQUIRED:
        if key not in doc:
            raise refused(key, _("missing required key"))
    schema = doc["schema"]
    if schema != NATIVE_SCHEMA:
        why = _("unsupported version %(version)s (this kvselect reads %(schema)s)")
        raise refused("schema", why, version=repr(schema), schema=NATIVE_SCHEMA)
    unknown = set(doc) - TOP_KEYS
    if unknown:
        raise refused(sorted(unknown)[0], _("unknown key in %(schema)s"), schema=NATIVE_SCHEMA)
    evidence = doc["evidence"]
    if evidence not in ("MEASURED", "SIMULATED"):
        raise refused("evidence", _("must be MEASURED or SIMULATED, got %(value)s"), value=repr(evidence))
    test = doc.get("test")
    if test is not None and test not in TEST_IDS:
        why = _("must be one of %(allowed)s, got %(value)s")
        raise refused("test", why, allowed=", ".join(TEST_IDS), value=repr(test))
    result = NormalizedResult(
        tool=_string(doc, "tool", "", required=True),
        format="native",
        tool_version=_string(doc, "tool_version", ""),
        evidence=evidence,
        test=test,
    )
    result.metadata = dict(expect_object(doc.get("metadata") or {}, "metadata"))
    definitions = expect_object(doc.get("definitions") or {}, "definitions")
    for key, value in definitions.items():
        if not isinstance(value, str):
            raise refused(f"definitions.{key}", EXPECTED_STRING, type=type_name(value))
    result.definitions = dict(definitions)
    points = expect_list(doc["points"], "points")
    result.points = [_point(p, f"points[{i}]") for i, p in enumerate(points)]
    timeseries = _timeseries(doc)
    result.timeseries = {k: [list(map(float, p)) for p in v] for k, v in timeseries.items()}
    verdicts = _verdicts(doc)
    result.verdicts = [dict(v) for v in verdicts]
    notes = expect_list(doc.get("notes") or [], "notes")
    for i, note in enumerate(notes):
        if not isinstance(note, str):
            raise refused(f"notes[{i}]", EXPECTED_STRING, type=type_name(note))
    result.notes = list(notes)
    partial = doc.get("partial", False)
    if not isinstance(partial, bool):
        raise refused("partial", EXPECTED_BOOLEAN, type=type_name(partial))
    result.partial = partial
    if doc.get("requests") is not None:
        result.requests = _requests(doc["requests"], len(result.points))
    return result


def parse(source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    return finish(validate(source.json), slo)


FORMATS = [Format("native", "kvselect", f"kvselect native result ({NATIVE_SCHEMA})", sniff, parse)]
