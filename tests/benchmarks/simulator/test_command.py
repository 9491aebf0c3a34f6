"""`manage.py simulate --trace FILE --out FILE` writes a SIMULATED native result."""

import io
import json

from django.core.management import call_command

from benchmarks.simulator.offline import TraceRecord, write_trace


def test_simulate_command_runs_a_trace_offline(tmp_path):
    trace, out = tmp_path / "trace.csv", tmp_path / "result.json"
    write_trace(trace, [TraceRecord(i * 0.1, 300, 20, prefix_id="sys", prefix_tokens=128) for i in range(10)])
    stdout = io.StringIO()
    call_command(
        "simulate",
        "--trace",
        str(trace),
        "--out",
        str(out),
        "--profile",
        "static",
        "--gpu",
        "A100-80G",
        "--num-blocks",
        "500",
        "--max-model-len",
        "2048",
        stdout=stdout,
    )
    summary = json.loads(stdout.getvalue())
    assert summary["evidence"] == "SIMULATED" and summary["requests_completed"] == 10
    document = json.loads(out.read_text())
    assert document["evidence"] == "SIMULATED"
    assert document["metadata"]["engine"] == "kvsim/static" and document["metadata"]["hardware"] == "A100-80G"


def _options(*argv):
    import argparse

    from benchmarks.simulator import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return vars(parser.parse_args(list(argv)))


def test_simulate_model_sizes_the_engine_from_the_shipped_config():
    from benchmarks.simulator import cli
    from selection.domain.capacity.plan import plan_for_model

    options = _options("--model", "Llama-3.1-70B", "--tp", "8")
    config = cli.config_from_options(options)
    plan = plan_for_model(
        "Llama-3.1-70B", gpu="H100-80GB", engine="vllm", block_size=16, tp=8, gpu_memory_utilization=0.9
    )
    assert config.kv_bytes_per_token == int(plan.kv_bytes_per_token_total) == 327_680  # 80 layers x 8 KV heads
    assert config.total_blocks == plan.num_blocks
    said = cli.describe_serving(config, options)
    assert "sized from the shipped config Llama-3.1-70B (TP 8" in said
    assert "model name to send (the candidate's Model name): kvsim-Llama-3.1-70B" in said
    fp8 = cli.config_from_options(_options("--model", "Llama-3.1-70B", "--tp", "8", "--kv-dtype", "fp8"))
    assert fp8.kv_bytes_per_token == config.kv_bytes_per_token // 2


def test_simulate_model_refuses_what_it_cannot_size():
    import pytest

    from benchmarks.simulator import cli
    from benchmarks.simulator.config import SimConfigError

    with pytest.raises(SimConfigError, match="not a shipped model config"):
        cli.config_from_options(_options("--model", "my-own-model"))
    with pytest.raises(SimConfigError, match="give a larger --tp"):
        cli.config_from_options(_options("--model", "Llama-3.1-70B"))
    custom = cli.config_from_options(_options("--model", "my-own-model", "--kv-bytes-per-token", "65536"))
    assert custom.kv_bytes_per_token == 65536 and custom.served_model_name == "kvsim-my-own-model"


def test_the_overload_knob_is_a_flag():
    from benchmarks.simulator import cli

    assert cli.config_from_options(_options("--oom-without-admission", "crash")).oom_without_admission == "crash"
    assert cli.config_from_options(_options()).oom_without_admission is None


def test_simulate_no_prefix_caching_flag_starts_the_caching_off_variant():
    from benchmarks.simulator import cli

    assert cli.config_from_options(_options()).prefix_caching_on
    off = cli.config_from_options(_options("--no-prefix-caching", "--profile", "radix"))
    assert off.prefix_caching is False and not off.prefix_caching_on
