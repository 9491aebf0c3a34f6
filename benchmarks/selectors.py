"""Reads of evidence: which runs count for a candidate."""

from __future__ import annotations

from typing import Iterable

from benchmarks.models import BenchmarkRun
from benchmarks.result import SIMULATED
from selection.models import Candidate


def latest_runs(candidate: Candidate) -> dict[str, BenchmarkRun]:
    """The newest succeeded run per test; an upload with evidence-quality warnings counts only
    once confirmed as evidence (`benchmarks.uploads.quality`)."""
    runs: dict[str, BenchmarkRun] = {}
    for run in candidate.runs.filter(status=BenchmarkRun.Status.SUCCEEDED).prefetch_related("points"):
        if run.needs_confirmation:
            continue
        runs.setdefault(run.test, run)  # ordered newest first
    return runs


def simulated_run_count(candidates: Iterable[Candidate]) -> int:
    """How many finished runs of these candidates are SIMULATED (a measured-only view leaves them out)."""
    return BenchmarkRun.objects.filter(
        candidate__in=list(candidates), status=BenchmarkRun.Status.SUCCEEDED, evidence=SIMULATED
    ).count()
