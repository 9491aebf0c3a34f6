"""Reads of evidence: which runs count for a candidate."""

from __future__ import annotations

from benchmarks.models import BenchmarkRun
from selection.models import Candidate


def latest_runs(candidate: Candidate) -> dict[str, BenchmarkRun]:
    runs: dict[str, BenchmarkRun] = {}
    for run in candidate.runs.filter(status=BenchmarkRun.Status.SUCCEEDED).prefetch_related("points"):
        runs.setdefault(run.test, run)  # ordered newest first
    return runs
