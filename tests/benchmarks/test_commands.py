import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from benchmarks.models import BenchmarkRun
from benchmarks.traces.synthetic import synthetic_requests, write_trace
from selection.candidates.services import add_candidate

FIXTURES = Path(__file__).parent / "formats" / "fixtures"


def test_validate_writes_the_native_format_that_ingest_accepts(
    mock_engine, tmp_path, selection_with_constraints, architect, engines
):
    out = tmp_path / "result.json"
    call_command(
        "validate",
        "--endpoint",
        mock_engine.url,
        "--model",
        "mock",
        "--test",
        "concurrency_stress",
        "--concurrency",
        "4",
        "--duration",
        "1",
        "--param",
        "settle_s=0.2",
        "--param",
        "warmup_s=0",
        "--out",
        str(out),
        verbosity=0,
    )
    document = json.loads(out.read_text())
    assert document["schema"] == "kvselect.result/1" and document["evidence"] == "MEASURED"
    candidate = add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0"},
    )
    call_command("ingest", str(out), "--candidate", str(candidate.pk), "--test", "concurrency_stress")
    run = BenchmarkRun.objects.get()
    assert run.format == "native" and run.points.get().requests_completed > 0


@pytest.mark.reliability
def test_validate_refuses_targets_outside_the_allow_list():
    with pytest.raises(CommandError, match="--endpoint"):
        call_command("validate", "--endpoint", "http://169.254.169.254", "--model", "m", "--test", "stability")


def test_ingest_names_the_bad_option(selection_with_constraints, architect, engines, tmp_path):
    with pytest.raises(CommandError, match="FILE: .* does not exist"):
        call_command("ingest", str(tmp_path / "x.json"), "--candidate", "999", "--test", "custom")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(CommandError, match="--candidate"):
        call_command("ingest", str(tmp_path / "x.json"), "--candidate", "999", "--test", "custom")


def _small_trace(path):
    frame = synthetic_requests(24, rate=40.0, seed=3, idle_mean_s=0.05, tenants=0, long_share=0.0)
    frame["input_tokens"] = frame["input_tokens"].clip(upper=300)
    frame["output_tokens"] = frame["output_tokens"].clip(upper=8)
    frame["prefix_tokens"] = frame["prefix_tokens"].clip(upper=100)
    frame["e2e_ms"] = 50.0
    return write_trace(path, frame, "kvselect-csv")


def test_validate_trace_replays_it_and_ingest_accepts_the_result(
    mock_engine, tmp_path, selection_with_constraints, architect, engines, capsys
):
    trace, out = _small_trace(tmp_path / "trace.csv"), tmp_path / "replay.json"
    call_command(
        "validate",
        "--endpoint",
        mock_engine.url,
        "--model",
        "mock",
        "--trace",
        str(trace),
        "--speedup",
        "2",
        "--sample",
        "20",
        "--out",
        str(out),
    )
    document = json.loads(out.read_text())
    assert document["test"] == "trace_replay" and document["metadata"]["replay"]["requests"] == 20
    assert document["points"][0]["label"] == "all" and document["metadata"]["send_lateness_ms_p99"] is not None
    assert "send lateness p99" in capsys.readouterr().err
    candidate = add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0"},
    )
    call_command("ingest", str(out), "--candidate", str(candidate.pk), "--test", "trace_replay")
    assert BenchmarkRun.objects.get().test == "trace_replay"


def test_validate_with_a_test_and_a_trace_takes_the_traces_lengths(mock_engine, tmp_path):
    trace, out = _small_trace(tmp_path / "trace.csv"), tmp_path / "stress.json"
    call_command(
        "validate",
        *("--endpoint", mock_engine.url, "--model", "mock", "--test", "concurrency_stress"),
        *("--trace", str(trace), "--concurrency", "2", "--duration", "0.5", "--param", "settle_s=0.2"),
        *("--param", "warmup_s=0", "--param", "abort_fraction=0", "--out", str(out)),
        verbosity=0,
    )
    document = json.loads(out.read_text())
    assert document["metadata"]["lengths"]["format"] == "kvselect"
    assert max(document["requests"]["prompt_tokens"]) > 0


def test_validate_trace_options_name_the_problem(tmp_path):
    endpoint = ("--endpoint", "http://127.0.0.1:9", "--model", "m")
    with pytest.raises(CommandError, match="--test: required"):
        call_command("validate", *endpoint)
    with pytest.raises(CommandError, match="--trace: .* no such file"):
        call_command("validate", *endpoint, "--trace", str(tmp_path / "none.csv"))
    trace = _small_trace(tmp_path / "trace.csv")
    with pytest.raises(CommandError, match="--sample: must be a positive"):
        call_command("validate", *endpoint, "--trace", str(trace), "--sample", "0")
    with pytest.raises(CommandError, match="--trace: long_context keeps its own request shapes"):
        call_command("validate", *endpoint, "--trace", str(trace), "--test", "long_context")


def test_validate_runs_the_overload_test_and_the_stress_open_loop(mock_engine, tmp_path):
    out = tmp_path / "overload.json"
    call_command(
        "validate",
        *("--endpoint", mock_engine.url, "--model", "mock", "--test", "overload", "--concurrency", "2"),
        *("--duration", "0.4", "--param", "step_factors=[1, 2]", "--param", "recovery_s=0.4"),
        *("--param", "input_distribution=null", "--param", "output_distribution=null", "--out", str(out)),
        verbosity=0,
    )
    document = json.loads(out.read_text())
    assert document["test"] == "overload" and [p["extra"]["level"] for p in document["points"]] == [2.0, 4.0, 2.0]
    assert {v["name"] for v in document["verdicts"]} >= {"sustainable_load_meets_target", "recovered_within_bound"}
    assert document["metadata"]["observed"]["line"]
    stress = tmp_path / "stress.json"
    call_command(
        "validate",
        *("--endpoint", mock_engine.url, "--model", "mock", "--test", "concurrency_stress", "--rate", "20"),
        *("--duration", "0.5", "--param", "settle_s=0.2", "--param", "warmup_s=0", "--out", str(stress)),
        verbosity=0,
    )
    point = json.loads(stress.read_text())["points"][0]
    assert point["request_rate"] == 20.0 and point["label"] == "20 req/s"
    with pytest.raises(CommandError, match="--rate: long_context has no open-loop mode"):
        call_command("validate", "--endpoint", mock_engine.url, "--model", "m", "--test", "long_context", "--rate", "2")


def test_validate_max_context_ends_the_ladder_and_kv_capacity_applies(mock_engine, tmp_path):
    out = tmp_path / "ladder.json"
    call_command(
        "validate",
        *("--endpoint", mock_engine.url, "--model", "mock", "--test", "long_context"),
        *("--max-context", "3000", "--kv-capacity-tokens", "65536", "--param", "with_background=false"),
        *("--out", str(out)),
        verbosity=0,
    )
    document = json.loads(out.read_text())
    params = document["metadata"]["params"]
    assert params["rungs"] == [750, 1500, 3000] and params["required_tokens"] == 3000
    assert params["kv_capacity_tokens"] == 65536
    assert document["metadata"]["largest_successful_rung"] == 3000
    endpoint = ("--endpoint", "http://127.0.0.1:9", "--model", "m")
    with pytest.raises(CommandError, match="--max-context: applies to --test long_context only"):
        call_command("validate", *endpoint, "--test", "stability", "--max-context", "4096")


def test_validate_runs_on_the_receive_clock_asked_for(mock_engine, tmp_path):
    out = tmp_path / "user.json"
    call_command(
        "validate",
        *("--endpoint", mock_engine.url, "--model", "mock", "--test", "concurrency_stress", "--concurrency", "2"),
        *("--duration", "0.5", "--param", "settle_s=0.2", "--param", "warmup_s=0", "--receive-clock", "user"),
        *("--out", str(out)),
        verbosity=0,
    )
    metadata = json.loads(out.read_text())["metadata"]
    assert metadata["target"]["receive_clock"] == "user"
    assert metadata["client_clock"]["receive_clock"] == "user space"
    assert metadata["client_clock"]["reads"] is None  # not counted on this clock: missing, never 0
    with pytest.raises(CommandError, match="receive-clock"):
        call_command("validate", "--endpoint", mock_engine.url, "--model", "m", "--receive-clock", "wall")


def test_validate_refuses_a_shared_flag_the_test_does_not_take():
    endpoint = ("--endpoint", "http://127.0.0.1:9", "--model", "m")
    with pytest.raises(CommandError, match=r"--duration: prefix_reuse has no duration setting \(its flags: "):
        call_command("validate", *endpoint, "--test", "prefix_reuse", "--duration", "5")
    with pytest.raises(CommandError, match="--kv-capacity-tokens: isolation has no KV capacity setting"):
        call_command("validate", *endpoint, "--test", "isolation", "--kv-capacity-tokens", "1000")
