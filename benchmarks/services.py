"""Write operations on evidence: storing normalised results, ingesting uploads.

Nothing is half-written: a result is validated (parsed) before anything is stored, rows are
written in one transaction, and files saved for a transaction that rolls back are deleted.
"""

from __future__ import annotations

import hashlib
import io
import logging
from dataclasses import asdict
from typing import Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction
from django.utils import timezone

from selection.models import Candidate

from .models import Artifact, BenchmarkRun, RunPoint
from .result import TEST_NAMES, NormalizedResult

logger = logging.getLogger(__name__)


class IngestError(ValueError):
    """An upload that cannot be accepted; `field` names the request field at fault."""

    def __init__(self, field: str, message: str, status: int = 400):
        super().__init__(message)
        self.field, self.status = field, status


class StorageFailure(RuntimeError):
    """An artifact could not be saved (disk full, bucket down): nothing was recorded."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def selection_slo(candidate: Candidate) -> dict[str, float]:
    """The selection's latency budget as an SLO for goodput: {ttft_ms, tpot_ms, e2e_ms}."""
    constraints = getattr(candidate.selection, "constraints", None)
    if constraints is None:
        return {}
    slo = {"ttft_ms": constraints.ttft_p95_ms, "tpot_ms": constraints.tpot_p95_ms, "e2e_ms": constraints.e2e_p95_ms}
    return {k: float(v) for k, v in slo.items() if v is not None}


class _SavedFiles:
    """Files saved during a transaction; deleted again if it rolls back."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def save(self, run: BenchmarkRun, kind: str, filename: str, data: bytes) -> Artifact:
        artifact = Artifact(run=run, kind=kind, sha256=sha256_hex(data), size=len(data))
        field = artifact.file.field
        # The name is chosen first so that a write failing half-way (disk full) leaves no orphan file:
        # Django's FileSystemStorage does not remove what it wrote before the error.
        name = field.storage.get_available_name(field.generate_filename(artifact, filename), max_length=field.max_length)
        try:
            artifact.file.name = field.storage.save(name, ContentFile(data), max_length=field.max_length)
        except OSError as exc:
            self._delete(name)
            raise StorageFailure(f"could not store the {kind} artifact: {exc.strerror or exc}") from exc
        self.names.append(artifact.file.name)
        artifact.save()
        return artifact

    def discard(self) -> None:
        for name in self.names:
            self._delete(name)

    @staticmethod
    def _delete(name: str) -> None:
        try:
            default_storage.delete(name)
        except OSError:  # best effort: an orphan file is harmless, a half row is not
            logger.warning("could not delete orphan artifact %s", name)


def requests_parquet(result: NormalizedResult) -> bytes | None:
    if result.requests is None or not len(result.requests):
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = result.requests if isinstance(result.requests, pa.Table) else pa.Table.from_pandas(
        result.requests, preserve_index=False)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def _write_points(run: BenchmarkRun, result: NormalizedResult) -> None:
    run.points.all().delete()
    RunPoint.objects.bulk_create([
        RunPoint(run=run, index=index, label=point.label[:120], concurrency=point.concurrency,
                 request_rate=point.request_rate, achieved_concurrency=point.achieved_concurrency,
                 duration_s=point.duration_s, requests_completed=point.requests_completed,
                 requests_failed=point.requests_failed, ttft_ms=asdict(point.ttft_ms), tpot_ms=asdict(point.tpot_ms),
                 itl_ms=asdict(point.itl_ms), e2e_ms=asdict(point.e2e_ms),
                 request_throughput=point.request_throughput, output_token_throughput=point.output_token_throughput,
                 input_token_throughput=point.input_token_throughput, error_rate=point.error_rate,
                 goodput=point.goodput, slo_attainment=point.slo_attainment, client_bound=point.client_bound,
                 extra=point.extra)
        for index, point in enumerate(result.points)
    ])


def apply_result(run: BenchmarkRun, result: NormalizedResult, files: _SavedFiles, status: str) -> BenchmarkRun:
    """Copy a normalised result onto a run (inside the caller's transaction)."""
    run.tool, run.tool_version, run.format = result.tool[:60], (result.tool_version or "")[:60], result.format[:60]
    run.evidence = result.evidence
    run.metadata, run.definitions = result.metadata, result.definitions
    run.verdicts, run.timeseries, run.notes, run.partial = result.verdicts, result.timeseries, result.notes, result.partial
    run.status = status
    run.finished_at = timezone.now()
    run.save()
    _write_points(run, result)
    parquet = requests_parquet(result)
    if parquet is not None:
        run.artifacts.filter(kind=Artifact.Kind.REQUESTS).delete()
        files.save(run, Artifact.Kind.REQUESTS, f"run-{run.pk}-requests.parquet", parquet)
    return run


def _validate_upload_fields(test: str, fmt: str | None) -> None:
    if test not in TEST_NAMES:
        raise IngestError("test", f"must be one of {', '.join(TEST_NAMES)}; got {test!r}")
    if fmt:
        from .formats import format_names

        if fmt not in format_names():
            raise IngestError("format", f"unknown format {fmt!r}; one of {', '.join(format_names())}")


GZIP_MAGIC = b"\x1f\x8b"


def gunzip_bounded(data: bytes, limit: int) -> bytes:
    """Decompress a gzip upload, reading at most `limit` bytes of output (a gzip bomb stops there)."""
    import gzip
    import zlib

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


def ingest_upload(*, candidate: Candidate, data: bytes, filename: str, test: str, fmt: str | None = None,
                  label: str = "", uploader: str = "", idempotency_key: str = "",
                  synchronous: bool | None = None) -> tuple[BenchmarkRun, bool]:
    """Store an uploaded result file. Returns (run, created).

    Small files are parsed here, before anything is written (a parse failure stores nothing).
    Large files are stored raw and parsed by the `parse_upload` task; the run says `parsing`.
    """
    _validate_upload_fields(test, fmt)
    if len(data) > settings.KVSELECT_MAX_UPLOAD_BYTES:
        raise IngestError("file", f"{len(data):,} bytes exceeds the limit of {settings.KVSELECT_MAX_UPLOAD_BYTES:,}", 413)
    if not data:
        raise IngestError("file", "the file is empty")
    compressed = data.startswith(GZIP_MAGIC)
    if compressed:
        compressed_size = len(data)
        data = gunzip_bounded(data, settings.KVSELECT_MAX_UPLOAD_BYTES)
        filename = filename[:-3] if (filename or "").lower().endswith(".gz") else filename
    existing = find_idempotent(candidate, idempotency_key)
    if existing:
        return existing, False
    if synchronous is None:
        synchronous = len(data) <= settings.KVSELECT_SYNC_PARSE_BYTES
    result = parse_bytes(data, filename, fmt, selection_slo(candidate)) if synchronous else None
    files = _SavedFiles()
    try:
        with transaction.atomic():
            run = BenchmarkRun.objects.create(
                candidate=candidate, test=test, label=label[:200], origin=BenchmarkRun.Origin.UPLOAD,
                status=BenchmarkRun.Status.PARSING, idempotency_key=idempotency_key[:200], uploaded_by=uploader[:150],
                raw_sha256=sha256_hex(data), params={"filename": filename, "format": fmt or "auto",
                                                     **({"compressed": "gzip", "compressed_size": compressed_size}
                                                        if compressed else {})})
            files.save(run, Artifact.Kind.RAW, _safe_filename(filename), data)
            if result is not None:
                apply_result(run, result, files, BenchmarkRun.Status.SUCCEEDED)
    except IntegrityError:
        files.discard()
        existing = find_idempotent(candidate, idempotency_key)
        if existing:  # a concurrent retry with the same key won the race
            return existing, False
        raise
    except BaseException:
        files.discard()
        raise
    if result is None:
        enqueue_parse(run)
    return run, True


def enqueue_parse(run: BenchmarkRun) -> bool:
    """Queue parsing; if the broker is down the run stays `parsing` and the reaper re-queues it."""
    from .tasks import parse_upload

    try:
        parse_upload.apply_async((run.pk,), retry=False)
        return True
    except Exception as exc:  # kombu raises OperationalError and friends when the broker is down
        logger.warning("broker unavailable, run %s waits for the reaper: %s", run.pk, exc)
        BenchmarkRun.objects.filter(pk=run.pk).update(progress={"phase": "waiting for the job queue"})
        return False


def parse_stored_upload(run_id: int) -> BenchmarkRun:
    """Parse a stored raw upload (the `parse_upload` task body). Idempotent."""
    run = BenchmarkRun.objects.select_related("candidate__selection__constraints").get(pk=run_id)
    if run.status != BenchmarkRun.Status.PARSING:
        return run
    raw = run.artifacts.get(kind=Artifact.Kind.RAW)
    with raw.file.open("rb") as handle:
        data = handle.read()
    try:
        result = parse_bytes(data, run.params.get("filename"), None if run.params.get("format") in (None, "auto")
                             else run.params["format"], selection_slo(run.candidate))
    except ValueError as exc:
        BenchmarkRun.objects.filter(pk=run.pk).update(status=BenchmarkRun.Status.FAILED, error=str(exc)[:5000],
                                                      finished_at=timezone.now())
        run.refresh_from_db()
        return run
    files = _SavedFiles()
    try:
        with transaction.atomic():
            locked = BenchmarkRun.objects.select_for_update().get(pk=run.pk)
            if locked.status == BenchmarkRun.Status.PARSING:
                apply_result(locked, result, files, BenchmarkRun.Status.SUCCEEDED)
    except BaseException:
        files.discard()
        raise
    run.refresh_from_db()
    return run


def parse_bytes(data: bytes, filename: str | None, fmt: str | None, slo: dict[str, Any]) -> NormalizedResult:
    from .formats import detect_and_parse

    return detect_and_parse(data, filename=filename, format=fmt or None, slo=slo or None)


def store_native_result(*, run: BenchmarkRun, result: NormalizedResult, status: str,
                        extra_files: dict[str, tuple[str, bytes]] | None = None) -> BenchmarkRun:
    """Store a result the harness or simulator produced for an existing run, with its native JSON."""
    import json

    files = _SavedFiles()
    try:
        with transaction.atomic():
            locked = BenchmarkRun.objects.select_for_update().get(pk=run.pk)
            apply_result(locked, result, files, status)
            native = json.dumps(result.to_native(include_requests=False), default=str).encode()
            locked.raw_sha256 = sha256_hex(native)
            locked.save(update_fields=["raw_sha256"])
            files.save(locked, Artifact.Kind.NATIVE, f"run-{locked.pk}.json", native)
            for kind, (name, content) in (extra_files or {}).items():
                files.save(locked, kind, name, content)
    except BaseException:
        files.discard()
        raise
    run.refresh_from_db()
    return run


def _safe_filename(name: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in (name or "upload").split("/")[-1])
    return keep[:120] or "upload"
