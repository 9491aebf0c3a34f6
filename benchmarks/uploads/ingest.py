"""Accepting an uploaded result file (API, upload form, `manage.py ingest`).

Nothing is half-written: small files are parsed before anything is stored (a parse failure
stores nothing); large ones are stored raw and parsed on the `default` queue, once their first
bytes look like a known format (else 400 with every format's refusal, nothing stored). A retried
upload with the same Idempotency-Key and the same file returns the first run; the same key with
another file is a 409 naming the key and the first run (a CI job's key must name its file).
An upload whose file names another model or engine, or holds fewer than 20 requests, is stored
with its warnings and counts for scoring once confirmed (`benchmarks.uploads.quality`).
"""

from __future__ import annotations

import gzip
import io
import zlib

from django.conf import settings
from django.db import IntegrityError, transaction

from benchmarks.formats import HEAD_BYTES, detect_head, format_names
from benchmarks.models import Artifact, BenchmarkRun
from benchmarks.storage import SavedFiles, apply_result, sha256_hex
from benchmarks.suite import TEST_IDS
from benchmarks.tasks import enqueue_parse
from benchmarks.uploads.parse import parse_bytes, selection_slo
from benchmarks.uploads.quality import warnings_for_candidate
from selection.models import Candidate


class IngestError(ValueError):
    """An upload that cannot be accepted; `field` names the request field at fault."""

    def __init__(self, field: str, message: str, status: int = 400):
        super().__init__(message)
        self.field, self.status = field, status


def _validate_upload_fields(test: str, fmt: str | None) -> None:
    if test not in TEST_IDS:
        raise IngestError("test", f"must be one of {', '.join(TEST_IDS)}; got {test!r}")
    if fmt:
        if fmt not in format_names():
            raise IngestError("format", f"unknown format {fmt!r}; one of {', '.join(format_names())}")


GZIP_MAGIC = b"\x1f\x8b"


def gunzip_bounded(data: bytes, limit: int) -> bytes:
    """Decompress a gzip upload, reading at most `limit` bytes of output (a gzip bomb stops there)."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as handle:
            out = handle.read(limit + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise IngestError("file", f"not a valid gzip file ({exc})") from None
    if len(out) > limit:
        raise IngestError("file", f"decompressed size exceeds the limit of {limit:,} bytes (gzip bomb?)", 413)
    if not out:
        raise IngestError("file", "the gzip file is empty")
    return out


def find_idempotent(candidate: Candidate, key: str) -> BenchmarkRun | None:
    return BenchmarkRun.objects.filter(candidate=candidate, idempotency_key=key).first() if key else None


def same_upload(existing: BenchmarkRun, key: str, sha256: str) -> BenchmarkRun:
    """The first run of a retried upload; the key reused for another file is a conflict."""
    if existing.raw_sha256 and existing.raw_sha256 != sha256:
        raise IngestError(
            "Idempotency-Key",
            f"the key {key!r} was already used for run #{existing.pk} with a different file "
            f"(SHA-256 {existing.raw_sha256[:12]}…, this one {sha256[:12]}…); give each file its own key",
            409,
        )
    return existing


def ingest_upload(
    *,
    candidate: Candidate,
    data: bytes,
    filename: str,
    test: str,
    fmt: str | None = None,
    label: str = "",
    uploader: str = "",
    idempotency_key: str = "",
    synchronous: bool | None = None,
) -> tuple[BenchmarkRun, bool]:
    """Store an uploaded result file. Returns (run, created).

    Small files are parsed here, before anything is written (a parse failure stores nothing).
    Large files are stored raw and parsed by the `parse_upload` task; the run says `parsing`.
    """
    _validate_upload_fields(test, fmt)
    if len(data) > settings.KVSELECT_MAX_UPLOAD_BYTES:
        raise IngestError(
            "file", f"{len(data):,} bytes exceeds the limit of {settings.KVSELECT_MAX_UPLOAD_BYTES:,}", 413
        )
    if not data:
        raise IngestError("file", "the file is empty")
    compressed = data.startswith(GZIP_MAGIC)
    if compressed:
        compressed_size = len(data)
        data = gunzip_bounded(data, settings.KVSELECT_MAX_UPLOAD_BYTES)
        filename = filename[:-3] if (filename or "").lower().endswith(".gz") else filename
    digest = sha256_hex(data)
    existing = find_idempotent(candidate, idempotency_key)
    if existing:
        return same_upload(existing, idempotency_key, digest), False
    if synchronous is None:
        synchronous = len(data) <= settings.KVSELECT_SYNC_PARSE_BYTES
    result = parse_bytes(data, filename, fmt, selection_slo(candidate)) if synchronous else None
    if result is None:
        detect_head(data[:HEAD_BYTES], filename)  # UnrecognisedFormat: nothing stored
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
                raw_sha256=digest,
                params={
                    "filename": filename,
                    "format": fmt or "auto",
                    **({"compressed": "gzip", "compressed_size": compressed_size} if compressed else {}),
                },
            )
            files.save(run, Artifact.Kind.RAW, _safe_filename(filename), data)
            if result is not None:
                run.quality_warnings = warnings_for_candidate(result, candidate)
                apply_result(run, result, files, BenchmarkRun.Status.SUCCEEDED)
    except IntegrityError:
        files.discard()
        existing = find_idempotent(candidate, idempotency_key)
        if existing:  # a concurrent retry with the same key won the race
            return same_upload(existing, idempotency_key, digest), False
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
