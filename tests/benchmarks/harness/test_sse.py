from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.harness.sse import SSEParser, parse_sse


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

from benchmarks.harness.client import OpenAIClient  # noqa: E402
from benchmarks.harness.request_record import RequestRecord, RequestSpec  # noqa: E402


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


def sse_event(kind, api, compact):
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
    stream = b"".join(sse_event(kind, api, compact) for kind in kinds)
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


def chunked_reads(events, cuts, merge_every):
    """The HTTP response of `events` (one chunk each, as engines write them) in reads: mostly one
    chunk per read, some reads merging the next chunks, and the cuts splitting anywhere."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    frames = [b"%x\r\n%s\r\n" % (len(event), event) for event in events] + [b"0\r\n\r\n"]
    reads, pending = [head], b""
    for index, frame in enumerate(frames):
        pending += frame
        if merge_every and index % merge_every == 1:
            continue
        reads.append(pending)
        pending = b""
    if pending:
        reads.append(pending)
    for cut in cuts:  # split one read in two
        at = cut % len(reads)
        read = reads[at]
        if len(read) > 1:
            point = 1 + cut % (len(read) - 1)
            reads[at : at + 1] = [read[:point], read[point:]]
    return reads


# A chunked stream as reads: (event kinds, api, compact JSON, cuts, merge every nth chunk).
CHUNKED_STREAM_CASES = (
    st.lists(
        st.sampled_from(["token", "token", "token", "empty", "quote", "null", "role", "finish", "usage"]),
        max_size=25,
    ),
    st.sampled_from(["chat", "completions"]),
    st.booleans(),
    st.lists(st.integers(min_value=0, max_value=5000), max_size=4),
    st.sampled_from([0, 0, 3, 7]),
)


@settings(max_examples=150, deadline=None)
@given(*CHUNKED_STREAM_CASES)
def test_whole_chunk_reads_counted_before_the_http_parser_record_what_it_records(kinds, api, compact, cuts, merge):
    """The per-token path (`StreamRecorder.take_frame`, called by the protocol on each read) against
    the same reads through the HTTP parser and `feed`: the same record, time for time."""
    from unittest import mock

    from benchmarks.harness import rawhttp
    from benchmarks.harness.stream_recorder import StreamRecorder

    events = [sse_event(kind, api, compact) for kind in kinds] + [sse_event("done", api, compact)]
    reads = chunked_reads(events, cuts, merge)

    class Transport:
        def write(self, data):
            pass

        def close(self):
            pass

    def record_with(offer_frames):
        record = RequestRecord()
        recorder = StreamRecorder(record, api, False, None)
        protocol = rawhttp._ResponseProtocol()
        protocol.transport = Transport()
        loop = asyncio.new_event_loop()
        done = loop.create_future()
        taken = []

        class Counted:  # the recorder as the protocol sees it, counting what take_frame took
            def take_frame(self, now, data):
                taken.append(recorder.take_frame(now, data))
                return taken[-1]

            frame_template = recorder.frame_template

        clock = iter(range(10, 10_000))
        with mock.patch.object(rawhttp.time, "perf_counter", lambda: float(next(clock))):
            protocol.start(
                b"", lambda _p, now, chunk: recorder.feed(now, chunk), done, Counted() if offer_frames else None
            )
            for read in reads:
                protocol.data_received(read)
        recorder.finish(recorder.last_data)
        assert done.done() and done.exception() is None and protocol.frames is None
        loop.close()
        return record, sum(taken)

    (fast, taken), (slow, _) = record_with(True), record_with(False)
    assert (fast.chunk_times, fast.chunk_tokens, fast.first_token_time, fast.end_time) == (
        slow.chunk_times,
        slow.chunk_tokens,
        slow.first_token_time,
        slow.end_time,
    )
    assert (fast.output_tokens, fast.finish_reason, fast.done_marker, fast.error_class) == (
        slow.output_tokens,
        slow.finish_reason,
        slow.done_marker,
        slow.error_class,
    )
    if compact and not merge and not cuts and kinds.count("token") > 1 and "finish" not in kinds:
        # one chunk per read, as engines write them: after the first plain token (learnt from),
        # every other one skips the HTTP parser
        assert taken >= kinds.count("token") - 1
