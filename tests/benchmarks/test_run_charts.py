"""The charts a run is drawn as (issue 27: the swap test's phases are no load levels)."""

import pytest

from benchmarks import run_charts
from benchmarks.models import BenchmarkRun, RunPoint
from selection.candidates.services import add_candidate

pytestmark = pytest.mark.django_db


@pytest.fixture
def candidate(selection_with_constraints, architect, engines):
    return add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": engines["vllm"].versions[0]},
    )


def test_the_swap_test_is_drawn_as_its_phases_never_against_concurrency(candidate):
    run = BenchmarkRun.objects.create(
        candidate=candidate,
        test="swap_recovery",
        origin="harness",
        status="succeeded",
        metadata={"resume": {"resume_ttft_ms": {"p50": 196.0, "n": 20, "p50_interval": [190.0, 205.0]}}},
    )
    # the phases ran at different concurrencies (16 first turns, 1 timed turn, 32 pressure requests)
    for index, (label, concurrency, p50) in enumerate(
        (("turn1", 16, 60.0), ("warm", 1, 50.0), ("resume", 1, 196.0), ("recompute", 1, 192.0), ("pressure", 32, 900.0))
    ):
        RunPoint.objects.create(run=run, index=index, label=label, concurrency=concurrency, ttft_ms={"p50": p50})
    charts = run_charts.record_charts(run)
    assert [chart["kind"] for chart in charts] == ["swap_phases"]
    assert run_charts.swap_phase_figures(run) == {
        "warm": 50.0,
        "warm_interval": None,
        "resume": 196.0,
        "resume_interval": [190.0, 205.0],
        "recompute": 192.0,
        "recompute_interval": None,
    }
    assert "concurrency" not in charts[0]["svg"]
