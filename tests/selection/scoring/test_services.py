"""Scoring through the database: runs -> evidence -> Score snapshot -> API."""

import pytest
from rest_framework.test import APIClient

from benchmarks.models import BenchmarkRun, RunPoint
from selection.candidates.services import add_candidate
from selection.scoring.evidence import documented_features, evidence_for
from selection.scoring.services import compute_scores
from selection.setup.services import accept_scenario, set_gates


@pytest.fixture
def candidates(selection_with_constraints, architect, engines):
    made = []
    for slug in ("vllm", "sglang", "llama-cpp"):
        made.append(
            add_candidate(
                selection=selection_with_constraints,
                user=architect,
                data={"engine": engines[slug], "engine_version": engines[slug].versions[0], "gpu_count": 2},
            )
        )
    return made


def add_run(candidate, evidence="MEASURED", ttft_p95=400.0, error_rate=0.0, derived=None):
    run = BenchmarkRun.objects.create(
        candidate=candidate,
        test="concurrency_stress",
        origin="upload",
        status="succeeded",
        evidence=evidence,
        metadata={"derived": derived or {}},
    )
    RunPoint.objects.create(
        run=run,
        index=0,
        concurrency=200,
        achieved_concurrency=190,
        ttft_ms={"p95": ttft_p95},
        tpot_ms={"p95": 30.0},
        error_rate=error_rate,
        output_token_throughput=4000.0,
        slo_attainment=0.95,
    )
    return run


def test_documented_features_come_from_the_catalog(candidates):
    vllm = documented_features(candidates[0])
    assert vllm.allocation_strategy == "paged" and vllm.prefix_cache == "hash"
    assert "kv_usage" in vllm.metrics_exported and "prefix_hit_rate" in vllm.metrics_exported
    assert documented_features(candidates[2]).allocation_strategy == "static"


def test_measured_metrics_from_the_point_at_target_concurrency(candidates):
    run = add_run(candidates[0], derived={"kv_headroom_at_target": 0.25})
    metrics = evidence_for(candidates[0].selection, [candidates[0]])[0].metrics
    assert metrics["ttft_p95_ms"].value == 400.0 and metrics["ttft_p95_ms"].run_ids == (str(run.pk),)
    assert metrics["achieved_concurrency"].value == 190
    assert metrics["output_tokens_per_s_per_gpu"].value == pytest.approx(4000 * 0.95 / 2)
    assert metrics["cost_per_mtok"].value == pytest.approx(2 * 2.5 / (3800 * 3600) * 1e6)
    assert metrics["kv_headroom_at_target"].value == 0.25


def test_simulated_evidence_is_excluded_from_the_final_scoring(candidates):
    add_run(candidates[0], evidence="SIMULATED")
    final = compute_scores(candidates[0].selection, include_simulated=False)
    with_sim = compute_scores(candidates[0].selection, include_simulated=True)
    assert final.signable is True and with_sim.signable is False
    vllm_final = next(c for c in final.result["candidates"] if c["candidate"] == str(candidates[0].pk))
    vllm_sim = next(c for c in with_sim.result["candidates"] if c["candidate"] == str(candidates[0].pk))
    assert vllm_sim["total"] > vllm_final["total"]


def test_a_score_is_stored_once_per_inputs(candidates):
    add_run(candidates[1])
    first = compute_scores(candidates[0].selection)
    assert compute_scores(candidates[0].selection).pk == first.pk
    add_run(candidates[1], ttft_p95=2000.0)
    assert compute_scores(candidates[0].selection).pk != first.pk


def test_scores_api_returns_the_breakdown(candidates, architect):
    add_run(candidates[0])
    client = APIClient()
    client.force_authenticate(architect)
    response = client.get(f"/api/v1/selections/{candidates[0].selection_id}/scores/")
    assert response.status_code == 200
    body = response.json()
    assert body["result"]["rules_version"].startswith("kvselect-scoring/")
    assert {c["candidate"] for c in body["result"]["candidates"]} == {str(c.pk) for c in candidates}
    assert body["result"]["sentences"]


def test_dashboard_shows_leader_coverage_and_next_step(client, candidates, architect):
    selection = candidates[0].selection
    accept_scenario(selection=selection, user=architect)
    set_gates(selection=selection, user=architect, gates={"memory": 0.1})
    add_run(candidates[0])
    compute_scores(selection)
    client.force_login(architect)
    body = client.get("/").content.decode()
    assert "Leading candidate" in body and "Compare and decide" in body
    assert (
        candidates[0].display_name in body or candidates[1].display_name in body or candidates[2].display_name in body
    )


def test_a_client_bound_point_gives_no_achieved_concurrency(candidates):
    run = add_run(candidates[0])
    RunPoint.objects.filter(run=run).update(client_bound=True)  # the client held 190 of 200, not the engine
    metrics = evidence_for(candidates[0].selection, [candidates[0]])[0].metrics
    assert "achieved_concurrency" not in metrics and metrics["ttft_p95_ms"].value == 400.0
