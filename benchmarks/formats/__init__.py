"""Parsers for benchmark-client result files, normalised to `benchmarks.result.NormalizedResult`.

`detect_and_parse(data, filename)` tries every registered format's sniffer (cheap, looks at the
shape of the file) and parses with the one that accepts; `detect_and_parse_file(path, ...)`
does the same for a file on disk (per-request JSONL is then read in blocks, never whole).
`format=` skips detection. When no format accepts the file, `UnrecognisedFormat` lists each
format tried and why it refused; when the format is recognised but the content is broken,
`FormatError` names the offending key path. A parse that finds neither requests nor figures (a
parser forced onto another tool's file) is a `FormatError` too, never an empty result.
`detect_head(head)` sniffs only the first bytes of an upload, so a file no format could accept is
refused before anything is stored. No other exception escapes (hostile uploads included).
A file that shows it came from kvselect's simulator is SIMULATED whatever it claims
(`common.simulator_marks`): an upload never turns simulated evidence into measured.
"""

from __future__ import annotations

from typing import Any

from benchmarks.formats import (
    aiperf,
    genai_perf,
    guidellm,
    inference_perf,
    llmperf,
    native,
    sglang,
    vllm,
)
from benchmarks.formats.base import (
    HEAD_BYTES,
    AcceptedOnHead,
    FileSource,
    Format,
    FormatError,
    Source,
    UnrecognisedFormat,
    reason_of,
    where_in,
)
from benchmarks.formats.common import apply_slo, keep_simulated, validate_slo
from benchmarks.result import STAT_KEYS, NormalizedResult
from selection.domain.messages import Message
from selection.domain.messages import marked as _

__all__ = [
    "FORMATS",
    "Format",
    "FormatError",
    "UnrecognisedFormat",
    "HEAD_BYTES",
    "detect",
    "detect_and_parse",
    "detect_and_parse_file",
    "detect_head",
    "format_names",
    "recompute_goodput",
]


# Order matters only for tie-breaking; sniffers are written to be mutually exclusive.
FORMATS: list[Format] = [
    fmt
    for module in (native, guidellm, aiperf, genai_perf, vllm, sglang, inference_perf, llmperf)
    for fmt in module.FORMATS
]


def format_names() -> list[str]:
    return [f.name for f in FORMATS]


def _safe_sniff(fmt: Format, source: Source) -> str | Message | None:
    try:
        return fmt.sniff(source)
    except FormatError as error:
        return reason_of(error)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, MemoryError) as error:
        return Message(_("could not inspect the file (%(error)s)"), {"error": type(error).__name__})


def _safe_parse(fmt: Format, source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    try:
        result = fmt.parse(source, slo)
    except (FormatError, UnrecognisedFormat):
        raise
    except RecursionError:
        raise FormatError(where_in(fmt.name, Message(_("document nested too deeply")))) from None
    except MemoryError:
        raise FormatError(where_in(fmt.name, Message(_("file too large to parse in memory")))) from None
    except Exception as error:  # a parser bug must still surface as a clean rejection
        why = Message(_("could not parse (%(error)s)"), {"error": f"{type(error).__name__}: {error}"})
        raise FormatError(where_in(fmt.name, why)) from error
    if not holds_evidence(result):
        empty = _(
            "the file holds no request and no figure this format defines (no request counts, latencies or "
            "throughputs); is it another tool's file?"
        )
        raise FormatError(where_in(fmt.name, Message(empty)))
    result.format = fmt.name
    return keep_simulated(result)


POINT_FIGURES = (
    "requests_completed",
    "requests_failed",
    "request_throughput",
    "output_token_throughput",
    "input_token_throughput",
    "goodput",
    "slo_attainment",
    "achieved_concurrency",
)


def holds_evidence(result: NormalizedResult) -> bool:
    """At least one request record, request count (zero counts too: "every request failed" is a
    result), latency statistic or throughput."""
    if result.requests is not None and len(result.requests):
        return True
    for point in result.points:
        if any(getattr(point, name) is not None for name in POINT_FIGURES):
            return True
        for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            if any(getattr(getattr(point, metric), stat) is not None for stat in STAT_KEYS):
                return True
    return False


def recompute_goodput(result: NormalizedResult, slo: dict[str, Any]) -> NormalizedResult:
    """Recompute goodput/SLO attainment of a parsed result against another latency budget
    (in place; needs `result.requests`, otherwise goodput becomes missing)."""
    validate_slo(slo)  # a bad budget is a FormatError naming `slo.<key>`
    return apply_slo(result, slo)


def detect_head(head: bytes, filename: str | None = None) -> Format:
    """The first format whose sniffer accepts the first bytes of an upload (`HEAD_BYTES` are
    enough), or UnrecognisedFormat listing every refusal. A format whose marker keys are in the
    head counts as accepting: only the whole file (parsed later) can say more."""
    source = Source(bytes(head[:HEAD_BYTES]), filename, head_only=True)
    refusals: dict[str, str | Message] = {}
    for fmt in FORMATS:
        try:
            reason = _safe_sniff(fmt, source)
        except AcceptedOnHead:
            return fmt
        if reason is None:
            return fmt
        refusals[fmt.name] = reason
    raise UnrecognisedFormat(refusals, filename)


def detect(data: bytes, filename: str | None = None) -> Format:
    """The format that accepts the file, or UnrecognisedFormat listing every refusal."""
    source = Source(data, filename)
    refusals: dict[str, str | Message] = {}
    for fmt in FORMATS:
        reason = _safe_sniff(fmt, source)
        if reason is None:
            return fmt
        refusals[fmt.name] = reason
    raise UnrecognisedFormat(refusals, filename)


def detect_and_parse(
    data: bytes,
    filename: str | None = None,
    format: str | None = None,
    slo: dict[str, Any] | None = None,
) -> NormalizedResult:
    """Parse a result file into the normalised shape.

    `format` forces a parser (a name from `format_names()`); `slo` (`{"ttft_ms", "tpot_ms",
    "e2e_ms"}`, any subset) recomputes goodput/SLO attainment from per-request data.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError("data must be bytes")
    return _detect_and_parse(Source(bytes(data), filename), format, slo)


def detect_and_parse_file(
    path: str,
    filename: str | None = None,
    format: str | None = None,
    slo: dict[str, Any] | None = None,
) -> NormalizedResult:
    """`detect_and_parse` for a file on disk: sniffers read its first 64 KiB; a parser reads the whole
    only if its format needs it (per-request JSONL is read in blocks)."""
    return _detect_and_parse(FileSource(path, filename), format, slo)


def _detect_and_parse(source: Source, format: str | None, slo: dict[str, Any] | None) -> NormalizedResult:
    validate_slo(slo)  # a bad budget is a FormatError naming `slo.<key>`
    filename = source.filename
    if format is not None:
        chosen = next((f for f in FORMATS if f.name == format), None)
        if chosen is None:
            unknown = Message(_("unknown format (known: %(known)s)"), {"known": ", ".join(format_names())})
            raise UnrecognisedFormat({format: unknown}, filename)
        return _safe_parse(chosen, source, slo)
    refusals: dict[str, str | Message] = {}
    for fmt in FORMATS:
        reason = _safe_sniff(fmt, source)
        if reason is None:
            return _safe_parse(fmt, source, slo)
        refusals[fmt.name] = reason
    raise UnrecognisedFormat(refusals, filename)
