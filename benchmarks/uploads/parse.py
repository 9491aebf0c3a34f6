"""Parsing an upload: bytes -> normalised result (any format), and the stored raw upload of a
large file parsed later by the `parse_upload` task (this module owns an upload's status)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from benchmarks.formats import detect_and_parse, detect_and_parse_file
from benchmarks.formats.base import reason_of
from benchmarks.models import Artifact, BenchmarkRun
from benchmarks.result import NormalizedResult
from benchmarks.storage import SavedFiles, apply_result, local_path
from benchmarks.uploads.quality import warnings_for_candidate
from selection.domain.messages import Message
from selection.models import Candidate
from selection.tasks import schedule_rescoring


def selection_slo(candidate: Candidate) -> dict[str, float]:
    """The selection's latency budget as an SLO for goodput: {ttft_ms, tpot_ms, e2e_ms}."""
    constraints = getattr(candidate.selection, "constraints", None)
    if constraints is None:
        return {}
    slo = {"ttft_ms": constraints.ttft_p95_ms, "tpot_ms": constraints.tpot_p95_ms, "e2e_ms": constraints.e2e_p95_ms}
    return {k: float(v) for k, v in slo.items() if v is not None}


def parse_stored_upload(run_id: int) -> BenchmarkRun:
    """Parse a stored raw upload (the `parse_upload` task body). Idempotent."""
    run = BenchmarkRun.objects.select_related("candidate__selection__constraints", "candidate__engine").get(pk=run_id)
    if run.status != BenchmarkRun.Status.PARSING:
        return run
    raw = run.artifacts.get(kind=Artifact.Kind.RAW)
    filename = run.params.get("filename")
    fmt = None if run.params.get("format") in (None, "auto") else run.params["format"]
    path = local_path(raw)
    try:
        if path is not None:  # parsed from disk: a file larger than memory stays on disk
            result = detect_and_parse_file(
                path, filename=filename, format=fmt, slo=selection_slo(run.candidate) or None
            )
        else:
            with raw.file.open("rb") as handle:
                result = parse_bytes(handle.read(), filename, fmt, selection_slo(run.candidate))
    except ValueError as exc:
        reason = reason_of(exc)
        BenchmarkRun.objects.filter(pk=run.pk, status=BenchmarkRun.Status.PARSING).update(
            status=BenchmarkRun.Status.FAILED,
            error=str(exc)[:5000],
            error_message=reason.to_dict() if isinstance(reason, Message) else None,
            finished_at=timezone.now(),
            progress={"phase": BenchmarkRun.Status.FAILED, "percent": 100},
        )
        run.refresh_from_db()
        return run
    files = SavedFiles()
    try:
        with transaction.atomic():
            locked = BenchmarkRun.objects.select_for_update().get(pk=run.pk)
            if locked.status == BenchmarkRun.Status.PARSING:
                locked.quality_warnings = warnings_for_candidate(result, run.candidate)
                # a phase it showed while waiting ("waiting for the job queue") ends with the parse
                locked.progress = {"phase": BenchmarkRun.Status.SUCCEEDED, "percent": 100}
                apply_result(locked, result, files, BenchmarkRun.Status.SUCCEEDED)
                schedule_rescoring(run.candidate.selection_id)
    except BaseException:
        files.discard()
        raise
    run.refresh_from_db()
    return run


def parse_bytes(data: bytes, filename: str | None, fmt: str | None, slo: dict[str, Any]) -> NormalizedResult:
    return detect_and_parse(data, filename=filename, format=fmt or None, slo=slo or None)
