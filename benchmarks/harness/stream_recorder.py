"""The per-token read of a streamed response: `StreamRecorder` turns one SSE response's bytes into
its `RequestRecord`, counting template token events without a parse."""

from __future__ import annotations

from benchmarks.harness.completion_payloads import finish_stream, handle_payload
from benchmarks.harness.request_record import Api, RequestRecord
from benchmarks.harness.sse import SSEParser, event_data

# An event that carries any of these is never learnt as the plain-token template (StreamRecorder).
_NOT_PLAIN = (
    b'"usage":{',
    b'"usage": {',
    b'"error"',
    b'"finish_reason":"',
    b'"finish_reason": "',
    b'"reasoning_content":"',
    b'"reasoning_content": "',
    b'"reasoning":"',
    b'"reasoning": "',
)
_QUOTE, _BACKSLASH = ord('"'), ord("\\")


class StreamRecorder:
    """Turns the bytes of one SSE response into a RequestRecord, read by read.

    Fast path: an engine writes a stream's token events from one template, the same bytes around a
    different content string (vLLM: `data: {"id":...,"delta":{"content":` + the string + `},
    "logprobs":null,"finish_reason":null,...}`). The first plain token event (a content string,
    no finish reason, usage, error or reasoning text) is parsed and its bytes before and after the
    string are kept; a later event that starts and ends with exactly those bytes and holds one
    JSON string between them is a token when that string is not empty, counted without a parse
    (a few C-level byte comparisons). Everything else — vLLM's and SGLang's opening role chunk, the
    finish, usage and `[DONE]`, an event whose template changed (SGLang and TGI stamp `created`
    per chunk, in seconds) — goes through the full parse, and a plain one teaches the new
    template. A string with an escaped quote is parsed too, so the template can never misread one.
    """

    __slots__ = (
        "record",
        "api",
        "keep_text",
        "abort_after",
        "parser",
        "key",
        "prefix",
        "suffix",
        "head",
        "tail",
        "last_data",
    )

    def __init__(self, record: RequestRecord, api: Api, keep_text: bool, abort_after: int | None) -> None:
        self.record, self.api, self.keep_text, self.abort_after = record, api, keep_text, abort_after
        self.parser = SSEParser()
        self.key = b'"content":' if api == "chat" else b'"text":'
        self.prefix: bytes | None = None  # the learnt template, None until a plain token event is seen
        self.suffix = b""
        self.head = self.tail = 0  # len(prefix), len(suffix) + 1
        self.last_data: float | None = None

    def take_frame(self, now: float, data: bytes) -> bool:
        """A read of the chunked body, before the HTTP parser: True when it was exactly one chunk
        holding one template token event, now counted. Anything else (False) goes through the
        parser and `feed`. The per-token path: the protocol calls it directly, not through `feed`,
        and only for streams that abort nothing (`abort_after` is checked in `feed`)."""
        if self.prefix is None or self.parser.buffer:
            return False
        line_end = data.find(b"\r\n", 0, 10)
        if line_end <= 0:
            return False
        try:
            size = int(data[:line_end], 16)
        except ValueError:
            return False
        start = line_end + 2
        end = start + size
        if len(data) != end + 2 or not data.endswith(b"\r\n") or not self._one_token(data, start, end):
            return False
        self.last_data = now
        record = self.record
        if record.first_token_time is None:
            record.first_token_time = now
        record.chunk_times.append(now)
        record.chunk_tokens.append(1)
        return True

    def frame_template(self) -> tuple[bytes, bytes, list[float], list[int]] | None:
        """What a compiled reader needs to do take_frame's work itself (rawhttp.FrameTaker): the
        template around the content string and the record's lists, while take_frame would take
        frames (a template learnt, no partial event waiting in the parser)."""
        if self.prefix is None or self.parser.buffer:
            return None
        return self.prefix, self.suffix, self.record.chunk_times, self.record.chunk_tokens

    def last_arrival(self) -> float | None:
        """The newest read's arrival: token events a compiled reader counted are only in chunk_times."""
        times = self.record.chunk_times
        if times and (self.last_data is None or times[-1] > self.last_data):
            return times[-1]
        return self.last_data

    def feed(self, now: float, data: bytes) -> bool:
        """Record one read; True when the stream should be closed now (deliberate abort)."""
        self.last_data = now
        record = self.record
        prefix = self.prefix
        if prefix is not None and not self.parser.buffer:
            # the usual read: one whole template token event (_one_token, inline: this runs per token)
            first, last = self.head, len(data) - self.tail
            if (
                last - first >= 2
                and data.startswith(prefix)
                and data.endswith(self.suffix)
                and data[first] == _QUOTE
                and data[last] == _QUOTE
                and data[last - 1] != _BACKSLASH
                and data.find(b'"', first + 1, last) < 0
            ):
                if record.first_token_time is None:
                    record.first_token_time = now
                record.chunk_times.append(now)
                record.chunk_tokens.append(1)
                if self.abort_after is not None:
                    return self._abort_due(now)
                return False
        complete = self.parser.take_complete(data)
        if not complete:
            return False
        if prefix is not None and self._one_token(complete, 0, len(complete)):
            if record.first_token_time is None:
                record.first_token_time = now
            record.chunk_times.append(now)
            record.chunk_tokens.append(1)
        else:
            self._feed_events(now, complete)
        if self.abort_after is not None:
            return self._abort_due(now)
        return False

    def _abort_due(self, now: float) -> bool:
        """A deliberate abort once `abort_after` tokens have arrived: True when the stream must close."""
        record = self.record
        if sum(record.chunk_tokens) < self.abort_after:  # type: ignore[operator]
            return False
        record.aborted = True
        record.end_time = now
        if not record.usage_reported:
            record.output_tokens = sum(record.chunk_tokens)
        return True

    def _one_token(self, data: bytes, start: int, end: int) -> bool:
        """Whether data[start:end] is one event of the template with a non-empty, plain string."""
        prefix, suffix = self.prefix, self.suffix
        first = start + len(prefix)  # type: ignore[arg-type]
        last = end - len(suffix) - 1  # the closing quote
        return (
            last - first >= 2
            and data.startswith(prefix, start)
            and data.endswith(suffix, start, end)  # type: ignore[arg-type]
            and data[first] == _QUOTE
            and data[last] == _QUOTE
            and data[last - 1] != _BACKSLASH
            and data.find(b'"', first + 1, last) < 0
        )

    def _feed_events(self, now: float, complete: bytes) -> None:
        """Each event in turn: template tokens counted, the others parsed (and perhaps learnt from)."""
        record, api, keep_text = self.record, self.api, self.keep_text
        prefix, suffix = self.prefix or b"", self.suffix
        fast = self.prefix is not None and not keep_text
        head, tail = len(prefix), len(suffix) + 1
        find, startswith, endswith = complete.find, complete.startswith, complete.endswith
        start, size, counted = 0, len(complete), 0
        while start < size:
            end = find(b"\n\n", start) + 2
            first, last = start + head, end - tail  # the string's opening and closing quotes, if it is one
            if (
                fast
                and last - first >= 2
                and startswith(prefix, start)
                and endswith(suffix, start, end)
                and complete[first] == _QUOTE
                and complete[last] == _QUOTE
                and complete[last - 1] != _BACKSLASH
                and find(b'"', first + 1, last) < 0
            ):
                counted += 1
            else:
                if counted:  # in order: a parsed event may count tokens from those before it
                    self._count(now, counted)
                    counted = 0
                payload = event_data(complete[start : end - 2])
                if payload is not None:
                    tokens = len(record.chunk_tokens)
                    handle_payload(record, payload, now, api, keep_text)
                    if (
                        not keep_text
                        and len(record.chunk_tokens) == tokens + 1
                        and record.error_class is None
                        and record.finish_reason is None
                        and self._learn(complete, start, end)
                    ):
                        prefix, suffix, fast = self.prefix or b"", self.suffix, True
                        head, tail = len(prefix), len(suffix) + 1
            start = end
        if counted:
            self._count(now, counted)

    def _count(self, now: float, tokens: int) -> None:
        record = self.record
        if record.first_token_time is None:
            record.first_token_time = now
        record.chunk_times.extend([now] * tokens)
        record.chunk_tokens.extend([1] * tokens)

    def _learn(self, data: bytes, start: int, end: int) -> bool:
        """Keep the bytes around the content string of a parsed plain token event as the template."""
        block = data[start:end]
        if b"\n" in block[:-2] or not block.startswith(b"data:") or any(marker in block for marker in _NOT_PLAIN):
            return False
        at = block.find(self.key + b'"')
        if at < 0 or block.find(self.key, at + 1) >= 0:
            return False
        first = at + len(self.key)
        last = first + 1
        while True:  # the string's closing quote: the first one not escaped
            last = block.find(b'"', last)
            if last < 0:
                return False
            backslashes = 0
            while block[last - 1 - backslashes] == _BACKSLASH:
                backslashes += 1
            if backslashes % 2 == 0:
                break
            last += 1
        self.prefix, self.suffix = block[:first], block[last + 1 :]
        self.head, self.tail = len(self.prefix), len(self.suffix) + 1
        return True

    def finish(self, end_time: float) -> None:
        """The stream ended (EOF) at `end_time`, the last byte's arrival."""
        record = self.record
        record.end_time = end_time
        for payload in self.parser.flush():
            handle_payload(record, payload, end_time, self.api, self.keep_text)
        finish_stream(record)
