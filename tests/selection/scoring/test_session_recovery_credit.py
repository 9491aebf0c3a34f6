"""Session recovery consistency is credited only after a swap-in (issue 27): the demo credited it
1.000 while every idle session was dropped and recomputed (resume 1.02x a recompute)."""

import pytest

from benchmarks.models import BenchmarkRun
from selection.candidates.services import add_candidate
from selection.scoring.evidence import derived_from_run, evidence_for


@pytest.fixture
def candidate(selection_with_constraints, architect, engines):
    return add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": engines["vllm"].versions[0]},
    )


def swap_run(candidate, eviction: str, resume: str, continuation: str = "pass", derived=None) -> BenchmarkRun:
    statuses = {"eviction_exercised": eviction, "resume_cheaper_than_recompute": resume}
    statuses["continuation_identical"] = continuation
    return BenchmarkRun.objects.create(
        candidate=candidate,
        test="swap_recovery",
        origin="harness",
        status="succeeded",
        verdicts=[
            {"name": name, "status": status, "passed": {"pass": True, "fail": False}.get(status)}
            for name, status in statuses.items()
        ],
        metadata={"derived": derived or {}},
    )


@pytest.mark.parametrize(
    ("eviction", "resume", "continuation", "credit"),
    [
        ("pass", "pass", "pass", 1.0),  # swapped out and back for less than a recompute: recovery observed
        ("pass", "pass", "fail", 0.0),  # ... and it continued differently: a real failure
        ("pass", "fail", "pass", None),  # dropped and recomputed (the demo): nothing was recovered
        ("pass", "inconclusive", "pass", None),
        ("not_exercised", "not_exercised", "not_exercised", None),
    ],
)
def test_continuation_counts_only_after_a_swap_in(candidate, eviction, resume, continuation, credit):
    run = swap_run(candidate, eviction, resume, continuation)
    assert derived_from_run(run).get("continuation_correct") == credit


def test_a_stated_continuation_figure_needs_the_swap_in_too(candidate):
    swap_run(candidate, "pass", "fail", derived={"continuation_correct": 1.0, "swap_resume_ttft_ratio": 1.02})
    metrics = evidence_for(candidate.selection, [candidate])[0].metrics
    assert "continuation_correct" not in metrics
    assert metrics["swap_resume_ttft_ratio"].value == 1.02  # the cost it did measure still counts (against it)
