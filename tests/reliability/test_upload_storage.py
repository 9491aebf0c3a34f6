"""A read-only or full media volume during an upload (issue 38 item 2): a 507 that names the problem for
any upload size, on the page and in the API, with no temporary file left on disk or held open.

Before, a small upload got the intended JSON 507 but a large one (spooled to disk by Django while it
parsed the multipart body, before the view) answered 500 with an HTML page, and on a full disk its
partial temporary file stayed on disk, held open by the web worker, until the worker restarted. The
disk's refusals are injected here (an OSError from the write or the create); tests/reliability/
test_real_services.py does the same on a real 1 MiB tmpfs, remounted read-only.
"""

from __future__ import annotations

import errno
import gzip
import html
import io
import os
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from django.core.files import uploadedfile
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from benchmarks.models import BenchmarkRun
from config.request_limits import ChunkedBodyLimit
from tests.support.uploads import media_files, token_client, upload

pytestmark = pytest.mark.reliability

FIXTURES = Path(__file__).parents[1] / "benchmarks" / "formats" / "fixtures"
LARGE = b'{"model_id": "m", "completed": 1, "duration": 1.0, "pad": "' + b"x" * 300_000 + b'"}'
FULL = OSError(errno.ENOSPC, "No space left on device")
READ_ONLY = OSError(errno.EROFS, "Read-only file system")


@pytest.fixture
def incoming(media, settings, tmp_path) -> Path:
    """Django spools request bodies over 64 KiB to this directory (beside the media, as in production)."""
    directory = tmp_path / "incoming"
    directory.mkdir()
    settings.FILE_UPLOAD_TEMP_DIR = str(directory)
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
    settings.KVSELECT_SYNC_PARSE_BYTES = 1024
    return directory


@pytest.fixture
def ci(selection_with_constraints, architect):
    return token_client(selection_with_constraints, architect)


def open_files_under(directory: Path) -> list[str]:
    """This process's open file descriptors that point under `directory` (deleted files included)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed while listing
            continue
        if target.startswith(str(directory)):
            found.append(target)
    return found


class DiskFillsUp:
    """Django's temporary upload file on a disk that is full after `room` bytes (ENOSPC), as a tmpfs is."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.real = tempfile.NamedTemporaryFile

    def __call__(self, *args, **kwargs):
        handle = self.real(*args, **kwargs)
        room = [self.room]
        write = handle.file.write

        def limited(data: bytes) -> int:
            if len(data) > room[0]:
                write(data[: room[0]])
                room[0] = 0
                raise OSError(errno.ENOSPC, "No space left on device")
            room[0] -= len(data)
            return write(data)

        handle.write = limited
        return handle


def assert_not_stored(response, words: str, incoming: Path, media: Path) -> None:
    assert response.status_code == 507, response.content[:500]
    assert response["Content-Type"].startswith("application/json")
    assert words in response.json()["detail"] and "nothing was stored" in response.json()["detail"]
    assert not BenchmarkRun.objects.exists()
    assert list(incoming.iterdir()) == []  # no partial temporary file left on disk
    assert open_files_under(incoming) == []  # and none held open by this (web) process
    assert [p for p in media_files(media) if not p.is_relative_to(incoming)] == []


def test_a_large_api_upload_on_a_full_disk_is_a_json_507_and_leaves_nothing(candidate, ci, incoming, media):
    with mock.patch.object(uploadedfile.tempfile, "NamedTemporaryFile", DiskFillsUp(room=100_000)):
        response = upload(ci, candidate.pk, LARGE, key="ci-full")
    assert_not_stored(response, "No space left on device", incoming, media)
    assert upload(ci, candidate.pk, LARGE, key="ci-full").status_code == 202  # space again: same key stores it


def test_a_large_api_upload_on_a_read_only_disk_is_a_json_507(candidate, ci, incoming, media):
    with mock.patch.object(uploadedfile.tempfile, "NamedTemporaryFile", side_effect=READ_ONLY):
        response = upload(ci, candidate.pk, LARGE, key="ci-ro")
    assert_not_stored(response, "Read-only file system", incoming, media)


@pytest.mark.parametrize("error", [FULL, READ_ONLY], ids=["full", "read-only"])
def test_a_small_upload_the_disk_refuses_is_a_json_507(candidate, ci, incoming, media, error):
    data = (FIXTURES / "vllm_bench_serve.json").read_bytes()
    with mock.patch("django.core.files.storage.FileSystemStorage._save", side_effect=error):
        response = upload(ci, candidate.pk, data, filename="v.json", key="ci-small")
    assert response.status_code == 507 and error.strerror in response.json()["detail"]
    assert not BenchmarkRun.objects.exists() and media_files(media) == []


@pytest.mark.parametrize("error", [FULL, READ_ONLY], ids=["full", "read-only"])
def test_a_small_gzip_upload_the_disk_refuses_is_a_507_not_a_bad_gzip(candidate, ci, incoming, media, error):
    """A gzip upload is inflated to a file beside the media: the disk's refusal is not the file's fault."""
    data = gzip.compress((FIXTURES / "vllm_bench_serve.json").read_bytes())
    target = "benchmarks.uploads.ingest.tempfile.NamedTemporaryFile"
    fake = DiskFillsUp(room=100) if error is FULL else mock.Mock(side_effect=error)
    with mock.patch(target, fake):
        response = upload(ci, candidate.pk, data, filename="v.json.gz", key="ci-gz")
    assert response.status_code == 507, response.content
    assert error.strerror in response.json()["detail"] and "gzip" not in response.json()["detail"]
    assert not BenchmarkRun.objects.exists()
    assert list(incoming.iterdir()) == [] and open_files_under(incoming) == []


def page_upload(client: Client, selection, candidate, data: bytes, **headers):
    """The upload form, with the CSRF check on: the middleware reads the body before the view."""
    client.get(f"/selections/{selection.pk}/uploads/")
    return client.post(
        f"/selections/{selection.pk}/uploads/file/",
        {
            "csrfmiddlewaretoken": client.cookies["csrftoken"].value,
            "candidate": candidate.pk,
            "test": "concurrency_stress",
            "file": SimpleUploadedFile("v.json", data),
        },
        **headers,
    )


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_large_page_upload_on_a_full_disk_is_a_507_page_naming_the_problem(
    candidate, architect, incoming, media, language
):
    client = Client(enforce_csrf_checks=True, raise_request_exception=False)
    client.force_login(architect)
    client.cookies["django_language"] = language
    with mock.patch.object(uploadedfile.tempfile, "NamedTemporaryFile", DiskFillsUp(room=100_000)):
        response = page_upload(client, candidate.selection, candidate, LARGE)
    assert response.status_code == 507
    body = html.unescape(response.content.decode())
    if language == "en":
        assert "The upload could not be stored" in body and "the server's storage is full" in body
    else:
        assert "上传" in body and "存储空间已满" in body and "storage is full" not in body
    assert list(incoming.iterdir()) == [] and open_files_under(incoming) == []
    assert not BenchmarkRun.objects.exists()


def test_a_page_upload_asking_for_json_gets_the_json_507(candidate, architect, incoming, media):
    client = Client(enforce_csrf_checks=True, raise_request_exception=False)
    client.force_login(architect)
    with mock.patch.object(uploadedfile.tempfile, "NamedTemporaryFile", side_effect=READ_ONLY):
        response = page_upload(client, candidate.selection, candidate, LARGE, HTTP_ACCEPT="application/json")
    assert response.status_code == 507 and "Read-only file system" in response.json()["detail"]


def test_a_small_page_upload_the_disk_refuses_is_a_507_with_the_form(candidate, architect, incoming, media):
    client = Client()
    client.force_login(architect)
    data = (FIXTURES / "vllm_bench_serve.json").read_bytes()
    with mock.patch("django.core.files.storage.FileSystemStorage._save", side_effect=FULL):
        response = page_upload(client, candidate.selection, candidate, data)
    assert response.status_code == 507
    assert "The file could not be stored" in response.content.decode()
    assert not BenchmarkRun.objects.exists() and media_files(media) == []


def test_a_chunked_body_on_a_full_disk_is_a_json_507_and_leaves_nothing_open(incoming):
    """The WSGI wrapper that spools chunked bodies (no Content-Length) meets the same disk."""
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/api/v1/candidates/1/results/",
        "HTTP_TRANSFER_ENCODING": "chunked",
        "wsgi.input_terminated": True,
        "wsgi.input": io.BytesIO(b"x" * 3_000_000),
    }
    statuses = []

    def start_response(status, headers):
        statuses.append(status)

    def application(environ, start_response):  # never reached: the body could not be spooled
        raise AssertionError("the application ran")

    real = tempfile.TemporaryFile

    def full_disk(*args, **kwargs):
        handle = real(*args, **kwargs)
        handle.write = mock.Mock(side_effect=OSError(errno.ENOSPC, "No space left on device"))
        return handle

    with mock.patch("config.request_limits.tempfile.TemporaryFile", full_disk):
        body = b"".join(ChunkedBodyLimit(application)(environ, start_response))
    assert statuses == ["507 Insufficient Storage"] and b"No space left on device" in body
    assert open_files_under(incoming) == []
