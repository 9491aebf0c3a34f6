"""Archiving is one operation everywhere (issue 37 item 3): an archived candidate takes no new evidence
(validation runs from the page and the API, uploads from the form and the API, confirmations, edits),
each refusal says so in words; the API archives with DELETE or POST …/archive/ and restores with
POST …/restore/, both audited; archiving cancels the runs still queued."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from rest_framework.test import APIClient

from benchmarks.models import BenchmarkRun
from benchmarks.validation.dispatch import CandidateArchived, start_validation
from selection.candidates.screening import override_screen
from selection.candidates.services import add_candidate, archive_candidate, restore_candidate, update_candidate
from selection.models import AuditEntry
from tests.support import uploads

pytestmark = pytest.mark.django_db

NATIVE = (Path(__file__).parents[2] / "benchmarks" / "formats" / "fixtures" / "vllm_bench_serve.json").read_bytes()


@pytest.fixture
def tested(selection_with_constraints, architect, engines):
    """A compared candidate with an (allow-listed) endpoint, and a second one that gets archived."""
    data = {"engine": engines["vllm"], "engine_version": "0.11.0", "endpoint_url": "http://127.0.0.1:9"}
    keep = add_candidate(selection=selection_with_constraints, user=architect, data={**data, "label": "kept"})
    gone = add_candidate(selection=selection_with_constraints, user=architect, data={**data, "label": "set aside"})
    return keep, gone


def archived_entries(selection, action: str) -> int:
    return AuditEntry.objects.filter(selection=selection, action=action).count()


def test_archiving_cancels_queued_runs_and_refuses_new_ones_in_words(tested, architect):
    keep, gone = tested
    queued = start_validation(candidate=gone, test="concurrency_stress", user=architect)
    archive_candidate(candidate=gone, user=architect)
    queued.refresh_from_db()
    assert queued.status == BenchmarkRun.Status.CANCELLED
    entry = AuditEntry.objects.get(selection=gone.selection, action="candidate.archived")
    assert entry.new["runs_cancelled"] == [queued.pk]
    gone.refresh_from_db()
    with pytest.raises(CandidateArchived, match="“set aside” is archived: it takes no new evidence"):
        start_validation(candidate=gone, test="concurrency_stress", user=architect)
    assert start_validation(candidate=keep, test="concurrency_stress", user=architect).status == "queued"


def test_an_archived_candidate_is_not_edited_overridden_or_confirmed(tested, architect):
    _keep, gone = tested
    archive_candidate(candidate=gone, user=architect)
    gone.refresh_from_db()
    with pytest.raises(ValidationError, match="is archived"):
        update_candidate(candidate=gone, user=architect, data={"label": "renamed"})
    with pytest.raises(ValidationError, match="is archived"):
        override_screen(candidate=gone, user=architect, justification="test it anyway")


def test_the_validation_page_offers_no_run_and_refuses_a_posted_one(client, tested, architect):
    _keep, gone = tested
    archive_candidate(candidate=gone, user=architect)
    client.force_login(architect)
    page = client.get(reverse("selection:validation", args=[gone.selection_id, gone.pk])).content.decode()
    assert f'data-archived-candidate="{gone.pk}"' in page and f'data-restore-candidate="{gone.pk}"' in page
    assert "Edit candidate" not in page
    response = client.post(
        reverse("selection:validation-start", args=[gone.selection_id, gone.pk, "concurrency_stress"]),
        {f"concurrency_stress-{k}": v for k, v in {"concurrency": 4, "duration_s": 5}.items()},
    )
    assert not BenchmarkRun.objects.filter(candidate=gone).exists()
    assert response.status_code in (302, 400)
    follow = client.get(response.url) if response.status_code == 302 else response
    assert "it takes no new evidence" in follow.content.decode()


def test_the_evidence_and_upload_pages_list_it_only_as_archived(client, tested, architect):
    keep, gone = tested
    archive_candidate(candidate=gone, user=architect)
    client.force_login(architect)
    evidence = client.get(reverse("selection:evidence", args=[gone.selection_id])).content.decode()
    table, archived = evidence.split("data-archived-candidates")
    assert reverse("selection:validation", args=[gone.selection_id, gone.pk]) + '"' not in table
    assert "set aside" in archived and "set aside" not in table
    response = client.post(reverse("selection:token-create", args=[gone.selection_id]), {"name": "ci"})
    page = response.content.decode()
    assert f"<code>{gone.pk}</code>" not in page  # "Other candidates: replace the id in the URL"
    assert f'<option value="{gone.pk}"' not in page and f'<option value="{keep.pk}"' in page


def test_an_upload_for_an_archived_candidate_is_refused_on_the_form_and_the_api(client, tested, architect, media):
    keep, gone = tested
    token = uploads.token_client(gone.selection, architect)
    first = uploads.upload(token, gone.pk, NATIVE, key="before")
    assert first.status_code == 201, first.json()
    archive_candidate(candidate=gone, user=architect)

    refused = uploads.upload(token, gone.pk, NATIVE, key="after")
    assert refused.status_code == 409
    assert "it takes no new evidence" in refused.json()["candidate"][0]
    assert uploads.upload(token, gone.pk, NATIVE, key="before").status_code == 200  # a retry of one received before

    client.force_login(architect)
    response = client.post(
        reverse("selection:result-upload", args=[gone.selection_id]),
        {"candidate": gone.pk, "test": "concurrency_stress", "file": SimpleUploadedFile("r.json", NATIVE)},
    )
    assert response.status_code == 400 and "it takes no new evidence" in response.content.decode()
    assert BenchmarkRun.objects.filter(candidate=gone).count() == 1
    assert uploads.upload(token, keep.pk, NATIVE).status_code == 201


def test_the_api_archives_with_delete_or_post_and_restores_audited(tested, architect, reviewer):
    keep, gone = tested
    api = APIClient()
    api.force_authenticate(reviewer)
    assert api.delete(f"/api/v1/candidates/{gone.pk}/").status_code == 403
    api.force_authenticate(architect)

    response = api.delete(f"/api/v1/candidates/{gone.pk}/")
    assert response.status_code == 200 and response.json()["archived_at"]
    started = api.post(f"/api/v1/candidates/{gone.pk}/validations/", {"test": "concurrency_stress"}, format="json")
    assert started.status_code == 409 and "takes no new evidence" in started.json()["candidate"][0]

    restored = api.post(f"/api/v1/candidates/{gone.pk}/restore/")
    assert restored.status_code == 200 and restored.json()["archived_at"] is None
    assert api.post(f"/api/v1/candidates/{keep.pk}/archive/").json()["archived_at"]
    assert archived_entries(gone.selection, "candidate.archived") == 2
    assert archived_entries(gone.selection, "candidate.restored") == 1
    started = api.post(f"/api/v1/candidates/{gone.pk}/validations/", {"test": "concurrency_stress"}, format="json")
    assert started.status_code == 202


def test_restoring_through_the_api_names_a_taken_label(tested, architect, engines):
    _keep, gone = tested
    archive_candidate(candidate=gone, user=architect)
    add_candidate(
        selection=gone.selection,
        user=architect,
        data={"engine": engines["sglang"], "engine_version": engines["sglang"].versions[0], "label": "Set Aside"},
    )
    api = APIClient()
    api.force_authenticate(architect)
    response = api.post(f"/api/v1/candidates/{gone.pk}/restore/")
    assert response.status_code == 400 and "already called" in response.json()["label"][0]
    with pytest.raises(ValidationError):
        restore_candidate(candidate=gone, user=architect)
