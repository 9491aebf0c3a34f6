"""Every fixture is detected as its format; unknown files list every refusal."""

import pytest

from benchmarks.formats import FORMATS, FormatError, UnrecognisedFormat, detect, detect_and_parse, format_names
from benchmarks.result import REQUEST_COLUMNS

from .conftest import load

CASES = {
    "guidellm.json": ("guidellm", "0.8.1", 1),
    "guidellm.csv": ("guidellm-csv", "0.8.1", 1),
    "recon_guidellm_v0.3.json": ("guidellm", None, 2),
    "guidellm_v0.3.1_sweep.json": ("guidellm", None, 3),
    "guidellm_v0.3.1.csv": ("guidellm-csv", None, 1),
    "guidellm_v0.4.0.json": ("guidellm", None, 1),
    "guidellm_v0.4.0.csv": ("guidellm-csv", None, 1),
    "guidellm_v0.6.1.json": ("guidellm", "0.6.1", 1),
    "guidellm_v0.6.1.csv": ("guidellm-csv", "0.6.1", 1),
    "guidellm_v0.6.1_sweep.csv": ("guidellm-csv", "0.6.1", 3),
    "recon_guidellm_v0.4.json": ("guidellm", None, 2),
    "recon_guidellm_v0.6.json": ("guidellm", "0.6.0", 2),
    "recon_guidellm_v0.7.json": ("guidellm", "0.7.3", 1),
    "aiperf.json": ("aiperf", "0.13.0", 1),
    "recon_aiperf_schema1.0.json": ("aiperf", "0.2.0", 1),
    "recon_aiperf_schema1.5.json": ("aiperf", "0.14.0", 1),
    "aiperf.profile_export_aiperf.csv": ("aiperf-csv", None, 1),
    "aiperf.profile_export.jsonl": ("aiperf-jsonl", None, 1),
    "aiperf_v0.3.0.json": ("aiperf", None, 1),
    "aiperf_v0.8.0_schema1.1.json": ("aiperf", "0.8.0", 1),
    "aiperf_v0.3.0.csv": ("aiperf-csv", None, 1),
    "aiperf_v0.3.0.profile_export.jsonl": ("aiperf-jsonl", None, 1),
    "genai-perf_profile_export_genai_perf.json": ("genai-perf", None, 1),
    "genai-perf_profile_export_raw.json": ("perf-analyzer-raw", "2.53.0", 1),
    "vllm_bench_serve.json": ("vllm", None, 1),
    "recon_vllm_legacy_benchmark_serving.json": ("vllm", None, 1),
    "recon_vllm_append_result.jsonl": ("vllm", None, 2),
    "sglang_bench_serving.json": ("sglang", None, 1),
    "recon_sglang_two_runs.jsonl": ("sglang", None, 2),
    "inference-perf_summary_lifecycle_metrics.json": ("inference-perf", None, 1),
    "inference-perf_per_request_lifecycle_metrics.json": ("inference-perf-requests", None, 1),
    "inference-perf_summary_prometheus_metrics.json": ("inference-perf-prometheus", None, 1),
    "llmperf_summary.json": ("llmperf", None, 1),
    "llmperf_individual_responses.json": ("llmperf-responses", None, 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_is_detected_and_parsed(name):
    fmt, version, points = CASES[name]
    result = detect_and_parse(load(name), name)
    assert result.format == fmt
    assert result.tool_version == version
    assert len(result.points) == points
    assert result.definitions, "the tool's original definitions are recorded"
    assert result.points[0].ttft_ms.mean is not None
    if result.requests is not None:
        assert tuple(result.requests.columns) == REQUEST_COLUMNS


@pytest.mark.parametrize("name", sorted(CASES))
def test_format_override_matches_detection(name):
    fmt = CASES[name][0]
    assert detect(load(name), name).name == fmt
    assert detect_and_parse(load(name), None, format=fmt).format == fmt


def test_every_format_has_a_fixture():
    assert set(format_names()) - {CASES[n][0] for n in CASES} == {"native", "genai-perf-csv"}


def test_unrecognised_file_lists_every_format_and_reason():
    with pytest.raises(UnrecognisedFormat) as caught:
        detect_and_parse(load("aiperf.inputs.json"), "inputs.json")
    error = caught.value
    assert isinstance(error, ValueError)
    assert list(error.refusals) == [f.name for f in FORMATS]
    assert all(reason for reason in error.refusals.values())
    assert "guidellm: no top-level 'benchmarks' key" in str(error)
    assert "'inputs.json'" in str(error)


def test_unknown_format_name_is_refused():
    with pytest.raises(UnrecognisedFormat, match="unknown format"):
        detect_and_parse(b"{}", format="nope")


def test_forcing_the_wrong_format_gives_a_precise_error():
    with pytest.raises(FormatError, match=r"^benchmarks: missing required key"):
        detect_and_parse(load("vllm_bench_serve.json"), format="guidellm")


@pytest.mark.parametrize("data", [b"", b"\xff\xfe\x00garbage", b"[1, 2", b"null", b"a,b\n1,2\n"])
def test_junk_is_unrecognised(data):
    with pytest.raises(UnrecognisedFormat):
        detect_and_parse(data, "junk")


def test_genai_perf_csv_is_told_apart_from_aiperf_csv():
    csv = (
        b"Metric,avg,min,max,p99,p95,p90,p75,p50,p25,p10,p5,p1\n"
        b"Time to First Token (ms),78.10,54.67,124.96,109.34,93.72,85.91,82.01,78.10,74.20,70.29,66.39,62.48\n"
        b"Request Latency (ms),6740.76,4718.53,10785.22,9437.06,8088.91,7414.84,7077.80,6740.76,6403.72,6066.68,5729.65,5392.61\n"  # noqa: E501  (data as the tool writes it)
        b"Inter Token Latency (ms),19.32,13.52,30.91,27.05,23.18,21.25,20.29,19.32,18.35,17.39,16.42,15.46\n"
        b"\nMetric,Value\nRequest Throughput (per sec),3.21\nOutput Token Throughput (per sec),1105.20\nRequest Count (count),100.00\n"  # noqa: E501  (data as the tool writes it)
    )
    result = detect_and_parse(csv, "profile_export_genai_perf.csv")
    assert result.format == "genai-perf-csv"
    point = result.points[0]
    assert point.ttft_ms.p99 == pytest.approx(109.34)
    assert point.tpot_ms.mean == pytest.approx(19.32)
    assert point.request_throughput == pytest.approx(3.21)
    assert point.requests_completed == 100


@pytest.mark.parametrize("name", sorted(CASES))
def test_result_is_plain_json_without_nan(name):
    import json

    document = detect_and_parse(load(name), name, slo={"ttft_ms": 100}).to_native()
    json.dumps(document, allow_nan=False)  # no numpy scalars, no NaN/inf leak into storage


@pytest.mark.parametrize("name", sorted(n for n in CASES if detect_and_parse(load(n), n).requests is not None))
def test_requests_write_to_parquet(name, tmp_path):
    import pandas as pd

    frame = detect_and_parse(load(name), name).requests
    frame.to_parquet(tmp_path / "r.parquet")
    again = pd.read_parquet(tmp_path / "r.parquet")
    assert list(again.columns) == list(REQUEST_COLUMNS) and len(again) == len(frame)


def test_another_tools_file_run_against_the_simulator_is_simulated_with_the_reason():
    # vllm bench serve against the simulator: its model id is the simulator's served model
    data = load("vllm_bench_serve.json").replace(b'"mock-model"', b'"kvsim-llama-3.1-8b"')
    result = detect_and_parse(data, "vllm.json")
    assert result.evidence == "SIMULATED"
    assert any("metadata.model names kvsim" in note for note in result.notes)
    measured = detect_and_parse(load("vllm_bench_serve.json"), "vllm.json")
    assert measured.evidence == "MEASURED" and not any("SIMULATED" in note for note in measured.notes)
