"""Faults while CI uploads arrive: broker down, database errors, disk full. Nothing half-written."""

from __future__ import annotations

import errno
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest
from django.db import InterfaceError, OperationalError
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerDown

from benchmarks import tasks
from benchmarks.models import Artifact, BenchmarkRun, RunPoint
from benchmarks.storage import SavedFiles, StorageFailure, sha256_hex, store_native_result
from benchmarks.uploads.parse import parse_stored_upload
from tests.support.uploads import media_files, token_client, upload

pytestmark = pytest.mark.reliability

FIXTURES = Path(__file__).parents[1] / "benchmarks" / "formats" / "fixtures"

# the head of a vLLM result (what the request sniffs before storing a file it parses later)
LARGE = (
    b'{"model_id": "m", "completed": 1, "duration": 1.0, "note": "a large CI result", "pad": "' + b"x" * 6000 + b'"}'
)


@pytest.fixture
def media(media, settings):
    settings.KVSELECT_SYNC_PARSE_BYTES = 1024  # LARGE takes the asynchronous path
    return media


@pytest.fixture
def ci(selection_with_constraints, architect):
    return token_client(selection_with_constraints, architect)


def test_broker_down_upload_is_accepted_stored_and_requeued_when_it_returns(candidate, ci, media, monkeypatch):
    monkeypatch.setattr("config.celery.BROKER_PAUSE_S", 0.0)  # the reaper's next pass finds the broker back
    with mock.patch("benchmarks.tasks.parse_upload.apply_async", side_effect=BrokerDown("Error 111 connecting")):
        response = upload(ci, candidate.pk, LARGE, key="ci-1")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "parsing"
    run = BenchmarkRun.objects.get(pk=body["id"])
    assert run.progress == {"phase": "waiting for the job queue"}
    raw = run.artifacts.get(kind=Artifact.Kind.RAW)
    with raw.file.open("rb") as handle:
        assert handle.read() == LARGE  # the upload is stored, byte for byte
    assert raw.sha256 == sha256_hex(LARGE) == run.raw_sha256
    assert len(media_files(media)) == 1

    # The reaper leaves young uploads alone, then re-queues once the broker is back.
    with mock.patch("benchmarks.tasks.parse_upload.apply_async") as queued:
        tasks.reap_stale_runs()
        assert not queued.called
        tasks.reap_stale_runs(now=timezone.now() + timedelta(minutes=1))
    queued.assert_called_once()
    assert queued.call_args.args[0] == (run.pk,) and queued.call_args.kwargs["retry"] is False
    run.refresh_from_db()
    assert run.status == "parsing"
    # A client retry with the same key while waiting gets the same run, not a second one.
    with mock.patch("benchmarks.tasks.parse_upload.apply_async", side_effect=BrokerDown("down")):
        again = upload(ci, candidate.pk, LARGE, key="ci-1")
    assert again.status_code == 200 and again.json()["id"] == run.pk
    assert BenchmarkRun.objects.count() == 1


@pytest.mark.parametrize("fixture, outcome", [("vllm_bench_serve.json", "succeeded"), (None, "failed")])
def test_an_upload_parsed_after_a_broker_outage_no_longer_says_it_waits(candidate, ci, media, fixture, outcome):
    """Before: uploads parsed after a broker outage ended `succeeded` still showing "waiting for the job queue"."""
    data = (FIXTURES / fixture).read_bytes() if fixture else LARGE
    with mock.patch("benchmarks.tasks.parse_upload.apply_async", side_effect=BrokerDown("Error 111 connecting")):
        response = upload(ci, candidate.pk, data, filename="v.json", key="ci-later")
    run = BenchmarkRun.objects.get(pk=response.json()["id"])
    assert run.status == "parsing" and run.progress == {"phase": "waiting for the job queue"}
    assert response.json()["progress"] == {"phase": "waiting for the job queue"}  # the API says it waits
    parsed = parse_stored_upload(run.pk)  # the task, once the broker is back
    assert parsed.status == outcome and parsed.progress == {"phase": outcome, "percent": 100}


def test_broker_down_with_a_real_unreachable_url_still_accepts(candidate, ci, media, monkeypatch):
    """Not a mock of apply_async: the Celery app is pointed at a closed port."""
    from config.celery import app

    down = "redis://127.0.0.1:1/0"
    original = app.conf.broker_url  # read before the variable below changes what it returns
    monkeypatch.setenv("CELERY_BROKER_URL", down)  # Celery reads this variable before its own setting
    monkeypatch.delenv("CELERY_BROKER_WRITE_URL", raising=False)
    app.conf.broker_url = down
    try:
        with mock.patch.object(app, "_pool", None), mock.patch.object(app.amqp, "_producer_pool", None):
            response = upload(ci, candidate.pk, LARGE, key="ci-real")
    finally:
        app.conf.broker_url = original
    assert response.status_code == 202, response.content
    run = BenchmarkRun.objects.get(pk=response.json()["id"])
    assert run.status == "parsing" and run.progress["phase"] == "waiting for the job queue"
    assert run.artifacts.filter(kind="raw").count() == 1
    monkeypatch.undo()
    assert app.conf.broker_url == original  # later tests (and their workers) get the real broker back


@pytest.mark.parametrize(
    "error",
    [OperationalError("server closed the connection unexpectedly"), InterfaceError("connection already closed")],
)
def test_database_error_mid_write_is_503_and_nothing_half_written(candidate, ci, media, error):
    # The run row is written, the raw file saved, then the artifact row insert fails.
    with mock.patch.object(Artifact, "save", side_effect=error):
        response = upload(ci, candidate.pk, LARGE, key="ci-db")
    assert response.status_code == 503, response.content
    assert "temporarily unavailable" in response.json()["detail"]
    assert response["Retry-After"]
    assert not BenchmarkRun.objects.exists()
    assert not Artifact.objects.exists()
    assert media_files(media) == []  # the saved raw file was removed again
    # The client's retry with the same key succeeds once the database is back: exactly one run.
    with mock.patch("benchmarks.tasks.parse_upload.apply_async"):
        retry = upload(ci, candidate.pk, LARGE, key="ci-db")
    assert retry.status_code == 202
    assert BenchmarkRun.objects.count() == 1 and len(media_files(media)) == 1


def test_database_error_on_read_is_503(candidate, ci, media, architect):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(architect)
    with mock.patch(
        "benchmarks.api.views.candidate_for_request", side_effect=OperationalError("the database system is starting up")
    ):
        response = client.get(f"/api/v1/candidates/{candidate.pk}/results/")
    assert response.status_code == 503


def test_disk_full_before_writing_is_507_with_nothing_recorded(candidate, ci, media):
    full = OSError(errno.ENOSPC, "No space left on device")
    with mock.patch("django.core.files.storage.FileSystemStorage._save", side_effect=full):
        response = upload(ci, candidate.pk, LARGE, key="ci-full")
    assert response.status_code == 507, response.content
    assert "No space left on device" in response.json()["detail"]
    assert "raw artifact" in response.json()["detail"]
    assert not BenchmarkRun.objects.exists() and not Artifact.objects.exists() and not RunPoint.objects.exists()
    assert media_files(media) == []


def test_disk_full_half_way_through_the_write_leaves_no_orphan_file(candidate, ci, media):
    """The file is created and partly written before ENOSPC: the partial file must go too."""
    from django.core.files.base import File
    from django.core.files.uploadedfile import InMemoryUploadedFile

    def chunks_then_full(self, chunk_size=None):
        self.seek(0)
        yield self.read(100)
        raise OSError(errno.ENOSPC, "No space left on device")

    with (
        mock.patch.object(File, "chunks", chunks_then_full),
        mock.patch.object(InMemoryUploadedFile, "chunks", chunks_then_full),
    ):
        response = upload(ci, candidate.pk, LARGE, key="ci-half")
    assert response.status_code == 507, response.content
    assert not BenchmarkRun.objects.exists() and not Artifact.objects.exists()
    assert media_files(media) == []


def test_storage_error_on_a_later_artifact_removes_the_earlier_files(candidate, media, architect):
    """store_native_result writes several artifacts; the third fails: no rows, no files from the first two."""
    from benchmarks.result import NormalizedResult

    run = BenchmarkRun.objects.create(
        candidate=candidate, test="concurrency_stress", origin="harness", status="running"
    )
    result = NormalizedResult(tool="kvselect-harness", format="kvselect-harness", test="concurrency_stress", points=[])
    real_save = SavedFiles.save
    calls = []

    def save(self, run, kind, filename, data):
        calls.append(kind)
        if len(calls) == 3:
            raise StorageFailure("could not store the log artifact: No space left on device")
        return real_save(self, run, kind, filename, data)

    with mock.patch.object(SavedFiles, "save", save), pytest.raises(StorageFailure):
        store_native_result(
            run=run, result=result, status="succeeded", extra_files={"log": ("a.log", b"1"), "trace": ("b.log", b"2")}
        )
    assert len(calls) == 3
    assert not Artifact.objects.filter(run=run).exists()
    assert media_files(media) == []
    run.refresh_from_db()
    assert run.status == "running"  # unchanged: the reaper or the worker decides, not a half-write
