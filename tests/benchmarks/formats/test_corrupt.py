"""A corrupt file per format -> FormatError naming the offending key (never another exception)."""

import json

import pytest

from benchmarks.formats import FormatError, UnrecognisedFormat, detect_and_parse

from .conftest import load


def mutate(name, change):
    doc = json.loads(load(name))
    change(doc)
    return json.dumps(doc).encode()


def set_path(doc, path, value):
    *parents, last = path
    for key in parents:
        doc = doc[key]
    doc[last] = value


def delete_path(doc, path):
    *parents, last = path
    for key in parents:
        doc = doc[key]
    del doc[last]


WRONG_TYPES = [
    (
        "guidellm.json",
        ["benchmarks", 0, "metrics", "time_to_first_token_ms"],
        [1, 2],
        "benchmarks[0].metrics.time_to_first_token_ms: expected an object, got list",
    ),
    (
        "guidellm.json",
        ["benchmarks", 0, "metrics", "request_latency", "successful", "mean"],
        "fast",
        "benchmarks[0].metrics.request_latency.successful.mean: expected a number, got string",
    ),
    ("guidellm.json", ["benchmarks"], {"a": 1}, "benchmarks: expected a list, got object"),
    (
        "recon_guidellm_v0.3.json",
        ["benchmarks", 1, "requests", "successful", 2, "output_tokens"],
        "x",
        "benchmarks[1].requests.successful[2].output_tokens: expected a number, got string",
    ),
    ("aiperf.json", ["time_to_first_token", "p99"], "slow", "time_to_first_token.p99: expected a number, got string"),
    ("aiperf.json", ["request_latency", "unit"], "fortnights", "request_latency.unit: unknown time unit 'fortnights'"),
    ("aiperf.json", ["schema_version"], "9.0", "schema_version: unsupported aiperf schema '9.0'"),
    (
        "genai-perf_profile_export_genai_perf.json",
        ["inter_token_latency"],
        3,
        "inter_token_latency: expected an object, got number",
    ),
    (
        "genai-perf_profile_export_raw.json",
        ["experiments", 0, "requests", 0, "response_timestamps", 1],
        "late",
        "experiments[0].requests[0].response_timestamps[1]: expected a number, got string",
    ),
    ("vllm_bench_serve.json", ["ttfts", 1], "x", "ttfts[1]: expected a number, got string"),
    ("vllm_bench_serve.json", ["itls", 0], 5, "itls[0]: expected a list, got number"),
    ("vllm_bench_serve.json", ["completed"], "six", "completed: expected a number, got string"),
    ("vllm_bench_serve.json", ["output_lens"], [16], "output_lens: has 1 entries but ttfts has 2"),
    (
        "inference-perf_summary_lifecycle_metrics.json",
        ["successes", "latency", "time_to_first_token"],
        [],
        "successes.latency.time_to_first_token: expected an object, got list",
    ),
    (
        "inference-perf_per_request_lifecycle_metrics.json",
        [0, "info", "response_metrics", "output_token_times"],
        "soon",
        "[0].info.response_metrics.output_token_times: expected a list, got string",
    ),
    (
        "inference-perf_summary_prometheus_metrics.json",
        ["successes", "request_latency", "p90"],
        "x",
        "successes.request_latency.p90: expected a number, got string",
    ),
    (
        "llmperf_summary.json",
        ["results_ttft_s_quantiles_p50"],
        "x",
        "results_ttft_s_quantiles_p50: expected a number, got string",
    ),
    ("llmperf_individual_responses.json", [1, "ttft_s"], None, "[1].ttft_s: expected a number, got null"),
]


@pytest.mark.parametrize("name,path,value,message", WRONG_TYPES, ids=[f"{c[0]}:{c[3][:30]}" for c in WRONG_TYPES])
def test_wrong_type_names_the_path(name, path, value, message):
    with pytest.raises(FormatError) as caught:
        detect_and_parse(mutate(name, lambda d: set_path(d, path, value)), name)
    assert message in str(caught.value)


MISSING = [
    ("guidellm.json", ["benchmarks", 0, "metrics"], "benchmarks[0]", "guidellm"),
    ("vllm_bench_serve.json", ["duration"], "duration: missing required key", "vllm"),
    ("sglang_bench_serving.json", ["completed"], "completed: missing required key", "sglang"),
    (
        "inference-perf_summary_lifecycle_metrics.json",
        ["successes", "latency"],
        "successes.latency: missing required key",
        "inference-perf",
    ),
    ("llmperf_summary.json", ["num_concurrent_requests"], "num_concurrent_requests: missing required key", "llmperf"),
    (
        "genai-perf_profile_export_raw.json",
        ["experiments", 0, "requests"],
        "experiments[0].requests: missing required key",
        "perf-analyzer-raw",
    ),
]


@pytest.mark.parametrize("name,path,message,fmt", MISSING)
def test_missing_key_names_the_path(name, path, message, fmt):
    data = mutate(name, lambda d: delete_path(d, path))
    with pytest.raises((FormatError, UnrecognisedFormat)) as caught:
        detect_and_parse(data, name, format=fmt)
    assert message in str(caught.value)


TRUNCATABLE = [
    "guidellm.json",
    "aiperf.json",
    "genai-perf_profile_export_genai_perf.json",
    "genai-perf_profile_export_raw.json",
    "vllm_bench_serve.json",
    "inference-perf_summary_lifecycle_metrics.json",
    "inference-perf_summary_prometheus_metrics.json",
    "inference-perf_per_request_lifecycle_metrics.json",
    "llmperf_summary.json",
    "llmperf_individual_responses.json",
    "sglang_bench_serving.json",
]
FORMAT_OF = {
    "guidellm.json": "guidellm",
    "aiperf.json": "aiperf",
    "genai-perf_profile_export_genai_perf.json": "genai-perf",
    "genai-perf_profile_export_raw.json": "perf-analyzer-raw",
    "vllm_bench_serve.json": "vllm",
    "inference-perf_summary_lifecycle_metrics.json": "inference-perf",
    "inference-perf_summary_prometheus_metrics.json": "inference-perf-prometheus",
    "inference-perf_per_request_lifecycle_metrics.json": "inference-perf-requests",
    "llmperf_summary.json": "llmperf",
    "llmperf_individual_responses.json": "llmperf-responses",
    "sglang_bench_serving.json": "sglang",
}


@pytest.mark.parametrize("name", TRUNCATABLE)
def test_truncated_json_is_rejected_with_position(name):
    data = load(name)
    truncated = data[: len(data) * 2 // 3]
    with pytest.raises(UnrecognisedFormat):
        detect_and_parse(truncated, name)
    with pytest.raises(FormatError, match=r"invalid JSON at line \d+ column \d+"):
        detect_and_parse(truncated, name, format=FORMAT_OF[name])


def test_truncated_jsonl_record_is_rejected():
    data = load("aiperf.profile_export.jsonl")
    with pytest.raises(FormatError, match="profile_export.jsonl"):
        detect_and_parse(data[:-40], "profile_export.jsonl")


def test_aiperf_jsonl_wrong_type():
    data = load("aiperf.profile_export.jsonl").replace(
        b'"time_to_first_token":{"value":32.048665', b'"time_to_first_token":{"value":"soon"', 1
    )
    with pytest.raises(FormatError, match="time_to_first_token"):
        detect_and_parse(data, "profile_export.jsonl")


def test_guidellm_csv_corrupt_cell_names_line_and_column():
    import csv
    import io

    rows = list(csv.reader(io.StringIO(load("guidellm.csv").decode())))
    rows[3][16] = "quick"  # Timings / Duration / Sec
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    with pytest.raises(
        FormatError, match="CSV line 4, column Timings / Duration / Sec: expected a number, got 'quick'"
    ):
        detect_and_parse(out.getvalue().encode(), "benchmarks.csv")


def test_guidellm_csv_short_row():
    text = load("guidellm.csv").decode().split("\n")
    text[3] = text[3][:200]
    with pytest.raises(FormatError, match="CSV line 4: has"):
        detect_and_parse("\n".join(text).encode(), "benchmarks.csv")


def test_aiperf_csv_corrupt_cell():
    text = (
        load("aiperf.profile_export_aiperf.csv")
        .decode()
        .replace("Request Latency (ms),60.41", "Request Latency (ms),sixty", 1)
    )
    with pytest.raises(FormatError, match=r"Request Latency \(ms\)\), column avg: expected a number, got 'sixty'"):
        detect_and_parse(text.encode(), "profile_export_aiperf.csv")


def test_nan_rejected_where_json_forbids_it():
    data = load("vllm_bench_serve.json").replace(b'"mean_ttft_ms": 27.1595', b'"mean_ttft_ms": NaN')
    with pytest.raises(FormatError, match="NaN"):
        detect_and_parse(data, "vllm.json", format="vllm")


def test_sglang_nan_in_a_metric_is_rejected_even_though_infinity_rate_is_allowed():
    data = load("sglang_bench_serving.json").replace(b'"mean_ttft_ms": 23.7931', b'"mean_ttft_ms": NaN')
    with pytest.raises(FormatError, match="mean_ttft_ms: expected a finite number"):
        detect_and_parse(data, "sglang.jsonl")


def test_deep_nesting_is_rejected():
    data = b'{"benchmarks": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    with pytest.raises((FormatError, UnrecognisedFormat), match="nested deeper"):
        detect_and_parse(data, "deep.json", format="guidellm")
    moderately = b'{"benchmarks": [' + b'{"a":' * 100 + b"1" + b"}" * 100 + b"]}"
    with pytest.raises(FormatError, match="nested deeper than 64"):
        detect_and_parse(moderately, "deep.json", format="guidellm")


def test_non_utf8_is_rejected():
    data = load("vllm_bench_serve.json").replace(b"mock-model", b"mock-\xff\xfeodel")
    with pytest.raises(UnrecognisedFormat, match="not UTF-8"):
        detect_and_parse(data, "vllm.json")
    with pytest.raises(FormatError, match="not UTF-8"):
        detect_and_parse(data, "vllm.json", format="vllm")


def test_non_utf8_in_aiperf_jsonl_string_is_rejected():
    data = load("aiperf.profile_export.jsonl").replace(b"673a9f6b", b"673a\xff\xfe6b", 1)
    with pytest.raises(FormatError, match="x_request_id: not valid UTF-8"):
        detect_and_parse(data, "profile_export.jsonl", format="aiperf-jsonl")


def test_guidellm_unknown_metadata_version():
    data = mutate("guidellm.json", lambda d: set_path(d, ["metadata", "version"], 3))
    with pytest.raises(FormatError, match="metadata.version: unsupported guidellm report version 3"):
        detect_and_parse(data, "benchmarks.json")
