"""The native format round-trips and is validated strictly."""

import json

import numpy as np
import pytest

from benchmarks.formats import FormatError, detect_and_parse
from benchmarks.result import NATIVE_SCHEMA

from .conftest import load


def native_bytes(result):
    return json.dumps(result.to_native()).encode()


def test_round_trip_of_a_parsed_file():
    original = detect_and_parse(load("vllm_bench_serve.json"), "v.json")
    original.test = "concurrency_stress"
    again = detect_and_parse(native_bytes(original), "result.json")
    assert again.format == "native" and again.tool == "vllm"
    assert again.points[0].ttft_ms == original.points[0].ttft_ms
    assert again.points[0].extra["itl_chunk_ms"] == original.points[0].extra["itl_chunk_ms"]
    assert again.test == "concurrency_stress"
    assert len(again.requests) == len(original.requests)
    assert np.allclose(again.requests["ttft_ms"], original.requests["ttft_ms"])


def test_simulated_evidence_survives():
    original = detect_and_parse(load("aiperf.json"), "a.json")
    original.evidence = "SIMULATED"
    assert detect_and_parse(native_bytes(original), "r.json").evidence == "SIMULATED"


def base_doc():
    return detect_and_parse(load("llmperf_individual_responses.json"), "x.json").to_native()


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda d: d.update(schema="kvselect.result/2"), "schema: unsupported version 'kvselect.result/2'"),
        (lambda d: d.update(evidence="GUESSED"), "evidence: must be MEASURED or SIMULATED"),
        (lambda d: d.update(test="smoke"), "test: must be one of"),
        (lambda d: d.update(surprise=1), "surprise: unknown key"),
        (lambda d: d.pop("points"), "points: missing required key"),
        (
            lambda d: d["points"][0].update(ttft_ms={"mean": "fast"}),
            "points[0].ttft_ms.mean: expected a number, got string",
        ),
        (lambda d: d["points"][0].update(ttft_ms={"p42": 1.0}), "points[0].ttft_ms: unknown statistic 'p42'"),
        (lambda d: d["points"][0].update(error_rate=1.5), "points[0].error_rate: must be between 0 and 1"),
        (
            lambda d: d["points"][0].update(requests_completed=2.5),
            "points[0].requests_completed: expected a non-negative integer",
        ),
        (lambda d: d["points"][0].update(colour="red"), "points[0].colour: unknown key"),
        (lambda d: d["requests"].update(ttft_ms=[1.0]), "requests.ttft_ms: has 1 rows, other columns have 2"),
        (lambda d: d["requests"].update(ok=[1, 0]), "requests.ok[0]: expected a boolean, got number"),
        (lambda d: d["requests"].update(point=[0, 3]), "requests.point: every row must name a point index"),
        (lambda d: d["requests"].update(shoe_size=[1, 2]), "requests.shoe_size: unknown column"),
        (lambda d: d.update(timeseries={"kv": [[0.0]]}), "timeseries.kv[0]: expected [t_s, value]"),
        (lambda d: d.update(verdicts=[{"name": "x", "passed": "yes"}]), "verdicts[0].passed: expected a boolean"),
        (lambda d: d.update(verdicts=[{"name": "x", "passed": None}]), "verdicts[0].passed: expected a boolean"),
        (
            lambda d: d.update(verdicts=[{"name": "x", "status": "maybe", "passed": None}]),
            "verdicts[0].status: expected one of",
        ),
        (
            lambda d: d.update(verdicts=[{"name": "x", "status": "inconclusive", "passed": True}]),
            "verdicts[0].passed: True contradicts status 'inconclusive'",
        ),
    ],
)
def test_strict_validation(change, message):
    doc = base_doc()
    change(doc)
    with pytest.raises(FormatError) as caught:
        detect_and_parse(json.dumps(doc).encode(), "r.json", format="native")
    assert message in str(caught.value)


def test_a_verdict_without_a_pass_carries_its_status():
    doc = base_doc()
    doc["verdicts"] = [{"name": "eviction_exercised", "status": "not_exercised", "passed": None, "n": 16}]
    result = detect_and_parse(json.dumps(doc).encode(), "r.json", format="native")
    assert result.verdicts[0]["status"] == "not_exercised" and result.verdicts[0]["n"] == 16


def test_native_is_detected_by_schema():
    doc = base_doc()
    assert doc["schema"] == NATIVE_SCHEMA
    assert detect_and_parse(json.dumps(doc).encode(), None).format == "native"


def test_native_rejects_infinity():
    text = json.dumps(base_doc()).replace('"concurrency": null', '"concurrency": Infinity', 1)
    with pytest.raises(FormatError, match="Infinity"):
        detect_and_parse(text.encode(), "r.json", format="native")
