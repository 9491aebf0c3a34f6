"""Pages without dead ends or misleading words (issue 37): an oversized upload is a page with a way back,
in the reader's language; a failed login does not say "Nothing was saved"; a run that never reached the
engine is not badged MEASURED and is not told to check its endpoint; a refused file is named so the user
chooses it again; an expected 403 writes one line to the log, no traceback; /favicon.ico is served; a
record with one signature of three does not offer a "signed PDF"."""

from __future__ import annotations

import logging

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from benchmarks import presentation
from benchmarks.models import BenchmarkRun
from selection.candidates.services import add_candidate

pytestmark = pytest.mark.django_db


@pytest.fixture
def candidate(selection_with_constraints, architect, engines):
    return add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0", "endpoint_url": "http://127.0.0.1:9"},
    )


def test_an_oversized_upload_is_a_page_with_a_way_back_in_the_readers_language(client, architect, candidate, settings):
    settings.KVSELECT_MAX_UPLOAD_BYTES = 1000
    settings.KVSELECT_REQUEST_OVERHEAD_BYTES = 100
    client.force_login(architect)
    uploads = reverse("selection:uploads", args=[candidate.selection_id])
    body = {"candidate": candidate.pk, "test": "concurrency_stress", "file": SimpleUploadedFile("r.json", b" " * 5000)}
    response = client.post(
        reverse("selection:result-upload", args=[candidate.selection_id]),
        body,
        HTTP_REFERER=f"http://testserver{uploads}",
    )
    page = response.content.decode()
    assert response.status_code == 413 and response["Content-Type"].startswith("text/html")
    assert "This file is too large to upload" in page and "Nothing was read or stored" in page
    assert f'href="http://testserver{uploads}" data-back-to-form' in page

    chinese = client.post(
        reverse("selection:result-upload", args=[candidate.selection_id]),
        {**body, "file": SimpleUploadedFile("r.json", b" " * 5000)},
        HTTP_ACCEPT_LANGUAGE="zh-hans",
    )
    assert chinese.status_code == 413 and "文件过大" in chinese.content.decode()
    assert "data-back-to-form" not in chinese.content.decode()  # no referer: the error page's own links


def test_a_failed_login_does_not_say_nothing_was_saved(client, architect):
    response = client.post(reverse("login"), {"username": "alice", "password": "wrong"})
    page = response.content.decode()
    assert "You are not logged in" in page and "Nothing was saved" not in page


@pytest.mark.parametrize(
    "error,origin,advice",
    [
        ("params: params.rate: must be a positive number", "harness", "A parameter was refused"),
        ("worker lost: no heartbeat for more than 45 s", "harness", "The worker running the test stopped"),
        ("engine unreachable: http://127.0.0.1:9 did not answer /health", "harness", "The engine never answered"),
        ("engine unreachable: launch_recipe: not healthy within 60 s", "harness", "launch recipe"),
        ("endpoint_url: not in KVSELECT_ALLOWED_TARGETS", "harness", "outbound allow-list"),
        ("RuntimeError: connection reset", "harness", "Check the candidate's endpoint"),
        ("not UTF-8 text", "upload", "could not be parsed"),
    ],
)
def test_a_failed_run_is_advised_by_what_failed(error, origin, advice):
    assert advice in presentation.failure_advice(error, origin)


def test_a_run_that_never_reached_the_engine_is_not_badged_measured(client, architect, candidate):
    run = BenchmarkRun.objects.create(
        candidate=candidate,
        test="concurrency_stress",
        origin="harness",
        status="failed",
        error="params: params.rate: must be a positive number of requests/s or null (closed loop), got 0.0",
    )
    client.force_login(architect)
    page = client.get(reverse("selection:run", args=[candidate.selection_id, run.pk])).content.decode()
    assert "data-no-evidence" in page and ">MEASURED<" not in page
    assert "A parameter was refused before any request was sent" in page
    assert "Check the candidate&#x27;s endpoint" not in page


def test_a_refused_file_is_named_so_the_user_chooses_it_again(client, architect, candidate):
    client.force_login(architect)
    response = client.post(
        reverse("selection:result-upload", args=[candidate.selection_id]),
        {"candidate": candidate.pk, "test": "concurrency_stress", "file": SimpleUploadedFile("bench.json", b"{}")},
    )
    page = response.content.decode()
    assert response.status_code == 400 and "data-choose-again" in page and "“bench.json”" in page
    assert f'data-page-url="{reverse("selection:uploads", args=[candidate.selection_id])}"' in page


def test_an_expected_403_logs_one_line_without_a_traceback(client, reviewer, candidate, caplog):
    client.force_login(reviewer)
    with caplog.at_level(logging.WARNING, logger="django.request"):
        response = client.post(reverse("selection:constraints", args=[candidate.selection_id]), {})
    assert response.status_code == 403
    forbidden = [r for r in caplog.records if r.name == "django.request" and getattr(r, "status_code", 0) == 403]
    assert forbidden and all(r.exc_info is None for r in forbidden)
    handler = logging.StreamHandler()
    assert "Traceback" not in handler.format(forbidden[0])


def test_the_favicon_is_served_without_a_login():
    response = Client().get("/favicon.ico")
    assert response.status_code == 200 and response["Content-Type"] == "image/x-icon"
    assert b"".join(response.streaming_content)[:4] == b"\x00\x00\x01\x00"  # an ICO header
