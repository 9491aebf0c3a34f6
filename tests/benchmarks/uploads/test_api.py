"""The CI upload API: every format through HTTP, tokens, idempotency, nothing half-written."""

import gzip
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from benchmarks.models import Artifact, BenchmarkRun, RunPoint
from benchmarks.selectors import latest_runs
from benchmarks.uploads.tokens import create_upload_token, revoke_upload_token
from selection.models import AuditEntry
from selection.setup.services import create_selection
from tests.support import uploads

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
def token_client(candidate, architect):
    return uploads.token_client(candidate.selection, architect)


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


def test_token_of_another_selection_is_403_and_revoked_is_401(
    candidate, architect, team, engines, token_client, selection_owners
):
    other = create_selection(
        user=architect,
        team=team,
        name="Other",
        business_owner=selection_owners["business"],
        platform_owner=selection_owners["platform"],
        security_owner=selection_owners["security"],
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


# --- issue 16: idempotency per file, refusing unknown large files before storing, evidence quality ------


def keyed(client, candidate, name, key, data=None):
    content = data if data is not None else (FIXTURES / name).read_bytes()
    return client.post(
        f"/api/v1/candidates/{candidate.pk}/results/",
        {"file": SimpleUploadedFile(name, content), "test": "concurrency_stress"},
        HTTP_IDEMPOTENCY_KEY=key,
    )


def test_idempotency_key_reused_for_another_file_is_a_409_naming_the_key_and_the_first_run(token_client, candidate):
    first = keyed(token_client, candidate, "vllm_bench_serve.json", "build-42")
    assert first.status_code == 201
    other = keyed(token_client, candidate, "guidellm.json", "build-42")  # before: 200 with the first run
    assert other.status_code == 409
    message = other.json()["Idempotency-Key"][0]
    assert "'build-42'" in message and f"run #{first.json()['id']}" in message
    assert BenchmarkRun.objects.count() == 1
    # the README's key names the job, the test and the file: two files of one job are two runs
    a = keyed(token_client, candidate, "guidellm.json", "run-7-1-concurrency_stress-guidellm.json")
    b = keyed(token_client, candidate, "aiperf.json", "run-7-1-concurrency_stress-aiperf.json")
    assert a.status_code == b.status_code == 201 and a.json()["id"] != b.json()["id"]
    again = keyed(token_client, candidate, "aiperf.json", "run-7-1-concurrency_stress-aiperf.json")
    assert again.status_code == 200 and again.json()["id"] == b.json()["id"]


def test_the_readme_example_key_names_the_file():
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    assert '-H "Idempotency-Key: $GITHUB_RUN_ID-$GITHUB_RUN_ATTEMPT-concurrency_stress-benchmarks.json"' in readme


def test_a_large_unrecognisable_file_is_refused_before_anything_is_stored(token_client, candidate, settings):
    settings.KVSELECT_SYNC_PARSE_BYTES = 1024  # the asynchronous path: before, 202 and a failure later
    response = upload(token_client, candidate, "results.json", data=bytes(200_000))
    assert response.status_code == 400
    assert "guidellm" in response.json()["formats_tried"] and "aiperf-jsonl" in response.json()["formats_tried"]
    assert not BenchmarkRun.objects.exists() and not Artifact.objects.exists()


def test_a_large_real_file_still_goes_to_the_worker(token_client, candidate, settings):
    settings.KVSELECT_SYNC_PARSE_BYTES = 1024
    data = gzip.decompress((FIXTURES / "guidellm_0.8.1_c64_max12s.benchmarks.json.gz").read_bytes())
    response = upload(token_client, candidate, "benchmarks.json", data=data)
    assert response.status_code == 202 and response.json()["status"] == "parsing"


def test_a_forced_wrong_parser_is_refused_with_the_reason(token_client, candidate):
    response = upload(token_client, candidate, "guidellm.json", format="aiperf")  # before: 201, an empty run
    assert response.status_code == 400 and "no request and no figure" in response.json()["file"][0]
    assert not BenchmarkRun.objects.exists()


def test_an_upload_with_quality_warnings_counts_only_once_confirmed(token_client, candidate, architect, client):
    candidate.model_name = "meta-llama/Llama-3.1-8B"
    candidate.save()
    body = upload(token_client, candidate, "vllm_bench_serve.json").json()  # mock-model, engine=mock, 6 requests
    codes = {w["code"]: w for w in body["quality_warnings"]}
    assert set(codes) == {"model_mismatch", "engine_mismatch", "few_requests"}
    assert codes["model_mismatch"]["file"] == "mock-model" and codes["few_requests"]["requests"] == 6
    assert body["needs_confirmation"] is True
    run = BenchmarkRun.objects.get(pk=body["id"])
    assert latest_runs(candidate) == {}  # scoring leaves it out
    client.force_login(architect)
    page = client.get(f"/selections/{candidate.selection.pk}/runs/{run.pk}/").content.decode()
    assert 'data-warning="model_mismatch"' in page and "Use as evidence" in page
    response = client.post(f"/selections/{candidate.selection.pk}/runs/{run.pk}/use-as-evidence/")
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.evidence_confirmed_by == architect.get_username() and not run.needs_confirmation
    assert latest_runs(candidate)["concurrency_stress"].pk == run.pk
    assert AuditEntry.objects.filter(action="upload.confirmed_as_evidence", field=f"run:{run.pk}").exists()


def test_only_an_editor_may_confirm_an_upload_as_evidence(token_client, candidate, reviewer, client):
    run_id = upload(token_client, candidate, "vllm_bench_serve.json").json()["id"]
    client.force_login(reviewer)
    response = client.post(f"/selections/{candidate.selection.pk}/runs/{run_id}/use-as-evidence/")
    assert response.status_code == 403
    assert BenchmarkRun.objects.get(pk=run_id).needs_confirmation


def test_a_file_of_the_selections_model_and_engine_with_enough_requests_has_no_warning(token_client, candidate):
    """Checked against the selection's model (issue 33 item 5), not the candidate's model name."""
    data = gzip.decompress((FIXTURES / "vllm_0.33.0_bench_serve_c64_n1000.json.gz").read_bytes())
    data = data.replace(b'"engine": "mock"', b'"engine": "vllm"')
    target = candidate.selection.constraints.target_model.encode()
    body = upload(token_client, candidate, "v.json", data=data.replace(b"mock-model", b"meta-llama/" + target)).json()
    assert body["quality_warnings"] == [] and body["needs_confirmation"] is False


def test_a_file_of_the_candidates_model_name_but_not_the_selections_model_is_warned(token_client, candidate):
    candidate.model_name = "mock-model"  # the candidate says so; nothing shows it is the selection's model
    candidate.save()
    data = gzip.decompress((FIXTURES / "vllm_0.33.0_bench_serve_c64_n1000.json.gz").read_bytes())
    body = upload(token_client, candidate, "v.json", data=data.replace(b'"engine": "mock"', b'"engine": "vllm"')).json()
    assert [w["code"] for w in body["quality_warnings"]] == ["model_mismatch"] and body["needs_confirmation"]


def test_idempotency_key_reused_for_the_same_file_with_another_test_is_a_409(token_client, candidate):
    def post(test):
        return token_client.post(
            f"/api/v1/candidates/{candidate.pk}/results/",
            {"file": SimpleUploadedFile("v.json", (FIXTURES / "vllm_bench_serve.json").read_bytes()), "test": test},
            HTTP_IDEMPOTENCY_KEY="build-43",
        )

    first = post("concurrency_stress")
    assert first.status_code == 201
    other = post("prefix_reuse")  # before: 200 with the first run, the new test dropped
    assert other.status_code == 409
    message = other.json()["Idempotency-Key"][0]
    assert "'build-43'" in message and f"run #{first.json()['id']}" in message
    assert "'concurrency_stress'" in message and "'prefix_reuse'" in message
    assert BenchmarkRun.objects.count() == 1 and BenchmarkRun.objects.get().test == "concurrency_stress"
    assert post("concurrency_stress").status_code == 200
