"""Validation runs through the database: plan, claim, execute against a real HTTP engine, cancel, reap."""

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from rest_framework.test import APIClient

from benchmarks import tasks
from benchmarks.models import BenchmarkRun
from benchmarks.validation import worker
from benchmarks.validation.dispatch import ValidationError, request_cancel, start_validation
from benchmarks.validation.engine import EngineUnavailable, LaunchedEngine, healthy
from benchmarks.validation.plan import plan_for, validation_plan
from benchmarks.validation.worker import HardwareBusy, claim, execute, finish_failed
from selection.candidates.services import add_candidate
from selection.models import Candidate
from tests.support.builders import SHORT_STRESS as SHORT
from tests.support.builders import mock_engine_candidate


@pytest.fixture
def candidate(selection_with_constraints, architect, engines, mock_engine):
    return mock_engine_candidate(
        selection_with_constraints, architect, engines["vllm"], mock_engine.url, api_key="sk-test"
    )


def test_plan_derives_parameters_from_constraints(candidate):
    plan = validation_plan(candidate)
    assert set(plan) == {
        "concurrency_stress",
        "long_context",
        "swap_recovery",
        "prefix_reuse",
        "stability",
        "overload",
        "model_switch",
        "isolation",
    }
    assert plan["overload"]["target_concurrency"] == 200 and max(plan["overload"]["step_factors"]) == 3.0
    assert plan["concurrency_stress"]["concurrency"] == 200
    assert plan["concurrency_stress"]["ttft_p95_ms"] == 800.0


def test_prefix_plan_converts_kv_usage_with_the_measured_or_planned_capacity(candidate):
    """The prefix test turns the engine's KV usage ratio into tokens: with the capacity the engine
    logged when there is one, else the capacity model's prediction for the candidate."""
    from selection.capacity.plans import plan_for_candidate

    planned = plan_for(candidate, "prefix_reuse")["kv_capacity_tokens"]
    assert planned == plan_for_candidate(candidate)["token_capacity"] > 0
    candidate.measured_capacity = {"token_capacity": 123_456}
    candidate.save(update_fields=["measured_capacity"])
    assert plan_for(candidate, "prefix_reuse")["kv_capacity_tokens"] == 123_456
    assert plan_for(candidate, "long_context")["kv_capacity_tokens"] == 123_456  # its KV per request
    assert "kv_capacity_tokens" not in plan_for(candidate, "stability")


def test_swap_plan_sizes_its_pressure_from_the_measured_or_planned_capacity(candidate):
    """The swap test pushes more than the KV pool through while the idle sessions wait: it needs
    the candidate's capacity, measured when the engine logged it, else the capacity model's."""
    from selection.capacity.plans import plan_for_candidate

    assert plan_for(candidate, "swap_recovery")["kv_capacity_tokens"] == plan_for_candidate(candidate)["token_capacity"]
    candidate.measured_capacity = {"token_capacity": 222_222}
    candidate.save(update_fields=["measured_capacity"])
    assert plan_for(candidate, "swap_recovery")["kv_capacity_tokens"] == 222_222


def test_isolation_plan_sends_priority_when_the_launch_flags_turn_it_on(candidate):
    """vLLM documents priority scheduling, but only --scheduling-policy priority turns it on: without
    the flag the engine refuses a request's priority field, so the test must not send it."""
    assert plan_for(candidate, "isolation")["use_priority"] is False
    candidate.launch_flags = "--max-num-seqs 256 --scheduling-policy priority"
    candidate.save(update_fields=["launch_flags"])
    assert plan_for(candidate, "isolation")["use_priority"] is True
    assert plan_for(candidate, "model_switch")["switch_endpoint"] == ""  # the architect gives the new version's


def test_a_run_is_claimed_once(candidate, architect):
    run = start_validation(candidate=candidate, test="concurrency_stress", user=architect, params=SHORT)
    assert claim(run.pk, "w1") is not None
    assert claim(run.pk, "w2") is None  # a live worker owns it
    BenchmarkRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    reclaimed = claim(run.pk, "w3")
    assert reclaimed is not None and reclaimed.attempt == 2 and reclaimed.worker == "w3"


@pytest.mark.django_db(transaction=True)
def test_execute_stores_a_measured_result_with_progress(candidate, architect):
    run = start_validation(candidate=candidate, test="concurrency_stress", user=architect, params=SHORT)
    run = execute(claim(run.pk, "w1"))
    assert run.status == "succeeded", run.error
    assert run.evidence == "MEASURED" and run.tool == "kvselect-harness"
    point = run.points.get(index=0)  # the whole load; then one point per traffic group drawn
    assert point.requests_completed > 0 and point.ttft_ms["p50"] is not None
    assert {p.label for p in run.points.exclude(index=0)} <= {"short", "long"}
    assert run.progress["percent"] == 100
    assert run.artifacts.filter(kind="native").exists()
    # what the engine ran as and on, asked before the load; a remote engine's GPUs are never the client's
    host = run.metadata["engine_host"]
    assert host["identity"]["gpu"] is None and host["findings"] == [] and host["at"]


def execute_now(candidate, user, test, params):
    return execute(claim(start_validation(candidate=candidate, test=test, user=user, params=params).pk, "w1"))


def test_the_worker_runs_model_switch_and_isolation(candidate, architect, mock_engine):
    """Both new tests through the worker: a switch to a second endpoint (here the same engine) and
    back, and two tenants; a model switch against a real engine without a second endpoint fails
    naming the parameter (kvselect runs no switch command)."""
    switch = plan_for(candidate, "model_switch") | {
        "concurrency": 2,
        "before_s": 0.5,
        "switched_s": 0.5,
        "after_s": 0.5,
        "input_tokens": 16,
        "prefix_tokens": 8,
        "output_tokens": 4,
    }
    run = execute_now(candidate, architect, "model_switch", switch)
    assert run.status == "failed" and "params.switch_endpoint" in run.error
    switch["switch_endpoint"] = mock_engine.url
    run = execute_now(candidate, architect, "model_switch", switch)
    assert run.status == "succeeded", run.error
    assert [p.label for p in run.points.order_by("index")] == ["before", "switched", "rolled_back"]
    assert run.metadata["observed"]["line"].startswith("switch by endpoint pair")
    isolation = plan_for(candidate, "isolation") | {
        "alone_s": 0.5,
        "flood_lead_s": 0.2,
        "flood_s": 0.5,
        "tenant_a_rate": 10.0,
        "tenant_b_input_tokens": 256,
    }
    run = execute_now(candidate, architect, "isolation", isolation)
    assert run.status == "succeeded", run.error
    assert run.metadata["isolation"]["scheduling"] == "fcfs" and any(v["name"] == "flood_held" for v in run.verdicts)


def test_cancel_of_a_queued_run_is_immediate(candidate, architect):
    run = start_validation(candidate=candidate, test="concurrency_stress", user=architect, params=SHORT)
    run = request_cancel(run, architect)
    assert run.status == "cancelled"
    assert claim(run.pk, "w1") is None


def test_reviewer_cannot_start_runs(candidate, reviewer):
    with pytest.raises(PermissionDenied):
        start_validation(candidate=candidate, test="concurrency_stress", user=reviewer)


@pytest.mark.reliability
@pytest.mark.parametrize("url", ["http://10.1.2.3:8000", "http://169.254.169.254/latest", "http://example.com:80"])
def test_endpoints_outside_the_allow_list_are_refused_before_any_connection(
    selection_with_constraints, architect, engines, url
):
    data = {"engine": engines["vllm"], "engine_version": "0.11.0", "endpoint_url": url}
    with pytest.raises(DjangoValidationError) as refused:  # refused at the door, when saved
        add_candidate(selection=selection_with_constraints, user=architect, data=data)
    assert "endpoint_url" in refused.value.message_dict
    # ... and again before a run, for a candidate saved before the allow-list changed
    candidate = Candidate.objects.create(selection=selection_with_constraints, **data)
    with pytest.raises(ValidationError, match="endpoint_url"):
        start_validation(candidate=candidate, test="concurrency_stress", user=architect)
    assert not BenchmarkRun.objects.exists()


@pytest.mark.reliability
def test_reaper_fails_runs_whose_worker_stopped(candidate, architect):
    run = start_validation(candidate=candidate, test="concurrency_stress", user=architect, params=SHORT)
    claim(run.pk, "w1")
    assert tasks.reap_stale_runs() == []
    BenchmarkRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert tasks.reap_stale_runs() == [run.pk]
    run.refresh_from_db()
    assert run.status == "failed" and "worker lost" in run.error


@pytest.mark.django_db(transaction=True)
def test_api_key_is_never_in_the_result(candidate, architect):
    run = start_validation(candidate=candidate, test="concurrency_stress", user=architect, params=SHORT)
    run = execute(claim(run.pk, "w1"))
    client = APIClient()
    client.force_authenticate(architect)
    assert "sk-test" not in client.get(f"/api/v1/runs/{run.pk}/").content.decode()


def test_validation_api_plans_starts_and_cancels(candidate, architect, reviewer):
    client = APIClient()
    client.force_authenticate(architect)
    url = f"/api/v1/candidates/{candidate.pk}/validations/"
    assert "prefix_reuse" in client.get(url).json()
    response = client.post(url, {"test": "concurrency_stress", "params": SHORT}, format="json")
    assert response.status_code == 202, response.json()
    run_id = response.json()["id"]
    assert client.post(url, {"test": "warp_speed"}, format="json").status_code == 400
    other = APIClient()
    other.force_authenticate(reviewer)
    assert other.post(f"/api/v1/runs/{run_id}/cancel/").status_code == 403
    response = client.post(f"/api/v1/runs/{run_id}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"


def test_two_tests_never_load_the_same_engine_at_once(candidate, architect):
    first = start_validation(candidate=candidate, test="concurrency_stress", user=architect, params=SHORT)
    second = start_validation(candidate=candidate, test="prefix_reuse", user=architect)
    assert claim(first.pk, "w1") is not None
    with pytest.raises(HardwareBusy):
        claim(second.pk, "w2")
    BenchmarkRun.objects.filter(pk=first.pk).update(status="succeeded")
    assert claim(second.pk, "w2") is not None


def test_derived_scoring_metrics_from_harness_output(candidate):
    from selection.scoring.evidence import derived_from_run

    run = BenchmarkRun.objects.create(
        candidate=candidate,
        test="prefix_reuse",
        origin="harness",
        status="succeeded",
        params={"prefix_tokens": 750, "suffix_tokens": 250},
    )
    from benchmarks.models import RunPoint

    # a hit ratio alone is no memory saving (the scoring reads the measured footprint)
    RunPoint.objects.create(run=run, index=0, label="prefix_on", extra={"prefix_hit_ratio": 0.6})
    assert derived_from_run(run) == {}
    run.points.all().delete()
    on = {"kv_tokens_peak": 2000, "own_allocation_tokens": 8000, "shared_once_tokens": 1000, "prefix_hit_ratio": 0.9}
    RunPoint.objects.create(run=run, index=0, label="prefix_on", extra=on)
    # no off run: against the theory, (1 - 2000/8000) / (1 - 1000/8000)
    assert derived_from_run(run) == {"prefix_saving_ratio": pytest.approx(0.75 / 0.875)}
    RunPoint.objects.create(run=run, index=1, label="prefix_off", extra={"kv_tokens_peak": 4000})
    assert derived_from_run(run) == {"prefix_saving_ratio": pytest.approx(0.5 / 0.875)}
    stability = BenchmarkRun.objects.create(
        candidate=candidate,
        test="stability",
        origin="harness",
        status="succeeded",
        verdicts=[{"name": "ttft_p99_drift", "passed": True, "value": 12.0}],
    )
    assert derived_from_run(stability) == {"soak_drift_p99_ratio": pytest.approx(1.12)}
    # a p99 drift from too few requests has no value: no scoring metric, never a stand-in
    too_few = BenchmarkRun.objects.create(
        candidate=candidate,
        test="stability",
        origin="harness",
        status="succeeded",
        verdicts=[{"name": "ttft_p99_drift", "status": "insufficient_data", "passed": None, "value": None, "n": 12}],
    )
    assert derived_from_run(too_few) == {}
    ladder = BenchmarkRun.objects.create(
        candidate=candidate,
        test="long_context",
        origin="harness",
        status="succeeded",
        metadata={"largest_successful_rung": 32768, "required_tokens": 32768},
    )
    assert derived_from_run(ladder) == {"max_context_rung_reached": 32768.0}


FAKE_ENGINE = """
import sys, http.server, json
print("INFO 11-29 [kv_cache_utils.py:1087] GPU KV cache size: 91,056 tokens", flush=True)
print("INFO 11-29 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 tokens per request: 11.12x", flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.mark.django_db(transaction=True)
def test_launch_recipe_starts_the_engine_keeps_its_log_and_records_measured_capacity(candidate, tmp_path, monkeypatch):
    import socket
    import sys

    script = tmp_path / "fake_engine.py"
    script.write_text(FAKE_ENGINE)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    candidate.launch_recipe = f"{sys.executable} {script} {port}"
    candidate.endpoint_url = f"http://127.0.0.1:{port}"
    candidate.save()
    seen = {}

    def fake_run(run, cand, reporter, launched=False):
        seen["healthy"] = healthy(cand.endpoint_url)
        seen["launched"] = launched  # its NVML reads the engine host's GPUs
        return finish_failed(run, "stopped after the launch check")

    monkeypatch.setattr(worker, "_execute_against_engine", fake_run)
    run = BenchmarkRun.objects.create(
        candidate=candidate, test="concurrency_stress", origin="harness", status="running", params=SHORT
    )
    run = execute(run)
    assert seen["healthy"] is True and seen["launched"] is True
    log = run.artifacts.get(kind="engine_log")
    assert b"GPU KV cache size: 91,056 tokens" in log.file.open("rb").read()
    candidate.refresh_from_db()
    assert candidate.measured_capacity["token_capacity"] == 91056
    assert candidate.measured_capacity["predicted_token_capacity"] > 0
    assert not healthy(candidate.endpoint_url)  # the engine was stopped


def test_a_recipe_that_exits_early_is_reported(candidate, tmp_path):
    import sys

    engine = LaunchedEngine(
        f"{sys.executable} -c \"print('boom'); raise SystemExit(3)\"", "http://127.0.0.1:9", startup_timeout_s=10
    )
    with pytest.raises(EngineUnavailable, match="status 3.*boom"):
        engine.__enter__()
