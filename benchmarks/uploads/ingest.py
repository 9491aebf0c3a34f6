"""Accepting an uploaded result file (API, upload form, `manage.py ingest`).

Nothing is half-written: small files are parsed before anything is stored (a parse failure
stores nothing); large ones are stored raw and parsed on the `default` queue, once their first
bytes look like a known format (else 400 with every format's refusal, nothing stored). A retried
upload with the same Idempotency-Key, the same file and the same test returns the first run; the
same key with another file, or with another test, is a 409 naming the key and the first run (a CI
job's key must name its test and its file).
An archived candidate takes no new upload (409; a retry of one received before still answers with its run).
An upload whose file names another model or engine, or holds fewer than 20 requests, is stored
with its warnings and counts for scoring once confirmed (`benchmarks.uploads.quality`).

Memory stays bounded whatever the size: the upload arrives on disk (Django's temporary upload
file), is hashed and, when gzip, decompressed in chunks to another file on disk, stopping at
KVSELECT_MAX_UPLOAD_BYTES (a gzip bomb stops there); the file is moved into storage, not copied.
Only files small enough to parse at once (KVSELECT_SYNC_PARSE_BYTES) are read into memory.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tempfile
import zlib
from dataclasses import dataclass
from typing import IO

from django.conf import settings
from django.core.files import File
from django.db import IntegrityError, transaction

from benchmarks.formats import HEAD_BYTES, detect_head, format_names
from benchmarks.models import Artifact, BenchmarkRun
from benchmarks.storage import SavedFiles, StorageFailure, apply_result
from benchmarks.suite import TEST_IDS
from benchmarks.tasks import enqueue_parse
from benchmarks.uploads.parse import parse_bytes, selection_slo
from benchmarks.uploads.quality import warnings_for_candidate
from selection.domain.messages import Message
from selection.domain.messages import marked as _
from selection.models import Candidate
from selection.selectors import archived_refusal
from selection.tasks import schedule_rescoring


class IngestError(ValueError):
    """An upload that cannot be accepted; `field` names the request field at fault. Given a `Message`, the
    refusal keeps it (`message`) for the upload page to show in its language; the text stays English."""

    def __init__(self, field: str, message: str | Message, status: int = 400):
        super().__init__(str(message))
        self.field, self.status = field, status
        self.message = message if isinstance(message, Message) else None


def _validate_upload_fields(test: str, fmt: str | None) -> None:
    if test not in TEST_IDS:
        raise IngestError("test", f"must be one of {', '.join(TEST_IDS)}; got {test!r}")
    if fmt:
        if fmt not in format_names():
            raise IngestError("format", f"unknown format {fmt!r}; one of {', '.join(format_names())}")


GZIP_MAGIC = b"\x1f\x8b"
CHUNK = 1024 * 1024


class SpooledUpload(File):
    """An upload on local disk, moved (not copied) into storage by FileSystemStorage."""

    def __init__(self, handle: IO[bytes], path: str, name: str | None = None) -> None:
        super().__init__(handle, name)
        self.path = path

    def temporary_file_path(self) -> str:
        return self.path


@dataclass
class StagedUpload:
    """The (decompressed) upload: its file, size and SHA-256, read in chunks once."""

    file: File
    size: int
    sha256: str
    compressed_size: int | None = None
    spooled: bool = False  # a temporary file of ours: removed in `close` unless storage moved it

    def read(self) -> bytes:
        self.file.seek(0)
        return self.file.read()

    def head(self) -> bytes:
        self.file.seek(0)
        head = self.file.read(HEAD_BYTES)
        self.file.seek(0)
        return head

    def close(self) -> None:
        self.file.close()
        if self.spooled and os.path.exists(self.file.temporary_file_path()):
            os.unlink(self.file.temporary_file_path())


def spool_directory() -> str:
    """Where decompressed uploads are written: Django's upload directory, beside storage when it is local."""
    directory = settings.FILE_UPLOAD_TEMP_DIR or tempfile.gettempdir()
    os.makedirs(directory, exist_ok=True)
    return str(directory)


def _hash_file(handle: IO[bytes]) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    handle.seek(0)
    while chunk := handle.read(CHUNK):
        digest.update(chunk)
        size += len(chunk)
    handle.seek(0)
    return size, digest.hexdigest()


def gunzip_to_disk(handle: IO[bytes], limit: int) -> StagedUpload:
    """Decompress a gzip upload in chunks into a file on disk, refusing (413) once the output passes `limit`.
    A disk that refuses the output (full, read-only) is a StorageFailure (507), not a bad gzip file."""
    try:
        spool = tempfile.NamedTemporaryFile(
            prefix="kvselect-gunzip-", suffix=".upload", dir=spool_directory(), delete=False
        )
    except OSError as exc:
        raise StorageFailure(f"could not store the decompressed upload: {exc.strerror or exc}") from exc
    try:
        size, digest = _gunzip(handle, spool, limit)
    except BaseException:
        discard_spool(spool)
        raise
    spool.seek(0)
    return StagedUpload(SpooledUpload(spool, spool.name), size, digest, spooled=True)


def _gunzip(handle: IO[bytes], spool: IO[bytes], limit: int) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    handle.seek(0)
    with gzip.GzipFile(fileobj=handle, mode="rb") as reader:
        while True:
            try:
                chunk = reader.read(CHUNK)
            except (OSError, EOFError, zlib.error) as exc:
                raise IngestError(
                    "file", Message(_("not a valid gzip file (%(error)s)"), {"error": str(exc)})
                ) from None
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                too_large = _("decompressed size exceeds the limit of %(limit)s bytes (gzip bomb?)")
                raise IngestError("file", Message(too_large, {"limit": f"{limit:,}"}), 413)
            digest.update(chunk)
            write_spool(spool, chunk)
    write_spool(spool, b"", flush=True)
    if not size:
        raise IngestError("file", Message(_("the gzip file is empty")))
    return size, digest.hexdigest()


def write_spool(spool: IO[bytes], chunk: bytes, flush: bool = False) -> None:
    try:
        spool.write(chunk)
        if flush:
            spool.flush()
    except OSError as exc:  # the disk is full or read-only: the server's problem, not the file's
        raise StorageFailure(f"could not store the decompressed upload: {exc.strerror or exc}") from exc


def discard_spool(spool) -> None:
    """Close and remove a spool file that will not be used (closing may fail on a full disk: still removed)."""
    try:
        spool.close()
    except OSError:
        pass
    try:
        os.unlink(spool.name)
    except FileNotFoundError:
        pass


def stage_upload(upload: IO[bytes] | bytes, limit: int) -> StagedUpload:
    """Size-check, hash and (gzip) decompress an upload, in chunks: never the whole file in memory."""
    handle = File(io.BytesIO(upload)) if isinstance(upload, (bytes, bytearray)) else upload
    size, digest = _hash_file(handle)
    if size > limit:
        too_large = _("%(size)s bytes exceeds the limit of %(limit)s")
        raise IngestError("file", Message(too_large, {"size": f"{size:,}", "limit": f"{limit:,}"}), 413)
    if not size:
        raise IngestError("file", Message(_("the file is empty")))
    head = handle.read(2)
    handle.seek(0)
    if head == GZIP_MAGIC:
        staged = gunzip_to_disk(handle, limit)
        staged.compressed_size = size
        return staged
    return StagedUpload(handle if isinstance(handle, File) else File(handle), size, digest)


def find_idempotent(candidate: Candidate, key: str) -> BenchmarkRun | None:
    return BenchmarkRun.objects.filter(candidate=candidate, idempotency_key=key).first() if key else None


def same_upload(existing: BenchmarkRun, key: str, sha256: str, test: str) -> BenchmarkRun:
    """The first run of a retried upload; the key reused for another file, or for the same file as
    evidence of another test, is a conflict (returning the first run would drop the new test silently)."""
    if existing.raw_sha256 and existing.raw_sha256 != sha256:
        raise IngestError(
            "Idempotency-Key",
            f"the key {key!r} was already used for run #{existing.pk} with a different file "
            f"(SHA-256 {existing.raw_sha256[:12]}…, this one {sha256[:12]}…); give each file its own key",
            409,
        )
    if existing.test != test:
        raise IngestError(
            "Idempotency-Key",
            f"the key {key!r} was already used for run #{existing.pk} with this file as evidence of "
            f"{existing.test!r}, not {test!r}; give each test's upload its own key",
            409,
        )
    return existing


def ingest_upload(
    *,
    candidate: Candidate,
    data: bytes | IO[bytes],
    filename: str,
    test: str,
    fmt: str | None = None,
    label: str = "",
    uploader: str = "",
    idempotency_key: str = "",
    synchronous: bool | None = None,
) -> tuple[BenchmarkRun, bool]:
    """Store an uploaded result file (bytes, or a binary file such as Django's upload). Returns (run, created).

    Small files are parsed here, before anything is written (a parse failure stores nothing).
    Large files are stored raw and parsed by the `parse_upload` task; the run says `parsing`.
    """
    _validate_upload_fields(test, fmt)
    refused = archived_refusal(candidate)
    if refused and not find_idempotent(candidate, idempotency_key):  # a retry of an upload received before is fine
        raise IngestError("candidate", refused, 409)
    staged = stage_upload(data, settings.KVSELECT_MAX_UPLOAD_BYTES)
    try:
        return _ingest_staged(
            staged,
            candidate=candidate,
            filename=filename,
            test=test,
            fmt=fmt,
            label=label,
            uploader=uploader,
            idempotency_key=idempotency_key,
            synchronous=synchronous,
        )
    finally:
        staged.close()


def _ingest_staged(
    staged: StagedUpload,
    *,
    candidate: Candidate,
    filename: str,
    test: str,
    fmt: str | None,
    label: str,
    uploader: str,
    idempotency_key: str,
    synchronous: bool | None,
) -> tuple[BenchmarkRun, bool]:
    compressed = staged.compressed_size is not None
    if compressed:
        filename = filename[:-3] if (filename or "").lower().endswith(".gz") else filename
    existing = find_idempotent(candidate, idempotency_key)
    if existing:
        return same_upload(existing, idempotency_key, staged.sha256, test), False
    if synchronous is None:
        synchronous = staged.size <= settings.KVSELECT_SYNC_PARSE_BYTES
    result = parse_bytes(staged.read(), filename, fmt, selection_slo(candidate)) if synchronous else None
    if result is None:
        detect_head(staged.head(), filename)  # UnrecognisedFormat: nothing stored
    files = SavedFiles()
    try:
        with transaction.atomic():
            run = BenchmarkRun.objects.create(
                candidate=candidate,
                test=test,
                label=label[:200],
                origin=BenchmarkRun.Origin.UPLOAD,
                status=BenchmarkRun.Status.PARSING,
                idempotency_key=idempotency_key[:200],
                uploaded_by=uploader[:150],
                raw_sha256=staged.sha256,
                params={
                    "filename": filename,
                    "format": fmt or "auto",
                    **({"compressed": "gzip", "compressed_size": staged.compressed_size} if compressed else {}),
                },
            )
            staged.file.seek(0)
            files.save_file(
                run, Artifact.Kind.RAW, _safe_filename(filename), staged.file, sha256=staged.sha256, size=staged.size
            )
            if result is not None:
                run.quality_warnings = warnings_for_candidate(result, candidate)
                apply_result(run, result, files, BenchmarkRun.Status.SUCCEEDED)
                schedule_rescoring(candidate.selection_id)
    except IntegrityError:
        files.discard()
        existing = find_idempotent(candidate, idempotency_key)
        if existing:  # a concurrent retry with the same key won the race
            return same_upload(existing, idempotency_key, staged.sha256, test), False
        raise
    except BaseException:
        files.discard()
        raise
    if result is None:
        enqueue_parse(run)
    return run, True


def _safe_filename(name: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in (name or "upload").split("/")[-1])
    return keep[:120] or "upload"
