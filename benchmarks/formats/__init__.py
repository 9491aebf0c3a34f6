"""Parsers for benchmark-client result files, normalised to `benchmarks.result.NormalizedResult`.

`detect_and_parse(data, filename)` tries every registered format's sniffer (cheap, looks at the
shape of the file) and parses with the one that accepts. `format=` skips detection. When no
format accepts the file, `UnrecognisedFormat` lists each format tried and why it refused; when
the format is recognised but the content is broken, `FormatError` names the offending key path.
No other exception escapes (hostile uploads included).
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
from benchmarks.formats.base import Format, FormatError, Source, UnrecognisedFormat
from benchmarks.formats.common import apply_slo, validate_slo
from benchmarks.result import NormalizedResult

__all__ = [
    "FORMATS",
    "Format",
    "FormatError",
    "UnrecognisedFormat",
    "detect",
    "detect_and_parse",
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


def _safe_sniff(fmt: Format, source: Source) -> str | None:
    try:
        return fmt.sniff(source)
    except FormatError as error:
        return str(error)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, MemoryError) as error:
        return f"could not inspect the file ({type(error).__name__})"


def _safe_parse(fmt: Format, source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    try:
        result = fmt.parse(source, slo)
    except (FormatError, UnrecognisedFormat):
        raise
    except RecursionError:
        raise FormatError(f"{fmt.name}: document nested too deeply") from None
    except MemoryError:
        raise FormatError(f"{fmt.name}: file too large to parse in memory") from None
    except Exception as error:  # a parser bug must still surface as a clean rejection
        raise FormatError(f"{fmt.name}: could not parse ({type(error).__name__}: {error})") from error
    result.format = fmt.name
    return result


def recompute_goodput(result: NormalizedResult, slo: dict[str, Any]) -> NormalizedResult:
    """Recompute goodput/SLO attainment of a parsed result against another latency budget
    (in place; needs `result.requests`, otherwise goodput becomes missing)."""
    try:
        validate_slo(slo)
    except ValueError as error:
        raise FormatError(str(error)) from None
    return apply_slo(result, slo)


def detect(data: bytes, filename: str | None = None) -> Format:
    """The format that accepts the file, or UnrecognisedFormat listing every refusal."""
    source = Source(data, filename)
    refusals: dict[str, str] = {}
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
    try:
        validate_slo(slo)
    except ValueError as error:
        raise FormatError(str(error)) from None
    source = Source(bytes(data), filename)
    if format is not None:
        chosen = next((f for f in FORMATS if f.name == format), None)
        if chosen is None:
            raise UnrecognisedFormat({format: f"unknown format (known: {', '.join(format_names())})"}, filename)
        return _safe_parse(chosen, source, slo)
    refusals: dict[str, str] = {}
    for fmt in FORMATS:
        reason = _safe_sniff(fmt, source)
        if reason is None:
            return _safe_parse(fmt, source, slo)
        refusals[fmt.name] = reason
    raise UnrecognisedFormat(refusals, filename)
