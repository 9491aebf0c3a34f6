"""Upload size limits and memory: refused on Content-Length before the body is read, a chunked body
read only up to the limit, gzip decompressed to disk in chunks, and large uploads never held whole
in memory (issue 20 items 7-8, issue 16 item 10)."""

from __future__ import annotations

import gzip
import io
import json
import tracemalloc
from pathlib import Path

import pytest
from django.core.handlers.wsgi import WSGIHandler

from benchmarks.models import BenchmarkRun
from benchmarks.uploads.ingest import ingest_upload
from benchmarks.uploads.tokens import create_upload_token
from config.wsgi import application
from tests.support.uploads import media_files, token_client, upload

pytestmark = pytest.mark.reliability

FIXTURES = Path(__file__).resolve().parents[1] / "benchmarks" / "formats" / "fixtures"
BOUNDARY = "kvselect-test-boundary"


@pytest.fixture
def media(media, settings, tmp_path):
    settings.FILE_UPLOAD_TEMP_DIR = str(tmp_path / "incoming")
    Path(settings.FILE_UPLOAD_TEMP_DIR).mkdir()
    return media


class CountingInput(io.RawIOBase):
    """A request body of `size` bytes that counts what the server reads of it."""

    def __init__(self, head: bytes, size: int, tail: bytes = b"") -> None:
        self.head, self.size, self.tail, self.read_bytes = head, size, tail, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.read_bytes >= self.size:
            return 0
        n = min(len(buffer), self.size - self.read_bytes)
        chunk = bytearray(b" " * n)
        for i in range(n):  # the multipart head, then padding, then the closing boundary
            position = self.read_bytes + i
            if position < len(self.head):
                chunk[i] = self.head[position]
            elif position >= self.size - len(self.tail):
                chunk[i] = self.tail[position - (self.size - len(self.tail))]
        buffer[:n] = chunk
        self.read_bytes += n
        return n


def multipart(file_bytes: bytes, name: str = "result.json", test: str = "concurrency_stress") -> bytes:
    return (
        (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="test"\r\n\r\n{test}\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + file_bytes
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )


def environ(token: str, candidate_id: int, body, length: int | None, chunked: bool = False) -> dict:
    env = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": f"/api/v1/candidates/{candidate_id}/results/",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "HTTP_HOST": "testserver",
        "wsgi.url_scheme": "http",
        "wsgi.input": body,
        "wsgi.errors": io.StringIO(),
        "CONTENT_TYPE": f"multipart/form-data; boundary={BOUNDARY}",
        "HTTP_AUTHORIZATION": f"Token {token}",
    }
    if length is not None:
        env["CONTENT_LENGTH"] = str(length)
    if chunked:  # as gunicorn hands a chunked body over: de-chunked, delimited by the server
        env["HTTP_TRANSFER_ENCODING"] = "chunked"
        env["wsgi.input_terminated"] = True
    return env


def call(app, env) -> tuple[int, bytes]:
    status = {}

    def start_response(line, headers, exc_info=None):
        status["code"] = int(line.split()[0])

    body = b"".join(app(env, start_response))
    return status["code"], body


@pytest.mark.django_db(transaction=True)
def test_a_content_length_over_the_limit_is_413_before_a_byte_of_the_body_is_read(
    candidate, architect, media, settings
):
    settings.KVSELECT_MAX_UPLOAD_BYTES = 10 * 1024 * 1024
    _, raw = create_upload_token(selection=candidate.selection, user=architect, name="ci")
    size = 1024**3  # a 1 GiB upload: before, all of it was spooled to disk before the 413
    body = CountingInput(multipart(b"")[:200], size)
    code, text = call(WSGIHandler(), environ(raw, candidate.pk, body, size))
    assert code == 413, text[:300]
    assert "exceeds the limit of 10,485,760" in json.loads(text)["file"][0]
    assert body.read_bytes == 0
    assert not BenchmarkRun.objects.exists() and media_files(media) == []
    assert not any(Path(settings.FILE_UPLOAD_TEMP_DIR).iterdir())  # nothing spooled either


@pytest.mark.django_db(transaction=True)
def test_a_chunked_body_is_read_only_up_to_the_limit(candidate, architect, media, settings):
    settings.KVSELECT_MAX_UPLOAD_BYTES = 2 * 1024 * 1024
    settings.KVSELECT_REQUEST_OVERHEAD_BYTES = 64 * 1024
    _, raw = create_upload_token(selection=candidate.selection, user=architect, name="ci")
    size = 64 * 1024 * 1024
    body = CountingInput(multipart(b"")[:200], size)
    code, text = call(application, environ(raw, candidate.pk, body, None, chunked=True))
    assert code == 413, text[:300]
    assert "exceeds the limit" in json.loads(text)["file"][0]
    assert body.read_bytes <= 2 * 1024 * 1024 + 64 * 1024 + 1024 * 1024  # the limit and one read, not 64 MiB
    assert not BenchmarkRun.objects.exists() and media_files(media) == []
    assert not any(Path(settings.FILE_UPLOAD_TEMP_DIR).iterdir())


@pytest.mark.django_db(transaction=True)
def test_a_chunked_upload_within_the_limit_is_stored(candidate, architect, media):
    _, raw = create_upload_token(selection=candidate.selection, user=architect, name="ci")
    data = multipart((FIXTURES / "vllm_bench_serve.json").read_bytes(), "vllm_bench_serve.json")
    code, text = call(application, environ(raw, candidate.pk, io.BytesIO(data), None, chunked=True))
    assert code == 201, text[:500]
    assert json.loads(text)["format"].startswith("vllm")


@pytest.mark.django_db(transaction=True)
def test_a_large_upload_is_streamed_to_disk_not_read_into_memory(candidate, architect, media, settings):
    settings.KVSELECT_SYNC_PARSE_BYTES = 1024 * 1024  # above it: stored raw, parsed by the worker
    _, raw = create_upload_token(selection=candidate.selection, user=architect, name="ci")
    document = json.loads((FIXTURES / "vllm_bench_serve.json").read_bytes())
    handler = WSGIHandler()
    document["generated_texts"] = ["x" * 1000] * 2_000
    warm_up = multipart(json.dumps(document).encode(), "vllm_bench_serve.json")  # imports are not the upload
    assert call(handler, environ(raw, candidate.pk, io.BytesIO(warm_up), len(warm_up)))[0] == 202
    document["generated_texts"] = ["x" * 1000] * 40_000  # ~40 MB, as a --save-detailed file can be
    data = multipart(json.dumps(document).encode(), "vllm_bench_serve.json")
    body = io.BytesIO(data)
    tracemalloc.start()
    try:
        code, text = call(handler, environ(raw, candidate.pk, body, len(data)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 202, text[:500]
    run = BenchmarkRun.objects.get(pk=json.loads(text)["id"])
    assert run.status == "parsing"
    artifact = run.artifacts.get(kind="raw")
    assert artifact.size == len(json.dumps(document).encode())
    assert peak < 8 * 1024 * 1024, f"peak Python allocation {peak / 1e6:.0f} MB for a {len(data) / 1e6:.0f} MB upload"


@pytest.mark.django_db(transaction=True)
def test_gzip_bombs_are_decompressed_to_disk_in_bounded_memory(candidate, architect, media, settings):
    """Before: inflated in memory (8 concurrent 1 MB bombs took two gunicorn workers to 1.2 and 0.9 GiB)."""
    settings.KVSELECT_MAX_UPLOAD_BYTES = 150 * 1024 * 1024
    bomb = gzip.compress(b"\0" * (140 * 1024 * 1024), compresslevel=9)  # 140 KB inflating to 140 MiB
    warm_up = gzip.compress((FIXTURES / "vllm_bench_serve.json").read_bytes())  # imports are not the bomb
    ingest_upload(candidate=candidate, data=warm_up, filename="w.json.gz", test="custom", synchronous=False)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="not a recognised benchmark result format"):  # zeros: refused
            ingest_upload(candidate=candidate, data=bomb, filename="bomb.json.gz", test="custom", synchronous=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024, f"peak Python allocation {peak / 1e6:.0f} MB inflating a 140 MiB bomb"
    assert BenchmarkRun.objects.count() == 1  # the warm-up only
    assert not any(Path(settings.FILE_UPLOAD_TEMP_DIR).iterdir())  # the inflated file is removed


def test_a_gzip_upload_over_the_limit_stops_inflating_at_the_limit(candidate, architect, media, settings):
    settings.KVSELECT_MAX_UPLOAD_BYTES = 4 * 1024 * 1024
    client = token_client(candidate.selection, architect)
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)
    tracemalloc.start()
    try:
        response = upload(client, candidate.pk, bomb, "bomb.json.gz")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.status_code == 413 and "decompressed size" in json.dumps(response.json())
    assert peak < 12 * 1024 * 1024
    assert not BenchmarkRun.objects.exists() and media_files(media) == []
    assert not any(Path(settings.FILE_UPLOAD_TEMP_DIR).iterdir())  # the partial inflated file is removed
