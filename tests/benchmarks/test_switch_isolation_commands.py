"""`validate --test model_switch --switch-endpoint URL` and `validate --test isolation --priority`
against the simulator, and the results ingested as runs of those tests."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from benchmarks.models import BenchmarkRun
from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.server import ServerThread
from selection.candidates.services import add_candidate

SIM = dict(time_scale=4.0, gpu_memory_utilization=0.22)


def test_validate_model_switch_moves_the_load_to_the_second_endpoint_and_ingest_stores_it(
    tmp_path, selection_with_constraints, architect, engines
):
    out = tmp_path / "switch.json"
    with ServerThread(SimConfig(**SIM)) as current, ServerThread(SimConfig(**SIM)) as new:
        call_command(
            "validate",
            *("--endpoint", current.url, "--model", "m", "--engine", "vllm", "--test", "model_switch"),
            *("--switch-endpoint", new.url, "--concurrency", "2"),
            *("--param", "before_s=0.8", "--param", "switched_s=0.8", "--param", "after_s=0.8"),
            *("--param", "input_tokens=64", "--param", "prefix_tokens=32", "--param", "output_tokens=4"),
            *("--out", str(out)),
            verbosity=0,
        )
        served_by_new = new.server.engine.stats["prompt_tokens"]
    document = json.loads(out.read_text())
    assert document["test"] == "model_switch" and served_by_new > 0  # the load moved to the new endpoint
    switch = document["metadata"]["switch"]
    assert switch["mode"] == "endpoint" and switch["switch_endpoint"] == new.url and switch["timeline"]
    assert document["metadata"]["observed"]["line"].startswith("switch by endpoint pair")
    candidate = add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0"},
    )
    call_command("ingest", str(out), "--candidate", str(candidate.pk), "--test", "model_switch")
    run = BenchmarkRun.objects.get()
    assert run.test == "model_switch" and [p.label for p in run.points.order_by("index")] == [
        "before",
        "switched",
        "rolled_back",
    ]


def test_validate_isolation_sends_the_priority_field_only_when_asked(tmp_path):
    out = tmp_path / "isolation.json"
    params = ("alone_s=0.5", "flood_lead_s=0.2", "flood_s=0.5", "tenant_b_input_tokens=2048", "tenant_a_rate=10")
    with ServerThread(SimConfig(**SIM)) as fcfs:  # refuses a priority field, as vLLM without the flag
        base = ("--endpoint", fcfs.url, "--model", "m", "--test", "isolation", "--out", str(out))
        call_command("validate", *base, *[a for p in params for a in ("--param", p)], verbosity=0)
        quiet = json.loads(out.read_text())
        call_command("validate", *base, "--priority", *[a for p in params for a in ("--param", p)], verbosity=0)
        refused = json.loads(out.read_text())
    assert quiet["metadata"]["isolation"]["scheduling"] == "fcfs"
    assert {v["name"]: v for v in quiet["verdicts"]}["zero_errors[tenant_a_flood]"]["status"] == "pass"
    # the fcfs engine refuses tenant B's priority field (A's is the default 0): no flood, so nothing
    # under it is a pass
    verdicts = {v["name"]: v for v in refused["verdicts"]}
    assert refused["metadata"]["isolation"]["b_requests_failed"] > 0
    assert verdicts["flood_held"]["status"] == "not_exercised"
    assert all(v["status"] != "pass" for name, v in verdicts.items() if name.endswith("[tenant_a_flood]"))


def test_validate_switch_and_priority_options_belong_to_their_tests():
    endpoint = ("--endpoint", "http://127.0.0.1:9", "--model", "m")
    with pytest.raises(CommandError, match="--switch-endpoint"):
        call_command("validate", *endpoint, "--test", "stability", "--switch-endpoint", "http://127.0.0.1:10")
    with pytest.raises(CommandError, match="--priority"):
        call_command("validate", *endpoint, "--test", "stability", "--priority")
    with pytest.raises(CommandError, match="--endpoint"):
        call_command("validate", *endpoint, "--test", "model_switch", "--switch-endpoint", "http://169.254.169.254")
