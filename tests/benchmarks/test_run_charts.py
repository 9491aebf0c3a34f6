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


def test_a_stress_run_draws_its_traffic_groups_apart_from_its_load_points(candidate):
    """Issue 33 item 6: short and long requests are parts of one load at their own concurrency; the chart
    (run page, comparison, record) draws them as series of their own, markers only, never a line to x = 21."""
    run = BenchmarkRun.objects.create(
        candidate=candidate, test="concurrency_stress", origin="harness", status="succeeded"
    )
    RunPoint.objects.create(
        run=run, index=0, concurrency=21, achieved_concurrency=21.17, ttft_ms={"p95": 400.0}, tpot_ms={"p95": 30.0}
    )
    for index, (group, ttft) in enumerate((("short", 150.0), ("long", 900.0)), start=1):
        RunPoint.objects.create(
            run=run,
            index=index,
            label=group,
            concurrency=2,
            ttft_ms={"p95": ttft},
            tpot_ms={"p95": 25.0},
            extra={"traffic_group": group},
        )
    data = run_charts.latency_vs_load(run)
    assert data["concurrency"] == [21.0] and data["ttft_ms"] == [400.0]
    assert sorted(data["groups"]) == ["long requests", "short requests"]
    assert data["groups"]["long requests"]["concurrency"] == [2.0]
    [chart] = [c for c in run_charts.record_charts(run) if c["kind"] == "latency_vs_load"]
    assert "short requests" in chart["svg"] and "long requests" in chart["svg"]
