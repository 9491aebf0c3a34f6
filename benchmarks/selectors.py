"""Reads of evidence: which runs count for a candidate."""

from __future__ import annotations

from typing import Iterable

from benchmarks.models import BenchmarkRun
from benchmarks.result import SIMULATED
from selection.models import Candidate


def latest_runs(candidate: Candidate) -> dict[str, BenchmarkRun]:
    """The newest succeeded run per test; an upload with evidence-quality warnings counts only
    once confirmed as evidence (`benchmarks.uploads.quality`)."""
    return {test: runs[0] for test, runs in run_history(candidate).items()}


def run_history(candidate: Candidate) -> dict[str, list[BenchmarkRun]]:
    """Every succeeded run per test that counts as evidence (as `latest_runs`), newest first (by
    creation, then id: a fixed order)."""
    runs: dict[str, list[BenchmarkRun]] = {}
    succeeded = candidate.runs.filter(status=BenchmarkRun.Status.SUCCEEDED).order_by("-created_at", "-id")
    for run in succeeded.prefetch_related("points"):
        if not run.needs_confirmation:
            runs.setdefault(run.test, []).append(run)
    return runs


def simulated_run_count(candidates: Iterable[Candidate]) -> int:
    """How many finished runs of these candidates are SIMULATED (a measured-only view leaves them out)."""
    return BenchmarkRun.objects.filter(
        candidate__in=list(candidates), status=BenchmarkRun.Status.SUCCEEDED, evidence=SIMULATED
    ).count()
