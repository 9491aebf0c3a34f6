"""Archive instead of delete (issue 19): candidates, selections and record drafts can be archived:
out of the comparison, the scores and new records (a selection off the dashboard and read-only),
kept with their evidence and in the audit trail, and restored; a record that left draft never.
A second draft attempt continues the open draft instead of leaving an orphan version."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse

from benchmarks.models import BenchmarkRun
from selection.candidates.services import add_candidate, archive_candidate, restore_candidate
from selection.models import AuditEntry, Candidate, DecisionRecord, Selection
from selection.records.services import archive_draft, create_draft, restore_draft, start_review, update_draft
from selection.scoring.services import compute_scores
from selection.setup.services import archive_selection, restore_selection
from tests.support.builders import stress_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def decided(decided, enrolled_owners):
    """The shared decided selection, its owners enrolled (a record goes to review only then)."""
    return decided


@pytest.fixture
def junk(decided, architect, engines):
    """A third candidate added by mistake, with a run."""
    candidate = add_candidate(
        selection=decided,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": engines["vllm"].versions[0], "label": "junk test"},
    )
    stress_run(candidate, (100.0, 200.0))
    return candidate


def actions(selection) -> list[str]:
    return list(AuditEntry.objects.filter(selection=selection).values_list("action", flat=True))


# --- candidates --------------------------------------------------------------------------------


def test_an_archived_candidate_leaves_the_comparison_scores_and_new_records_and_keeps_its_runs(
    client, architect, decided, junk
):
    assert "junk test" in {c["label"] for c in compute_scores(decided).result["candidates"]}
    client.force_login(architect)
    response = client.post(reverse("selection:candidate-archive", args=[decided.pk, junk.pk]), follow=True)
    assert "Candidate “junk test” archived" in response.content.decode()
    junk.refresh_from_db()
    assert junk.archived and BenchmarkRun.objects.filter(candidate=junk).count() == 1  # kept
    assert "candidate.archived" in actions(decided)

    assert "junk test" not in {c["label"] for c in compute_scores(decided).result["candidates"]}
    comparison = client.get(reverse("selection:comparison", args=[decided.pk])).content.decode()
    assert "junk test" not in comparison
    record = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    assert "junk test" not in {c["name"] for c in record.snapshot["candidates"]}
    assert all(entry["candidate"] != "junk test" for entry in record.snapshot["validation"])

    page = client.get(reverse("selection:candidates", args=[decided.pk])).content.decode()
    archived = page.split("data-archived-candidates")[1]
    assert "junk test" in archived and f'data-restore-candidate="{junk.pk}"' in archived
    assert f'data-archive-candidate="{junk.pk}"' not in page


def test_a_restored_candidate_is_compared_again_unless_its_name_was_taken(architect, decided, junk, engines):
    archive_candidate(candidate=junk, user=architect)
    taken = add_candidate(  # an archived candidate's name is free again
        selection=decided,
        user=architect,
        data={"engine": engines["sglang"], "engine_version": engines["sglang"].versions[0], "label": "Junk Test"},
    )
    with pytest.raises(ValidationError, match="already called “Junk Test”"):
        restore_candidate(candidate=junk, user=architect)
    archive_candidate(candidate=taken, user=architect)
    restore_candidate(candidate=junk, user=architect)
    junk.refresh_from_db()
    assert not junk.archived and "candidate.restored" in actions(decided)
    assert "junk test" in {c["label"] for c in compute_scores(decided).result["candidates"]}


def test_only_architects_archive_candidates(client, owners, decided, junk):
    client.force_login(owners["business"])
    assert client.post(reverse("selection:candidate-archive", args=[decided.pk, junk.pk])).status_code == 403
    with pytest.raises(PermissionDenied):
        archive_candidate(candidate=junk, user=owners["business"])
    assert not Candidate.objects.get(pk=junk.pk).archived


# --- selections --------------------------------------------------------------------------------


def test_an_archived_selection_is_off_the_dashboard_and_read_only_until_restored(client, architect, decided):
    Selection.objects.filter(pk=decided.pk).update(status=Selection.Status.VALIDATING)
    client.force_login(architect)
    assert client.post(reverse("selection:archive", args=[decided.pk])).status_code == 302
    decided.refresh_from_db()
    assert decided.status == Selection.Status.ARCHIVED

    dashboard = client.get(reverse("selection:dashboard")).content.decode()
    assert reverse("selection:detail", args=[decided.pk]) not in dashboard
    assert "1 archived selection" in dashboard
    listed = client.get(reverse("selection:dashboard"), {"archived": "1"}).content.decode()
    assert reverse("selection:detail", args=[decided.pk]) in listed

    page = client.get(reverse("selection:detail", args=[decided.pk])).content.decode()
    assert "data-archived-selection" in page and reverse("selection:restore", args=[decided.pk]) in page
    assert "Read-only: an architect restores the selection to continue." in page  # the next step says so
    assert "data-archive-selection" not in page
    refused = client.post(reverse("selection:gates", args=[decided.pk]), {"memory": "on"})
    assert refused.status_code == 403  # read-only
    assert "This selection is archived: restore it to change it." in refused.content.decode()

    assert client.post(reverse("selection:restore", args=[decided.pk])).status_code == 302
    decided.refresh_from_db()
    assert decided.status == Selection.Status.VALIDATING  # the status it had
    assert actions(decided)[:2] == ["selection.restored", "selection.archived"]


def test_only_architects_archive_a_selection(owners, decided, architect):
    with pytest.raises(PermissionDenied):
        archive_selection(selection=decided, user=owners["security"])
    archive_selection(selection=decided, user=architect)
    with pytest.raises(PermissionDenied):
        restore_selection(selection=decided, user=owners["security"])


# --- record drafts -----------------------------------------------------------------------------


def test_a_second_draft_attempt_continues_the_open_draft_instead_of_an_orphan_version(client, architect, decided):
    client.force_login(architect)
    url = reverse("selection:records", args=[decided.pk])
    first = client.post(url, {"rationale": "first try"}, follow=True).content.decode()
    assert "Draft v1 created" in first
    again = client.post(url, {"rationale": "second try"}, follow=True).content.decode()
    assert "Draft v1 updated" in again
    assert list(decided.records.values_list("version", "rationale")) == [(1, "second try")]
    assert "data-open-draft" in client.get(url).content.decode()

    archive_draft(record=decided.records.get(), user=architect)
    third = create_draft(selection=decided, user=architect, rationale="fresh start")
    assert third.version == 2 and decided.records.count() == 2  # the archived v1 is kept
    listing = client.get(url).content.decode()
    assert (
        "data-archived-records" in listing
        and f'href="{reverse("selection:record", args=[decided.pk, third.pk])}"' in listing
    )


def test_an_archived_draft_is_not_edited_or_reviewed_and_is_restored_only_without_an_open_one(architect, decided):
    draft = create_draft(selection=decided, user=architect)
    archive_draft(record=draft, user=architect)
    with pytest.raises(ValidationError, match="archived"):
        update_draft(record=draft, user=architect, rationale="x")
    with pytest.raises(ValidationError, match="archived"):
        start_review(record=draft, user=architect)
    other = create_draft(selection=decided, user=architect)
    with pytest.raises(ValidationError, match=f"Draft v{other.version} is open"):
        restore_draft(record=draft, user=architect)
    archive_draft(record=other, user=architect)
    restore_draft(record=draft, user=architect)
    assert DecisionRecord.objects.get(pk=draft.pk).archived_at is None
    assert {"record.archived", "record.restored"} <= set(actions(decided))


def test_a_record_that_left_draft_is_never_archived(client, architect, decided):
    record = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    with pytest.raises(ValidationError, match="only a draft can be archived"):
        archive_draft(record=record, user=architect)
    DecisionRecord.objects.filter(pk=record.pk).update(status=DecisionRecord.Status.SIGNED)
    client.force_login(architect)
    response = client.post(
        reverse("selection:record-action", args=[decided.pk, record.pk]), {"action": "archive"}, follow=True
    )
    assert "only a draft can be archived" in response.content.decode()
    assert DecisionRecord.objects.get(pk=record.pk).archived_at is None


def test_a_new_version_attempt_continues_the_successor_draft_even_archived(architect, decided):
    signed = create_draft(selection=decided, user=architect)
    DecisionRecord.objects.filter(pk=signed.pk).update(status=DecisionRecord.Status.SIGNED)
    signed.refresh_from_db()
    successor = create_draft(selection=decided, user=architect, supersedes=signed, rationale="v2")
    again = create_draft(selection=decided, user=architect, supersedes=signed, rationale="v2 again")
    assert again.pk == successor.pk and again.rationale == "v2 again"
    archive_draft(record=successor, user=architect)
    back = create_draft(selection=decided, user=architect, supersedes=signed, rationale="v2 once more")
    assert back.pk == successor.pk and back.archived_at is None  # a record has one successor: brought back
    assert decided.records.count() == 2
