"""The CI upload API: every format through HTTP, tokens, idempotency, nothing half-written."""

from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from benchmarks.models import Artifact, BenchmarkRun, RunPoint
from benchmarks.uploads.tokens import create_upload_token, revoke_upload_token
from selection.candidates.services import add_candidate
from selection.setup.services import create_selection

FIXTURES = Path(__file__).parents[1] / "formats" / "fixtures"
# (fixture file, expected format name)
FILES = [
    ("guidellm.json", "guidellm"),
    ("guidellm.csv", "guidellm-csv"),
    ("guidellm_v0.3.1_sweep.json", "guidellm"),
    ("aiperf.json", "aiperf"),
    ("aiperf.profile_export.jsonl", "aiperf-jsonl"),
    ("aiperf.profile_export_aiperf.csv", "aiperf-csv"),
    ("genai-perf_profile_export_genai_perf.json", "genai-perf"),
    ("genai-perf_profile_export_raw.json", "perf-analyzer-raw"),
    ("vllm_bench_serve.json", "vllm"),
    ("sglang_bench_serving.json", "sglang"),
    ("inference-perf_summary_lifecycle_metrics.json", "inference-perf"),
    ("llmperf_summary.json", "llmperf"),
]


@pytest.fixture
def candidate(selection_with_constraints, architect, engines):
    return add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0"},
    )


@pytest.fixture
def token_client(candidate, architect):
    _, raw = create_upload_token(selection=candidate.selection, user=architect, name="ci")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return client


def upload(client, candidate, name, data=None, **extra):
    content = data if data is not None else (FIXTURES / name).read_bytes()
    return client.post(
        f"/api/v1/candidates/{candidate.pk}/results/",
        {"file": SimpleUploadedFile(name, content), "test": "concurrency_stress", **extra},
        **{k: v for k, v in extra.items() if k.startswith("HTTP_")},
    )


@pytest.mark.parametrize("name,fmt", FILES)
def test_every_format_uploads_and_normalises(token_client, candidate, name, fmt):
    response = upload(token_client, candidate, name)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["format"] == fmt and body["status"] == "succeeded" and body["evidence"] == "MEASURED"
    assert body["points"] and body["uploaded_by"] == "token:ci"
    assert len(body["raw_sha256"]) == 64
    assert Artifact.objects.filter(run_id=body["id"], kind="raw").exists()


def test_per_request_records_are_downloadable_as_csv(token_client, candidate):
    run_id = upload(token_client, candidate, "vllm_bench_serve.json").json()["id"]
    response = token_client.get(f"/api/v1/runs/{run_id}/requests/?as=csv")
    assert response.status_code == 200 and response.content.decode().splitlines()[0].startswith('"point"')


def test_an_unknown_file_names_each_format_tried_and_stores_nothing(token_client, candidate):
    response = upload(token_client, candidate, "notes.json", data=b'{"hello": "world"}')
    assert response.status_code == 400
    body = response.json()
    assert "guidellm" in body["formats_tried"] and "vllm" in body["formats_tried"]
    assert not BenchmarkRun.objects.exists() and not Artifact.objects.exists()


def test_a_corrupt_known_format_is_a_precise_400(token_client, candidate):
    truncated = (FIXTURES / "guidellm.json").read_bytes()[:5000]
    response = upload(token_client, candidate, "guidellm.json", data=truncated)
    assert response.status_code == 400 and response.json()["file"]
    wrong = b'{"benchmarks": [{"metrics": []}]}'
    response = upload(token_client, candidate, "guidellm.json", data=wrong, format="guidellm")
    assert response.status_code == 400 and "benchmarks[0]" in response.json()["file"][0]
    assert not BenchmarkRun.objects.exists() and not RunPoint.objects.exists()


def test_idempotency_key_returns_the_first_run(token_client, candidate):
    first = token_client.post(
        f"/api/v1/candidates/{candidate.pk}/results/",
        {
            "file": SimpleUploadedFile("v.json", (FIXTURES / "vllm_bench_serve.json").read_bytes()),
            "test": "concurrency_stress",
        },
        HTTP_IDEMPOTENCY_KEY="build-42",
    )
    again = token_client.post(
        f"/api/v1/candidates/{candidate.pk}/results/",
        {
            "file": SimpleUploadedFile("v.json", (FIXTURES / "vllm_bench_serve.json").read_bytes()),
            "test": "concurrency_stress",
        },
        HTTP_IDEMPOTENCY_KEY="build-42",
    )
    assert first.status_code == 201 and again.status_code == 200
    assert first.json()["id"] == again.json()["id"] and BenchmarkRun.objects.count() == 1


def test_token_of_another_selection_is_403_and_revoked_is_401(candidate, architect, team, engines, token_client):
    other = create_selection(
        user=architect,
        team=team,
        name="Other",
        business_owner=architect,
        platform_owner=architect,
        security_owner=architect,
    )
    _, raw = create_upload_token(selection=other, user=architect, name="other-ci")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    assert upload(client, candidate, "vllm_bench_serve.json").status_code == 403
    assert client.get(f"/api/v1/candidates/{candidate.pk}/results/").status_code == 403
    assert client.get("/api/v1/selections/").status_code == 403  # tokens only reach result endpoints
    token = other.upload_tokens.get()
    revoke_upload_token(token=token, user=architect)
    assert client.get(f"/api/v1/candidates/{candidate.pk}/results/").status_code == 401


def test_large_files_are_parsed_by_the_worker_path(
    token_client, candidate, settings, django_capture_on_commit_callbacks
):
    settings.KVSELECT_SYNC_PARSE_BYTES = 10
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(token_client, candidate, "vllm_bench_serve.json")
    assert response.status_code == 202 and response.json()["status"] == "parsing"
    from benchmarks.uploads.parse import parse_stored_upload

    run = parse_stored_upload(response.json()["id"])
    assert run.status == "succeeded" and run.points.exists()


def test_oversized_upload_is_413(token_client, candidate, settings):
    settings.KVSELECT_MAX_UPLOAD_BYTES = 100
    assert upload(token_client, candidate, "vllm_bench_serve.json").status_code == 413
    assert not BenchmarkRun.objects.exists()
