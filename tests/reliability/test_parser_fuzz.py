"""Fuzz targets for the engine-facing parsers: SSE streams, chunk payloads, Prometheus and JSON metrics.

A hostile or broken engine must never crash a validation run: bad input is ignored or recorded
as a request error, never an exception out of the harness.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from benchmarks.harness.completion_payloads import handle_complete_response, handle_payload
from benchmarks.harness.metrics import MetricsSampler, map_samples, map_trtllm_json, parse_prometheus
from benchmarks.harness.request_record import RequestRecord
from benchmarks.harness.sse import SSEParser, parse_sse

pytestmark = pytest.mark.reliability

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "choices",
                    "delta",
                    "content",
                    "text",
                    "usage",
                    "completion_tokens",
                    "prompt_tokens",
                    "finish_reason",
                    "error",
                    "prompt_tokens_details",
                    "cached_tokens",
                    "message",
                    "x",
                ]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=20,
)


@FUZZ
@given(stream=st.binary(max_size=2000), cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=20))
@example(stream=b"data: a\r", cuts=[8])
@example(stream=b"data: a\r\n\r\ndata: b\n\n", cuts=[8, 9])
def test_sse_parser_is_independent_of_how_the_stream_is_split(stream, cuts):
    whole = parse_sse(stream)
    parser, got, start = SSEParser(), [], 0
    for cut in sorted(set(c for c in cuts if c <= len(stream))) + [len(stream)]:
        got += parser.feed(stream[start:cut])
        start = cut
    got += parser.flush()
    assert got == whole


@FUZZ
@given(
    payloads=st.lists(st.binary(max_size=50).filter(lambda b: b"\n" not in b and b"\r" not in b), max_size=10),
    newline=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    comments=st.booleans(),
)
def test_sse_well_formed_events_round_trip(payloads, newline, comments):
    stream = b"".join(
        (b": keep-alive" + newline if comments else b"") + b"data: " + p + newline + newline for p in payloads
    )
    assert parse_sse(stream) == payloads


@FUZZ
@given(value=json_values, api=st.sampled_from(["chat", "completions"]))
@example(value={"choices": "x"}, api="chat")
@example(value={"choices": [1]}, api="chat")
@example(value={"usage": [1]}, api="chat")
@example(value={"choices": [{"delta": {"content": "a"}}], "usage": {"completion_tokens": "many"}}, api="chat")
@example(value={"usage": {"completion_tokens": float("inf")}}, api="chat")
@example(value={"usage": {"prompt_tokens_details": {"cached_tokens": float("nan")}}}, api="chat")
def test_a_hostile_stream_chunk_never_raises(value, api):
    record = RequestRecord()
    payload = json.dumps(value).encode()
    handle_payload(record, payload, 1.0, api, True)
    handle_complete_response(RequestRecord(), payload, api, True)


@FUZZ
@given(data=st.binary(max_size=300))
def test_arbitrary_chunk_bytes_never_raise(data):
    handle_payload(RequestRecord(), data, 1.0, "chat", False)
    handle_complete_response(RequestRecord(), data, "chat", False)


metric_names = st.sampled_from(
    [
        "vllm:gpu_cache_usage_perc",
        "vllm:num_requests_running",
        "sglang:token_usage",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "x",
        "a_b",
    ]
)
label_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=10)
sample_values = st.sampled_from(["1", "0.5", "NaN", "+Inf", "-Inf", "1e308", "1e999", "-0", "abc", ""])


@st.composite
def exposition(draw):
    lines = []
    for _ in range(draw(st.integers(0, 8))):
        name = draw(metric_names)
        kind = draw(st.sampled_from(["", "# TYPE {} gauge\n", "# TYPE {} counter\n", "# HELP {} h\\n\n", "# junk\n"]))
        labels = draw(st.dictionaries(st.sampled_from(["le", "quantile", "model", "dp"]), label_text, max_size=2))
        rendered = ",".join(f'{k}="{json.dumps(v)[1:-1]}"' for k, v in labels.items())
        lines.append(kind.format(name) + f"{name}{{{rendered}}} {draw(sample_values)}\n")
    text = "".join(lines)
    if draw(st.booleans()):  # mutate: cut, duplicate or splice arbitrary text
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] + draw(st.text(max_size=20)) + text[cut:]
    return text


def _sampler(engine="auto") -> MetricsSampler:
    return MetricsSampler("http://127.0.0.1:9/metrics", engine=engine)


@FUZZ
@given(body=exposition(), engine=st.sampled_from(["auto", "vllm", "sglang", "trtllm"]))
def test_prometheus_text_is_parsed_or_refused_with_a_value_error(body, engine):
    sampler = _sampler(engine)
    try:
        values, raw = sampler._interpret(body, "text/plain; version=0.0.4")
    except (ValueError, TypeError):  # what sample_once catches and records as an unparseable scrape
        return
    assert all(isinstance(v, float) for v in values.values())
    sampler._record(1.0, values, raw)


@FUZZ
@given(body=st.text(max_size=500) | st.binary(max_size=500).map(lambda b: b.decode("latin-1")))
@example(body="[" * 100_000)
@example(body='{"a": ' * 50_000)
@example(body='[{"iterLatencyMS": 1e999, "kvCacheStats": {"usedNumBlocks": "x"}}]')
def test_arbitrary_metrics_bodies_are_refused_with_a_value_error(body):
    for content_type in ("text/plain", "application/json"):
        try:
            _sampler()._interpret(body, content_type)
        except (ValueError, TypeError):
            pass


@FUZZ
@given(stats=json_values)
def test_trtllm_json_stats_never_crash(stats):
    try:
        values = map_trtllm_json(stats)
    except (ValueError, TypeError):
        return
    assert isinstance(values, dict)


def test_huge_and_special_values_in_prometheus_stay_floats():
    samples = parse_prometheus('vllm:gpu_cache_usage_perc{model="m"} NaN\nvllm:num_requests_running 1e308\n')
    values = map_samples(samples, "vllm")
    assert values["running"] == 1e308
