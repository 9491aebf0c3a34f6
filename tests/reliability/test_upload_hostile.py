"""Hostile and bad uploads through the CI API: never a 500, never a stored partial run, clear 4xx."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.models import Artifact, BenchmarkRun, RunPoint
from tests.support.uploads import media_files, token_client, upload

pytestmark = pytest.mark.reliability

FIXTURES = Path(__file__).resolve().parents[1] / "benchmarks" / "formats" / "fixtures"
REAL = {
    name: (FIXTURES / name).read_bytes()
    for name in (
        "vllm_bench_serve.json",
        "sglang_bench_serving.json",
        "guidellm.csv",
        "llmperf_summary.json",
        "genai-perf_profile_export_genai_perf.json",
        "aiperf.profile_export_aiperf.csv",
    )
}


@pytest.fixture
def ci(selection_with_constraints, architect):
    return token_client(selection_with_constraints, architect)


def assert_refused(response, status, *words):
    assert response.status_code == status, (response.status_code, response.content[:500])
    text = json.dumps(response.json()).lower()
    for word in words:
        assert word.lower() in text, (word, text[:500])
    assert not BenchmarkRun.objects.exists() and not Artifact.objects.exists() and not RunPoint.objects.exists()


def test_a_real_file_is_accepted(candidate, ci, media):
    response = upload(ci, candidate.pk, REAL["vllm_bench_serve.json"], "vllm_bench_serve.json")
    assert response.status_code == 201, response.content[:500]
    assert response.json()["status"] == "succeeded" and response.json()["points"]


def test_oversized_upload_is_413(candidate, ci, media, settings):
    settings.KVSELECT_MAX_UPLOAD_BYTES = 1000
    assert_refused(upload(ci, candidate.pk, b" " * 1001 + b"{}"), 413, "exceeds the limit of 1,000")
    assert media_files(media) == []


def test_gzip_upload_is_decompressed_and_parsed(candidate, ci, media):
    response = upload(ci, candidate.pk, gzip.compress(REAL["vllm_bench_serve.json"]), "vllm_bench_serve.json.gz")
    assert response.status_code == 201, response.content[:500]
    run = BenchmarkRun.objects.get()
    assert run.params["compressed"] == "gzip" and run.params["filename"] == "vllm_bench_serve.json"
    assert run.format.startswith("vllm")


def test_gzip_bomb_is_stopped_at_the_decompressed_limit(candidate, ci, media, settings):
    settings.KVSELECT_MAX_UPLOAD_BYTES = 1_000_000
    bomb = gzip.compress(b"\0" * 200_000_000, compresslevel=9)  # ~200 KB that would inflate to 200 MB
    assert len(bomb) < settings.KVSELECT_MAX_UPLOAD_BYTES
    assert_refused(upload(ci, candidate.pk, bomb, "bomb.json.gz"), 413, "decompressed size", "gzip")
    assert media_files(media) == []


def test_corrupt_gzip_is_400(candidate, ci, media):
    broken = gzip.compress(REAL["vllm_bench_serve.json"])[:200]
    assert_refused(upload(ci, candidate.pk, broken, "r.json.gz"), 400, "gzip")


def test_deeply_nested_json_is_400_naming_the_nesting(candidate, ci, media):
    assert_refused(upload(ci, candidate.pk, b'{"a": ' * 100_000 + b"1" + b"}" * 100_000), 400, "nested")


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_in_a_strict_format_are_400(candidate, ci, media, literal):
    document = json.loads(REAL["vllm_bench_serve.json"])
    key = next(k for k, v in document.items() if isinstance(v, float))
    text = (
        REAL["vllm_bench_serve.json"]
        .decode()
        .replace(json.dumps({key: document[key]})[1:-1], f'"{key}": {literal.decode()}', 1)
    )
    assert literal.decode() in text
    response = upload(ci, candidate.pk, text.encode(), "vllm_bench_serve.json")
    assert_refused(response, 400, "nan" if literal == b"NaN" else "infinity")


def test_huge_numbers_never_reach_the_database_as_non_finite(candidate, ci, media):
    document = json.loads(REAL["vllm_bench_serve.json"])
    for key, value in list(document.items()):
        if isinstance(value, float):
            document[key] = 1.7e308
        elif isinstance(value, int) and not isinstance(value, bool):
            document[key] = 10**400
    response = upload(ci, candidate.pk, json.dumps(document).encode(), "vllm_bench_serve.json")
    assert response.status_code in (201, 400), response.content[:500]
    if response.status_code == 400:
        assert not BenchmarkRun.objects.exists()
    else:
        json.dumps(response.json(), allow_nan=False)  # the API never answers NaN/Infinity


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "latin-1"])
def test_wrong_encodings_are_400_or_parsed_never_500(candidate, ci, media, encoding):
    text = REAL["vllm_bench_serve.json"].decode("utf-8")
    data = text.encode(encoding) + (b" \xff\xfe\xe9" if encoding == "latin-1" else b"")  # latin-1: invalid UTF-8
    response = upload(ci, candidate.pk, data, "vllm_bench_serve.json")
    assert response.status_code in (201, 400), response.content[:500]
    if response.status_code == 400:
        assert_refused(response, 400, "file")


def _check_outcome(response):
    """The one property every upload must have: a clean 4xx with nothing stored, or a complete run."""
    assert response.status_code in (201, 400, 413), (response.status_code, response.content[:300])
    if response.status_code == 201:
        run = BenchmarkRun.objects.get(pk=response.json()["id"])
        assert run.status == "succeeded" and run.points.exists()
        assert run.artifacts.filter(kind="raw").count() == 1
        json.dumps(response.json(), allow_nan=False)
        run.delete()
    else:
        body = response.json()
        assert body and all(isinstance(k, str) for k in body)
        assert not BenchmarkRun.objects.exists() and not Artifact.objects.exists()


FUZZ = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(
    data=st.binary(min_size=1, max_size=3000), name=st.sampled_from(["r.json", "r.csv", "r.jsonl", "r", "r.json.gz"])
)
def test_arbitrary_bytes_never_500(candidate, ci, media, data, name):
    _check_outcome(upload(ci, candidate.pk, data, name))


@st.composite
def mutated_real_file(draw):
    name = draw(st.sampled_from(sorted(REAL)))
    data = bytearray(REAL[name])
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "dup"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif op == "truncate":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(
                st.sampled_from(
                    [
                        b"NaN",
                        b"1e999",
                        b"-1",
                        b"\xff",
                        b'"',
                        b"{",
                        b"]",
                        b",",
                        b"\n",
                        b"null",
                        b"99999999999999999999999",
                        b"\x00",
                    ]
                )
            )
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 50))]
        elif op == "dup":
            data[at:at] = data[at : at + draw(st.integers(1, 200))]
    return name, bytes(data) or b"x"


@FUZZ
@given(case=mutated_real_file())
def test_mutated_real_files_never_500(candidate, ci, media, case):
    name, data = case
    _check_outcome(upload(ci, candidate.pk, data, name))


def test_nul_characters_in_lookup_fields_are_400_not_500(architect, team):
    """PostgreSQL refuses NUL in text even in a WHERE clause; SQLite does not. Both must answer 400."""
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(architect)
    response = client.post(
        "/api/v1/selections/",
        {
            "name": "n",
            "team": "plat\x00form",
            "business_owner": "al\x00ice",
            "platform_owner": "alice",
            "security_owner": "alice",
        },
        format="json",
    )
    assert response.status_code == 400, response.content
    assert "business_owner" in response.json()  # the NUL byte is refused where it is, whatever else is wrong
    from selection.models import Selection

    assert not Selection.objects.filter(name="n").exists()
