"""The simulator runs production traces offline: every format, scaled ("what if 2x the traffic"), with
the trace's own prefix sharing. Everything it returns is SIMULATED."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.offline import TraceError, load_trace, simulate
from benchmarks.traces.synthetic import FORMAT_NAMES, synthetic_requests, write_trace

SUFFIX = {"kvselect-csv": ".csv", "kvselect-jsonl": ".jsonl", "mooncake": ".jsonl", "azure": ".csv", "burstgpt": ".csv"}


@pytest.fixture(scope="module")
def frame():
    return synthetic_requests(300, rate=4.0, seed=5, long_share=0.0, idle_mean_s=5.0)


def config() -> SimConfig:
    return SimConfig(num_blocks=6000, max_model_len=16384)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_every_trace_format_runs_offline_and_is_simulated(frame, fmt, tmp_path):
    path = write_trace(tmp_path / f"trace{SUFFIX[fmt]}", frame, fmt)
    records = load_trace(path)
    assert len(records) == len(frame)
    result = simulate(records, config())
    assert result.evidence == "SIMULATED"
    assert result.points[0].requests_completed + result.points[0].requests_failed == len(frame)


def test_twice_the_traffic_arrives_in_half_the_time(frame, tmp_path):
    path = write_trace(tmp_path / "trace.csv", frame, "azure")
    normal, doubled = load_trace(path), load_trace(path, speedup=2.0)
    assert doubled[-1].arrival_s == pytest.approx(normal[-1].arrival_s / 2)
    busy = simulate(doubled, config()).points[0].extra["peak_running"]
    assert busy >= simulate(normal, config()).points[0].extra["peak_running"]


def test_mooncake_hash_ids_become_shared_blocks(tmp_path):
    path = tmp_path / "m.jsonl"
    lines = [
        {"timestamp": i * 2000, "input_length": 2048, "output_length": 4, "hash_ids": [0, 1, 2, 3 + i]}
        for i in range(10)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    extra = simulate(load_trace(path), config()).points[0].extra
    assert extra["prefix_cache_hit_rate"] > 0.5  # 3 of every 4 blocks repeat the first request's


def test_sample_keeps_the_first_requests_and_bad_traces_name_the_line(frame, tmp_path):
    path = write_trace(tmp_path / "trace.csv", frame, "burstgpt")
    assert len(load_trace(path, sample=25)) == 25
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": -5}\n')
    with pytest.raises(TraceError, match="line 2: input_length"):
        load_trace(bad)


def test_simulate_command_takes_the_format_speedup_and_sample(frame, tmp_path):
    path, out = write_trace(tmp_path / "trace.jsonl", frame, "mooncake"), tmp_path / "result.json"
    stdout = io.StringIO()
    call_command(
        "simulate",
        *("--trace", str(path), "--format", "mooncake", "--speedup", "2", "--sample", "100"),
        *("--num-blocks", "6000", "--max-model-len", "16384", "--out", str(out)),
        stdout=stdout,
    )
    summary = json.loads(stdout.getvalue())
    assert summary["evidence"] == "SIMULATED" and summary["speedup"] == 2.0 and summary["requests"] == 100
    assert json.loads(out.read_text())["metadata"]["trace"]["format"] == "mooncake"
