"""Evidence behind a record in review or signed cannot be deleted: not through the ORM (PROTECT), not
through SQL (triggers), not in the admin; an allowed deletion is audited and removes its files
(issue 20 item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.models import ProtectedError

from benchmarks.models import Artifact, BenchmarkRun, RunPoint
from benchmarks.storage import SavedFiles
from selection.candidates.services import EvidenceCited, add_candidate, delete_candidate
from selection.models import AuditEntry, Candidate, RecordCitation, Selection
from selection.records.services import create_draft, start_review

pytestmark = pytest.mark.reliability


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.fixture
def in_review(decided, architect, media):
    for run in BenchmarkRun.objects.filter(candidate__selection=decided):
        SavedFiles().save(run, Artifact.Kind.RAW, f"run-{run.pk}.json", b'{"raw": true}')
    return start_review(record=create_draft(selection=decided, user=architect), user=architect)


def sql(statement: str, *params) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, params)


def test_review_cites_every_candidate_compared_and_every_run_listed(in_review):
    runs = set(BenchmarkRun.objects.filter(candidate__selection=in_review.selection).values_list("pk", flat=True))
    cited = RecordCitation.objects.filter(record=in_review)
    assert {c.run_id for c in cited if c.run_id} == runs
    assert {c.candidate_id for c in cited if not c.run_id} == set(
        in_review.selection.candidates.values_list("pk", flat=True)
    )


def test_cited_evidence_cannot_be_deleted_through_the_orm(in_review, media):
    candidate = in_review.selection.candidates.first()
    run = candidate.runs.first()
    with pytest.raises(ProtectedError):
        candidate.delete()
    with pytest.raises(ProtectedError):
        run.delete()
    assert Candidate.objects.filter(pk=candidate.pk).exists() and BenchmarkRun.objects.filter(pk=run.pk).exists()
    assert len(files(media)) == 2


@pytest.mark.parametrize(
    "table",
    ["benchmarks_artifact", "benchmarks_runpoint", "benchmarks_benchmarkrun", "selection_candidate"],
)
def test_cited_evidence_cannot_be_deleted_through_sql(in_review, table):
    """What the ORM does not stop (a shell, raw SQL, a script) the database does."""
    run = in_review.selection.candidates.first().runs.first()
    key = {"benchmarks_benchmarkrun": ("id", run.pk), "selection_candidate": ("id", run.candidate_id)}.get(
        table, ("run_id", run.pk)
    )
    with pytest.raises(DatabaseError, match="cited by a decision record"):
        sql(f"DELETE FROM {table} WHERE {key[0]} = %s", key[1])
    assert Artifact.objects.filter(run=run).exists() and RunPoint.objects.filter(run=run).exists()


def test_a_citation_of_a_record_in_review_cannot_be_removed(in_review):
    with pytest.raises(DatabaseError, match="citation"):
        sql("DELETE FROM selection_recordcitation WHERE record_id = %s", in_review.pk)
    assert RecordCitation.objects.filter(record=in_review).exists()


def test_the_service_refuses_cited_candidates_naming_the_record(in_review, architect):
    candidate = in_review.selection.candidates.first()
    with pytest.raises(EvidenceCited, match=r"decision record v1 \(In review\).*archive"):
        delete_candidate(candidate=candidate, user=architect)


def test_admin_cannot_delete_a_cited_candidate(in_review, admin_client, media, django_capture_on_commit_callbacks):
    candidate = in_review.selection.candidates.first()
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(f"/admin/selection/candidate/{candidate.pk}/delete/", {"post": "yes"})
    assert response.status_code == 200  # the confirmation page lists the protected citations instead
    assert "protected" in response.content.decode().lower()
    assert Candidate.objects.filter(pk=candidate.pk).exists()
    assert len(files(media)) == 2
    assert not AuditEntry.objects.filter(action="candidate.deleted").exists()


def test_an_uncited_candidate_deleted_in_the_admin_is_audited_and_its_files_removed(
    selection_with_constraints, architect, engines, admin_client, admin_user, media, django_capture_on_commit_callbacks
):
    candidate = add_candidate(
        selection=selection_with_constraints, user=architect, data={"engine": engines["vllm"], "engine_version": "1"}
    )
    run = BenchmarkRun.objects.create(candidate=candidate, test="custom", origin="upload", status="succeeded")
    SavedFiles().save(run, Artifact.Kind.RAW, "raw.json", b"{}")
    SavedFiles().save(run, Artifact.Kind.NATIVE, "native.json", b"{}")
    assert len(files(media)) == 2
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(f"/admin/selection/candidate/{candidate.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Candidate.objects.filter(pk=candidate.pk).exists() and not BenchmarkRun.objects.exists()
    assert files(media) == []  # before: the rows went, the files stayed on disk
    entry = AuditEntry.objects.get(action="candidate.deleted")
    assert entry.actor == admin_user and entry.old["runs"] == [run.pk] and len(entry.old["files"]) == 2


def test_selections_are_archived_not_deleted_in_the_admin(selection, admin_client, admin_user):
    response = admin_client.post(f"/admin/selection/selection/{selection.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    response = admin_client.post(
        "/admin/selection/selection/", {"action": "archive", "_selected_action": [selection.pk]}
    )
    assert response.status_code == 302
    selection.refresh_from_db()
    assert selection.status == Selection.Status.ARCHIVED
    assert AuditEntry.objects.filter(selection=selection, action="selection.archived", actor=admin_user).exists()
