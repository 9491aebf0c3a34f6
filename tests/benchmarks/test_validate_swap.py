import json

from django.core.management import call_command

from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.server import ServerThread


def test_validate_swap_recovery_sizes_its_pressure_from_the_given_capacity(tmp_path, settings):
    settings.KVSELECT_ALLOWED_TARGETS = ["127.0.0.1"]
    config = SimConfig(
        profile="paged-offload",
        num_blocks=500,
        max_model_len=4096,
        prefill_tokens_per_s=4000.0,
        weight_bytes=1_000_000_000,
        time_scale=4.0,
        offload_after_s=1000.0,
    )
    out = tmp_path / "swap.json"
    with ServerThread(config) as server:
        call_command(
            "validate",
            "--endpoint",
            server.url,
            "--model",
            "kvsim",
            "--test",
            "swap_recovery",
            "--engine",
            "simulator",
            "--kv-capacity-tokens",
            "9000",
            *("--param", "history_tokens=256", "--param", "turn_input_tokens=64", "--param", "output_tokens=16"),
            *("--param", "sessions=20", "--param", "warm_sessions=20", "--param", "idle_s=0.2"),
            *("--param", "pressure_concurrency=8", "--param", "settle_s=2"),
            "--out",
            str(out),
            verbosity=0,
        )
    document = json.loads(out.read_text())
    sizing = document["metadata"]["sizing"]
    assert sizing["kv_capacity_tokens"] == 9000 and sizing["kv_capacity_source"] == "params.kv_capacity_tokens"
    assert sizing["kv_capacity_stated"] == 8000
    verdicts = {v["name"]: v["status"] for v in document["verdicts"]}
    assert verdicts["eviction_exercised"] == "pass" and verdicts["continuation_identical"] == "pass"
    assert document["evidence"] == "SIMULATED"
