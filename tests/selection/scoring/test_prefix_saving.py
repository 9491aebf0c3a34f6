"""Scoring reads the prefix test's measured memory saving (peak KV on vs off), not a hit ratio."""

import pytest

from benchmarks.models import BenchmarkRun, RunPoint
from selection.candidates.services import add_candidate
from selection.scoring.evidence import evidence_for


@pytest.fixture
def candidate(selection_with_constraints, architect, engines):
    return add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": engines["vllm"].versions[0]},
    )


def prefix_run(candidate, on: dict, off: dict | None = None) -> BenchmarkRun:
    run = BenchmarkRun.objects.create(
        candidate=candidate,
        test="prefix_reuse",
        origin="harness",
        status="succeeded",
        evidence="SIMULATED",
        params={"requests": 64, "concurrency": 16, "prefix_tokens": 768, "suffix_tokens": 256, "output_tokens": 128},
    )
    RunPoint.objects.create(run=run, index=0, label="prefix_on", extra=on)
    if off is not None:
        RunPoint.objects.create(run=run, index=1, label="prefix_off", extra=off)
    return run


def saving(candidate):
    metrics = evidence_for(candidate.selection, [candidate])[0].metrics
    return metrics.get("prefix_saving_ratio")


def test_the_saving_is_peak_kv_on_against_off_over_the_theoretical_saving(candidate):
    # theory: 16 x (768 + 256 + 128) = 18432 each on its own; the prefix once: 768 + 16 x 384 = 6912
    run = prefix_run(
        candidate,
        {"kv_tokens_peak": 7000, "own_allocation_tokens": 18432, "prefix_hit_ratio": 0.1},
        {"kv_tokens_peak": 18000},
    )
    metric = saving(candidate)
    assert metric.value == pytest.approx((1 - 7000 / 18000) / (1 - 6912 / 18432))
    assert metric.run_ids == (str(run.pk),) and metric.evidence == "SIMULATED"


def test_without_an_off_run_the_saving_is_against_the_theory(candidate):
    prefix_run(candidate, {"kv_tokens_peak": 6912, "own_allocation_tokens": 18432, "shared_once_tokens": 6912})
    assert saving(candidate).value == pytest.approx(1.0)


def test_hits_without_a_smaller_footprint_save_nothing(candidate):
    # every prefix hit, yet caching on held as much KV as off: no memory saved
    prefix_run(
        candidate,
        {"kv_tokens_peak": 18400, "own_allocation_tokens": 18432, "prefix_hit_ratio": 0.95},
        {"kv_tokens_peak": 18000},
    )
    assert saving(candidate).value == 0.0
    prefix_run(candidate, {"prefix_hit_ratio": 0.95})  # an older run with a hit ratio only: no saving
    assert saving(candidate) is None


def test_the_harnesss_saving_on_a_per_slot_engine_is_compute_and_stands_when_the_client_lagged(candidate):
    """A per-slot engine (llama.cpp) saves prefill, not memory: the harness writes the compute saved
    over its best into `derived`, and token counts do not depend on the client's pace, so a client-bound
    point does not hold it out (issue 34 items 2-3; the audit saw it held out as "client-bound")."""
    run = prefix_run(candidate, {"kv_tokens_peak": 5000, "own_allocation_tokens": 5120})
    run.metadata = {
        "derived": {"prefix_saving_ratio": 1.0},
        "pace_independent": ["prefix_saving_ratio"],
        "observed": {"per_slot_cache": True, "saving_kind": "compute"},
    }
    run.save(update_fields=["metadata"])
    run.points.filter(label="prefix_on").update(client_bound=True, concurrency=16, achieved_concurrency=5.5)
    metric = saving(candidate)
    assert metric is not None and metric.value == 1.0 and metric.run_ids == (str(run.pk),)
    # the same figure without the harness's statement is the client's: held out
    run.metadata = {"derived": {"prefix_saving_ratio": 1.0}}
    run.save(update_fields=["metadata"])
    assert saving(candidate) is None
