"""Unit conversion and the mapping of each tool's definitions onto kvselect's."""

import math

import numpy as np
import pytest

from benchmarks.formats import detect_and_parse

from .conftest import load


def parse(name, **kwargs):
    return detect_and_parse(load(name), name, **kwargs)


def test_guidellm_latency_seconds_to_ms_and_tpot_including_ttft_kept_apart():
    point = parse("guidellm.json").points[0]
    assert point.e2e_ms.mean == pytest.approx(61.2)  # request_latency 0.0612 s
    assert point.ttft_ms.mean == pytest.approx(24.146)
    assert point.ttft_ms.p50 == pytest.approx(23.9534)
    assert point.ttft_ms.max == pytest.approx(25.7146)
    # time_per_output_token_ms includes TTFT: never in the tpot column
    assert point.tpot_ms.mean is None
    assert point.extra["guidellm_time_per_output_token_ms"]["mean"] == pytest.approx(3.7968)
    # token-weighted ITL: mean is the per-token mean, percentiles are not kvselect's
    assert point.itl_ms.mean == pytest.approx(2.4402)
    assert point.itl_ms.p50 is None and point.itl_ms.p99 is None
    assert point.concurrency == 2 and point.achieved_concurrency == pytest.approx(1.8228)
    assert point.request_throughput == pytest.approx(29.7926)
    assert point.goodput == pytest.approx(29.7926) and point.slo_attainment == 1.0
    assert point.extra["goodput_slo_ms"]["ttft_ms"] == 50.0


def test_guidellm_csv_matches_json():
    json_point = parse("guidellm.json").points[0]
    csv_point = parse("guidellm.csv").points[0]
    assert csv_point.ttft_ms.mean == pytest.approx(json_point.ttft_ms.mean, rel=1e-3)
    assert csv_point.ttft_ms.p90 == pytest.approx(json_point.ttft_ms.p90, rel=1e-3)
    assert csv_point.e2e_ms.mean == pytest.approx(json_point.e2e_ms.mean, rel=1e-3)
    assert csv_point.itl_ms.mean == pytest.approx(json_point.itl_ms.mean, rel=1e-3)
    assert csv_point.tpot_ms.mean is None
    assert csv_point.concurrency == 2 and csv_point.duration_s == pytest.approx(0.2014, rel=1e-3)
    assert csv_point.requests_completed == 6 and csv_point.requests_failed == 0


def test_guidellm_v03_records_give_tpot_and_median_stands_in_for_p50():
    result = parse("recon_guidellm_v0.3.json")
    first = result.points[0]
    assert first.label == "synchronous" and first.concurrency == 1
    assert result.points[1].request_rate == 5.0
    assert first.ttft_ms.p50 == pytest.approx(39.0)  # no p50 key in 0.3 percentiles
    assert first.requests_completed == 4 and first.requests_failed == 1 and first.error_rate == pytest.approx(0.2)
    # every request is in the file -> kvselect TPOT from per-request (last-first)/(n-1)
    assert first.tpot_ms.mean == pytest.approx(17.0, rel=1e-4)
    frame = result.requests
    assert len(frame) == 10 and frame["ok"].sum() == 8
    assert frame.loc[frame["ok"], "ttft_ms"].to_numpy() == pytest.approx([40.0] * 8, rel=1e-4)
    assert frame.loc[frame["ok"], "e2e_ms"].to_numpy() == pytest.approx([300.0] * 8, rel=1e-4)


def test_guidellm_layouts_are_named():
    assert "0.4" in parse("recon_guidellm_v0.4.json").metadata["layout"]
    assert "metadata v1" in parse("recon_guidellm_v0.6.json").metadata["layout"]
    assert parse("recon_guidellm_v0.4.json").metadata["model"] == "toy-model"


def test_aiperf_itl_is_kvselect_tpot_and_chunk_latency_is_kept_apart():
    point = parse("aiperf.json").points[0]
    assert point.tpot_ms.mean == pytest.approx(1.480349554347826)
    assert point.extra["itl_chunk_ms"]["mean"] == pytest.approx(2.2698693166666666)
    # per-token ITL mean = (sum latency - sum ttft) / (sum osl - count)
    expected = (60.409364374999996 * 8 - 26.361324624999998 * 8) / (192 - 8)
    assert point.itl_ms.mean == pytest.approx(expected)
    assert point.itl_ms.p99 is None
    assert point.duration_s == pytest.approx(0.264589568)
    assert point.concurrency == 2  # from run_info.cli_command
    assert point.error_rate == 0.0


def test_aiperf_units_are_authoritative():
    import json

    doc = json.loads(load("aiperf.json"))
    doc["time_to_first_token"] = {"unit": "sec", "avg": 0.5, "p50": 0.4, "p99": 0.9, "max": 1.0}
    doc["request_latency"]["unit"] = "ns"
    point = detect_and_parse(json.dumps(doc).encode(), "x.json").points[0]
    assert point.ttft_ms.mean == 500.0 and point.ttft_ms.p99 == 900.0
    assert point.e2e_ms.mean == pytest.approx(60.409364374999996e-6)


def test_aiperf_jsonl_per_request():
    result = parse("aiperf.profile_export.jsonl")
    frame = result.requests
    assert len(frame) == 2
    assert frame["ok"].tolist() == [True, False]
    # the client cancelled it (was_cancelled): marked, neither a failure nor a success
    assert frame.loc[1, "error"].startswith("cancelled: RequestCancellationError")
    assert frame.loc[0, "ttft_ms"] == pytest.approx(32.048665)
    assert frame.loc[0, "tpot_ms"] == pytest.approx(1.3348429130434782)
    assert frame.loc[1, "start_s"] == pytest.approx((1795991479522444442 - 1795991479520199685) / 1e9)
    point = result.points[0]
    assert point.requests_completed == 1 and point.requests_failed == 0 and point.error_rate == 0.0
    assert point.extra["cancelled_in_flight"] == 1


def test_vllm_summary_ms_and_per_request_seconds():
    result = parse("vllm_bench_serve.json")
    point = result.points[0]
    assert point.ttft_ms.mean == 27.1595 and point.ttft_ms.p90 == 30.5603
    assert point.tpot_ms.mean == 2.2174  # same definition as kvselect
    assert point.e2e_ms.p99 == 64.814
    assert point.request_rate is None and point.concurrency == 2
    assert point.extra["itl_chunk_ms"]["mean"] == 2.2174
    frame = result.requests
    assert frame["ttft_ms"].tolist() == pytest.approx([27.0, 28.1])
    assert frame["e2e_ms"].tolist() == pytest.approx([60.6, 60.6])
    assert frame["start_s"].tolist() == pytest.approx([0.0, 0.0001], abs=1e-6)
    assert result.metadata["gpu"] == "H100" and result.metadata["engine"] == "mock"
    assert result.metadata["model"] == "mock-model"
    assert "trimmed" in " ".join(result.notes)


def test_vllm_legacy_goodput_key_and_exact_per_token_itl():
    result = parse("recon_vllm_legacy_benchmark_serving.json")
    point = result.points[0]
    assert "legacy" in result.metadata["layout"]
    assert point.goodput == 6.0
    # one token per chunk (len(itls) == output_len - 1): chunk ITL is per-token ITL
    assert point.itl_ms.mean == pytest.approx(10.5)
    assert point.itl_ms.max == pytest.approx(12.0)
    assert point.e2e_ms.mean == pytest.approx(30.5 + 7 * 10.5)


def test_vllm_append_result_is_a_sweep():
    points = parse("recon_vllm_append_result.jsonl").points
    assert [p.request_rate for p in points] == [2.0, 8.0]
    assert points[1].ttft_ms.mean > points[0].ttft_ms.mean


def test_sglang_bare_infinity_and_derived_e2e():
    result = parse("sglang_bench_serving.json")
    point = result.points[0]
    assert point.request_rate is None  # Infinity = unbounded
    assert point.achieved_concurrency == 1.9325
    assert point.e2e_ms.mean == 56.4621
    assert point.slo_attainment == 1.0 and point.extra["goodput_slo_ms"] == {"ttft": 50.0, "tpot": 5.0}
    frame = result.requests
    # the lists hold 2 of 6 requests: e2e = ttft + sum of gaps cannot be checked against the
    # tool's mean TPOT, so it is not derived (a list missing gaps would give a far too short e2e)
    assert frame["e2e_ms"].isna().all() and frame["ttft_ms"].tolist() == pytest.approx([24.0, 24.4])
    assert any("cannot be checked" in note for note in result.notes)


def test_inference_perf_seconds_everywhere():
    point = parse("inference-perf_summary_lifecycle_metrics.json").points[0]
    assert point.ttft_ms.mean == pytest.approx(210.0)
    assert point.tpot_ms.p99 == pytest.approx(27.75)
    assert point.e2e_ms.p50 == pytest.approx(3310.0)
    assert point.itl_ms.mean == pytest.approx(18.5) and point.itl_ms.p99 is None
    assert point.extra["ntpot_ms"]["mean"] == pytest.approx(22.1)
    assert point.requests_completed == 598 and point.requests_failed == 2
    assert point.slo_attainment == pytest.approx(0.913)
    assert point.request_rate == 10.0


def test_inference_perf_prometheus_is_server_side_and_keeps_kv_metrics():
    result = parse("inference-perf_summary_prometheus_metrics.json")
    point = result.points[0]
    assert "server-side" in result.definitions["ttft_ms"]
    assert point.tpot_ms.mean is None
    assert point.itl_ms.p99 == pytest.approx(24.0)
    assert point.extra["server"]["kv_cache_usage_percentage"]["mean"] == 0.41


def test_inference_perf_per_request():
    result = parse("inference-perf_per_request_lifecycle_metrics.json")
    frame = result.requests
    assert frame["ok"].tolist() == [True, False]
    assert frame.loc[0, "ttft_ms"] == pytest.approx(210.0, abs=0.01)
    assert frame.loc[0, "e2e_ms"] == pytest.approx(3333.0, abs=0.01)
    assert frame.loc[0, "tpot_ms"] == pytest.approx((3333.0 - 210.0) / 149, abs=0.01)
    assert frame.loc[0, "prompt_tokens"] == 512
    assert "504" in frame.loc[1, "error"]


def test_llmperf_itl_including_ttft_is_not_kvselect_itl():
    point = parse("llmperf_summary.json").points[0]
    assert point.ttft_ms.p50 == pytest.approx(350.0)
    assert point.e2e_ms.p95 == pytest.approx(7280.0)
    assert point.extra["llmperf_itl_incl_ttft_ms"]["mean"] == pytest.approx(21.0)
    assert point.itl_ms.mean == pytest.approx((5600 - 350) / 149)
    assert point.tpot_ms.mean is None
    assert point.request_throughput == pytest.approx(245.3 / 60)
    assert point.concurrency == 8


def test_llmperf_individual_responses_tpot_and_errors():
    result = parse("llmperf_individual_responses.json")
    frame = result.requests
    assert frame["ok"].tolist() == [True, False]
    assert frame.loc[0, "tpot_ms"] == pytest.approx((3520 - 341) / 149)
    assert math.isnan(frame.loc[1, "ttft_ms"])  # failed request: missing, not 0
    assert result.points[0].requests_failed == 1


def test_perf_analyzer_raw_nanoseconds():
    result = parse("genai-perf_profile_export_raw.json")
    point = result.points[0]
    assert point.concurrency == 8
    assert point.ttft_ms.mean == pytest.approx((1741134590728534586 - 1741134590669919999) / 1e6)
    assert point.e2e_ms.mean == pytest.approx((1741134590748123456 - 1741134590669919999) / 1e6)
    assert point.tpot_ms.mean is None and point.itl_ms.mean is None
    assert point.duration_s == pytest.approx(10.0)


def test_genai_perf_summary():
    point = parse("genai-perf_profile_export_genai_perf.json").points[0]
    assert point.tpot_ms.p99 == pytest.approx(27.048)
    assert point.goodput == 2.9
    assert point.requests_completed == 100
    assert point.itl_ms.mean == pytest.approx((6740.76 - 78.1) / 344.8)


def test_missing_stays_none_never_zero():
    point = parse("aiperf.profile_export_aiperf.csv").points[0]
    assert point.itl_ms.p50 is None  # only the mean is derivable (from Decode Duration sum)
    assert point.concurrency is None and point.client_bound is None  # the CSV carries no run configuration
    vllm = parse("vllm_bench_serve.json").points[0]
    assert vllm.ttft_ms.p95 is None  # not in --metric-percentiles 50,90,99


def test_requests_have_one_row_per_request_and_fixed_columns():
    frame = parse("recon_guidellm_v0.3.json").requests
    assert frame["point"].tolist() == [0] * 5 + [1] * 5
    assert np.issubdtype(frame["ttft_ms"].dtype, np.floating)


def test_real_guidellm_031_sweep_and_per_request_tpot():
    result = parse("guidellm_v0.3.1_sweep.json")
    labels = [p.label for p in result.points]
    assert labels[0] == "synchronous" and labels[1] == "throughput" and labels[2].startswith("constant@")
    assert result.points[2].request_rate == pytest.approx(12.748612085582355)
    assert result.metadata["model"] == "mock-model"
    first = result.points[0]
    assert first.e2e_ms.mean == pytest.approx(95.8557923634847)  # seconds -> ms
    # every request is in the file: kvselect TPOT = per-request (last - first)/(n - 1)
    frame = result.requests[result.requests["point"] == 0]
    assert len(frame) == 6
    assert first.tpot_ms.mean == pytest.approx(frame["tpot_ms"].mean())
    record = frame.iloc[0]
    assert record["tpot_ms"] == pytest.approx((1795995600.6850953 - 1795995600.647611) * 1000 / 15, rel=1e-4)
    # 0.3's time_per_output_token_ms divides by n, kept apart
    assert first.extra["guidellm_time_per_output_token_ms"]["mean"] != pytest.approx(first.tpot_ms.mean)


def test_real_guidellm_031_csv_matches_its_layout():
    point = parse("guidellm_v0.3.1.csv").points[0]
    assert point.concurrency == 2 and point.requests_completed == 6
    assert point.ttft_ms.mean == pytest.approx(48.108100891113274)
    assert point.ttft_ms.p50 == pytest.approx(27.231454849243164)
    assert point.ttft_ms.max == pytest.approx(112.6394271850586)
    assert point.e2e_ms.mean == pytest.approx(102.73090998331705)
    assert point.itl_ms.mean == pytest.approx(3.407128651936849) and point.itl_ms.p99 is None
    assert point.tpot_ms.mean is None


@pytest.mark.parametrize("version", ["0.4.0", "0.6.1"])
def test_real_guidellm_04_06_json_and_csv_agree(version):
    json_point = parse(f"guidellm_v{version}.json").points[0]
    csv_point = parse(f"guidellm_v{version}.csv").points[0]
    assert json_point.concurrency == csv_point.concurrency == 2
    for metric in ("ttft_ms", "e2e_ms"):
        assert getattr(csv_point, metric).mean == pytest.approx(getattr(json_point, metric).mean)
        assert getattr(csv_point, metric).p99 == pytest.approx(getattr(json_point, metric).p99)
    assert csv_point.itl_ms.mean == pytest.approx(json_point.itl_ms.mean)
    # all 6 requests are in the JSON: kvselect TPOT from per-request records; the CSV cannot give it
    assert json_point.tpot_ms.mean is not None and csv_point.tpot_ms.mean is None
    assert parse(f"guidellm_v{version}.json").metadata["model"] == "mock-model"


def test_real_guidellm_06_sweep_csv_rows_take_their_rates_from_the_profile():
    points = parse("guidellm_v0.6.1_sweep.csv").points
    assert [p.label.split("@")[0] for p in points] == ["synchronous", "throughput", "constant"]
    assert points[0].concurrency == 1 and points[1].concurrency is None
    assert points[2].request_rate == pytest.approx(44.49953848602197)


def test_real_aiperf_030_summary_agrees_with_its_per_request_file():
    summary = parse("aiperf_v0.3.0.json")
    records = parse("aiperf_v0.3.0.profile_export.jsonl")
    a, b = summary.points[0], records.points[0]
    assert summary.metadata["model"] == "mock-model" and a.concurrency == 2
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert getattr(a, metric).mean == pytest.approx(getattr(b, metric).mean)
    assert a.itl_ms.mean == pytest.approx(b.itl_ms.mean)
    assert a.request_throughput == pytest.approx(b.request_throughput, rel=1e-6)
    assert a.duration_s == pytest.approx(b.duration_s, rel=1e-6)


@pytest.mark.parametrize("name", ["aiperf_v0.3.0_all_errors.json", "aiperf_v0.3.0_all_errors.csv"])
def test_real_aiperf_all_failed_run(name):
    result = parse(name)
    assert result.format.startswith("aiperf")
    point = result.points[0]
    assert point.requests_completed == 0 and point.requests_failed == 8
    assert point.ttft_ms.mean is None and point.e2e_ms.mean is None  # missing, not zero


def test_real_aiperf_schema_11():
    result = parse("aiperf_v0.8.0_schema1.1.json")
    point = result.points[0]
    assert result.metadata["schema_version"] == "1.1"
    assert point.e2e_ms.mean == pytest.approx(64.91832475) and point.e2e_ms.max == pytest.approx(75.236316)
    assert point.requests_completed == 8 and point.concurrency == 2
