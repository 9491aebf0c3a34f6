"""A record for one of tied candidates rests on a ground its drafter states (issue 33, issue 34 item 4): the pure
rule (selection/domain/tie_ground.py)."""

from __future__ import annotations

from selection.domain import tie_ground
from selection.domain.messages import Message

LABELS = {"1": "vLLM A", "2": "vLLM B", "3": "SGLang"}
GROUND = "Our on-call team has run vLLM A's launch flags for a year; B would need new runbooks."


def fields(found: dict[str, list[Message]]) -> dict[str, str]:
    return {field: " ".join(str(m) for m in messages) for field, messages in found.items()}


def test_the_tied_candidates_come_from_a_result_without_a_winner():
    assert tie_ground.tied({"winner": None, "tie": {"candidates": ["1", "2"]}}) == ["1", "2"]
    assert tie_ground.tied({"winner": "1", "tie": {"candidates": ["1", "2"]}}) == []
    assert tie_ground.tied({"winner": None}) == []
    assert tie_ground.tied({"winner": None, "tie": {"candidates": ["1"]}}) == []


def test_a_tie_without_a_choice_or_a_ground_is_refused_on_each_field():
    found = fields(tie_ground.problems(["1", "2"], LABELS, None, None))
    assert set(found) == {"tie_choice", "tie_ground"}
    assert "The scores tie between vLLM A, vLLM B" in found["tie_choice"]
    assert "Name which tied candidate" in found["tie_choice"]
    assert "state the ground for choosing one of them" in found["tie_ground"]
    assert set(fields(tie_ground.problems(["1", "2"], LABELS, "1", "   "))) == {"tie_ground"}


def test_a_candidate_outside_the_tie_is_refused():
    found = fields(tie_ground.problems(["1", "2"], LABELS, "3", GROUND))
    assert found == {
        "tie_choice": "SGLang is not one of the tied candidates (vLLM A, vLLM B): the record chooses among them."
    }


def test_a_ground_must_be_a_reason_a_reader_can_weigh():
    assert "at least 20 characters" in fields(tie_ground.problems(["1", "2"], LABELS, "1", "ok"))["tie_ground"]
    named = {**LABELS, "1": "vLLM 0.11 with prefix caching"}
    assert "candidate's name" in fields(tie_ground.problems(["1", "2"], named, "1", named["1"]))["tie_ground"]
    long = "x" * (tie_ground.MAX_GROUND_CHARS + 1)
    assert "At most 2000 characters" in fields(tie_ground.problems(["1", "2"], LABELS, "1", long))["tie_ground"]
    assert tie_ground.problems(["1", "2"], LABELS, "2", GROUND) == {}


def test_a_ground_when_the_scores_name_a_winner_is_refused():
    found = fields(tie_ground.problems([], LABELS, "2", GROUND, winner_label="vLLM A"))
    assert "The scores do not tie: they recommend vLLM A" in found["tie_choice"]
    assert "tie_ground" in fields(tie_ground.problems([], LABELS, None, GROUND))
    assert tie_ground.problems([], LABELS, None, "", winner_label="vLLM A") == {}


def test_the_statement_carries_the_ground_in_full_and_names_no_winner():
    ground = GROUND + " " + "Further detail. " * 100
    choice = tie_ground.TiedChoice(chosen="vLLM A", ground=ground, tied=("vLLM A", "vLLM B"))
    text = str(tie_ground.statement(choice))
    assert text == f"Tied on the evidence between vLLM A, vLLM B; chosen on the stated ground: {ground}"
    summary = str(tie_ground.summary(choice, "Chat"))
    assert summary == "vLLM A for Chat: tied on the evidence with vLLM B; chosen on the stated ground."
    for said in (text, summary):
        assert "winner" not in said.lower() and "recommend" not in said.lower() and "clear" not in said.lower()


def test_the_business_owner_confirms_the_ground_before_approving():
    assert tie_ground.confirmation_needed("business", True, False) is not None
    assert tie_ground.confirmation_needed("business", True, True) is None
    assert tie_ground.confirmation_needed("platform", True, False) is None  # they see it; the business owner confirms
    assert tie_ground.confirmation_needed("business", False, False) is None  # nothing to confirm
