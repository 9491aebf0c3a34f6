"""SGLang `bench_serving` JSONL (one flat object per run, appended; `request_rate` may be a bare
`Infinity`, which strict JSON rejects, so this format alone decodes Python's NaN/Infinity).

Same definitions as vLLM (TPOT excludes the first token, ITL pooled per chunk); `concurrency`
is the achieved concurrency (sum of e2e / duration). `--output-details` adds per-request lists
without per-request latency, so per-request e2e is derived as ttft + sum of chunk gaps.
"""

from __future__ import annotations

from typing import Any

from benchmarks.formats.base import Format, FormatError, Source, decode_json, reason_of, type_name
from benchmarks.formats.common import EXPECTED_OBJECT, LINE, refused
from benchmarks.formats.vllm import parse_serving_docs
from benchmarks.result import NormalizedResult
from selection.domain.messages import Message
from selection.domain.messages import marked as _

DEFINITIONS = {
    "ttft_ms": "SGLang: first non-empty chunk - request send (same as kvselect)",
    "tpot_ms": "SGLang: per request (latency - ttft)/(output_len - 1), excludes first token (same as kvselect)",
    "itl_ms": "SGLang: inter-chunk gaps pooled (per chunk); kept as kvselect ITL only when one token per chunk, "
    "else only the exact mean",
    "e2e_ms": "SGLang e2e_latency: request send -> last chunk",
    "achieved_concurrency": "SGLang concurrency = sum of e2e latencies / duration",
    "goodput": "SGLang request_goodput: requests meeting goodput_slos_ms / duration; slo_attainment = good / sent",
}
REQUIRED = ("completed", "duration", "request_throughput", "dataset_name")


def _lines(source: Source, strict: bool) -> list[dict[str, Any]]:
    docs = []
    text = source.text if strict else source.head
    lines = text.splitlines()
    if not strict and source.head_is_partial:
        lines = lines[:1]
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        value = decode_json(line, allow_nonfinite=True, where=Message(LINE, {"n": number}))
        if not isinstance(value, dict):
            raise refused(Message(LINE, {"n": number}), EXPECTED_OBJECT, type=type_name(value))
        docs.append(value)
        if not strict:
            break
    if not docs:
        raise FormatError(Message(_("empty file")))
    return docs


def sniff(source: Source) -> str | Message | None:
    head = source.head
    if source.head_is_partial and head.lstrip().startswith("{") and "\n" not in head.strip():
        # one run with --output-details can make line 1 longer than the head: judge it by its keys
        missing = [k for k in REQUIRED if f'"{k}"' not in head]
        if missing:
            return Message(
                _("first line longer than the head, without the SGLang keys %(keys)s"), {"keys": str(missing)}
            )
        return Message(_("has vLLM's model_id key")) if '"model_id"' in head else None
    try:
        doc = _lines(source, strict=False)[0]
    except FormatError as error:
        # a pretty-printed single object (as in shortened examples) is also accepted
        if source.large:
            return reason_of(error)
        try:
            doc = source.json_lenient
        except FormatError:
            return reason_of(error)
        if not isinstance(doc, dict):
            return Message(_("not a JSON object"))
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        return Message(_("missing SGLang keys %(keys)s"), {"keys": str(missing)})
    if "model_id" in doc:
        return Message(_("has vLLM's model_id key"))
    return None


def parse(source: Source, slo: dict[str, Any] | None) -> NormalizedResult:
    try:
        docs = _lines(source, strict=True)
    except FormatError:
        doc = source.json_lenient
        if not isinstance(doc, dict):
            raise refused("(root)", EXPECTED_OBJECT, type=type_name(doc)) from None
        docs = [doc]
    return parse_serving_docs(docs, "sglang", DEFINITIONS, slo)


FORMATS = [Format("sglang", "sglang", "SGLang bench_serving JSONL", sniff, parse)]
