"""Scoring: hand-computed examples, the no-min-max property, gates, missing and SIMULATED
evidence, the tie-break, sensitivity against brute force, and a cross-check with pymcdm."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from selection.domain import headline
from selection.domain.scoring.aggregation import score_matrix
from selection.domain.scoring.base import (
    DIMENSION_OF,
    DIMENSIONS,
    GATE_CRITERIA,
    KV_METRIC_CATEGORIES,
    MEASURED,
    RULES_VERSION,
    SIMULATED,
    ScoringInputError,
)
from selection.domain.scoring.inputs import (
    CandidateEvidence,
    DocumentedFeatures,
    Metric,
    ScoringConstraints,
    ScoringOptions,
    cost_per_million_output_tokens,
    evidence_from_dict,
    sustainable_concurrency,
)
from selection.domain.scoring.mappings import MAPPINGS, mapping_table
from selection.domain.scoring.pipeline import score_candidates
from selection.domain.scoring.ranking import topsis
from selection.domain.scoring.sensitivity import analyse_sensitivity, nearest_tie, rank_acceptability, weights_with

CONS = ScoringConstraints(
    target_concurrency=64,
    ttft_p95_ms=1000,
    tpot_p95_ms=50,
    gpu_count_budget=8,
    cost_per_gpu_hour=3.0,
    team_size=2,
    max_context_tokens=32768,
    throughput_target_tok_s=2000,
)
FULL_DOC = DocumentedFeatures(
    allocation_strategy="paged",
    prefix_cache="radix",
    kv_cache_dtypes=("auto", "fp8_e4m3"),
    offload_tiers=("cpu", "disk"),
    scheduling_features=("priority", "admission_limit"),
    preemption_mode="recompute",
    metrics_exported=("kv_usage", "prefix_hit_rate", "preemptions", "queue_depth"),
    operating_complexity="medium",
    sources={"prefix_cache": "https://example.org/prefix"},
)
FULL_METRICS = dict(
    ttft_p95_ms=800.0,
    tpot_p95_ms=40.0,
    error_rate=0.01,
    isolation_ttft_p95_ms=500.0,
    achieved_concurrency=64.0,
    kv_headroom_at_target=0.15,
    soak_drift_p99_ratio=1.1,
    prefix_saving_ratio=0.55,
    max_context_rung_reached=16384.0,
    swap_resume_ttft_ratio=0.4,
    continuation_correct=1.0,
    idle_release_share=0.75,
    capacity_prediction_error=0.1,
    sustainable_concurrency_per_gpu=10.0,
    cost_per_mtok=0.0,
    output_tokens_per_s_per_gpu=250.0,
)


def metrics(values, evidence=MEASURED, run="run-1"):
    return {k: Metric(v, (run,), evidence) for k, v in values.items()}


def cand(cid, values, doc=FULL_DOC, evidence=MEASURED):
    return CandidateEvidence(cid, cid.upper(), metrics(values, evidence, run=f"run-{cid}"), doc)


def indicator(result, cid, criterion, name):
    return next(i for i in result.candidate(cid).criteria[criterion].indicators if i.indicator == name)


# ------------------------------------------------------------------ hand-computed examples


def test_every_indicator_is_scored_by_hand_from_full_evidence():
    values = dict(FULL_METRICS, cost_per_mtok=cost_per_million_output_tokens(2000, 8, 3.0) * 0.75)
    weights = {c: 1.0 for c in DIMENSION_OF}
    result = score_candidates("C", [cand("a", values)], CONS, weights)
    expected = {
        ("concurrency_control", "ttft_p95_vs_budget"): (1.5 - 0.8) / 1.0,  # 800/1000 = 0.8
        ("concurrency_control", "tpot_p95_vs_budget"): (1.5 - 0.8) / 1.0,
        ("concurrency_control", "error_rate"): (0.05 - 0.01) / 0.05,
        ("concurrency_control", "achieved_concurrency_ratio"): 1.0,
        ("concurrency_control", "scheduling_isolation"): 2 / 3,
        ("concurrency_control", "isolation_ttft_vs_budget"): 1.0,  # 500/1000 = 0.5
        ("memory_allocation", "kv_headroom_at_target"): 0.5,
        ("memory_allocation", "soak_drift_p99_ratio"): (1.5 - 1.1) / 0.45,
        ("memory_allocation", "allocation_strategy"): 1.0,
        ("cache_reuse", "prefix_saving_ratio"): 0.5,
        ("cache_reuse", "prefix_cache_kind"): 1.0,
        ("context_extension", "context_reached_vs_required"): (0.5 - 0.25) / 0.75,
        ("context_extension", "kv_quantisation"): 0.7,
        ("cache_persistence", "swap_resume_ttft_ratio"): 0.75,
        ("cache_persistence", "offload_tiers"): 1.0,
        ("cache_lifecycle", "idle_release_share"): 0.5,
        ("cache_lifecycle", "preemption_mode"): 0.5,
        ("session_recovery", "continuation_correct"): 1.0,
        ("cost_control", "sustainable_concurrency_vs_need"): (1.25 - 0.5) / 1.0,  # 10 / (64/8)
        ("cost_control", "cost_per_mtok_vs_reference"): (1.5 - 0.75) / 1.0,
        ("cost_control", "ops_complexity_vs_team"): 1.0,  # team 2 / needed 2
        ("throughput_unit_cost", "throughput_per_gpu_vs_need"): 0.5,  # 250 / (2000/8) = 1.0
        ("observability", "kv_metrics_exported"): 1.0,
        ("observability", "capacity_prediction_error"): (0.5 - 0.1) / 0.45,
    }
    assert {(r.criterion, r.indicator) for r in MAPPINGS} == set(expected)
    for (criterion, name), value in expected.items():
        got = indicator(result, "a", criterion, name)
        assert got.status == "ok", (name, got.reason)
        assert got.score == pytest.approx(value), name
    memory = result.candidate("a").criteria["memory_allocation"]
    assert memory.score == pytest.approx((2 * 0.5 + 2 * (0.4 / 0.45) + 1.0) / 5)
    assert memory.status == "complete" and memory.coverage == 1.0
    prefix = indicator(result, "a", "cache_reuse", "prefix_cache_kind")
    assert prefix.evidence == "DOCUMENTED" and prefix.sources == ["https://example.org/prefix"]
    assert indicator(result, "a", "cache_reuse", "prefix_saving_ratio").run_ids == ["run-a"]


def test_cost_per_million_output_tokens():
    # 8 GPUs x 3/h = 24 per hour; 2000 tok/s = 7.2M tokens per hour -> 3.333 per million
    assert cost_per_million_output_tokens(2000, 8, 3.0) == pytest.approx(24 / 7.2)
    with pytest.raises(ScoringInputError, match="goodput"):
        cost_per_million_output_tokens(0, 8, 3.0)


def test_scenario_d_relaxes_latency_bounds():
    values = {"ttft_p95_ms": 2000.0}  # twice the budget
    weights = {"concurrency_control": 1.0}
    a = indicator(
        score_candidates("A", [cand("x", values)], CONS, weights), "x", "concurrency_control", "ttft_p95_vs_budget"
    )
    d = indicator(
        score_candidates("D", [cand("x", values)], CONS, weights), "x", "concurrency_control", "ttft_p95_vs_budget"
    )
    assert a.score == 0.0
    assert d.score == pytest.approx((4.0 - 2.0) / 3.5)
    row = next(r for r in mapping_table("D") if r["indicator"] == "ttft_p95_vs_budget")
    assert (row["low"], row["high"]) == (0.5, 4.0) and ">= 4" in row["formula"]


# ------------------------------------------------------------------ fixed bounds vs min-max

REUSE_DOC = DocumentedFeatures(prefix_cache="hash")


def _minmax_ranking(raw, weights):
    """What a min-max-over-the-candidates scoring would rank first (test-only foil)."""
    names = list(raw)
    matrix = np.array([raw[n] for n in names], dtype=float)
    lo, hi = matrix.min(axis=0), matrix.max(axis=0)
    normalised = (matrix - lo) / np.where(hi > lo, hi - lo, 1.0)
    totals = normalised @ np.array(weights)
    return names[int(np.argmax(totals))]


def test_min_max_would_reverse_the_ranking_when_a_weak_candidate_joins_and_fixed_bounds_do_not():
    raw = {"x": (0.85, 0.96), "y": (0.60, 1.00), "z": (0.25, 0.50)}  # (prefix saving, continuation correct)
    w = (0.4, 0.6)
    assert _minmax_ranking({k: raw[k] for k in "xy"}, w) == "y"
    assert _minmax_ranking(raw, w) == "x"  # the weak z flips min-max

    def ours(names):
        evidence = [
            CandidateEvidence(
                n, n, metrics({"prefix_saving_ratio": raw[n][0], "continuation_correct": raw[n][1]}), REUSE_DOC
            )
            for n in names
        ]
        return score_candidates("C", evidence, CONS, {"cache_reuse": 0.4, "session_recovery": 0.6})

    two, three = ours("xy"), ours("xyz")
    # by hand: cache_reuse x = (2*(0.85-0.2)/0.7 + 0.9)/3, y = (2*0.4/0.7 + 0.9)/3; session x = 0.6, y = 1.0
    x_total = 0.4 * (2 * 0.65 / 0.7 + 0.9) / 3 + 0.6 * 0.6
    y_total = 0.4 * (2 * 0.40 / 0.7 + 0.9) / 3 + 0.6 * 1.0
    for result in (two, three):
        assert result.winner == "y"
        assert result.candidate("x").total == pytest.approx(x_total)
        assert result.candidate("y").total == pytest.approx(y_total)
    assert x_total == pytest.approx(0.727619, abs=1e-6) and y_total == pytest.approx(0.872381, abs=1e-6)


# ------------------------------------------------------------------ tie-break


def _obs_pair(margin):
    doc = DocumentedFeatures(prefix_cache="radix", metrics_exported=KV_METRIC_CATEGORIES)
    p = CandidateEvidence("p", "P", metrics({"prefix_saving_ratio": 0.9, "capacity_prediction_error": 0.275}), doc)
    q = CandidateEvidence("q", "Q", metrics({"prefix_saving_ratio": 0.5325, "capacity_prediction_error": 0.05}), doc)
    return score_candidates(
        "A", [p, q], CONS, {"cache_reuse": 1, "observability": 1}, options=ScoringOptions(tie_margin=margin)
    )


def test_a_lead_on_the_core_dimensions_decides_though_the_totals_are_close():
    """The article judges closeness on the core dimensions (scenario A: memory and scheduling): P leads
    on cache reuse by 0.35, so the totals' 0.008 difference is no tie and observability does not decide."""
    result = _obs_pair(0.02)
    p, q = result.candidate("p"), result.candidate("q")
    assert p.total == pytest.approx(0.5 * 1.0 + 0.5 * (1 + 2 * 0.5) / 3)  # 0.8333
    assert q.total == pytest.approx(0.5 * 0.65 + 0.5 * 1.0)  # 0.825
    assert result.core_dimensions == ["memory", "scheduling"]
    assert result.winner == "p" and result.ranking == ["p", "q"]
    assert result.tie_break["applied"] and result.tie_break["decided_by"] == "core"
    assert (
        "leads Q on the core dimensions (Memory allocation and reuse, Concurrency scheduling and isolation) by 0.350"
        in str(result.rests_on)
    )


def _core_tie(obs_q_error=0.05):
    """Level on the core (a memory gate: cache reuse equal), P far ahead on context extension (not core),
    Q better on observability."""
    doc = DocumentedFeatures(prefix_cache="radix", metrics_exported=KV_METRIC_CATEGORIES)
    p = CandidateEvidence(
        "p",
        "P",
        metrics({"prefix_saving_ratio": 0.9, "capacity_prediction_error": 0.275, "max_context_rung_reached": 32768.0}),
        doc,
    )
    q = CandidateEvidence(
        "q",
        "Q",
        metrics(
            {"prefix_saving_ratio": 0.9, "capacity_prediction_error": obs_q_error, "max_context_rung_reached": 4096.0}
        ),
        doc,
    )
    weights = {"cache_reuse": 1, "observability": 1, "context_extension": 1}
    return score_candidates("A", [p, q], CONS, weights, gates={"memory": 0.1})


def test_close_on_the_core_dimensions_observability_decides_even_against_a_lead_elsewhere():
    """The article's step 5: "when two candidates are close on the core dimensions, prefer the one with
    better observability and lower operating complexity" (issue 36 item 3)."""
    result = _core_tie()
    p, q = result.candidate("p"), result.candidate("q")
    assert p.total > q.total + 0.1 and result.weighted_sum_leader == "p"
    assert result.core_dimensions == ["memory"]
    assert result.winner == "q" and result.tie_break["decided_by"] == "observability"
    assert str(result.rests_on).startswith(
        "tie on the core dimensions (Memory allocation and reuse) between P, Q, decided by observability (Q"
    )
    assert any("Tie-break applied" in str(s) and "observability" in str(s) for s in result.sentences)


def test_outside_the_margin_the_weighted_sum_decides():
    result = _obs_pair(0.005)
    assert result.winner == "p" and not result.tie_break["applied"]


def test_equal_observability_falls_back_to_lower_operating_complexity():
    def doc(complexity):
        return DocumentedFeatures(prefix_cache="radix", operating_complexity=complexity)

    values = {"prefix_saving_ratio": 0.9}
    evidence = [
        CandidateEvidence("a-high", "A", metrics(values), doc("high")),
        CandidateEvidence("b-low", "B", metrics(values), doc("low")),
    ]
    result = score_candidates("A", evidence, CONS, {"cache_reuse": 1.0})
    assert result.winner == "b-low"
    assert result.tie_break["decided_by"] == "operating_complexity"


# ------------------------------------------------------------------ gates


def gate_candidates(threshold):
    strong = dict(
        FULL_METRICS,
        kv_headroom_at_target=0.0,
        soak_drift_p99_ratio=2.0,
        ttft_p95_ms=500.0,
        tpot_p95_ms=25.0,
        error_rate=0.0,
    )
    weak = dict(FULL_METRICS, prefix_saving_ratio=0.2)
    return score_candidates(
        "A",
        [cand("strong", strong), cand("weak", weak)],
        CONS,
        {"memory_allocation": 1, "cache_reuse": 1, "concurrency_control": 3},
        gates={"memory": threshold},
    )


def test_gate_failure_screens_out_but_keeps_the_candidate_in_the_comparison():
    result = gate_candidates(0.3)
    s, w = result.candidate("strong"), result.candidate("weak")
    # by hand: strong memory_allocation = (0 + 0 + 1) / 5, cache_reuse = (2 * 0.5 + 1) / 3
    assert s.dimensions["memory"].score == pytest.approx(0.5 * 0.2 + 0.5 * 2 / 3)
    assert w.dimensions["memory"].score == pytest.approx(0.5 * (2 * 0.5 + 2 * 0.4 / 0.45 + 1) / 5 + 0.5 * 1 / 3)
    assert s.total == pytest.approx(0.2 * 0.2 + 0.2 * 2 / 3 + 0.6 * (8 + 2 / 3 + 1.5) / 10.5)
    assert s.total > w.total  # higher total, but ...
    assert s.screened_out and not w.screened_out
    assert result.winner == "weak" and result.ranking == ["weak", "strong"]
    assert s.rank is None and s.screen_reasons == [s.gates[0].reason]  # a screened-out candidate is never ranked
    # the dimension (0.43) is above the gate, but its cache reuse cannot carry its allocation (0.20)
    assert str(s.screen_reasons[0]) == (
        "Memory allocation and reuse 0.43, but memory allocation strategy 0.20 < gate 0.30: "
        "one criterion's credit cannot carry another"
    )
    assert s.topsis is None  # TOPSIS is over the passing candidates only
    assert s.criteria["concurrency_control"].score is not None  # still fully scored for the comparison
    assert any("STRONG is screened out" in str(line) for line in result.sentences)


def test_a_dimension_below_its_gate_says_so():
    s = gate_candidates(0.5).candidate("strong")
    assert s.screened_out and str(s.screen_reasons[0]) == "Memory allocation and reuse 0.43 < gate 0.50"


def test_a_persistence_gate_cannot_pass_on_a_session_recovery_credit():
    """Issue 27: the persistence gate passed at 0.537 on session recovery's 1.000 while cache
    persistence itself scored 0 (no offload, resume as costly as a recompute)."""
    no_offload = replace(FULL_DOC, offload_tiers=())
    values = dict(FULL_METRICS, swap_resume_ttft_ratio=1.02, continuation_correct=1.0, idle_release_share=1.0)
    weights = {"cache_persistence": 3, "cache_lifecycle": 2, "session_recovery": 3}
    result = score_candidates("C", [cand("a", values, no_offload)], CONS, weights, gates={"persistence": 0.3})
    a = result.candidate("a")
    assert a.criteria["cache_persistence"].score == 0.0 and a.criteria["session_recovery"].score == 1.0
    assert a.dimensions["persistence"].score >= 0.3  # the credits would have carried it
    assert a.screened_out and result.winner is None
    assert "cache persistence 0.00 < gate 0.30" in str(a.screen_reasons[0])


def test_a_gate_fails_on_its_own_criterion_without_evidence():
    values = {k: v for k, v in FULL_METRICS.items() if k != "swap_resume_ttft_ratio"}
    undocumented = replace(FULL_DOC, offload_tiers=None)
    weights = {"cache_persistence": 1, "session_recovery": 1}
    a = score_candidates("C", [cand("a", values, undocumented)], CONS, weights, gates={"persistence": 0.2})
    a = a.candidate("a")
    assert a.criteria["cache_persistence"].score is None and a.dimensions["persistence"].score >= 0.2
    assert a.screened_out
    assert "cache persistence has no evidence (gate 0.20)" in str(a.screen_reasons[0])


def test_a_scenario_addition_adds_to_the_score_but_is_not_needed_on_its_own():
    """Cache lifecycle (idle sessions released) pulls against persistence (sessions kept): an engine
    that offloads and resumes cheaply passes a persistence gate with a low lifecycle score."""
    values = dict(FULL_METRICS, swap_resume_ttft_ratio=0.3, idle_release_share=0.0)
    weights = {"cache_persistence": 3, "cache_lifecycle": 3, "session_recovery": 3}
    a = score_candidates("C", [cand("a", values)], CONS, weights, gates={"persistence": 0.3}).candidate("a")
    assert a.criteria["cache_lifecycle"].score < 0.3 <= a.criteria["cache_persistence"].score
    assert not a.screened_out


def test_gate_on_a_dimension_without_evidence_fails_with_reason():
    result = score_candidates(
        "A", [cand("a", {})], CONS, {"cache_persistence": 1.0}, gates={"persistence": 0.1}, options=ScoringOptions()
    )
    a = result.candidate("a")
    # offload tiers are documented, so persistence has a (partial) score
    assert a.dimensions["persistence"].score == pytest.approx(1 / 3)
    empty = CandidateEvidence("e", "E")
    result = score_candidates("A", [empty], CONS, {"cache_persistence": 1.0}, gates={"persistence": 0.1})
    assert result.candidate("e").screened_out
    assert "no evidence" in str(result.candidate("e").screen_reasons[0])
    assert result.winner is None and str(result.sentences[0]) == "No candidate passes the gates."


# ------------------------------------------------------------------ missing and SIMULATED evidence


def test_missing_evidence_is_reported_and_never_rewards():
    weights = {"cache_reuse": 1.0, "session_recovery": 1.0}
    known = CandidateEvidence(
        "known", "K", metrics({"prefix_saving_ratio": 0.9, "continuation_correct": 0.93}), REUSE_DOC
    )
    missing = CandidateEvidence("missing", "M", metrics({"prefix_saving_ratio": 0.9}), REUSE_DOC)
    result = score_candidates("C", [known, missing], CONS, weights)
    k, m = result.candidate("known"), result.candidate("missing")
    rec = m.criteria["session_recovery"]
    assert rec.score is None and rec.score_upper is None and rec.status == "missing" and rec.coverage == 0.0
    assert rec.indicators[0].reason == "no evidence for continuation_correct"
    assert k.criteria["session_recovery"].score == pytest.approx(0.3)
    reuse = (2 * 1.0 + 0.9) / 3
    assert m.total == pytest.approx(0.5 * reuse)  # not renormalised to `reuse`
    assert k.total == pytest.approx(0.5 * reuse + 0.5 * 0.3)
    assert m.total < k.total < m.total_upper == pytest.approx(0.5 * reuse + 0.5)
    assert m.coverage == pytest.approx(0.5) and k.coverage == 1.0
    assert result.winner == "known"
    data = result.to_dict()
    assert data["candidates"][1]["criteria"]["session_recovery"]["score"] is None


def test_partial_criterion_reports_lower_and_upper_bounds():
    result = score_candidates("A", [cand("a", {"ttft_p95_ms": 800.0})], CONS, {"concurrency_control": 1.0})
    crit = result.candidate("a").criteria["concurrency_control"]
    assert crit.status == "partial"
    assert crit.score == pytest.approx((2 * 0.7 + 1 * 2 / 3) / 10.5)
    assert crit.score_upper == pytest.approx(crit.score + 7.5 / 10.5)
    assert crit.coverage == pytest.approx(3 / 10.5)
    assert "up to" in crit.explanation and "missing (no evidence for error_rate)" in crit.explanation


def test_missing_constraint_makes_the_indicator_missing_with_the_field_named():
    result = score_candidates(
        "A", [cand("a", {"ttft_p95_ms": 800.0})], ScoringConstraints(), {"concurrency_control": 1.0}
    )
    assert (
        indicator(result, "a", "concurrency_control", "ttft_p95_vs_budget").reason == "constraints.ttft_p95_ms not set"
    )


def test_simulated_evidence_is_excluded_from_a_final_scoring_unless_included():
    sim = cand("sim", {"prefix_saving_ratio": 0.9}, doc=REUSE_DOC, evidence=SIMULATED)
    final = score_candidates("A", [sim], CONS, {"cache_reuse": 1.0})
    ind = indicator(final, "sim", "cache_reuse", "prefix_saving_ratio")
    assert ind.status == "excluded_simulated" and ind.score is None and ind.evidence == SIMULATED
    assert final.candidate("sim").total == pytest.approx(0.9 / 3)
    assert final.final and final.signable and not final.candidate("sim").uses_simulated
    assert any("SIMULATED" in str(note) and "excluded" in str(note) for note in final.notes)

    draft = score_candidates("A", [sim], CONS, {"cache_reuse": 1.0}, options=ScoringOptions(include_simulated=True))
    ind = indicator(draft, "sim", "cache_reuse", "prefix_saving_ratio")
    assert ind.status == "ok" and ind.score == 1.0 and ind.evidence == SIMULATED
    assert draft.candidate("sim").total == pytest.approx((2 + 0.9) / 3)
    assert not draft.final and not draft.signable and draft.candidate("sim").uses_simulated
    assert "SIMULATED" in draft.candidate("sim").criteria["cache_reuse"].explanation


# ------------------------------------------------------------------ sensitivity against brute force


def _totals(matrix, weights):
    return matrix @ weights


def _scan_flip(matrix, weights, leader, k, direction, step=1e-4):
    """Brute force: walk w_k from its value in `direction` until someone strictly beats the leader."""
    grid = np.arange(weights[k], 1.0 + step / 2, step) if direction > 0 else np.arange(weights[k], -step / 2, -step)
    grid = np.clip(grid, 0.0, 1.0)
    # the documented rule, written out independently: w_k -> t, others scaled by (1 - t) / (1 - w_k)
    scaled = np.outer((1.0 - grid) / (1.0 - weights[k]), weights)
    scaled[:, k] = grid
    totals = scaled @ matrix.T
    beaten = np.delete(totals, leader, axis=1).max(axis=1) > totals[:, leader] + 1e-9
    return float(grid[int(np.argmax(beaten))]) if beaten.any() else None


def test_per_criterion_flip_thresholds_match_a_brute_force_scan():
    checked = 0
    for seed in range(6):
        checked += _check_flips_against_scan(seed)
    assert checked >= 6  # the random cases do contain flips, in both directions or not


def _check_flips_against_scan(seed):
    rng = np.random.default_rng(seed)
    matrix = rng.uniform(0, 1, size=(4, 5))
    weights = rng.dirichlet(np.ones(5))
    ids = ["c0", "c1", "c2", "c3"]
    analysis = analyse_sensitivity(
        matrix, weights, ids, list(DIMENSION_OF)[:5], ScoringOptions(acceptability_draws=100)
    )
    leader = ids.index(analysis["leader"])
    assert leader == int(np.argmax(matrix @ weights))
    checked = 0
    for k, entry in enumerate(analysis["per_criterion"]):
        for key, direction in (("rise", 1), ("fall", -1)):
            scanned = _scan_flip(matrix, weights, leader, k, direction)
            if entry[key] is None:
                assert scanned is None, (k, key, scanned)
            else:
                assert scanned is not None
                assert scanned == pytest.approx(entry[key]["to"], abs=2e-4)
                totals = matrix @ weights_with(weights, k, scanned)
                assert ids[int(np.argmax(totals))] == entry[key]["challenger"]
                checked += 1
    return checked


def test_flip_sentence_and_none_sentence():
    weights = np.array([0.5, 0.5])
    matrix = np.array([[0.9, 0.3], [0.5, 0.6]])  # vLLM 0.6 vs SGLang 0.55 at equal weights
    analysis = analyse_sensitivity(
        matrix,
        weights,
        ["vllm", "sglang"],
        ["cache_reuse", "cache_persistence"],
        ScoringOptions(acceptability_draws=1000),
        {"vllm": "vLLM", "sglang": "SGLang"},
    )
    # vLLM - SGLang at w_persistence = t: 0.4 (1 - t) - 0.3 t = 0 -> t = 4/7
    persistence = analysis["per_criterion"][1]
    assert persistence["rise"]["to"] == pytest.approx(4 / 7)
    assert str(persistence["sentence"]) == (
        "vLLM stays first unless the cache persistence weight rises by more than 0.07 (above 0.57, SGLang would lead)."
    )
    dominant = np.array([[0.9, 0.9], [0.5, 0.6]])
    analysis = analyse_sensitivity(
        dominant, weights, ["a", "b"], ["cache_reuse", "cache_persistence"], ScoringOptions(acceptability_draws=1000)
    )
    assert str(analysis["per_criterion"][0]["sentence"]) == "a stays first for any cache reuse weight in [0, 1]."
    assert analysis["nearest_ties"][0]["distance"] is None
    assert analysis["acceptability"]["first_share"] == {"a": 1.0, "b": 0.0}


def _grid_min_tie_distance(matrix, weights, leader, challenger, step=0.0025):
    d = matrix[leader] - matrix[challenger]
    best = math.inf
    for a in np.arange(0, 1 + step / 2, step):
        b = np.arange(0, 1 - a + step / 2, step)
        w = np.stack([np.full_like(b, a), b, np.clip(1 - a - b, 0, None)], axis=1)
        ok = w @ d <= 0
        if ok.any():
            best = min(best, float(np.linalg.norm(w[ok] - weights, axis=1).min()))
    return best


@pytest.mark.parametrize("seed", range(5))
def test_nearest_tie_is_the_smallest_l2_move_on_the_simplex(seed):
    rng = np.random.default_rng(100 + seed)
    matrix = rng.uniform(0, 1, size=(2, 3))
    weights = rng.dirichlet(np.ones(3) * 0.7)
    leader = int(np.argmax(matrix @ weights))
    challenger = 1 - leader
    tie = nearest_tie(matrix, weights, leader, challenger)
    brute = _grid_min_tie_distance(matrix, weights, leader, challenger)
    if tie is None:
        assert brute == math.inf
        return
    new = tie["weights"]
    assert new.sum() == pytest.approx(1.0) and (new >= -1e-12).all()
    assert new @ (matrix[leader] - matrix[challenger]) == pytest.approx(0.0, abs=1e-9)
    assert tie["distance"] <= brute + 1e-9  # nothing on the grid is closer
    assert tie["distance"] == pytest.approx(brute, abs=0.01)  # and the grid gets as close


@pytest.mark.parametrize("seed", range(8))
def test_nearest_tie_matches_a_numerical_optimiser_in_more_dimensions(seed):
    from scipy.optimize import minimize  # a pymcdm dependency, test-only here

    rng = np.random.default_rng(200 + seed)
    matrix = rng.uniform(0, 1, size=(2, 6))
    weights = rng.dirichlet(np.ones(6) * 0.5)
    leader = int(np.argmax(matrix @ weights))
    d = matrix[leader] - matrix[1 - leader]
    tie = nearest_tie(matrix, weights, leader, 1 - leader)
    if tie is None:
        assert (d >= 0).all()
        return
    best = minimize(
        lambda x: float(np.sum((x - weights) ** 2)),
        np.full(6, 1 / 6),
        method="SLSQP",
        bounds=[(0, 1)] * 6,
        constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1}, {"type": "eq", "fun": lambda x: x @ d}],
        options={"ftol": 1e-14, "maxiter": 500},
    )
    assert best.success
    assert tie["distance"] == pytest.approx(math.sqrt(best.fun), abs=1e-5)


def test_nearest_tie_closed_form_and_active_set():
    matrix = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5]])
    weights = np.array([0.6, 0.3, 0.1])
    tie = nearest_tie(matrix, weights, 0, 1)
    # d = (1, -1, 0); d~ = d; gap = 0.3; |delta| = 0.3 / sqrt(2); delta = (-0.15, +0.15, 0)
    assert tie["distance"] == pytest.approx(0.3 / math.sqrt(2))
    assert tie["delta"] == pytest.approx([-0.15, 0.15, 0.0])
    # here the unconstrained move would push the third weight negative
    matrix = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    weights = np.array([0.2, 0.7, 0.1])
    leader, challenger = 1, 0  # totals: 0.3 vs 0.7
    tie = nearest_tie(matrix, weights, leader, challenger)
    assert (tie["weights"] >= 0).all() and tie["weights"] @ (matrix[1] - matrix[0]) == pytest.approx(0)
    assert tie["distance"] == pytest.approx(_grid_min_tie_distance(matrix, weights, leader, challenger), abs=0.01)


def test_rank_acceptability_is_reproducible_and_sums_to_one():
    rng = np.random.default_rng(7)
    matrix = rng.uniform(0, 1, size=(3, 4))
    weights = np.array([0.4, 0.3, 0.2, 0.1])
    first = rank_acceptability(matrix, weights, 10_000, 0.3, 42)
    again = rank_acceptability(matrix, weights, 10_000, 0.3, 42)
    assert (first == again).all() and first.sum() == pytest.approx(1.0)
    still = rank_acceptability(matrix, weights, 500, 0.0, 42)
    assert still[int(np.argmax(matrix @ weights))] == 1.0
    with pytest.raises(ScoringInputError, match="acceptability_spread"):
        rank_acceptability(matrix, weights, 10, 1.5, 42)


# ------------------------------------------------------------------ cross-check with pymcdm


def _three_candidates():
    a = dict(FULL_METRICS)
    b = dict(FULL_METRICS, prefix_saving_ratio=0.85, ttft_p95_ms=1200.0, swap_resume_ttft_ratio=0.3)
    c = dict(FULL_METRICS, kv_headroom_at_target=0.28, error_rate=0.03, capacity_prediction_error=0.3)
    doc_c = DocumentedFeatures(**{**FULL_DOC.__dict__, "prefix_cache": "hash", "offload_tiers": ()})
    return [cand("a", a), cand("b", b), cand("c", c, doc=doc_c)]


@pytest.mark.filterwarnings("ignore:Alternatives with indices")  # the full-marks and zero rows, on purpose
def test_weighted_sum_and_topsis_match_pymcdm():
    """TOPSIS on the fixed scale: pymcdm's TOPSIS without normalisation over the candidates plus a row
    of full marks and a row of zeros (which make its set-relative ideal and anti-ideal 1 and 0)."""
    from pymcdm.methods import TOPSIS, WSM

    weights = {
        "memory_allocation": 3,
        "cache_reuse": 3,
        "concurrency_control": 3,
        "context_extension": 2,
        "cache_persistence": 1,
        "observability": 2,
        "cost_control": 3,
    }
    result = score_candidates("A", _three_candidates(), CONS, weights)
    ids = [c.candidate for c in result.candidates]
    matrix = score_matrix(result.candidates, list(weights))
    w = np.array([result.weights[c] for c in weights])
    types = np.ones(len(w))
    wsm = WSM(normalization_function=lambda x, cost: x)(matrix, w, types)
    bounded = np.vstack([matrix, np.ones(len(w)), np.zeros(len(w))])
    tops = TOPSIS(normalization_function=lambda x, cost: x)(bounded, w, types)
    for i, cid in enumerate(ids):
        assert result.candidate(cid).total == pytest.approx(wsm[i], abs=1e-6)
        assert result.candidate(cid).topsis == pytest.approx(tops[i], abs=1e-6)


# ------------------------------------------------------------------ output contract and validation


def test_to_dict_is_json_safe_with_version_and_hash():
    weights = {"memory_allocation": 1, "cache_reuse": 1, "observability": 1}
    result = score_candidates("A", _three_candidates(), CONS, weights)
    data = result.to_dict()
    text = json.dumps(data, allow_nan=False)
    assert data["rules_version"] == RULES_VERSION and len(data["inputs_hash"]) == 64
    assert {"candidates", "sensitivity", "sentences", "mappings", "tie_break", "ranking"} <= set(data)
    assert "nan" not in text.lower().replace("nanoseconds", "")
    same = score_candidates("A", _three_candidates(), CONS, weights)
    changed = score_candidates("A", _three_candidates(), CONS, {**weights, "observability": 2})
    assert same.inputs_hash == result.inputs_hash != changed.inputs_hash
    assert same.sensitivity["acceptability"] == result.sensitivity["acceptability"]  # fixed seed


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"weights": {"speed": 1}}, "weights.speed: unknown criterion"),
        ({"weights": {"cache_reuse": -1}}, "weights.cache_reuse: must be a non-negative number"),
        ({"weights": {"cache_reuse": 0}}, "weights: must not all be zero"),
        ({"gates": {"latency": 0.5}}, "gates.latency: unknown dimension"),
        ({"gates": {"memory": 1.5}}, "gates.memory: threshold must be in [0, 1]"),
        ({"gates": {"cost": 0.5}}, "gates.cost: no weighted criterion belongs to this dimension"),
        ({"scenario": "E"}, "scenario: must be one of A, B, C, D"),
    ],
)
def test_bad_input_names_the_field(kwargs, message):
    args = {"scenario": "A", "evidence": [cand("a", {})], "constraints": CONS, "weights": {"cache_reuse": 1}}
    args.update(kwargs)
    with pytest.raises(ScoringInputError) as info:
        score_candidates(**args)
    assert message in str(info.value)


def test_duplicate_candidate_ids_are_rejected():
    with pytest.raises(ScoringInputError, match="unique"):
        score_candidates("A", [cand("a", {}), cand("a", {})], CONS, {"cache_reuse": 1})


def test_unknown_documented_level_is_missing_not_zero():
    doc = DocumentedFeatures(allocation_strategy="mystery")
    result = score_candidates("A", [CandidateEvidence("a", "A", {}, doc)], CONS, {"memory_allocation": 1})
    ind = indicator(result, "a", "memory_allocation", "allocation_strategy")
    assert ind.status == "missing" and ind.score is None and "not in the level table" in ind.reason


def test_sustainable_concurrency_is_the_highest_point_within_every_budget():
    points = [
        {"concurrency": 8, "ttft_p95_ms": 200, "tpot_p95_ms": 20, "error_rate": 0.0},
        {"concurrency": 32, "ttft_p95_ms": 900, "tpot_p95_ms": 45, "error_rate": 0.005},
        {"concurrency": 48, "ttft_p95_ms": None, "tpot_p95_ms": 45, "error_rate": 0.0},  # unproven
        {"concurrency": 64, "ttft_p95_ms": 1500, "tpot_p95_ms": 48, "error_rate": 0.0},  # over TTFT budget
        {"concurrency": 96, "ttft_p95_ms": 900, "tpot_p95_ms": 45, "error_rate": 0.02},  # too many errors
    ]
    assert sustainable_concurrency(points, 1000, 50) == 32
    assert sustainable_concurrency(points[3:], 1000, 50) is None
    with pytest.raises(ScoringInputError, match=r"points\[0\].concurrency"):
        sustainable_concurrency([{"ttft_p95_ms": 1}], 1000, 50)


def test_evidence_round_trips_through_its_dict_form():
    from dataclasses import asdict

    original = cand("a", FULL_METRICS)
    data = json.loads(json.dumps(asdict(original)))
    rebuilt = evidence_from_dict(data)
    assert rebuilt == original
    with pytest.raises(ScoringInputError, match="evidence.metrics.x.evidence"):
        evidence_from_dict({"candidate": "a", "metrics": {"x": {"value": 1, "evidence": "GUESSED"}}})
    with pytest.raises(ScoringInputError, match="unknown field"):
        evidence_from_dict({"candidate": "a", "documented": {"speed": "fast"}})


# ------------------------------------------------------------------ which ranking decides


def test_when_topsis_picks_another_leader_the_result_says_which_method_decides_and_why():
    def ev(cid, correct, idle):
        values = {"continuation_correct": correct, "idle_release_share": idle}
        doc = DocumentedFeatures(preemption_mode="none")  # cache lifecycle = 2/3 of the idle release score
        return CandidateEvidence(cid, cid.upper(), metrics(values), doc)

    # b is even (0.54 and 0.54), c lopsided (1.0 and 0.1): a higher sum, further from full marks
    weights = {"session_recovery": 1, "cache_lifecycle": 1}
    evidence = [ev("b", 0.954, 0.905), ev("c", 1.0, 0.575)]
    result = score_candidates("A", evidence, CONS, weights, options=ScoringOptions(tie_margin=0.0))
    b, c = result.candidate("b"), result.candidate("c")
    assert c.total > b.total and b.topsis > c.topsis  # the two methods disagree
    assert result.winner == "c"
    method = result.method
    assert method["decides"] == "weighted_sum" and method["topsis_leader"] == "b" and method["agrees"] is False
    assert method["favoured_criteria"] == ["cache_lifecycle"]  # b's only lead
    text = str(method["sentence"])
    assert text.startswith("The weighted sum decides") and "fixed bounds" in text
    assert f"TOPSIS ranks B first (closeness {b.topsis:.3f} against {c.topsis:.3f} for C)" in text
    assert "cache lifecycle management" in text and method["sentence"] in result.sentences
    assert json.loads(json.dumps(result.to_dict()))["method"]["sentence"]["msgid"] == method["sentence"].msgid


def test_topsis_of_two_near_equal_candidates_is_near_equal_not_one_against_zero():
    """Two candidates, one ahead by a hair on the only criterion where they differ: the set's best and
    worst as ideals would read 1.000 against 0.000 (the demo's SGLang 0.775 vs vLLM 0.764)."""
    a = cand("a", dict(FULL_METRICS, error_rate=0.010))
    b = cand("b", dict(FULL_METRICS, error_rate=0.011))
    result = score_candidates("A", [a, b], CONS, {"concurrency_control": 1, "cache_reuse": 1})
    ta, tb = result.candidate("a").topsis, result.candidate("b").topsis
    assert ta > tb and ta - tb < 0.02
    alone = topsis(np.array([[0.8, 0.5]]), np.array([0.5, 0.5]))  # set-independent: alone, the same scale
    paired = topsis(np.array([[0.8, 0.5], [0.2, 0.9]]), np.array([0.5, 0.5]))
    assert alone[0] == pytest.approx(paired[0])


def test_when_topsis_agrees_the_result_says_so():
    a = cand("a", dict(FULL_METRICS))
    b = cand("b", dict(FULL_METRICS, ttft_p95_ms=1400.0, error_rate=0.04))
    result = score_candidates("A", [a, b], CONS, {"concurrency_control": 1.0})
    assert result.winner == "a" and result.method["agrees"] is True and result.method["topsis_leader"] == "a"
    assert "It agrees: A is also first by TOPSIS closeness" in str(result.method["sentence"])
    alone = score_candidates("A", [a], CONS, {"concurrency_control": 1.0})
    assert alone.method["agrees"] is None and "TOPSIS needs at least two" in str(alone.method["sentence"])


# ------------------------------------------------------------------ scheduling isolation


@pytest.mark.parametrize(
    "documented, overload, evidence, expected, admission",
    [
        (("priority", "fair", "admission_limit"), None, MEASURED, 1.0, None),  # it could never exceed 1/3
        (("priority", "admission_limit"), 0.0, MEASURED, 1 / 3, "failed in the overload test"),  # OOM past it
        (("priority",), 1.0, MEASURED, 2 / 3, "held in the overload test"),  # clean rejection observed
        (("priority",), 0.7, MEASURED, 2 / 3, "held in the overload test"),  # bounded queueing, no OOM
        (("priority", "admission_limit"), 0.3, MEASURED, 2 / 3, None),  # latency collapse: the docs stand
        (None, 1.0, MEASURED, 1 / 3, "held in the overload test"),  # nothing documented, observed
        (("priority", "admission_limit"), 0.0, SIMULATED, 2 / 3, None),  # SIMULATED is not used here
    ],
)
def test_scheduling_isolation_maps_fair_scheduling_and_admission_limits(
    documented, overload, evidence, expected, admission
):
    doc = DocumentedFeatures(scheduling_features=documented)
    values = {} if overload is None else {"overload_handling": overload}
    ev = CandidateEvidence("a", "A", metrics(values, evidence, run="run-overload"), doc)
    result = score_candidates("A", [ev], CONS, {"concurrency_control": 1.0})
    isolation = indicator(result, "a", "concurrency_control", "scheduling_isolation")
    assert isolation.status == "ok" and isolation.score == pytest.approx(expected)
    if admission is None:
        assert "admission_limit" not in isolation.inputs
    else:
        assert isolation.inputs["admission_limit"].startswith(admission) and isolation.run_ids == ["run-overload"]


# ------------------------------------------------------------------ measurement noise


def _noisy_pair(p_interval, q_interval):
    p = CandidateEvidence(
        "p",
        "P",
        {"ttft_p95_ms": Metric(700.0, ("1",), MEASURED, p_interval)},
        DocumentedFeatures(operating_complexity="high"),
    )
    q = CandidateEvidence(
        "q",
        "Q",
        {"ttft_p95_ms": Metric(760.0, ("2",), MEASURED, q_interval)},
        DocumentedFeatures(operating_complexity="low"),
    )
    return score_candidates("A", [p, q], CONS, {"concurrency_control": 1}, options=ScoringOptions(tie_margin=0.0))


def test_a_lead_inside_the_measurement_noise_is_a_tie_decided_by_the_tie_break():
    result = _noisy_pair((650.0, 760.0), (700.0, 820.0))
    p, q = result.candidate("p"), result.candidate("q")
    assert p.total > q.total and result.weighted_sum_leader == "p"
    low, high = p.total_interval
    assert low <= p.total <= high and q.total_interval[0] <= q.total <= q.total_interval[1]
    assert result.tie_break["applied"] and result.tie_break["noise"] == ["q"]
    assert result.winner == "q" and result.tie_break["decided_by"] == "operating_complexity"
    assert "measurement noise" in str(result.tie_break["explanation"].to_dict())


def test_a_tie_break_on_a_documented_property_within_the_noise_is_a_decision_not_inconclusive():
    result = _noisy_pair((650.0, 760.0), (700.0, 820.0))
    noise = result.sensitivity["noise"]
    assert result.winner == "q" and noise["first_share"]["p"] > noise["first_share"]["q"]  # p leads most draws
    assert noise["stable"] is True  # but the rule picks q on operating complexity, which no draw moves
    assert "noise" not in str(result.sentences[0])  # (inconclusive here for its missing evidence only)


def test_a_lead_beyond_the_noise_stands_and_no_interval_means_no_noise_claim():
    result = _noisy_pair((690.0, 710.0), (750.0, 770.0))
    assert result.winner == "p" and not result.tie_break["applied"] and result.tie_break["noise"] == []
    assert result.sensitivity["noise"]["first_share"] == {"p": 1.0, "q": 0.0}
    assert result.sensitivity["noise"]["stable"] is True and result.sensitivity["noise"]["with_interval"] == 2
    result = _noisy_pair(None, None)
    assert result.candidate("p").total_interval is None and result.winner == "p"
    assert "noise" not in str(result.tie_break["explanation"].to_dict())
    assert result.sensitivity["noise"]["stable"] is None  # nothing says how far the measurements move
    assert "robustness to measurement noise is unknown" in str(result.sensitivity["noise"]["sentence"])


def test_a_lead_within_the_noise_is_a_tie_that_names_no_winner():
    """Equal documented features, so the tie-break cannot pick on them; P's TTFT p95 is lower, but the
    two intervals overlap widely: the first place flips within the noise. Issue 34 item 4: a lead
    within the measurement noise names no winner anywhere, and weight robustness is not reported."""
    p = CandidateEvidence("p", "P", {"ttft_p95_ms": Metric(700.0, ("1",), MEASURED, (600.0, 900.0))}, FULL_DOC)
    q = CandidateEvidence("q", "Q", {"ttft_p95_ms": Metric(760.0, ("2",), MEASURED, (650.0, 950.0))}, FULL_DOC)
    result = score_candidates("A", [p, q], CONS, {"concurrency_control": 1}, options=ScoringOptions(tie_margin=0.0))
    assert result.winner is None and result.tie_break["decided_by"] == "none"
    assert result.tie["candidates"] == ["p", "q"] and result.candidate("p").rank == result.candidate("q").rank == 1
    assert str(result.sentences[0]).startswith("No candidate is recommended:")
    assert "more requests per run, to narrow the overlapping 95% intervals" in [str(m) for m in result.tie["separate"]]
    assert result.sensitivity["acceptability"] == {} and result.sensitivity["per_criterion"] == []
    everything = " ".join(str(s) for s in result.sentences)
    assert "weight vectors" not in everything and "stays first" not in everything and "preferred" not in everything
    out = headline.decision_headline(result.to_dict())
    assert out["verdict"] == headline.TIE and out["leader"] is None
    assert str(out["robustness"]) == "Weight robustness is not reported for a tie."
    assert "What would separate them:" in str(out["verdict_reason"])


def test_an_exact_tie_names_no_winner_and_says_what_would_separate_them():
    """The real llama-server audit (D5): both totals 0.28324881..., the outputs said "Recommended: A",
    "preferred on higher total" and "first in 100 % of 10,000 weight vectors"."""
    a = cand("a", dict(FULL_METRICS))
    b = cand("b", dict(FULL_METRICS))
    result = score_candidates("A", [a, b], CONS, {"concurrency_control": 1, "cache_reuse": 1})
    assert result.candidate("a").total == result.candidate("b").total
    assert result.winner is None and result.tie_break["decided_by"] == "none" and result.tie["candidates"] == ["a", "b"]
    separate = [str(m) for m in result.tie["separate"]]
    assert separate[-1] == "they score the same on every weighted criterion: only new evidence can separate them"
    assert "tie between A, B" in str(result.rests_on) and "no winner" in str(result.rests_on)
    data = result.to_dict()
    assert "higher total" not in json.dumps(data) and "Recommended" not in json.dumps(data)
    assert all(c["rank"] == 1 for c in data["candidates"])
    out = headline.decision_headline(data)
    assert out["verdict"] == headline.TIE and [c["candidate"] for c in out["tied"]] == ["a", "b"]


def test_a_lead_within_the_tie_margin_on_equal_observability_and_complexity_is_a_tie():
    """The demo: vLLM 0.787, SGLang 0.774, observability and complexity equal; the tie-break fell through
    to the total and named vLLM; a re-run named SGLang. A lead the tie margin calls none picks nobody."""
    a = cand("a", dict(FULL_METRICS))
    b = cand("b", dict(FULL_METRICS, error_rate=0.02))
    result = score_candidates("A", [a, b], CONS, {"concurrency_control": 1, "cache_reuse": 1})
    assert result.candidate("a").total > result.candidate("b").total
    assert result.tie_break["applied"] and result.tie_break["decided_by"] == "none" and result.winner is None
    separate = [str(m) for m in result.tie["separate"]]
    assert "a justified weight change or gate on the criteria where they differ: concurrency control" in separate
    assert headline.decision_headline(result.to_dict())["verdict"] == headline.TIE


def test_a_lead_beyond_the_margin_after_equal_observability_and_complexity_is_decided_by_the_total():
    a = cand("a", dict(FULL_METRICS))
    b = cand("b", dict(FULL_METRICS, error_rate=0.02))
    result = score_candidates(
        "A", [a, b], CONS, {"concurrency_control": 1, "cache_reuse": 1}, options=ScoringOptions(tie_margin=0.001)
    )
    assert result.winner == "a" and result.tie_break["decided_by"] in ("core", "weighted_sum")


@pytest.mark.parametrize("client_value", [1.0, 5000.0])
def test_a_held_out_client_bound_figure_cannot_flip_the_winner(client_value):
    """B's TTFT p95 came from a client-bound run: held out, whatever it measured, B scores as if it had
    not been measured, and the reason is stated. Scored as the engine's, the client's 1 ms would win."""
    weights = {"concurrency_control": 1, "cache_reuse": 1}
    a = cand("a", dict(FULL_METRICS))
    rest = {k: v for k, v in FULL_METRICS.items() if k != "ttft_p95_ms"}
    reason = "client-bound (concurrency_stress run 9, c=64: held 9.1 requests in flight on average, 64 requested)"
    b = replace(cand("b", dict(rest, ttft_p95_ms=client_value)), held_out={"ttft_p95_ms": reason})
    unmeasured = score_candidates("A", [a, cand("b", rest)], CONS, weights)
    result = score_candidates("A", [a, b], CONS, weights)
    assert result.winner == unmeasured.winner == "a"
    assert result.candidate("b").total == unmeasured.candidate("b").total
    assert result.candidate("b").total_upper == unmeasured.candidate("b").total_upper
    ind = indicator(result, "b", "concurrency_control", "ttft_p95_vs_budget")
    assert ind.status == "missing" and ind.reason == f"ttft_p95_ms held out: {reason}"
    assert f"B: TTFT p95 held out of the scoring: {reason}." in [str(s) for s in result.sentences]
    scored_anyway = score_candidates("A", [a, replace(b, held_out={})], CONS, weights)
    assert scored_anyway.winner == ("b" if client_value == 1.0 else "a")


def test_the_same_evidence_gives_the_same_decision_bit_for_bit_in_any_order():
    def ev(cid, ttft, interval, complexity):
        doc = replace(FULL_DOC, operating_complexity=complexity)
        return CandidateEvidence(cid, cid.upper(), {"ttft_p95_ms": Metric(ttft, (cid,), MEASURED, interval)}, doc)

    evidence = [
        ev("p", 700.0, (600.0, 900.0), "low"),
        ev("q", 760.0, (650.0, 950.0), "low"),
        ev("r", 900.0, None, "high"),
    ]
    weights = {"concurrency_control": 2, "cost_control": 1}
    first = score_candidates("A", evidence, CONS, weights).to_dict()
    again = score_candidates("A", evidence, CONS, weights).to_dict()
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)
    shuffled = score_candidates("A", [evidence[2], evidence[0], evidence[1]], CONS, weights).to_dict()
    assert shuffled["winner"] == first["winner"] and shuffled["ranking"] == first["ranking"]
    assert shuffled["sensitivity"]["noise"]["first_share"] == first["sensitivity"]["noise"]["first_share"]
    assert shuffled["sensitivity"]["noise"]["stable"] == first["sensitivity"]["noise"]["stable"]


def test_evidence_with_intervals_and_held_out_figures_round_trips():
    from dataclasses import asdict

    original = CandidateEvidence(
        "a",
        "A",
        {"ttft_p95_ms": Metric(700.0, ("1",), MEASURED, (600.0, 900.0), ("0",))},
        FULL_DOC,
        held_out={"error_rate": "client-bound (run 3)"},
    )
    assert evidence_from_dict(json.loads(json.dumps(asdict(original)))) == original


def test_each_dimensions_gate_criteria_are_its_own():
    assert set(GATE_CRITERIA) == set(DIMENSIONS)
    for dimension, members in GATE_CRITERIA.items():
        assert members and all(DIMENSION_OF[c] == dimension for c in members)
