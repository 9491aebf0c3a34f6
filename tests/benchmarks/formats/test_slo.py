"""Goodput / SLO attainment recomputed against kvselect's latency budget."""

import pytest

from benchmarks.formats import FormatError, detect_and_parse

from .conftest import load


def parse(name, slo):
    return detect_and_parse(load(name), name, slo=slo)


def test_recomputed_from_complete_per_request_data():
    # legacy vLLM RECON: ttfts 30,31,29,32 ms; tpot 10,11,9,12 ms; duration 0.5 s
    point = parse("recon_vllm_legacy_benchmark_serving.json", {"ttft_ms": 31.5, "tpot_ms": 11.5}).points[0]
    assert point.slo_attainment == pytest.approx(0.75)  # 30/10, 31/11 and 29/9 pass; 32/12 misses both
    assert point.goodput == pytest.approx(3 / 0.5)
    assert point.extra["tool_goodput"] == 6.0  # the tool's own SLO result is kept apart
    assert point.extra["slo"] == {"ttft_ms": 31.5, "tpot_ms": 11.5}


def test_failed_requests_are_never_good():
    result = parse("llmperf_individual_responses.json", {"e2e_ms": 100000})
    assert result.points[0].slo_attainment == pytest.approx(0.5)


def test_sample_gives_an_estimate_with_a_note():
    result = parse("guidellm.json", {"ttft_ms": 1000})
    point = result.points[0]
    assert point.slo_attainment == 1.0
    assert point.goodput == pytest.approx(point.request_throughput)
    assert any("sample of 1 of 6" in note for note in result.notes)


def test_without_per_request_data_goodput_is_missing_not_the_tools():
    point = parse("aiperf.json", {"ttft_ms": 10}).points[0]
    assert point.goodput is None and point.slo_attainment is None
    assert point.extra["tool_goodput"] == pytest.approx(29.817386621008694)


def test_without_slo_the_tools_goodput_stays():
    assert parse("aiperf.json", None).points[0].goodput == pytest.approx(29.817386621008694)


def test_one_token_answers_cannot_miss_tpot():
    import json

    doc = json.loads(load("llmperf_individual_responses.json"))
    doc[0]["number_output_tokens"] = 1
    result = detect_and_parse(json.dumps(doc).encode(), "x.json", slo={"tpot_ms": 1})
    assert result.points[0].slo_attainment == pytest.approx(0.5)


@pytest.mark.parametrize("slo", [{"ttft": 5}, {"ttft_ms": -1}, {"ttft_ms": "fast"}, {"e2e_ms": float("nan")}])
def test_bad_slo_is_rejected(slo):
    with pytest.raises(FormatError, match="slo"):
        detect_and_parse(load("aiperf.json"), "a.json", slo=slo)


def test_recompute_goodput_later_with_another_budget():
    from benchmarks.formats import recompute_goodput

    result = parse("recon_vllm_legacy_benchmark_serving.json", {"ttft_ms": 31.5, "tpot_ms": 11.5})
    recompute_goodput(result, {"ttft_ms": 100})
    assert result.points[0].slo_attainment == 1.0
    assert result.points[0].extra["tool_goodput"] == 6.0
