"""The article's tie rule (issue 36 item 3) and ties that name no winner (issue 34 item 4): closeness on
the core dimensions, then observability, then operating complexity, then the total; what the choice
rests on."""

from __future__ import annotations

from selection.domain import tiebreak
from selection.domain.messages import Message
from selection.domain.tiebreak import Contender

CORE = Message("the core dimensions (%(names)s)", {"names": "memory, persistence"})


def c(cid, total, core, obs=0.5, complexity=1, interval=None, core_interval=None):
    return Contender(
        cid,
        cid.upper(),
        total,
        core,
        obs,
        complexity,
        {0: "low", 1: "medium", 2: "high"}[complexity],
        interval,
        core_interval,
    )


def test_the_only_candidate_through_the_gates_rests_on_the_gates():
    decision = tiebreak.decide([c("a", 0.5, 0.5)], 0.02, CORE)
    assert decision.winner == "a" and not decision.applied
    assert str(decision.rests_on) == "A is the only candidate through the gates"


def test_a_lead_beyond_the_margin_on_the_core_and_the_total_is_the_weighted_sum():
    decision = tiebreak.decide([c("a", 0.70, 0.80), c("b", 0.60, 0.60)], 0.02, CORE)
    assert (
        decision.winner == "a" and decision.decided_by == tiebreak.WEIGHTED_SUM and decision.ranks == {"a": 1, "b": 2}
    )
    assert str(decision.rests_on) == (
        "A leads B on the core dimensions (memory, persistence) by 0.200 and on the weighted total by 0.100, beyond "
        "the tie margin"
    )


def test_a_core_lead_decides_when_the_totals_are_close():
    decision = tiebreak.decide([c("a", 0.61, 0.50), c("b", 0.60, 0.70)], 0.02, CORE)
    assert decision.winner == "b" and decision.decided_by == tiebreak.CORE
    assert str(decision.rests_on).startswith("B leads A on the core dimensions (memory, persistence) by 0.200")


def test_level_on_the_core_observability_decides_then_operating_complexity():
    decision = tiebreak.decide([c("a", 0.80, 0.60, obs=0.4), c("b", 0.60, 0.61, obs=0.9)], 0.02, CORE)
    assert decision.winner == "b" and decision.decided_by == tiebreak.OBSERVABILITY
    assert "decided by observability (B 0.90, A 0.40)" in str(decision.rests_on)
    decision = tiebreak.decide([c("a", 0.80, 0.60, complexity=2), c("b", 0.60, 0.61, complexity=0)], 0.02, CORE)
    assert decision.winner == "b" and decision.decided_by == tiebreak.COMPLEXITY
    assert "decided by lower operating complexity (B low, A high)" in str(decision.rests_on)


def test_level_on_everything_but_a_total_lead_beyond_the_noise_is_the_total():
    decision = tiebreak.decide([c("a", 0.80, 0.60), c("b", 0.60, 0.61)], 0.02, CORE)
    assert decision.winner == "a" and decision.decided_by == tiebreak.TOTAL


def test_an_exact_tie_names_no_winner_and_shares_the_first_rank():
    decision = tiebreak.decide([c("a", 0.2832, 0.5), c("b", 0.2832, 0.5), c("x", 0.1, 0.1)], 0.02, CORE)
    assert decision.winner is None and decision.decided_by == tiebreak.NONE and decision.tied == ["a", "b"]
    assert decision.ranks == {"a": 1, "b": 1, "x": 3}
    assert "no winner" in str(decision.rests_on) and "preferred" not in str(decision.explanation)


def test_a_lead_inside_the_measurement_noise_is_a_tie():
    a = c("a", 0.70, 0.70, interval=(0.60, 0.80), core_interval=(0.60, 0.80))
    b = c("b", 0.62, 0.62, interval=(0.55, 0.72), core_interval=(0.55, 0.72))
    decision = tiebreak.decide([a, b], 0.02, CORE)
    assert decision.winner is None and decision.noise == ["b"]
    narrow = tiebreak.decide(
        [c("a", 0.70, 0.70, interval=(0.69, 0.71)), c("b", 0.62, 0.62, interval=(0.61, 0.63))], 0.02, CORE
    )
    assert narrow.winner == "a"


def test_within_noise_turns_a_decision_the_draws_do_not_hold_into_a_tie():
    decision = tiebreak.decide([c("a", 0.70, 0.80), c("b", 0.60, 0.60)], 0.02, CORE)
    tied = tiebreak.within_noise(decision, [c("a", 0.70, 0.80), c("b", 0.60, 0.60)], ["a", "b"], CORE)
    assert tied.winner is None and tied.tied == ["a", "b"] and tied.ranks == {"a": 1, "b": 1}
    assert tiebreak.within_noise(decision, [c("a", 0.70, 0.80)], ["a"], CORE) is decision
