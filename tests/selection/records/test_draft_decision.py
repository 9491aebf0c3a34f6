"""A draft's decision is checked when it is saved, in words (issue 37 item 4, walk n11): naming a candidate
the documentation screen rules out, one the gates stop, an archived one, or another than the comparison's
recommendation is refused up front on the decision field; free text naming no candidate stands. Review
refusals are sentences, not field codes."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from selection.candidates.screening import documentation_screen
from selection.candidates.services import add_candidate, archive_candidate
from selection.models import DecisionRecord
from selection.records.services import create_draft, decision_problem, update_draft
from selection.scoring.services import compute_scores, latest_score
from selection.setup.services import set_gates

pytestmark = pytest.mark.django_db


@pytest.fixture
def names(decided):
    """The compared candidates by engine slug, and the comparison's winner."""
    candidates = {c.engine.slug: c for c in decided.candidates.select_related("engine")}
    compute_scores(decided)  # the snapshot the rescoring task would have stored
    winner = str(latest_score(decided, include_simulated=False).result["winner"])
    return candidates, next(c for c in candidates.values() if str(c.pk) == winner)


def test_the_recommended_candidate_or_free_text_stands(decided, names):
    _candidates, winner = names
    assert decision_problem(decided, f"Choose {winner.display_name} for the support bot", False) is None
    assert decision_problem(decided, "Go with the recommendation", False) is None


def test_another_candidate_than_the_recommendation_is_refused_in_words(decided, architect, names):
    candidates, winner = names
    loser = next(c for c in candidates.values() if c != winner)
    with pytest.raises(ValidationError) as refused:
        create_draft(selection=decided, user=architect, decision=f"Choose {loser.display_name}")
    message = refused.value.message_dict["decision"][0]
    assert f"recommends “{winner.display_name}”, not “{loser.display_name}”" in message
    assert not DecisionRecord.objects.filter(selection=decided).exists()


def test_a_screened_out_or_archived_candidate_is_refused(decided, architect, engines, names):
    lmdeploy = add_candidate(
        selection=decided,
        user=architect,
        data={
            "engine": engines["lmdeploy"],
            "engine_version": engines["lmdeploy"].versions[0],
            "label": "LMDeploy fp8",
        },
    )
    set_gates(selection=decided, user=architect, gates={"persistence": 0.3, "memory": 0.4})
    assert documentation_screen(lmdeploy)["status"] == "screened_out"  # no offload tier for persistence
    assert "is ruled out by the documentation screen" in decision_problem(decided, "LMDeploy fp8", False)
    archive_candidate(candidate=lmdeploy, user=architect)
    assert "is archived" in decision_problem(decided, "LMDeploy fp8", False)


def test_the_draft_form_shows_the_refusal_on_the_decision_field(client, decided, architect, names):
    candidates, winner = names
    loser = next(c for c in candidates.values() if c != winner)
    record = create_draft(selection=decided, user=architect)
    with pytest.raises(ValidationError):
        update_draft(record=record, user=architect, decision=loser.display_name)
    client.force_login(architect)
    response = client.post(
        reverse("selection:records", args=[decided.pk]), {"decision": loser.display_name, "rationale": "x"}
    )
    assert response.status_code == 200
    assert "the record chooses the recommendation" in response.context["form"].errors["decision"][0]
