"""Shared plumbing for the result-file parsers: path-aware field access, statistics, the
per-request table and SLO recomputation (decoding and the registry types are in `base`).

Every parser reports bad input as `FormatError` naming the JSON path of the offending value, so
an upload gets a message a CI user can act on ("benchmarks[0].metrics: expected an object, got
list") instead of a traceback.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

from benchmarks.formats.base import FormatError, type_name, where_in
from benchmarks.result import (
    REQUEST_COLUMNS,
    SIMULATED,
    LoadPoint,
    NormalizedResult,
    Stats,
    concurrency_shortfall,
    is_cancelled,
)
from selection.domain.messages import CLAUSE_SEPARATOR, Code, Join, Message
from selection.domain.messages import marked as _

MAX_METADATA_DEPTH = 8

# run notes the parsers add (English in `notes`; the message beside it for pages in any language)
NO_METRIC = _("%(n)s successful requests have no %(metric)s")
GOODPUT_NOT_DERIVABLE = _("point %(index)s: goodput/SLO attainment not derivable: %(why)s in the file")
GOODPUT_SAMPLED = _(
    "point %(index)s: goodput/SLO attainment estimated from a sample of %(total)s of %(expected)s requests"
)
STORED_SIMULATED = _(
    "Stored as SIMULATED although the file says %(evidence)s: it comes from kvselect's simulator (%(marks)s)."
)


def refused(path: str | Message, msgid: str, **params: Any) -> FormatError:
    """A FormatError at `path` (a key path, or a place such as "CSV line 4, column …") whose reason is `msgid`
    with `params`, kept as a Message. Text params are what the file holds (a value, a key, a column) or
    identifiers (allowed keys): a page shows them as code."""
    return FormatError(where_in(path, Message(msgid, coded(params))))


def coded(params: dict[str, Any]) -> dict[str, Any]:
    """`params` with each plain string marked as code (`Code`); Messages and numbers unchanged."""
    return {name: Code(value) if isinstance(value, str) else value for name, value in params.items()}


def at(msgid: str, **params: Any) -> Message:
    """A place in a file that is not a key path ("CSV line 4, column Benchmark / Strategy"), its text params as code."""
    return Message(msgid, coded(params))


# Places in a CSV file, and a CSV the csv module cannot read (its own reason, in English, as code).
CSV_LINE = _("CSV line %(line)s")
CSV_COLUMN = _("CSV line %(line)s, column %(column)s")
UNREADABLE_CSV = _("unreadable CSV: %(error)s")
LINE = _("line %(n)s")
EXPECTED_OBJECT = _("expected an object, got %(type)s")
EXPECTED_LIST = _("expected a list, got %(type)s")
EXPECTED_NUMBERS = _("expected numbers, got %(type)s")
EXPECTED_STRING = _("expected a string, got %(type)s")
EXPECTED_BOOLEAN = _("expected a boolean, got %(type)s")

# --- path-aware accessors -------------------------------------------------------------------


def expect_object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise refused(path, EXPECTED_OBJECT, type=type_name(value))
    return value


def expect_list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise refused(path, EXPECTED_LIST, type=type_name(value))
    return value


def require(mapping: dict[str, Any], key: str, path: str) -> Any:
    if key not in mapping:
        raise refused(join(path, key), _("missing required key"))
    return mapping[key]


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def number(value: Any, path: str, allow_none: bool = True, allow_inf: bool = False) -> float | None:
    """A finite number (bool is not a number); None stays None when allowed."""
    if value is None:
        if allow_none:
            return None
        raise refused(path, _("expected a number, got %(type)s"), type=type_name(None))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise refused(path, _("expected a number, got %(type)s"), type=type_name(value))
    number_ = float(value)
    if math.isnan(number_) or (math.isinf(number_) and not allow_inf):
        raise refused(path, _("expected a finite number, got %(value)s"), value=repr(value))
    return number_


def get_number(
    mapping: dict[str, Any], key: str, path: str, required: bool = False, allow_inf: bool = False
) -> float | None:
    if required:
        return number(require(mapping, key, path), join(path, key), allow_none=False, allow_inf=allow_inf)
    return number(mapping.get(key), join(path, key), allow_inf=allow_inf)


def get_int(mapping: dict[str, Any], key: str, path: str, required: bool = False) -> int | None:
    value = get_number(mapping, key, path, required=required)
    if value is None:
        return None
    if value != int(value) or value < 0:
        raise refused(join(path, key), _("expected a non-negative integer, got %(value)s"), value=repr(mapping[key]))
    return int(value)


def get_object(mapping: dict[str, Any], key: str, path: str, required: bool = False) -> dict[str, Any] | None:
    if required:
        return expect_object(require(mapping, key, path), join(path, key))
    value = mapping.get(key)
    return None if value is None else expect_object(value, join(path, key))


def get_list(mapping: dict[str, Any], key: str, path: str, required: bool = False) -> list[Any] | None:
    if required:
        return expect_list(require(mapping, key, path), join(path, key))
    value = mapping.get(key)
    return None if value is None else expect_list(value, join(path, key))


def scaled_stats(mapping: dict[str, Any] | None, path: str, scale: float, keys: dict[str, str]) -> Stats:
    """Stats from a tool's statistic block; `keys` maps our stat name to the tool's key."""
    if mapping is None:
        return Stats()
    expect_object(mapping, path)
    values = {}
    for ours, theirs in keys.items():
        value = number(mapping.get(theirs), join(path, theirs))
        values[ours] = None if value is None else value * scale
    return Stats(**values)


def stats_from_array(values: np.ndarray) -> Stats:
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return Stats()
    p50, p90, p95, p99 = np.percentile(values, [50, 90, 95, 99])
    return Stats(float(values.mean()), float(p50), float(p90), float(p95), float(p99), float(values.max()))


def mean_only(value: float | None) -> Stats:
    return Stats(mean=value)


def pooled_itl_mean(sum_e2e_ms: float | None, sum_ttft_ms: float | None, sum_gaps_tokens: float | None) -> float | None:
    """Mean per-token ITL = total decode time / total token gaps; exact whatever the chunking."""
    if sum_e2e_ms is None or sum_ttft_ms is None or not sum_gaps_tokens or sum_gaps_tokens <= 0:
        return None
    value = (sum_e2e_ms - sum_ttft_ms) / sum_gaps_tokens
    return value if value >= 0 and math.isfinite(value) else None  # inconsistent inputs: missing, not wrong


def cap_depth(value: Any, depth: int = MAX_METADATA_DEPTH) -> Any:
    """A copy of JSON-like metadata cut off below `depth` levels (kept provenance stays small)."""
    if depth <= 0:
        return "…" if isinstance(value, (dict, list)) else value
    if isinstance(value, dict):
        return {str(k): cap_depth(v, depth - 1) for k, v in value.items()}
    if isinstance(value, list):
        return [cap_depth(v, depth - 1) for v in value[:100]]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# --- per-request table ----------------------------------------------------------------------


def request_frame(columns: dict[str, Any], n: int) -> pd.DataFrame:
    """The per-request table with exactly REQUEST_COLUMNS; absent columns are all-missing. pandas is
    loaded here, by the parse that builds a table, as the parsers load it: a process that only
    sniffs an upload's head or lists the formats (the upload form, the web at start-up) never does."""
    import pandas as pd

    data: dict[str, Any] = {}
    for column in REQUEST_COLUMNS:
        value = columns.get(column)
        if value is None:
            if column in ("request_id", "error", "finish_reason"):
                data[column] = pd.Series([None] * n, dtype="object")
            elif column == "ok":
                data[column] = np.ones(n, dtype=bool)
            elif column == "point":
                data[column] = np.zeros(n, dtype=np.int32)
            else:
                data[column] = np.full(n, np.nan)
        else:
            data[column] = value
    frame = pd.DataFrame(data, columns=list(REQUEST_COLUMNS))
    if len(frame) != n:
        raise FormatError(Message(_("per-request columns have inconsistent lengths (expected %(n)s rows)"), {"n": n}))
    return frame


def per_request_tpot(e2e_ms: np.ndarray, ttft_ms: np.ndarray, output_tokens: np.ndarray) -> np.ndarray:
    """kvselect TPOT per request: (e2e - ttft) / (output tokens - 1); NaN where undefined."""
    e2e_ms = np.asarray(e2e_ms, dtype=float)
    ttft_ms = np.asarray(ttft_ms, dtype=float)
    tokens = np.asarray(output_tokens, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tokens > 1, (e2e_ms - ttft_ms) / (tokens - 1), np.nan)


# --- SLO recomputation ----------------------------------------------------------------------

SLO_KEYS = {"ttft_ms": "ttft_ms", "tpot_ms": "tpot_ms", "e2e_ms": "e2e_ms"}


def validate_slo(slo: dict[str, Any] | None) -> dict[str, float]:
    """The latency budget checked key by key; a bad one is a FormatError (a ValueError) naming `slo.<key>`."""
    if not slo:
        return {}
    if not isinstance(slo, dict):
        raise refused("slo", _("expected a dict, got %(type)s"), type=type_name(slo))
    cleaned = {}
    for key, value in slo.items():
        if key not in SLO_KEYS:
            raise refused(f"slo.{key}", _("unknown SLO (allowed: %(allowed)s)"), allowed=", ".join(SLO_KEYS))
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise refused(f"slo.{key}", _("must be a positive number of ms, got %(value)s"), value=repr(value))
        cleaned[key] = float(value)
    return cleaned


def cancelled_mask(errors: Any) -> np.ndarray:
    """Rows of the per-request table whose request the client cancelled (`result.CANCELLED`)."""
    return np.array([is_cancelled(e) for e in errors], dtype=bool)


def apply_slo(result: NormalizedResult, slo: dict[str, Any] | None) -> NormalizedResult:
    """Recompute goodput and SLO attainment against kvselect's latency budget.

    With per-request data: goodput = the request throughput x the share of the successful requests
    that meet every SLO (so never above the throughput; without a throughput: good requests / point
    duration), attainment = good / (completed + failed). Requests the client cancelled (a run cut
    at its end) are neither: they are left out and counted in `extra["cancelled_in_flight"]`. A sample of requests gives
    an estimate (noted). A successful request whose latency the file does not give cannot be
    judged: then goodput stays missing (noted), never counted as a miss. Without per-request data
    the tool's own goodput (against its own SLO) cannot be reused: it moves to
    `extra["tool_goodput"]` and goodput stays missing.
    """
    budget = validate_slo(slo)
    if not budget:
        return result
    frame = result.requests
    for index, point in enumerate(result.points):
        if point.goodput is not None or point.slo_attainment is not None:
            point.extra.setdefault("tool_goodput", point.goodput)
            point.extra.setdefault("tool_slo_attainment", point.slo_attainment)
        point.goodput = None
        point.slo_attainment = None
        point.extra["slo"] = dict(budget)
        if frame is None or not len(frame):
            continue
        rows = frame[frame["point"] == index]
        cancelled = cancelled_mask(rows["error"])
        if cancelled.any():
            point.extra.setdefault("cancelled_in_flight", int(cancelled.sum()))
            rows = rows[~cancelled]
        if not len(rows):
            continue
        ok = rows["ok"].to_numpy(dtype=bool)
        good = ok.copy()
        undetermined: list[Message] = []
        for metric, limit in budget.items():
            values = rows[metric].to_numpy(dtype=float)
            meets = values <= limit
            unknown = np.isnan(values)
            if metric == "tpot_ms":  # a one-token answer has no TPOT: it cannot miss the SLO
                tokens = rows["output_tokens"].to_numpy(dtype=float)
                meets |= unknown & (tokens <= 1)
                unknown &= ~(tokens <= 1)
            if (unknown & ok).any():
                undetermined.append(Message(NO_METRIC, {"n": int((unknown & ok).sum()), "metric": Code(metric)}))
            good &= meets
        if undetermined:
            result.add_note(
                Message(GOODPUT_NOT_DERIVABLE, {"index": index, "why": Join(undetermined, CLAUSE_SEPARATOR)})
            )
            continue
        good_count = int(good.sum())
        total = len(rows)
        expected = None
        if point.requests_completed is not None:
            expected = point.requests_completed + (point.requests_failed or 0)
        point.slo_attainment = good_count / total
        ok_rows = int(ok.sum())
        if expected is not None and expected != total:
            result.add_note(Message(GOODPUT_SAMPLED, {"index": index, "total": total, "expected": expected}))
        if point.request_throughput is not None and ok_rows:
            # the tool's own throughput scaled by the good share of the successes: never above it, whatever
            # window the tool divided by (guidellm counts records that overlap its window, over a longer span)
            point.goodput = point.request_throughput * good_count / ok_rows
        elif point.request_throughput is not None:
            point.goodput = 0.0
        elif point.duration_s and (expected is None or expected == total):
            point.goodput = good_count / point.duration_s
    return result


def held_concurrency(starts: np.ndarray, ends: np.ndarray, window: tuple[float, float] | None = None) -> float | None:
    """Time-weighted requests in flight: each request's [start, end] clipped to the window (by
    default first start -> last end), summed, divided by the window. Missing when any request
    lacks a start or an end (a partial sum would understate it)."""
    starts, ends = np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)
    if not starts.size or not (np.isfinite(starts).all() and np.isfinite(ends).all()):
        return None
    low, high = window if window is not None else (float(starts.min()), float(ends.max()))
    if not high > low:
        return None
    overlap = np.clip(np.minimum(ends, high) - np.maximum(starts, low), 0.0, None)
    return float(overlap.sum() / (high - low))


def judge_client(point: LoadPoint) -> None:
    """Mark a closed-loop point client-bound when it held less than the harness's share of its
    requested concurrency (`result.concurrency_shortfall`); open loops and points without an
    achieved concurrency stay unjudged (None)."""
    if point.client_bound is not None or point.request_rate is not None:
        return
    if point.concurrency is None or point.achieved_concurrency is None:
        return
    requests = None
    if point.requests_completed is not None:
        requests = point.requests_completed + (point.requests_failed or 0)
        requests += int(point.extra.get("cancelled_in_flight") or 0)
    reason = concurrency_shortfall(point.achieved_concurrency, point.concurrency, requests or None)
    point.client_bound = reason is not None
    point.extra["client_bound_reasons"] = [reason] if reason else []


def finish(result: NormalizedResult, slo: dict[str, Any] | None) -> NormalizedResult:
    """Common tail of every parser: error rates, achieved concurrency from per-request start and
    end times where the parser had none, SLO recomputation, the client-bound judgement."""
    frame = result.requests
    for index, point in enumerate(result.points):
        if point.error_rate is None and point.requests_completed is not None and point.requests_failed is not None:
            total = point.requests_completed + point.requests_failed
            point.error_rate = point.requests_failed / total if total else None
        if point.achieved_concurrency is None and frame is not None and len(frame):
            rows = frame[frame["point"] == index]
            starts = rows["start_s"].to_numpy(dtype=float)
            held = held_concurrency(starts, starts + rows["e2e_ms"].to_numpy(dtype=float) / 1000.0)
            if held is not None:
                point.achieved_concurrency = held
                point.extra["achieved_concurrency_source"] = "per-request start and end times"
    apply_slo(result, slo)
    for point in result.points:
        judge_client(point)
    return result


# --- provenance ------------------------------------------------------------------------------

SIMULATOR_NAME = "kvsim"  # the simulator's name: its metric prefix, served models, owner and evidence header
SIMULATED_TIMESERIES = ("fragmentation_ratio",)  # only the simulator exports a fragmentation gauge


def simulator_marks(result: NormalizedResult) -> list[str]:
    """Where a parsed file shows that kvselect's simulator produced it (empty: no sign). The harness
    records how it recognised the simulator (`metadata.simulator`, `metadata.engine_metrics.simulated`);
    any tool's file that names `kvsim` (the served model, a metric, the endpoint's owner) or holds
    the simulator's fragmentation series came from it too, whatever its `evidence` claims."""
    marks: list[str] = []
    metadata = result.metadata or {}
    recognised = metadata.get("simulator")
    if isinstance(recognised, dict) and any(v is True for v in recognised.values()):
        marks.append("metadata.simulator: " + ", ".join(k for k, v in recognised.items() if v is True))
    engine_metrics = metadata.get("engine_metrics")
    if isinstance(engine_metrics, dict) and engine_metrics.get("simulated") is True:
        marks.append("metadata.engine_metrics.simulated")
    target = metadata.get("target")
    if isinstance(target, dict) and target.get("engine") == "simulator":
        marks.append("metadata.target.engine: simulator")
    named = _first_mention(metadata, "metadata", SIMULATOR_NAME)
    if named:
        marks.append(f"{named} names {SIMULATOR_NAME}")
    marks.extend(f"timeseries.{name}" for name in SIMULATED_TIMESERIES if (result.timeseries or {}).get(name))
    return marks


def _first_mention(value: Any, path: str, word: str, depth: int = MAX_METADATA_DEPTH) -> str | None:
    """The path of the first key or string under `value` containing `word` (case-insensitive)."""
    if depth < 0:
        return None
    if isinstance(value, str):
        return path if word in value.lower() else None
    if isinstance(value, dict):
        for key, item in value.items():
            if word in str(key).lower():
                return join(path, str(key))
            found = _first_mention(item, join(path, str(key)), word, depth - 1)
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value[:1000]):
            found = _first_mention(item, join(path, index), word, depth - 1)
            if found:
                return found
    return None


def keep_simulated(result: NormalizedResult) -> NormalizedResult:
    """A file the simulator produced is SIMULATED, whatever it claims: never upgraded to MEASURED."""
    marks = simulator_marks(result)
    if marks:
        if result.evidence != SIMULATED:
            result.add_note(
                Message(STORED_SIMULATED, {"evidence": Code(result.evidence), "marks": Code("; ".join(marks[:3]))})
            )
        result.evidence = SIMULATED
    return result
