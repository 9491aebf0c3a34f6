"""The load benchmark's upload is a real, parseable vLLM detailed result of the requested size."""

import pytest

from benchmarks.formats import detect_and_parse
from benchmarks.perf.api_load import percentile, vllm_detailed_result

pytestmark = pytest.mark.reliability


def test_load_payload_is_a_parseable_vllm_detailed_result_of_about_the_requested_size():
    data = vllm_detailed_result(1024 * 1024)
    assert 0.8e6 < len(data) < 1.3e6
    result = detect_and_parse(data, "vllm_bench_serve.json")
    assert result.format == "vllm" and len(result.requests) > 500
    assert result.points[0].requests_completed == len(result.requests)


def test_percentile_nearest_rank():
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0 and percentile([1.0] * 5 + [9.0], 99) == 9.0


def test_the_load_benchmark_sets_up_its_world(db, capsys):
    """Its setup script imports the services where they live (it broke when the shells became folders)."""
    from benchmarks.perf.api_load import SETUP

    exec(compile(SETUP, "api_load.SETUP", "exec"), {})  # the benchmark's own script
    candidate, token = capsys.readouterr().out.split()[-2:]
    assert candidate.isdigit() and token.startswith("kvs_")
