"""Scoring through the database: runs -> evidence -> Score snapshot -> API."""

import json

import pytest
from django.utils import translation
from rest_framework.test import APIClient

from benchmarks.models import BenchmarkRun, RunPoint
from selection.candidates.services import add_candidate
from selection.domain import headline
from selection.domain.messages import render
from selection.i18n import message_text
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
    url = f"/api/v1/selections/{candidates[0].selection_id}/scores/"
    missing = client.get(url)  # a GET only reads: adding the candidates queued a scoring that has not run yet
    assert missing.status_code == 404 and missing.json()["recomputing"] is True
    assert "being computed" in missing.json()["detail"]
    assert client.post(url).status_code == 200
    response = client.get(url)
    assert response.status_code == 200
    body = response.json()
    assert body["current"] is True and body["recomputing"] is False
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


def bind(run, achieved=91.0, late_reads_ms=None):
    """Mark the run's load points client-bound as the harness does: the load not held (91 of 200 in
    flight), or held with reads stamped up to `late_reads_ms` late."""
    for point in run.points.all():
        point.client_bound = True
        point.achieved_concurrency = achieved
        reason = f"held {achieved:g} requests in flight on average, 200 requested"
        if late_reads_ms is not None:
            reason = f"their TTFT/ITL are stamped late, by up to {late_reads_ms:g} ms"
            point.extra = {**(point.extra or {}), "late_read_max_ms": late_reads_ms}
        point.extra = {**(point.extra or {}), "client_bound_reasons": [reason]}
        point.save(update_fields=["client_bound", "achieved_concurrency", "extra"])
    return run


def test_a_client_bound_point_is_held_out_of_the_scoring_with_its_reason(candidates):
    """TTFT/TPOT p95, throughput, cost and the sustainable concurrency of a run whose client could not
    keep the load were scored as the engine's (only achieved concurrency was dropped)."""
    run = bind(add_run(candidates[0], derived={"kv_headroom_at_target": 0.25}))
    evidence = evidence_for(candidates[0].selection, [candidates[0]])[0]
    for name in ("ttft_p95_ms", "tpot_p95_ms", "achieved_concurrency", "output_tokens_per_s_per_gpu"):
        assert name not in evidence.metrics
        # the test by its title, not its id; the reason as a message a Chinese page renders in Chinese
        assert str(evidence.held_out[name]).startswith(f"client-bound (Concurrency stress run {run.pk}, ")
        assert "held 91 requests in flight on average, 200 requested" in str(evidence.held_out[name])
        with translation.override("zh-hans"):
            assert message_text(evidence.held_out[name]).startswith(f"受客户端限制（并发压力 运行 {run.pk}，")
    assert "kv_headroom_at_target" not in evidence.metrics and "kv_headroom_at_target" in evidence.held_out
    result = compute_scores(candidates[0].selection).result
    vllm = next(c for c in result["candidates"] if c["candidate"] == str(candidates[0].pk))
    ttft = next(
        i for i in vllm["criteria"]["concurrency_control"]["indicators"] if i["indicator"] == "ttft_p95_vs_budget"
    )
    assert ttft["status"] == "missing" and ttft["reason"].startswith("ttft_p95_ms held out: client-bound")
    held = [render(s) for s in result["sentences"] if "held out of the scoring" in render(s)]
    # the figures by name, in words (the keys' order: achieved_concurrency first)
    assert len(held) == 1 and held[0].startswith(f"{candidates[0].display_name}: Concurrency held, ")
    assert "Error rate" not in held[0] and "achieved_concurrency" not in held[0]


@pytest.mark.parametrize("error_rate", [0.0, 0.4])
def test_the_error_rate_is_never_held_out_for_client_lag(candidates, error_rate):
    """A late client changes when it reads an answer, never whether the engine failed the request: a
    client-bound run's error rate is scored as measured (a clean one and a failing one), with its run."""
    run = bind(add_run(candidates[0], error_rate=error_rate))
    evidence = evidence_for(candidates[0].selection, [candidates[0]])[0]
    assert "error_rate" not in evidence.held_out
    metric = evidence.metrics["error_rate"]
    assert metric.value == error_rate and metric.run_ids == (str(run.pk),) and not metric.client_bound
    result = compute_scores(candidates[0].selection).result
    vllm = next(c for c in result["candidates"] if c["candidate"] == str(candidates[0].pk))
    indicators = [
        i for c in vllm["criteria"].values() for i in c.get("indicators", []) if i["indicator"] == "error_rate"
    ]
    assert indicators and all(i["status"] != "missing" for i in indicators), indicators


def test_a_client_that_held_the_load_but_read_late_scores_latencies_with_its_lateness_as_the_interval(candidates):
    """The load was held (190 of 200 in flight), reads were stamped up to 300 ms late: throughput,
    errors and the concurrency are the engine's; the TTFT p95 of 900 ms is at most 300 ms too long."""
    bind(add_run(candidates[0], ttft_p95=900.0), achieved=190.0, late_reads_ms=300.0)
    evidence = evidence_for(candidates[0].selection, [candidates[0]])[0]
    ttft = evidence.metrics["ttft_p95_ms"]
    assert ttft.value == 900.0 and ttft.interval == (600.0, 900.0) and "stamped late" in str(ttft.client_bound)
    assert evidence.metrics["achieved_concurrency"].value == 190.0 and not evidence.metrics["error_rate"].client_bound
    assert not evidence.held_out
    sentences = [render(s) for s in compute_scores(candidates[0].selection).result["sentences"]]
    # the figure by its name, not its key
    assert any(": TPOT p95, TTFT p95 scored with the client's lateness in their interval" in s for s in sentences), (
        sentences
    )
    assert not any("ttft_p95_ms" in s for s in sentences)


@pytest.mark.parametrize("bound_values", [dict(ttft_p95=50.0), dict(ttft_p95=9000.0)])
def test_a_client_bound_run_cannot_flip_the_winner(candidates, bound_values):
    """The issue's demo: a stress run flagged client-bound still scored throughput, cost, TTFT/TPOT
    p95 as the engine's. A newer run whose client did not hold the load, good or bad, on either
    candidate changes nothing: its timing figures come from the newest run the client did not bind
    (its error rate, which the client's pace cannot change, is the same here)."""
    selection = candidates[0].selection
    add_run(candidates[0], ttft_p95=400.0)
    older = add_run(candidates[1], ttft_p95=1400.0)
    before = compute_scores(selection).result
    assert before["winner"] == str(candidates[0].pk)
    for candidate in candidates[:2]:
        bind(add_run(candidate, **bound_values))
        after = compute_scores(selection).result
        assert after["winner"] == before["winner"] and after["ranking"] == before["ranking"]
        assert [c["total"] for c in after["candidates"]] == [c["total"] for c in before["candidates"]]
    sglang = evidence_for(selection, [candidates[1]])[0]
    assert sglang.metrics["ttft_p95_ms"].run_ids == (str(older.pk),)
    assert not set(sglang.held_out) & set(sglang.metrics)  # held out: only what no clean run measured


def test_a_late_reading_client_can_make_the_decision_inconclusive_but_never_pick_another_winner(candidates):
    """A run whose client held the load but read up to 8.7 s late measured vLLM's TTFT p95 at 9 s: the
    decision either stays vLLM, becomes inconclusive or a tie; SGLang is never the clear winner."""
    selection = candidates[0].selection
    add_run(candidates[0], ttft_p95=400.0)
    add_run(candidates[1], ttft_p95=700.0)
    assert headline.decision_headline(compute_scores(selection).result)["leader"]["candidate"] == str(candidates[0].pk)
    bind(add_run(candidates[0], ttft_p95=9000.0), achieved=190.0, late_reads_ms=8700.0)
    after = headline.decision_headline(compute_scores(selection).result)
    # vLLM stays, or the lead is inside the client's lateness: inconclusive, or a tie that names nobody
    if after["verdict"] == headline.TIE:
        assert after["leader"] is None and str(candidates[0].pk) in [c["candidate"] for c in after["tied"]]
    else:
        assert after["leader"]["candidate"] == str(candidates[0].pk) or after["verdict"] == headline.INCONCLUSIVE


def test_the_same_evidence_gives_the_same_snapshot_bit_for_bit(candidates):
    add_run(candidates[0], ttft_p95=400.0)
    add_run(candidates[1], ttft_p95=450.0)
    selection = candidates[0].selection
    first = compute_scores(selection)
    first.delete()
    second = compute_scores(selection)
    assert second.inputs_hash == first.inputs_hash
    assert json.dumps(second.result, sort_keys=True) == json.dumps(first.result, sort_keys=True)
    assert second.result["sensitivity"]["noise"]["first_share"] == first.result["sensitivity"]["noise"]["first_share"]


def test_re_runs_of_a_test_widen_the_interval_to_their_values(candidates):
    """The robustness section draws the measurements within their intervals: a re-run of the same
    test (same parameters) that measured another TTFT p95 widens that interval to span it."""
    first = add_run(candidates[0], ttft_p95=380.0)
    BenchmarkRun.objects.filter(pk=first.pk).update(params={"concurrency": 200})
    latest = add_run(candidates[0], ttft_p95=400.0)
    BenchmarkRun.objects.filter(pk=latest.pk).update(params={"concurrency": 200})
    other = add_run(candidates[0], ttft_p95=100.0)  # different parameters: not a re-run of the same test
    BenchmarkRun.objects.filter(pk=other.pk).update(params={"concurrency": 8})
    BenchmarkRun.objects.filter(pk=other.pk).update(created_at=first.created_at)
    ttft = evidence_for(candidates[0].selection, [candidates[0]])[0].metrics["ttft_p95_ms"]
    assert ttft.value == 400.0 and ttft.run_ids == (str(latest.pk),)
    assert ttft.interval == (380.0, 400.0) and ttft.reruns == (str(first.pk),)


def test_a_context_ladder_that_reached_the_longest_input_scores_full_marks(candidates):
    """The ladder's rungs are inputs: reaching max_input_tokens (4,096) meets the requirement; the
    maximum output is not added to it (it was: 4,096 / 5,120 scored 0.733, the demo's 0.96)."""
    BenchmarkRun.objects.create(
        candidate=candidates[0],
        test="long_context",
        origin="upload",
        status="succeeded",
        evidence="MEASURED",
        metadata={"largest_successful_rung": 4096},
    )
    result = compute_scores(candidates[0].selection).result
    vllm = next(c for c in result["candidates"] if c["candidate"] == str(candidates[0].pk))
    indicators = vllm["criteria"]["context_extension"]["indicators"]
    reached = next(i for i in indicators if i["indicator"] == "context_reached_vs_required")
    assert reached["inputs"]["required_context"] == 4096 and reached["score"] == 1.0


def swap_run(candidate, ttft_p50, metadata=None, verdicts=None):
    """A swap-out run: one point per phase (the swap test of the validation-tests overhaul labels
    them turn1, warm, resume, never_swap, recompute) with its TTFT p50."""
    run = BenchmarkRun.objects.create(
        candidate=candidate,
        test="swap_recovery",
        origin="harness",
        status="succeeded",
        evidence="MEASURED",
        metadata=metadata or {},
        verdicts=verdicts or [],
    )
    for index, (label, p50) in enumerate(ttft_p50.items()):
        RunPoint.objects.create(run=run, index=index, label=label, concurrency=8, ttft_ms={"p50": p50})
    return run


def test_the_swap_score_divides_by_the_recompute_of_the_same_history(candidates):
    """A resumed session's TTFT is compared with recomputing that history, as the rule says; it
    was divided by the first turn's TTFT (a shorter prompt): 300 / 100 = 3.0 scored 0."""
    phases = {"turn1": 100.0, "warm": 120.0, "resume": 300.0, "recompute": 600.0}
    figures = {
        "warm_ttft_ms": {"n": 8, "p50": 120.0},
        "resume_ttft_ms": {"n": 8, "p50": 300.0},
        "recompute_ttft_ms": {"n": 8, "p50": 600.0},
    }
    eviction = {"observed": True, "evidence": ["12 preemptions"]}
    swap_run(candidates[0], phases, {"resume": figures, "eviction": eviction})
    metrics = evidence_for(candidates[0].selection, [candidates[0]])[0].metrics
    assert metrics["swap_resume_ttft_ratio"].value == pytest.approx(0.5)
    # the points alone (an upload in the native format) give the same ratio
    swap_run(candidates[1], phases, verdicts=[{"name": "eviction_exercised", "status": "pass", "passed": True}])
    metrics = evidence_for(candidates[1].selection, [candidates[1]])[0].metrics
    assert metrics["swap_resume_ttft_ratio"].value == pytest.approx(0.5)
    result = compute_scores(candidates[0].selection).result
    vllm = next(c for c in result["candidates"] if c["candidate"] == str(candidates[0].pk))
    indicators = vllm["criteria"]["cache_persistence"]["indicators"]
    ratio = next(i for i in indicators if i["indicator"] == "swap_resume_ttft_ratio")
    assert ratio["score"] == pytest.approx((1.0 - 0.5) / 0.8)


def test_no_recompute_or_no_eviction_leaves_the_swap_score_missing(candidates):
    swap_run(candidates[0], {"turn1": 100.0, "resume": 300.0})  # no recompute measured: no stand-in
    not_evicted = {"resume": {"resume_ttft_ms": {"p50": 300.0}, "recompute_ttft_ms": {"p50": 600.0}}}
    swap_run(candidates[1], {"resume": 300.0, "recompute": 600.0}, {**not_evicted, "eviction": {"observed": False}})
    swap_run(
        candidates[2],
        {"resume": 300.0, "recompute": 600.0},
        verdicts=[{"name": "eviction_exercised", "status": "not exercised", "passed": None}],
    )
    for candidate in candidates:
        metrics = evidence_for(candidate.selection, [candidate])[0].metrics
        assert "swap_resume_ttft_ratio" not in metrics
    # the harness's own figure (metadata["derived"]) is used as it wrote it
    run = swap_run(candidates[0], {"resume": 300.0, "recompute": 600.0}, {"derived": {"swap_resume_ttft_ratio": 0.4}})
    ratio = evidence_for(candidates[0].selection, [candidates[0]])[0].metrics["swap_resume_ttft_ratio"]
    assert ratio.value == 0.4 and ratio.run_ids == (str(run.pk),)


def test_scheduling_isolation_reads_the_catalogs_admission_limits_and_the_overload_test(candidates):
    """Only "priority" was ever mapped, so no engine could score above 1/3; the catalog now states
    admission limits and fair scheduling, and the overload test confirms or refutes the limit."""
    vllm, sglang, llama = (documented_features(c) for c in candidates)
    assert vllm.scheduling_features == ("priority", "admission_limit")  # fair: documented as absent
    assert llama.scheduling_features == ("admission_limit",)  # -np slots; priority and fair unknown
    assert "vllm/config/scheduler.py" in vllm.sources["scheduling_features"]

    def isolation(candidate):
        result = compute_scores(candidate.selection).result
        scored = next(c for c in result["candidates"] if c["candidate"] == str(candidate.pk))
        rows = scored["criteria"]["concurrency_control"]["indicators"]
        return next(i for i in rows if i["indicator"] == "scheduling_isolation")

    assert isolation(candidates[0])["score"] == pytest.approx(2 / 3)
    # the overload test (validation-tests overhaul, branch issue15) saw an OOM past the sustainable load
    overload = BenchmarkRun.objects.create(
        candidate=candidates[0],
        test="overload",
        origin="harness",
        status="succeeded",
        evidence="MEASURED",
        metadata={
            "derived": {"sustainable_concurrency": 48, "overload_handling": 0.0},
            "past_sustainable": ["oom"],
        },
    )
    refuted = isolation(candidates[0])
    assert refuted["score"] == pytest.approx(1 / 3) and refuted["run_ids"] == [str(overload.pk)]
    assert refuted["inputs"]["admission_limit"].startswith("failed in the overload test")


def test_the_overload_test_gives_the_sustainable_concurrency_and_the_overload_handling(candidates):
    add_run(candidates[0])  # a one-level stress at 200: within budget, but only one level
    overload = BenchmarkRun.objects.create(
        candidate=candidates[0],
        test="overload",
        origin="harness",
        status="succeeded",
        evidence="MEASURED",
        metadata={"overload": {"mode": "closed", "sustainable": 48.0, "behaviour": "queueing", "handling_level": 0.7}},
    )
    metrics = evidence_for(candidates[0].selection, [candidates[0]])[0].metrics
    sustainable = metrics["sustainable_concurrency_per_gpu"]
    assert sustainable.value == 24.0 and sustainable.run_ids == (str(overload.pk),)  # 48 on 2 GPUs
    assert metrics["overload_handling"].value == 0.7
    open_loop = BenchmarkRun.objects.create(
        candidate=candidates[1],
        test="overload",
        origin="harness",
        status="succeeded",
        evidence="MEASURED",
        metadata={"overload": {"mode": "open", "sustainable": 12.0, "behaviour": None, "handling_level": None}},
    )
    RunPoint.objects.create(
        run=open_loop, index=0, label="↑ 12 req/s", achieved_concurrency=30.0, extra={"direction": "up", "level": 12.0}
    )
    metrics = evidence_for(candidates[1].selection, [candidates[1]])[0].metrics
    assert metrics["sustainable_concurrency_per_gpu"].value == 15.0  # held 30 at the sustainable rate
    assert "overload_handling" not in metrics  # never pushed past it: nothing observed


def test_idle_release_share_is_the_share_of_idle_sessions_seen_evicted(candidates):
    """The swap test counts the idle sessions whose cached tokens fell on resume; nothing is
    derived when it observed no eviction, or only an offload (no per-session count)."""
    evicted = {"observed": True, "evicted_sessions": 15, "sessions": 20}
    swap_run(candidates[0], {"resume": 300.0, "recompute": 600.0}, {"eviction": evicted})
    metrics = evidence_for(candidates[0].selection, [candidates[0]])[0].metrics
    assert metrics["idle_release_share"].value == pytest.approx(0.75)
    swap_run(candidates[1], {"resume": 300.0}, {"eviction": {**evicted, "observed": False}})
    swap_run(
        candidates[2], {"resume": 300.0}, {"eviction": {"observed": True, "evicted_sessions": None, "sessions": 20}}
    )
    for candidate in candidates[1:]:
        assert "idle_release_share" not in evidence_for(candidate.selection, [candidate])[0].metrics
    # an offloading engine's run from before sessions were counted as offloaded: the KV went to the CPU
    # tier and came back with the cached tokens intact, so no session's fell; that is no count of zero
    offloaded = {"observed": True, "offloaded": True, "evicted_sessions": 0, "sessions": 20}
    swap_run(candidates[1], {"resume": 300.0, "recompute": 600.0}, {"eviction": offloaded})
    assert "idle_release_share" not in evidence_for(candidates[1].selection, [candidates[1]])[0].metrics
    swap_run(candidates[1], {"resume": 300.0, "recompute": 600.0}, {"eviction": {**offloaded, "offloaded": False}})
    assert evidence_for(candidates[1].selection, [candidates[1]])[0].metrics["idle_release_share"].value == 0.0


def test_a_figure_is_judged_on_the_points_it_is_read_from(candidates):
    """The isolation figure is tenant A's TTFT under tenant B's flood: a late client while tenant A ran
    alone says nothing of it; the same lateness during the flood (an open loop, more than 1 % of sends
    late: its rate not held) holds it out."""
    run = BenchmarkRun.objects.create(
        candidate=candidates[0],
        test="isolation",
        origin="harness",
        status="succeeded",
        evidence="MEASURED",
        metadata={"isolation": {"flood_exercised": True, "a_ttft_p95_flood_ms": 700.0}},
    )
    late = {"late_sends_fraction": 0.09, "client_bound_reasons": ["9% of sends were more than 10 ms behind schedule"]}
    alone = RunPoint.objects.create(
        run=run, index=0, label="tenant_a_alone", request_rate=4.0, client_bound=True, extra=late
    )
    RunPoint.objects.create(run=run, index=1, label="tenant_a_flood", request_rate=4.0, client_bound=False)
    evidence = evidence_for(candidates[0].selection, [candidates[0]])[0]
    assert evidence.metrics["isolation_ttft_p95_ms"].value == 700.0 and not evidence.held_out
    RunPoint.objects.filter(run=run).exclude(pk=alone.pk).update(client_bound=True, extra=late)
    evidence = evidence_for(candidates[0].selection, [candidates[0]])[0]
    assert "isolation_ttft_p95_ms" not in evidence.metrics
    assert str(evidence.held_out["isolation_ttft_p95_ms"]) == (
        f"client-bound (Tenant isolation run {run.pk}, tenant A under the flood: 9% of sends were more than 10 ms "
        "behind schedule)"
    )
