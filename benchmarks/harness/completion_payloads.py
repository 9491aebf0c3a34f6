"""How an engine's JSON fills a `RequestRecord`: a streamed chunk's content, usage and errors, a
complete (non-streamed) response, llama.cpp's `timings`, the error classes of failures, and the
checks that close a finished stream. A hostile or broken engine cannot raise out of here.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from benchmarks.harness.request_record import Api, RequestRecord

# Engine out-of-memory messages (vLLM/torch, SGLang, TensorRT-LLM, llama.cpp, TGI).
OOM_PATTERN = re.compile(
    r"out of memory|outofmemory|\bOOM\b|CUBLAS_STATUS_ALLOC_FAILED|failed to find free space in the KV cache"
    r"|KV cache is full|no free (?:kv|cache) blocks|not enough (?:kv|cache|memory)",
    re.IGNORECASE,
)


def classify_error_text(text: str) -> str:
    """`oom` when an engine's message says it ran out of (KV) memory, else `stream_error`."""
    return "oom" if OOM_PATTERN.search(text or "") else "stream_error"


# What a JSON value of the wrong shape raises on the way through the chunk handlers.
_MALFORMED = (AttributeError, TypeError, ValueError, OverflowError, KeyError, IndexError, RecursionError)


def handle_payload(record: RequestRecord, payload: bytes, now: float, api: Api, keep_text: bool) -> None:
    """Apply one SSE data payload to the record. A hostile or broken engine cannot raise out of here:
    a chunk that is not a completion chunk is ignored like keep-alive noise."""
    try:
        _apply_payload(record, payload, now, api, keep_text)
    except _MALFORMED:
        pass


def _apply_payload(record: RequestRecord, payload: bytes, now: float, api: Api, keep_text: bool) -> None:
    if payload == b"[DONE]":
        record.done_marker = True
        return
    try:
        obj = json.loads(payload)
    except ValueError:
        return  # keep-alive noise or a partial line from a broken server: ignore, timing stays
    if not isinstance(obj, dict):
        return
    if "error" in obj and obj["error"]:
        message = json.dumps(obj["error"]) if not isinstance(obj["error"], str) else obj["error"]
        record.error_class = classify_error_text(message)
        record.error = message[:500]
        return
    usage = obj.get("usage")
    choices = obj.get("choices")
    if choices:
        choice = choices[0]
        if api == "chat":
            delta = choice.get("delta") or {}
            content = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
        else:
            content = choice.get("text")
        if content:
            tokens = 1
            if usage and usage.get("completion_tokens") is not None:  # continuous usage stats
                counted = sum(record.chunk_tokens)
                tokens = max(int(usage["completion_tokens"]) - counted, 1)
            if record.first_token_time is None:
                record.first_token_time = now
            record.chunk_times.append(now)
            record.chunk_tokens.append(tokens)
            if keep_text:
                record.text += content if isinstance(content, str) else str(content)
        reason = choice.get("finish_reason")
        if reason:
            record.finish_reason = reason
    if usage:
        if usage.get("prompt_tokens") is not None:
            record.prompt_tokens = int(usage["prompt_tokens"])
        if usage.get("completion_tokens") is not None:
            record.output_tokens = int(usage["completion_tokens"])
            record.usage_reported = True
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            record.cached_tokens = int(details["cached_tokens"])
            record.cached_source = "usage"
    _apply_timings(record, obj.get("timings"))


def _apply_timings(record: RequestRecord, timings: Any) -> None:
    """llama.cpp's per-response `timings`: `prompt_n` is the prompt tokens it processed (the rest came
    from the slot's cache), `cache_n` (newer builds) the tokens it reused."""
    if not isinstance(timings, dict):
        return
    processed = timings.get("prompt_n")
    if isinstance(processed, int) and not isinstance(processed, bool) and processed >= 0:
        record.prompt_processed = processed
    reused = timings.get("cache_n")
    if isinstance(reused, int) and not isinstance(reused, bool) and reused >= 0 and record.cached_source != "usage":
        record.cached_tokens, record.cached_source = reused, "timings"


def _cached_from_timings(record: RequestRecord) -> None:
    """The cached prompt tokens from llama.cpp's timings when no usage field stated them: the prompt's
    tokens less those the engine processed (it always processes at least the last one)."""
    if record.cached_source is None and record.prompt_processed is not None and record.prompt_tokens is not None:
        record.cached_tokens = max(record.prompt_tokens - record.prompt_processed, 0)
        record.cached_source = "timings"


def fail(record: RequestRecord, error_class: str, message: str) -> None:
    """The request ended now in error: its class (one of ERROR_CLASSES) and at most 500 characters of why."""
    record.end_time = time.perf_counter()
    record.error_class, record.error = error_class, message[:500]


def http_error(record: RequestRecord, status: int, text: str) -> None:
    """An HTTP error status: `oom` when the body says the engine ran out of (KV) memory, else `http`."""
    record.end_time = time.perf_counter()
    record.error = f"HTTP {status}: {text}"
    record.error_class = "oom" if OOM_PATTERN.search(text) else "http"


def handle_complete_response(record: RequestRecord, payload: bytes, api: Api, keep_text: bool) -> None:
    try:
        _apply_complete_response(record, payload, api, keep_text)
    except _MALFORMED:
        record.error_class, record.error = "stream_error", "response is not a completion object"


def _apply_complete_response(record: RequestRecord, payload: bytes, api: Api, keep_text: bool) -> None:
    try:
        obj = json.loads(payload)
    except ValueError:
        record.error_class, record.error = "stream_error", "response is not JSON"
        return
    if isinstance(obj, dict) and obj.get("error"):
        message = json.dumps(obj["error"])
        record.error_class, record.error = classify_error_text(message), message[:500]
        return
    choice = (obj.get("choices") or [{}])[0]
    text = (choice.get("message") or {}).get("content") if api == "chat" else choice.get("text")
    if keep_text and text:
        record.text = text
    record.finish_reason = choice.get("finish_reason")
    usage = obj.get("usage") or {}
    if usage.get("prompt_tokens") is not None:
        record.prompt_tokens = int(usage["prompt_tokens"])
    if usage.get("completion_tokens") is not None:
        record.output_tokens = int(usage["completion_tokens"])
        record.usage_reported = True
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        record.cached_tokens, record.cached_source = int(details["cached_tokens"]), "usage"
    _apply_timings(record, obj.get("timings"))
    _cached_from_timings(record)


def finish_stream(record: RequestRecord) -> None:
    """Close the books on a stream that ended: token counts and the missing-end check."""
    counted = sum(record.chunk_tokens)
    if not record.usage_reported:
        record.output_tokens = counted  # no usage from the engine: the chunk count is all we have
    _cached_from_timings(record)
    if record.error_class is None and not (record.done_marker or record.finish_reason or record.usage_reported):
        record.error_class = "disconnect"
        record.error = "stream ended without finish_reason, usage or [DONE]"
