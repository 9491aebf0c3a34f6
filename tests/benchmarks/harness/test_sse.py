from hypothesis import given, settings, strategies as st

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


payloads = st.lists(st.binary(min_size=1, max_size=30).filter(lambda b: b"\n" not in b and b"\r" not in b), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(payloads, st.sampled_from([b"\n", b"\r\n", b"\r"]), st.lists(st.integers(min_value=0, max_value=400), max_size=10))
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
