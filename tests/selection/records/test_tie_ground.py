"""A tie is no dead end for the record (issue 33, issue 34 item 4): the scores name no winner, so a record is
drafted for ONE tied candidate only on a ground its drafter states (which tied candidate, and why); the record, its
page, its API and its PDF say "tied on the evidence; chosen on the stated ground: ..." with the ground in full and
never a winner; the ground is audited (who, when), and the business owner confirms it before approving."""

from __future__ import annotations

import re
import subprocess

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from rest_framework.test import APIClient

from selection.models import AuditEntry, DecisionRecord
from selection.records.pdf import render_record_html
from selection.records.rendering import render_pdf
from selection.records.services import approve, create_draft, start_review, update_draft
from selection.scoring.services import compute_scores

pytestmark = pytest.mark.django_db

# longer than any page-1 clip, with a line break and a character a careless cut would lose at its end
GROUND = (
    "Our on-call team has run vLLM A's exact launch flags in production for a year and its runbooks, alerts and "
    "rollback drills exist; vLLM B would need all three written and rehearsed before launch.\n"
    + "The evidence cannot separate them (same runs, same totals), so operating familiarity decides. " * 8
    + "End of the ground: Ω"
)
WINNER_WORDS = re.compile(r"\bwinner\b|recommended|clear recommendation|recommends", re.IGNORECASE)


@pytest.fixture
def pair(tied):
    candidates = {c.label: c for c in tied.candidates.all()}
    return candidates["vLLM A"], candidates["vLLM B"]


def test_without_a_ground_the_draft_is_refused_naming_each_field(tied, architect):
    with pytest.raises(ValidationError) as refused:
        create_draft(selection=tied, user=architect, rationale="Either would do.")
    problems = refused.value.message_dict
    assert "The scores tie between vLLM A, vLLM B" in problems["tie_choice"][0]
    assert "state the ground for choosing one of them" in problems["tie_ground"][0]
    assert not DecisionRecord.objects.filter(selection=tied).exists()


def test_a_choice_without_a_ground_or_outside_the_tie_is_refused(tied, architect, pair, engines):
    a, _b = pair
    with pytest.raises(ValidationError) as refused:
        create_draft(selection=tied, user=architect, tie_choice=a, tie_ground="  ")
    assert set(refused.value.message_dict) == {"tie_ground"}
    with pytest.raises(ValidationError) as refused:
        create_draft(selection=tied, user=architect, tie_choice=a, tie_ground="because")
    assert "at least 20 characters" in refused.value.message_dict["tie_ground"][0]


def test_with_a_ground_the_draft_exists_and_the_ground_is_audited(tied, architect, pair):
    a, b = pair
    record = create_draft(selection=tied, user=architect, tie_choice=a, tie_ground=GROUND)
    assert record.tie_choice_id == a.pk and record.tie_ground == GROUND.strip()
    assert record.tie_ground_by == architect and record.tie_ground_at is not None
    stated = AuditEntry.objects.get(selection=tied, action="record.tie_ground_stated")
    assert stated.actor == architect and stated.justification == GROUND.strip()
    assert stated.new == {"candidate": a.pk, "ground": GROUND.strip()}
    # naming the other tied candidate in the decision text is refused; changing the choice is audited again
    with pytest.raises(ValidationError) as refused:
        update_draft(record=record, user=architect, decision=f"Choose {b.display_name}")
    assert (
        "chooses “vLLM A” among the tied candidates on its stated ground" in refused.value.message_dict["decision"][0]
    )
    update_draft(record=record, user=architect, tie_choice=b, tie_ground=GROUND + " (B after all)")
    assert AuditEntry.objects.filter(selection=tied, action="record.tie_ground_stated").count() == 2


def test_a_ground_is_refused_when_the_scores_name_a_winner(decided, architect):
    compute_scores(decided)
    chosen = decided.candidates.first()
    with pytest.raises(ValidationError) as refused:
        create_draft(selection=decided, user=architect, tie_choice=chosen, tie_ground=GROUND)
    assert "The scores do not tie: they recommend" in refused.value.message_dict["tie_choice"][0]


def test_review_refuses_a_tie_draft_without_a_ground_in_words(tied, architect, pair):
    a, _b = pair
    record = create_draft(selection=tied, user=architect, tie_choice=a, tie_ground=GROUND)
    DecisionRecord.objects.filter(pk=record.pk).update(tie_choice=None, tie_ground=None)  # a draft from before
    with pytest.raises(ValidationError) as refused:
        start_review(record=record, user=architect)
    said = " ".join(refused.value.message_dict["snapshot"])
    assert "Which tied candidate: The scores tie between vLLM A, vLLM B" in said
    assert "Ground for choosing it:" in said and "What would separate the tied candidates" in said


def test_the_record_carries_the_ground_in_full_and_names_no_winner(tied, architect, pair, owners):
    a, _b = pair
    record = start_review(
        record=create_draft(selection=tied, user=architect, tie_choice=a, tie_ground=GROUND), user=architect
    )
    tie = record.snapshot["decision"]["tie"]
    assert tie["ground"] == GROUND.strip()  # in full: no clip, no ellipsis
    assert tie["statement"] == (
        f"Tied on the evidence between vLLM A, vLLM B; chosen on the stated ground: {GROUND.strip()}"
    )
    assert tie["chosen"] == "vLLM A" and tie["tied"] == ["vLLM A", "vLLM B"] and tie["stated_at"]
    assert record.snapshot["decision"]["summary"] == (
        "vLLM A for Chat: tied on the evidence with vLLM B; chosen on the stated ground."
    )
    assert record.snapshot["basis"]["candidate"] == a.pk
    html = render_record_html(record.snapshot)
    flat = " ".join(re.sub(r"<[^>]+>", " ", html).split())
    assert "Tied on the evidence; chosen on the stated ground" in flat
    assert " ".join(GROUND.split()).replace("'", "&#x27;") in flat  # section 1 and Annex A, unclipped
    assert "chosen on the stated ground:" in flat.split("1. Decision and rationale")[0]  # page 1 says it too
    assert "weight vectors" not in flat and "first in" not in flat  # no weight robustness for a tie
    said = WINNER_WORDS.findall(flat.replace("no winner", "").replace("No candidate is recommended", ""))
    assert not said, said
    # the API shows who stated it and the statement it froze
    data = APIClient()
    data.force_authenticate(architect)
    body = data.get(f"/api/v1/records/{record.pk}/").json()
    assert body["tie_choice"] == a.pk and body["tie_ground"] == GROUND.strip()
    assert body["tie_ground_stated"]["by"] == architect.username
    assert body["tie_ground_stated"]["statement"] == tie["statement"]


def test_the_business_owner_confirms_the_ground_before_approving(tied, architect, pair, owners, tmp_path):
    a, _b = pair
    record = start_review(
        record=create_draft(selection=tied, user=architect, tie_choice=a, tie_ground=GROUND), user=architect
    )
    with pytest.raises(ValidationError) as refused:
        approve(record=record, user=owners["business"], role="business")
    said = refused.value.message_dict["confirm_tie_ground"][0]
    assert "as business owner, read the ground and confirm it" in said and GROUND.strip() in said
    approve(record=record, user=owners["platform"], role="platform")  # sees it; confirms nothing
    approve(record=record, user=owners["business"], role="business", confirm_tie_ground=True)
    confirmed = record.approvals.get(role="business")
    assert confirmed.confirmed_tie_ground == GROUND.strip()
    entry = AuditEntry.objects.get(selection=tied, action="record.approved", new__role="business")
    assert entry.new["confirmed_tie_ground"] == GROUND.strip() and entry.actor == owners["business"]
    record = approve(record=record, user=owners["security"], role="security")
    assert record.status == "approved"
    record = render_pdf(record)
    path = tmp_path / "record.pdf"
    path.write_bytes(record.pdf.open("rb").read())
    text = subprocess.run(
        ["pdftotext", "-enc", "UTF-8", str(path), "-"], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    flat = " ".join(text.split())
    assert "Tied on the evidence; chosen on the stated ground" in flat
    assert "End of the ground: Ω" in flat  # the ground's last words: nothing cut
    assert "Confirmed by the business owner 张伟" in flat


def test_the_api_refuses_without_a_ground_and_drafts_with_one(tied, architect, pair, owners):
    a, _b = pair
    api = APIClient()
    api.force_authenticate(architect)
    refused = api.post(f"/api/v1/selections/{tied.pk}/records/", {}, format="json")
    assert refused.status_code == 400
    assert "tie_choice" in refused.json() and "tie_ground" in refused.json()
    made = api.post(f"/api/v1/selections/{tied.pk}/records/", {"tie_choice": a.pk, "tie_ground": GROUND}, format="json")
    assert made.status_code == 201, made.content
    record_id = made.json()["id"]
    assert api.post(f"/api/v1/records/{record_id}/", {"action": "start_review"}, format="json").status_code == 200
    business = APIClient()
    business.force_authenticate(owners["business"])
    no = business.post(f"/api/v1/records/{record_id}/", {"action": "approve", "role": "business"}, format="json")
    assert no.status_code == 400 and "confirm_tie_ground" in no.json()
    yes = business.post(
        f"/api/v1/records/{record_id}/",
        {"action": "approve", "role": "business", "confirm_tie_ground": True},
        format="json",
    )
    assert yes.status_code == 200, yes.content
    assert yes.json()["tie_ground_stated"]["confirmed_by"] == owners["business"].username


def test_the_pages_ask_for_the_ground_show_it_and_ask_the_business_owner_to_confirm(
    client, tied, architect, pair, owners
):
    a, _b = pair
    client.force_login(architect)
    page = client.get(reverse("selection:records", args=[tied.pk]))
    assert 'name="tie_choice"' in page.content.decode() and 'name="tie_ground"' in page.content.decode()
    refused = client.post(reverse("selection:records", args=[tied.pk]), {"rationale": "x"})
    assert refused.status_code == 200
    errors = refused.context["form"].errors
    assert "The scores tie between vLLM A, vLLM B" in errors["tie_choice"][0] and errors["tie_ground"]
    made = client.post(
        reverse("selection:records", args=[tied.pk]), {"rationale": "x", "tie_choice": a.pk, "tie_ground": GROUND}
    )
    assert made.status_code == 302
    record = DecisionRecord.objects.get(selection=tied)
    start_review(record=record, user=architect)
    client.force_login(owners["business"])
    page = client.get(reverse("selection:record", args=[tied.pk, record.pk])).content.decode()
    assert "data-tie-ground" in page and 'name="confirm_tie_ground"' in page
    assert "End of the ground: Ω" in page
    client.post(
        reverse("selection:record-action", args=[tied.pk, record.pk]), {"action": "approve", "role": "business"}
    )
    assert not record.approvals.exists()  # refused without the confirmation
    client.post(
        reverse("selection:record-action", args=[tied.pk, record.pk]),
        {"action": "approve", "role": "business", "confirm_tie_ground": "1"},
    )
    assert record.approvals.get(role="business").confirmed_tie_ground == GROUND.strip()
