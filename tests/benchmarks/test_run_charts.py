"""The charts a run is drawn as (issue 27: the swap test's phases are no load levels)."""

import pytest

from benchmarks import run_charts
from benchmarks.models import BenchmarkRun, RunPoint
from selection.candidates.services import add_candidate
from tests.support.svg import legend_colours, lines_in

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


def stress_run_with_groups(candidate, loads=((21, 21.17, 400.0),)):
    """A finished stress run with these load points (concurrency, achieved, TTFT p95) and its short
    (TTFT p95 150 ms) and long (900 ms) traffic groups, both measured at concurrency 2."""
    run = BenchmarkRun.objects.create(
        candidate=candidate, test="concurrency_stress", origin="harness", status="succeeded"
    )
    for index, (concurrency, achieved, ttft) in enumerate(loads):
        RunPoint.objects.create(
            run=run,
            index=index,
            concurrency=concurrency,
            achieved_concurrency=achieved,
            ttft_ms={"p95": ttft},
            tpot_ms={"p95": 30.0 + index},
        )
    for index, (group, ttft) in enumerate((("short", 150.0), ("long", 900.0)), start=len(loads)):
        RunPoint.objects.create(
            run=run,
            index=index,
            label=group,
            concurrency=2,
            ttft_ms={"p95": ttft},
            tpot_ms={"p95": 25.0},
            extra={"traffic_group": group},
        )
    return run


def test_a_stress_run_draws_its_traffic_groups_apart_from_its_load_points(candidate):
    """Issue 33 item 6: short and long requests are parts of one load at their own concurrency; the chart
    (run page, comparison, record) draws them as series of their own, markers only, never a line to x = 21."""
    run = stress_run_with_groups(candidate)
    data = run_charts.latency_vs_load(run)
    assert data["concurrency"] == [21.0] and data["ttft_ms"] == [400.0]
    assert sorted(data["groups"]) == ["long requests", "short requests"]
    assert data["groups"]["long requests"]["concurrency"] == [2.0]
    [chart] = [c for c in run_charts.record_charts(run) if c["kind"] == "latency_vs_load"]
    assert "short requests" in chart["svg"] and "long requests" in chart["svg"]


def test_the_comparison_draws_each_candidates_traffic_groups_as_series_never_joined_to_a_load_point(
    candidate, selection_with_constraints, architect, engines
):
    """Walk M3 on the comparison: its "TTFT and TPOT p95 per load point" chart joined each candidate's
    groups at x = 2 by a line to its load point (vLLM: x = 4 to 95). Now the groups are series of their
    own in the candidate's colour, with no line; a candidate measured at two loads keeps its line, and
    that line has its two load points only (candidate names with " · " in them included)."""
    other = add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["sglang"], "engine_version": engines["sglang"].versions[0], "label": "SGLang · H100"},
    )
    stress = stress_run_with_groups(candidate)
    swept = stress_run_with_groups(other, loads=((4, 4.0, 95.0), (16, 15.8, 300.0)))
    latest = [("vLLM", {"concurrency_stress": stress}), ("SGLang · H100", {"concurrency_stress": swept})]
    [chart] = [
        c
        for c in run_charts.comparison_charts(latest, run_charts.Budgets(800.0, 50.0))
        if c["kind"] == "latency_vs_load"
    ]
    legend = legend_colours(chart["svg"])
    for name in ("vLLM", "SGLang · H100"):
        assert legend[f"{name} · short requests"] == legend[f"{name} · long requests"] == legend[name], legend
    assert lines_in(chart["svg"], legend["vLLM"]) == []  # its one load point and its groups: nothing to join
    lines = lines_in(chart["svg"], legend["SGLang · H100"])
    assert len(lines) == 2 and all(len(line) == 2 for line in lines), lines  # its two loads, in each panel

    # one load per candidate: one bar per series, nothing joined
    only = run_charts.comparison_charts(latest[:1], run_charts.Budgets(800.0, 50.0))
    [chart] = [c for c in only if c["kind"] == "latency_vs_load"]
    legend = legend_colours(chart["svg"])
    assert {"vLLM", "vLLM · short requests", "vLLM · long requests"} <= set(legend), legend
    assert lines_in(chart["svg"], legend["vLLM"]) == []
