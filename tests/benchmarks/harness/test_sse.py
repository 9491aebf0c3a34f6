from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.harness.client import SSEParser, parse_sse


def test_events_split_on_blank_lines_and_done_marker():
    stream = b'data: {"a":1}\n\ndata: {"a":2}\n\ndata: [DONE]\n\n'
    assert parse_sse(stream) == [b'{"a":1}', b'{"a":2}', b"[DONE]"]


def test_crlf_comments_multiline_and_other_fields():
    stream = b": keep-alive\r\n\r\nevent: message\r\nid: 3\r\ndata: line1\r\ndata:line2\r\n\r\nretry: 10\r\n\r\n"
    assert parse_sse(stream) == [b"line1\nline2"]


def test_last_event_without_terminating_blank_line_is_flushed():
    parser = SSEParser()
    assert parser.feed(b'data: {"x":1}\n\ndata: {"x":2}') == [b'{"x":1}']
    assert parser.flush() == [b'{"x":2}']
    assert parser.flush() == []


def test_crlf_split_across_reads_is_not_a_blank_line():
    parser = SSEParser()
    out = parser.feed(b"data: a\r")
    out += parser.feed(b"\ndata: b\r\n\r\n")
    assert out == [b"a\nb"]


payloads = st.lists(
    st.binary(min_size=1, max_size=30).filter(lambda b: b"\n" not in b and b"\r" not in b), min_size=1, max_size=8
)


@settings(max_examples=200, deadline=None)
@given(
    payloads, st.sampled_from([b"\n", b"\r\n", b"\r"]), st.lists(st.integers(min_value=0, max_value=400), max_size=10)
)
def test_any_split_of_a_stream_gives_the_same_events(items, newline, cuts):
    stream = b"".join(b"data: " + item + newline + newline for item in items)
    expected = items  # exactly one space after "data:" is stripped; the payload keeps the rest
    parser = SSEParser()
    points = sorted({c % (len(stream) + 1) for c in cuts})
    out, previous = [], 0
    for point in points + [len(stream)]:
        out += parser.feed(stream[previous:point])
        previous = point
    out += parser.flush()
    assert out == expected


# The client's per-read fast path must record exactly what the full JSON parse records.
import asyncio  # noqa: E402
import json  # noqa: E402

from benchmarks.harness.client import OpenAIClient, RequestRecord, RequestSpec  # noqa: E402


class _FakeContent:
    def __init__(self, reads):
        self._reads = list(reads)

    async def readany(self):
        return self._reads.pop(0) if self._reads else b""


class _FakeResponse:
    def __init__(self, reads):
        self.content = _FakeContent(reads)

    def close(self):
        pass


def _event(kind, api, compact):
    separators = (",", ":") if compact else None
    if kind == "done":
        return b"data: [DONE]\n\n"
    choice = {"index": 0, "finish_reason": None}
    if kind == "usage":
        body = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 7}}
    else:
        text = {"token": "tok ", "empty": "", "quote": 'say "content":"x" ', "null": None}.get(kind, "t")
        if kind == "finish":
            choice["finish_reason"] = "length"
        if api == "chat":
            choice["delta"] = {"content": text} if kind != "role" else {"role": "assistant", "content": ""}
        else:
            choice["text"] = text
        body = {"id": "x", "choices": [choice]}
    return b"data: " + json.dumps(body, separators=separators).encode() + b"\n\n"


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.sampled_from(["token", "token", "token", "empty", "quote", "null", "role", "finish", "usage", "done"]),
        max_size=25,
    ),
    st.sampled_from(["chat", "completions"]),
    st.booleans(),
    st.lists(st.integers(min_value=0, max_value=5000), max_size=8),
)
def test_fast_path_records_what_the_full_parse_records(kinds, api, compact, cuts):
    stream = b"".join(_event(kind, api, compact) for kind in kinds)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    reads, previous = [], 0
    for point in points + [len(stream)]:
        if stream[previous:point]:
            reads.append(stream[previous:point])
        previous = point

    def record_with(keep_text):
        client = OpenAIClient("http://127.0.0.1:1", "m", keep_text=keep_text)  # keep_text forces the full parse
        record = RequestRecord()
        asyncio.run(client._read_stream(_FakeResponse(reads), record, RequestSpec(api=api)))
        return record

    fast, slow = record_with(False), record_with(True)
    assert fast.chunk_tokens == slow.chunk_tokens
    assert len(fast.chunk_times) == len(slow.chunk_times)
    assert (fast.output_tokens, fast.prompt_tokens, fast.finish_reason, fast.done_marker, fast.error_class) == (
        slow.output_tokens,
        slow.prompt_tokens,
        slow.finish_reason,
        slow.done_marker,
        slow.error_class,
    )
    assert (fast.first_token_time is None) == (slow.first_token_time is None)
