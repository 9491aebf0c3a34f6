"""Write operations on evidence: storing normalised results, ingesting uploads.

Nothing is half-written: a result is validated (parsed) before anything is stored, rows are
written in one transaction, and files saved for a transaction that rolls back are deleted.

Nothing finished is lost: a validation run's result is first written to its write-ahead file
(`runs/<id>/pending/attempt-<n>.json`, atomically renamed into place) and only then stored in the
database; the file is removed once the rows are committed. A worker that dies, or a database
that stays away, between the two leaves the file for the reaper to store.

pyarrow and the native format's validator load with the write that needs them: the app's `ready`
imports this module for the artifact-file signal, and every process (each `manage.py` command)
runs it (issue 39: start-up).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from django.core.files.base import ContentFile, File
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from benchmarks.models import Artifact, BenchmarkRun, RunPoint
from benchmarks.result import NormalizedResult

logger = logging.getLogger(__name__)


class StorageFailure(RuntimeError):
    """An artifact could not be saved (disk full, bucket down): nothing was recorded."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class SavedFiles:
    """Files saved during a transaction; deleted again if it rolls back."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def save(self, run: BenchmarkRun, kind: str, filename: str, data: bytes) -> Artifact:
        return self.save_file(run, kind, filename, ContentFile(data), sha256=sha256_hex(data), size=len(data))

    def save_file(
        self, run: BenchmarkRun, kind: str, filename: str, content: File, *, sha256: str, size: int
    ) -> Artifact:
        """Store `content` (streamed in chunks; a file on local disk with `temporary_file_path` is moved)."""
        artifact = Artifact(run=run, kind=kind, sha256=sha256, size=size)
        field = artifact.file.field
        # The name is chosen first so that a write failing half-way (disk full) leaves no orphan file:
        # Django's FileSystemStorage does not remove what it wrote before the error.
        name = field.storage.get_available_name(
            field.generate_filename(artifact, filename), max_length=field.max_length
        )
        try:
            artifact.file.name = field.storage.save(name, content, max_length=field.max_length)
        except OSError as exc:
            delete_file(name)
            raise StorageFailure(f"could not store the {kind} artifact: {exc.strerror or exc}") from exc
        self.names.append(artifact.file.name)
        artifact.save()
        return artifact

    def discard(self) -> None:
        for name in self.names:
            delete_file(name)


def delete_file(name: str) -> None:
    try:
        default_storage.delete(name)
    except OSError:  # best effort: an orphan file is harmless, a half row is not
        logger.warning("could not delete orphan artifact %s", name)


def remove_artifact_file(sender, instance: Artifact, **kwargs) -> None:
    """post_delete of an artifact (on its own or in a cascade): its file goes once the deletion commits."""
    name = instance.file.name
    if name:
        transaction.on_commit(lambda: delete_file(name))


def requests_parquet(result: NormalizedResult) -> bytes | None:
    if result.requests is None or not len(result.requests):
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = (
        result.requests
        if isinstance(result.requests, pa.Table)
        else pa.Table.from_pandas(result.requests, preserve_index=False)
    )
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def _write_points(run: BenchmarkRun, result: NormalizedResult) -> None:
    run.points.all().delete()
    RunPoint.objects.bulk_create(
        [
            RunPoint(
                run=run,
                index=index,
                label=point.label[:120],
                concurrency=point.concurrency,
                request_rate=point.request_rate,
                achieved_concurrency=point.achieved_concurrency,
                duration_s=point.duration_s,
                requests_completed=point.requests_completed,
                requests_failed=point.requests_failed,
                ttft_ms=asdict(point.ttft_ms),
                tpot_ms=asdict(point.tpot_ms),
                itl_ms=asdict(point.itl_ms),
                e2e_ms=asdict(point.e2e_ms),
                request_throughput=point.request_throughput,
                output_token_throughput=point.output_token_throughput,
                input_token_throughput=point.input_token_throughput,
                error_rate=point.error_rate,
                goodput=point.goodput,
                slo_attainment=point.slo_attainment,
                client_bound=point.client_bound,
                extra=point.extra,
            )
            for index, point in enumerate(result.points)
        ]
    )


def apply_result(run: BenchmarkRun, result: NormalizedResult, files: SavedFiles, status: str) -> BenchmarkRun:
    """Copy a normalised result onto a run (inside the caller's transaction)."""
    run.tool, run.tool_version, run.format = result.tool[:60], (result.tool_version or "")[:60], result.format[:60]
    run.evidence = result.evidence
    run.metadata, run.definitions = result.metadata, result.definitions
    run.verdicts, run.timeseries, run.notes, run.partial = (
        result.verdicts,
        result.timeseries,
        result.notes,
        result.partial,
    )
    run.status = status
    run.finished_at = timezone.now()
    run.save()
    _write_points(run, result)
    parquet = requests_parquet(result)
    if parquet is not None:
        run.artifacts.filter(kind=Artifact.Kind.REQUESTS).delete()
        files.save(run, Artifact.Kind.REQUESTS, f"run-{run.pk}-requests.parquet", parquet)
    return run


def store_native_result(
    *,
    run: BenchmarkRun,
    result: NormalizedResult,
    status: str,
    extra_files: dict[str, tuple[str, bytes]] | None = None,
    error: str = "",
    error_message: dict[str, Any] | None = None,
    owned_by=None,
    on_stored: Callable[[BenchmarkRun], None] | None = None,
) -> BenchmarkRun | None:
    """Store a result the harness or simulator produced for an existing run, with its native JSON.

    `owned_by`: a Q object the locked run must match (a worker's attempt that still owns it);
    when it does not, nothing is written and None is returned. `on_stored` runs in the same
    transaction once the result is written (the selection's scoring inputs changed with it).
    """

    files = SavedFiles()
    try:
        with transaction.atomic():
            locked_rows = BenchmarkRun.objects.select_for_update().filter(pk=run.pk)
            if owned_by is not None:
                locked_rows = locked_rows.filter(owned_by)
            locked = locked_rows.first()
            if locked is None:
                return None
            apply_result(locked, result, files, status)
            native = json.dumps(result.to_native(include_requests=False), default=str).encode()
            locked.raw_sha256 = sha256_hex(native)
            locked.error = error[:5000]
            locked.error_message = error_message  # the same reason as a message the run page renders
            locked.progress = {"phase": status, "percent": 100}
            locked.save(update_fields=["raw_sha256", "error", "error_message", "progress"])
            files.save(locked, Artifact.Kind.NATIVE, f"run-{locked.pk}.json", native)
            for kind, (name, content) in (extra_files or {}).items():
                files.save(locked, kind, name, content)
            if on_stored is not None:
                on_stored(locked)
    except BaseException:
        files.discard()
        raise
    run.refresh_from_db()
    return run


# --------------------------------------------------------------------------------- write-ahead


def pending_name(run_id: int, attempt: int) -> str:
    """One file per attempt: a worker presumed dead that wakes up never touches its successor's."""
    return f"runs/{run_id}/pending/attempt-{attempt}.json"


def _pending_path(run_id: int, attempt: int) -> Path:
    # The write-ahead file needs a rename on a real file system (FileSystemStorage).
    return Path(default_storage.path(pending_name(run_id, attempt)))


def write_pending(run_id: int, attempt: int, envelope: dict[str, Any]) -> None:
    """Write (or replace) a run's write-ahead file: a temporary file, fsync, then an atomic rename."""
    path = _pending_path(run_id, attempt)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(envelope, default=str).encode()
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def pending_envelope(
    *,
    run_id: int,
    attempt: int,
    status: str,
    error: str,
    result: NormalizedResult,
    store_error: str = "",
    error_message: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "kind": "kvselect.pending-result/1",
        "run": run_id,
        "attempt": attempt,
        "status": status,
        "error": error,
        "error_message": error_message,
        "store_error": store_error,
        "written_at": timezone.now().isoformat(),
        "result": result.to_native(include_requests=True),
    }


def read_pending(run_id: int, attempt: int) -> dict[str, Any] | None:
    """An attempt's write-ahead envelope, its result validated again (None: no file, or an unreadable one)."""
    try:
        data = _pending_path(run_id, attempt).read_bytes()
    except FileNotFoundError:
        return None
    from benchmarks.formats.native import validate as validate_native

    try:
        envelope = json.loads(data)
        envelope["result"] = validate_native(envelope["result"])
    except (ValueError, KeyError, TypeError) as exc:  # a torn or foreign file: report, never store it
        logger.error("run %s: unreadable write-ahead file (%s)", run_id, exc)
        return None
    return envelope


def discard_pending(run_id: int, attempt: int) -> None:
    path = _pending_path(run_id, attempt)
    try:
        path.unlink()
    except FileNotFoundError:
        return
    try:
        path.parent.rmdir()
    except OSError:  # not empty or already gone
        pass


def local_path(artifact: Artifact) -> str | None:
    """The artifact's path on local disk (FileSystemStorage), else None (read it through the storage)."""
    try:
        return artifact.file.path
    except NotImplementedError:
        return None


def save_artifact(run: BenchmarkRun, kind: str, filename: str, data: bytes) -> Artifact:
    """Store one artifact of an existing run on its own (a worker's engine log, say)."""
    files = SavedFiles()
    try:
        with transaction.atomic():
            return files.save(run, kind, filename, data)
    except BaseException:
        files.discard()
        raise
