"""The comparison's headline (issue 19): leader, margin with its measurement interval, coverage,
robustness with its caveat, and the verdict clear / close / inconclusive.

The results are built in the shape `ScoringResult.to_dict()` stores, with issue 15's
measurement fields (each candidate's `total_interval`, the tie-break's `noise` list)."""

from __future__ import annotations

import pytest

from selection.domain import headline
from selection.domain.messages import Message
from selection.domain.scoring.inputs import CandidateEvidence, Metric, ScoringConstraints
from selection.domain.scoring.pipeline import score_candidates


def candidate(cid, total, coverage=0.9, upper=None, interval=None, rank=None, screened_out=False):
    data = {
        "candidate": cid,
        "label": cid.upper(),
        "total": total,
        "total_upper": total + (1 - coverage) if upper is None else upper,
        "coverage": coverage,
        "rank": rank,
        "screened_out": screened_out,
    }
    if interval is not None:
        data["total_interval"] = list(interval)
    return data


def result(*candidates, winner="a", share=1.0, noise=(), tie_margin=0.02):
    ranking = [c["candidate"] for c in candidates]
    return {
        "candidates": list(candidates),
        "ranking": ranking,
        "winner": winner,
        "options": {"tie_margin": tie_margin},
        "tie_break": {"applied": False, "noise": list(noise)},
        "sensitivity": {
            "acceptability": {"draws": 10000, "spread": 0.3, "first_share": {winner: share}},
        },
    }


def text(message) -> str:
    assert isinstance(message, Message)
    return str(message)


def test_a_clear_lead_beyond_margin_noise_and_missing_evidence():
    out = headline.decision_headline(
        result(
            candidate("a", 0.80, coverage=0.95, interval=(0.78, 0.82)),
            candidate("b", 0.60, coverage=0.95, interval=(0.57, 0.63)),
        )
    )
    assert out["verdict"] == headline.CLEAR
    assert out["margin"] == pytest.approx(0.20)
    assert out["margin_interval"] == pytest.approx((0.15, 0.25))
    assert text(out["lead"]) == (
        "A leads B by +0.200 (+0.150 to +0.250 with the measurements at the ends of their 95% intervals): "
        "weighted total 0.800 against 0.600."
    )
    assert "A is first in 100% of 10,000 weight vectors within ±30%" in text(out["robustness"])
    assert "stays above zero" in text(out["robustness"])
    assert text(out["verdict_reason"]).startswith("Clear: A's lead is beyond the tie margin and the measurement noise")


def test_a_lead_inside_the_measurement_noise_is_close():
    out = headline.decision_headline(
        result(
            candidate("a", 0.80, coverage=0.95, interval=(0.74, 0.84)),
            candidate("b", 0.76, coverage=0.95, upper=0.78, interval=(0.71, 0.81)),
            noise=["b"],
        )
    )
    assert out["verdict"] == headline.CLOSE
    assert out["margin_interval"][0] < 0 < out["margin_interval"][1]
    assert "inside the measurement noise" in text(out["robustness"])
    assert "Close: the margin is inside the measurement noise" in text(out["verdict_reason"])


def test_a_lead_within_the_tie_margin_or_a_minority_of_weight_vectors_is_close():
    within_margin = headline.decision_headline(
        result(candidate("a", 0.80, coverage=1.0), candidate("b", 0.79, coverage=1.0, upper=0.79))
    )
    assert within_margin["verdict"] == headline.CLOSE
    assert "within the tie margin 0.02" in text(within_margin["verdict_reason"])
    fragile = headline.decision_headline(
        result(candidate("a", 0.80, coverage=1.0), candidate("b", 0.70, coverage=1.0, upper=0.70), share=0.62)
    )
    assert fragile["verdict"] == headline.CLOSE
    assert "first in only 62.0% of the weight vectors" in text(fragile["verdict_reason"])


def test_the_issues_example_a_small_gap_on_two_thirds_of_the_evidence_is_inconclusive_whatever_the_weights_say():
    """A 0.03 gap, 62-66 % coverage, equal upper bounds, 100 % of 10,000 weight vectors."""
    out = headline.decision_headline(
        result(
            candidate("a", 0.55, coverage=0.62, upper=0.93),
            candidate("b", 0.52, coverage=0.66, upper=0.93),
            share=1.0,
        )
    )
    assert out["verdict"] == headline.INCONCLUSIVE
    assert "B could reach 0.930, above A's 0.550" in text(out["verdict_reason"])
    assert "no measurement has an interval yet" in text(out["robustness"])
    caveat = text(out["caveat"])  # shown with the robustness figures: they are not certainty
    assert "coverage 62% (A) and 66% (B)" in caveat and "totals up to 0.930 and 0.930" in caveat
    assert "Evidence coverage: A 62%, B 66%" in text(out["coverage_sentence"])


def test_too_little_coverage_is_inconclusive_even_alone():
    out = headline.decision_headline(result(candidate("a", 0.3, coverage=0.32)))
    assert out["verdict"] == headline.INCONCLUSIVE and out["runner_up"] is None
    assert "only 32% of the weight is evidenced for A" in text(out["verdict_reason"])
    alone = headline.decision_headline(result(candidate("a", 0.8, coverage=0.9)))
    assert alone["verdict"] == headline.CLEAR
    assert "only candidate that passes the gates" in text(alone["lead"])


def test_no_winner_is_no_recommendation_and_screened_candidates_are_not_the_runner_up():
    assert headline.decision_headline(result(candidate("a", 0.5), winner=None))["verdict"] == headline.NONE
    out = headline.decision_headline(
        result(candidate("a", 0.8, coverage=1.0), candidate("b", 0.9, coverage=1.0, screened_out=True))
    )
    assert out["runner_up"] is None


def test_without_intervals_a_clear_lead_says_its_noise_is_not_known_yet():
    out = headline.decision_headline(
        result(candidate("a", 0.80, coverage=0.95), candidate("b", 0.60, coverage=0.95, upper=0.65))
    )
    assert out["verdict"] == headline.CLEAR and out["margin_interval"] is None
    assert "no measurement interval yet" in text(out["lead"])
    assert "robustness to measurement noise is not known yet" in text(out["verdict_reason"])


def test_a_side_without_an_interval_counts_at_its_total():
    assert headline.margin_interval({"total": 0.8, "total_interval": [0.7, 0.9]}, {"total": 0.5}) == pytest.approx(
        (0.2, 0.4)
    )


def test_it_reads_a_real_scoring_result():
    """The keys it reads are the ones scoring writes (a rename there fails here)."""
    evidence = [
        CandidateEvidence(
            candidate=cid,
            label=cid,
            metrics={"ttft_p95_ms": Metric(ttft), "error_rate": Metric(0.0)},
        )
        for cid, ttft in (("fast", 200.0), ("slow", 900.0))
    ]
    scored = score_candidates(
        "A", evidence, ScoringConstraints(ttft_p95_ms=800.0), {"concurrency_control": 1.0}
    ).to_dict()
    out = headline.decision_headline(scored)
    assert out["leader"]["candidate"] == scored["winner"] == "fast"
    assert out["runner_up"]["candidate"] == "slow"
    assert out["share"] is not None and out["draws"] == 10000
    assert out["verdict"] in (headline.CLEAR, headline.CLOSE, headline.INCONCLUSIVE)


def _with_draws(data, share, stable):
    """`data` with the scoring's draws of the measurements (`sensitivity.noise`)."""
    data["sensitivity"]["noise"] = {"draws": 10000, "first_share": {data["winner"]: share}, "stable": stable}
    return data


def test_the_robustness_names_the_draws_of_the_measurements_beside_the_weight_vectors():
    data = result(candidate("a", 0.80, 0.95, interval=(0.78, 0.82)), candidate("b", 0.60, 0.95, interval=(0.5, 0.6)))
    out = headline.decision_headline(_with_draws(data, 1.0, True))
    assert out["verdict"] == headline.CLEAR and out["noise_share"] == 1.0
    assert "first in 100% of 10,000 draws of the measurements within their intervals" in text(out["robustness"])


def test_a_winner_that_flips_within_the_measurement_noise_is_inconclusive():
    data = result(candidate("a", 0.80, 0.95, interval=(0.70, 0.90)), candidate("b", 0.76, 0.95, interval=(0.7, 0.8)))
    out = headline.decision_headline(_with_draws(data, 0.709, False))
    assert out["verdict"] == headline.INCONCLUSIVE
    assert "within the measurement noise A is first in only 70.9% of 10,000 draws" in text(out["verdict_reason"])


def test_a_tie_names_no_leader_and_says_what_would_separate_them():
    data = result(candidate("a", 0.787, 1.0, rank=1), candidate("b", 0.787, 1.0, rank=1), winner=None)
    data["tie_break"] = {"applied": True, "decided_by": "none", "noise": [], "explanation": "level on everything"}
    data["tie"] = {"candidates": ["a", "b"], "separate": [Message("the evidence still missing on %(c)s", {"c": "x"})]}
    out = headline.decision_headline(data)
    assert out["verdict"] == headline.TIE and out["leader"] is None and out["share"] is None
    assert text(out["lead"]) == "Tie between A, B: weighted totals A 0.787, B 0.787."
    assert text(out["verdict_reason"]) == (
        "Tie, no winner: level on everything. What would separate them: the evidence still missing on x."
    )
    data["tie_break"]["decided_by"] = "observability"  # the article's rule picked: a close call, decided
    data["winner"], data["tie"] = "a", {}
    data["candidates"][1]["total"] = data["candidates"][1]["total_upper"] = 0.774
    assert headline.decision_headline(data)["verdict"] == headline.CLOSE
