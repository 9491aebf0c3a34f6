"""The engines' exact stream shapes, and the client's cheap path on them: tokens counted right, and
counted without a JSON parse per token (the role chunk used to send every read to the parser)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.harness import stream_recorder as recorder_module
from benchmarks.harness.request_record import RequestRecord, RequestSpec
from benchmarks.harness.sse import parse_sse
from benchmarks.harness.stream_recorder import StreamRecorder
from benchmarks.simulator.engine_streams import SHAPES, EngineStream
from benchmarks.simulator.mock_server import MockConfig

from .test_client import send


def stream(shape, chat=True, tokens=("a ", "b ", "c "), created=1):
    events = EngineStream(shape, chat, "id-1", "m", created)
    body = events.opening()
    for index, text in enumerate(tokens):
        body += events.token(text, "length" if index == len(tokens) - 1 else None)
    return body + events.usage(4, len(tokens)) + events.done()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("chat", [True, False])
def test_every_shape_is_valid_sse_json_with_the_engines_markers(shape, chat):
    payloads = parse_sse(stream(shape, chat))
    objects = [json.loads(p) for p in payloads[:-1]]
    assert payloads[-1] == b"[DONE]" and objects[-1]["usage"]["completion_tokens"] == 3
    key = "delta" if chat else "text"
    texts = [o["choices"][0][key] for o in objects if o["choices"]]
    if chat and shape in ("vllm", "sglang"):
        assert texts[0] == {"role": "assistant", "content": ""}  # the opening role chunk
    finishes = [o["choices"][0]["finish_reason"] for o in objects if o["choices"]]
    assert finishes.count("length") == 1 and finishes[-1] == "length"
    if shape == "tgi":
        assert all(line.startswith(b"data:{") for line in stream(shape, chat).split(b"\n\n") if b"{" in line)
        assert all("usage" in o for o in objects)  # "usage":null on every chunk


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_client_counts_each_shape_from_the_mock(with_mock, shape, api):
    record = with_mock(
        MockConfig(shape=shape, itl_s=0.002), lambda s: send(s, RequestSpec(api=api, prompt="a b c", max_tokens=9))
    )
    assert record.ok and record.output_tokens == 9 and record.finish_reason == "length" and record.done_marker
    assert len(record.chunk_times) == 9 and record.first_token_time is not None


def feed_counting_parses(monkeypatch, data, reads, **recorder_kwargs):
    parses = []
    original = recorder_module.handle_payload
    monkeypatch.setattr(recorder_module, "handle_payload", lambda *a: (parses.append(a[1]), original(*a)))
    record = RequestRecord()
    recorder = StreamRecorder(record, "chat", recorder_kwargs.get("keep_text", False), None)
    for index, piece in enumerate(reads(data)):
        recorder.feed(float(index), piece)
    recorder.finish(99.0)
    return record, parses


def one_event_per_read(data):
    return [block + b"\n\n" for block in data.split(b"\n\n") if block]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "reads", [one_event_per_read, lambda data: [data[i : i + 700] for i in range(0, len(data), 700)]]
)
def test_a_vllm_length_stream_needs_a_handful_of_parses_not_one_per_token(monkeypatch, shape, reads):
    data = stream(shape, tokens=[f"w{i} " for i in range(128)])
    record, parses = feed_counting_parses(monkeypatch, data, reads)
    assert len(record.chunk_times) == 128 and record.output_tokens == 128 and record.finish_reason == "length"
    # the opening chunk, the first token (it teaches the template), the last, usage, [DONE]; a read
    # cut mid-event re-learns nothing, and events split across reads are still whole when fed
    assert len(parses) <= 6


def test_template_never_misreads_escaped_quotes_empty_strings_or_reasoning(monkeypatch):
    events = EngineStream("vllm", True, "id", "m", 1)
    data = (
        events.opening()
        + events.token("a ")
        + events.token('say "hi"')
        + events.token("")
        + events.token("\\")
        + events.token("z", "length")
        + events.usage(1, 4)
        + events.done()
    )
    record, _ = feed_counting_parses(monkeypatch, data, one_event_per_read, keep_text=False)
    assert len(record.chunk_times) == 4  # "a ", 'say "hi"', "\\", "z"; the empty string is no token
    reasoning = data.replace(b'{"content":""}', b'{"content":"","reasoning_content":"thinking"}')
    record, _ = feed_counting_parses(monkeypatch, reasoning, one_event_per_read)
    assert len(record.chunk_times) == 5  # a reasoning token beside an empty content still counts


def test_a_template_that_changes_mid_stream_is_learnt_again(monkeypatch):
    """SGLang and TGI stamp `created` per chunk in seconds: the bytes around the text change."""
    first, later = EngineStream("sglang", True, "id", "m", 100), EngineStream("sglang", True, "id", "m", 101)
    data = first.opening() + b"".join(first.token(f"t{i}") for i in range(5))
    data += b"".join(later.token(f"u{i}") for i in range(5)) + later.token("end", "length") + later.usage(1, 11)
    record, parses = feed_counting_parses(monkeypatch, data + later.done(), one_event_per_read)
    assert len(record.chunk_times) == 11 and len(parses) <= 7


@settings(max_examples=150, deadline=None)
@given(
    shape=st.sampled_from(SHAPES),
    texts=st.lists(
        st.lists(st.sampled_from(["a", " ", '"', "\\", "}", "]", "é", "\n", ":", "data: "]), max_size=6).map("".join),
        min_size=1,
        max_size=40,
    ),
    cuts=st.lists(st.integers(min_value=1, max_value=4000), max_size=12),
    event_cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=30),
)
def test_the_template_path_counts_exactly_what_the_full_parse_counts(shape, texts, cuts, event_cuts):
    """Any token texts (quotes, backslashes, brackets, newlines, "data: " inside), any read splits:
    the cheap path records the same tokens as parsing every event (keep_text turns it off)."""
    events = EngineStream(shape, True, "id", "m", 1)
    data = (
        events.opening()
        + b"".join(events.token(text, "length" if i == len(texts) - 1 else None) for i, text in enumerate(texts))
        + events.usage(3, len(texts))
        + events.done()
    )
    # reads cut anywhere, and reads of whole events (one or several) as a client that falls behind gets them
    boundaries = [i + 2 for i in range(len(data) - 1) if data[i : i + 2] == b"\n\n"]
    whole = {boundaries[cut % len(boundaries)] for cut in event_cuts}
    points = sorted({min(cut, len(data)) for cut in cuts} | whole | {len(data)})
    reads, start = [], 0
    for point in points:
        if point > start:
            reads.append(data[start:point])
            start = point
    counted = []
    for keep_text in (False, True):
        record = RequestRecord()
        recorder = StreamRecorder(record, "chat", keep_text, None)
        for index, piece in enumerate(reads):
            recorder.feed(float(index), piece)
        recorder.finish(99.0)
        counted.append((record.chunk_times, record.first_token_time, record.output_tokens, record.finish_reason))
    assert counted[0] == counted[1]
    assert len(counted[0][0]) == sum(1 for text in texts if text)
