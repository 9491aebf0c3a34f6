"""`validate --test prefix_reuse --prefix-off-endpoint URL`: the same load on a caching-off engine."""

import json

import pytest
from django.core.management import CommandError, call_command

from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.server import ServerThread

PARAMS = (
    "--param",
    "requests=32",
    "--param",
    "concurrency=8",
    "--param",
    "prefix_tokens=512",
    "--param",
    "suffix_tokens=64",
    "--param",
    "output_tokens=32",
    "--param",
    "sample_interval_s=0.05",
    "--param",
    "kv_capacity_tokens=32000",  # the simulator's 2000 blocks of 16: its usage ratio becomes tokens
)


def config(**changes) -> SimConfig:
    return SimConfig(**{"num_blocks": 2000, "max_model_len": 8192, "time_scale": 3.0, **changes})


def test_validate_runs_prefix_reuse_on_and_off_endpoints(tmp_path):
    out = tmp_path / "prefix.json"
    with ServerThread(config()) as on, ServerThread(config(prefix_caching=False)) as off:
        call_command(
            "validate",
            "--endpoint",
            on.url,
            "--model",
            "kvsim",
            "--test",
            "prefix_reuse",
            "--engine",
            "simulator",
            "--prefix-off-endpoint",
            off.url,
            *PARAMS,
            "--out",
            str(out),
            verbosity=0,
        )
    document = json.loads(out.read_text())
    verdicts = {v["name"]: v for v in document["verdicts"]}
    assert verdicts["kv_below_prefix_off"]["status"] == "pass", verdicts["kv_below_prefix_off"]["detail"]
    assert [p["label"] for p in document["points"]] == ["prefix_on", "prefix_off"]
    assert document["metadata"]["off_target"]["endpoint_url"] == off.url
    assert document["metadata"]["observed"]["memory_saving_basis"] == "measured_off"
    assert document["evidence"] == "SIMULATED"


def test_validate_prefix_off_flags_name_the_problem():
    endpoint = ("--endpoint", "http://127.0.0.1:9", "--model", "m")
    with pytest.raises(CommandError, match="--prefix-off-endpoint: only the prefix_reuse test"):
        call_command("validate", *endpoint, "--test", "stability", "--prefix-off-endpoint", "http://127.0.0.1:10")
    with pytest.raises(CommandError, match="--prefix-off-endpoint: .*allowed"):
        call_command("validate", *endpoint, "--test", "prefix_reuse", "--prefix-off-endpoint", "http://169.254.169.254")
    with pytest.raises(CommandError, match="--prefix-off-metrics-url: give --prefix-off-endpoint"):
        call_command("validate", *endpoint, "--test", "prefix_reuse", "--prefix-off-metrics-url", "http://127.0.0.1:1")
