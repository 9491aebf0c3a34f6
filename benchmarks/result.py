"""The normalised result: what every parser, the harness and the simulator produce.

One shape for all evidence, so scoring never needs to know which tool measured it. Units are
fixed: latencies in milliseconds, throughputs per second, token counts as integers. Definitions
are kvselect's (see DEFINITIONS); a tool whose own definition differs is mapped to ours and
its original definition is recorded in `NormalizedResult.definitions`. A quantity that cannot be
derived is None (missing), never 0.

The native JSON format (`kvselect.result/1`) is `NormalizedResult.to_native()`; its schema is
documented in docs/native-format.md and validated by `benchmarks.formats.native`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from selection.domain.messages import Message

NATIVE_SCHEMA = "kvselect.result/1"
MEASURED = "MEASURED"
SIMULATED = "SIMULATED"
Evidence = Literal["MEASURED", "SIMULATED"]


# kvselect's metric definitions. Parsers map each tool onto these.
DEFINITIONS: dict[str, str] = {
    "ttft_ms": "time from sending the request to receiving the first output token (ms)",
    "tpot_ms": "per request: (end-to-end - TTFT) / (output tokens - 1); excludes the first token (ms)",
    "itl_ms": "gap between consecutive output tokens, per token (a chunk of k tokens counts k gaps of dt/k) (ms)",
    "e2e_ms": "time from sending the request to receiving the last byte (ms)",
    "request_throughput": "completed requests per second of benchmark wall time",
    "output_token_throughput": "output tokens per second of benchmark wall time",
    "error_rate": "failed requests / (completed + failed)",
    "goodput": "completed requests per second meeting every SLO of the latency budget",
}

STAT_KEYS = ("mean", "p50", "p90", "p95", "p99", "max")

# A closed loop that held less than this share of the requested concurrency (time-weighted
# requests in flight) is client-bound: the harness's rule (`benchmarks/harness/load_judging.py`), applied
# to uploads too, so an engine is never judged at a load its client did not send.
CONCURRENCY_KEPT_FRACTION = 0.95
# A request the client cancelled (a run cut at its end, a deliberate cancellation test) is marked
# in the per-request table by `error` = "cancelled" or "cancelled: <the tool's message>": it is
# neither a success nor an engine failure, and not an SLO miss; points count them in
# `extra["cancelled_in_flight"]`.
CANCELLED = "cancelled"
LATENCY_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")

# Columns of the per-request table (Parquet artifact). Times in seconds since the run start
# where noted, latencies in ms; None/NaN = missing.
REQUEST_COLUMNS = (
    "point",  # index into points
    "request_id",
    "start_s",
    "ttft_ms",
    "tpot_ms",
    "itl_ms_mean",
    "e2e_ms",
    "prompt_tokens",
    "output_tokens",
    "ok",
    "error",
    "finish_reason",
)


def is_cancelled(error: Any) -> bool:
    """Whether a per-request `error` marks a request the client cancelled (see CANCELLED)."""
    return isinstance(error, str) and (error == CANCELLED or error.startswith(CANCELLED + ":"))


def concurrency_shortfall(achieved: float | None, requested: float | None, requests: int | None = None) -> str | None:
    """Why a closed loop is client-bound (the harness's rule), or None when it kept its load or
    cannot be judged. A run of fewer requests than the concurrency cannot hold more than it sent."""
    if achieved is None or not requested:
        return None
    expected = min(requested, requests) if requests else requested
    if achieved < CONCURRENCY_KEPT_FRACTION * expected:
        return f"held {achieved:.1f} requests in flight on average, {expected:g} requested"
    return None


def _clean(value: Any) -> float | None:
    """A float, or None for missing/NaN/inf (JSON has no NaN; missing is not zero)."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@dataclass
class Stats:
    """Summary statistics of one latency metric at one load point (ms)."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None

    @classmethod
    def from_values(cls, values: Any) -> "Stats":
        """Statistics of raw samples (numpy's linear-interpolation percentiles)."""
        import numpy as np  # loaded by the first statistics, not by every module that names a result

        array = np.asarray([v for v in values if v is not None], dtype=float)
        array = array[np.isfinite(array)]
        if array.size == 0:
            return cls()
        p50, p90, p95, p99 = np.percentile(array, [50, 90, 95, 99])
        return cls(float(array.mean()), float(p50), float(p90), float(p95), float(p99), float(array.max()))

    @classmethod
    def from_mapping(cls, mapping: dict[str, Any] | None, scale: float = 1.0) -> "Stats":
        mapping = mapping or {}
        return cls(
            **{k: (None if _clean(mapping.get(k)) is None else _clean(mapping.get(k)) * scale) for k in STAT_KEYS}
        )

    def is_empty(self) -> bool:
        return all(getattr(self, k) is None for k in STAT_KEYS)


@dataclass
class LoadPoint:
    """One load level of a run: a sweep has several, a single run has one."""

    label: str = ""
    concurrency: float | None = None  # requested concurrency (closed loop)
    request_rate: float | None = None  # requested rate, req/s (open loop); None = unbounded
    achieved_concurrency: float | None = None
    duration_s: float | None = None
    requests_completed: int | None = None
    requests_failed: int | None = None
    ttft_ms: Stats = field(default_factory=Stats)
    tpot_ms: Stats = field(default_factory=Stats)
    itl_ms: Stats = field(default_factory=Stats)
    e2e_ms: Stats = field(default_factory=Stats)
    request_throughput: float | None = None
    output_token_throughput: float | None = None
    input_token_throughput: float | None = None
    error_rate: float | None = None
    goodput: float | None = None
    slo_attainment: float | None = None
    client_bound: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class NormalizedResult:
    tool: str
    format: str
    tool_version: str | None = None
    evidence: Evidence = MEASURED
    test: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # engine, model, hardware found in the file
    definitions: dict[str, str] = field(default_factory=dict)  # the tool's original definitions
    points: list[LoadPoint] = field(default_factory=list)
    requests: Any = None  # pandas.DataFrame with REQUEST_COLUMNS, or None
    timeseries: dict[str, list[list[float]]] = field(default_factory=dict)  # series -> [[t_s, value], ...]
    verdicts: list[dict[str, Any]] = field(default_factory=list)  # pass criteria: {name, passed, detail}
    notes: list[str] = field(default_factory=list)
    partial: bool = False

    def add_note(self, note: str | Message, text: str | None = None) -> None:
        """A run note: its English text in `notes` (the API, the CLI; `text` when it differs from the
        page's English) and, written as a message, the message beside it (metadata["note_messages"], by
        the note's index) for pages in any language."""
        self.notes.append(str(note) if text is None else text)
        if isinstance(note, Message):
            self.metadata.setdefault("note_messages", {})[str(len(self.notes) - 1)] = note.to_dict()

    def to_native(self, include_requests: bool = True) -> dict[str, Any]:
        """The native JSON document (`kvselect.result/1`)."""
        document: dict[str, Any] = {
            "schema": NATIVE_SCHEMA,
            "tool": self.tool,
            "tool_version": self.tool_version,
            "evidence": self.evidence,
            "test": self.test,
            "metadata": self.metadata,
            "definitions": self.definitions,
            "points": [asdict(point) for point in self.points],
            "timeseries": self.timeseries,
            "verdicts": self.verdicts,
            "notes": self.notes,
            "partial": self.partial,
        }
        if include_requests and self.requests is not None and len(self.requests):
            frame = self.requests
            document["requests"] = {
                column: [_json_value(v) for v in frame[column].tolist()] for column in frame.columns
            }
        return document


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
