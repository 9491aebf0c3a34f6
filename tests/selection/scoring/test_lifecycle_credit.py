"""Cache lifecycle credits the idle sessions whose KV was released OR offloaded, as the printed rule
says (issue 33 item 4; the audit's row 66: the offloading engine scored 0.167, the dropping one 0.833).
The eviction figures come from the swap test's own judging rule (`swap.observe_eviction`) on the
patterns a dropping and an offloading engine show."""

import pytest

from benchmarks.harness import swap
from benchmarks.models import BenchmarkRun
from benchmarks.suite.swap_recovery import idle_release_share
from selection.candidates.services import add_candidate
from selection.domain.scoring.indicators import score_indicator
from selection.domain.scoring.inputs import ScoringConstraints
from selection.domain.scoring.mappings import MAPPINGS
from selection.scoring.evidence import evidence_for

WARM = [960] * 20
# snapshots around the phases: an offloading engine stores KV out while the sessions idle, and loads
# it back while they resume; a dropping one moves nothing
OFFLOAD = {
    "pressure_start": {"swap_out": 0.0, "swap_in": 0.0},
    "resume_start": {"swap_out": 9.0e8, "swap_in": 0.0},
    "resume_end": {"swap_out": 9.0e8, "swap_in": 6.0e8},
}


def dropping() -> dict:
    """SGLang without its hierarchical cache, vLLM without an offload connector: histories recomputed."""
    return swap.observe_eviction(WARM, [5] * 20, {})


def offloading() -> dict:
    """vLLM with --kv-offloading-size: every history came back from the CPU tier, cache intact."""
    return swap.observe_eviction(WARM, [944] * 20, OFFLOAD)


def test_the_swap_test_counts_dropped_and_offloaded_sessions():
    drop, offload = dropping(), offloading()
    assert drop["observed"] and drop["evicted_sessions"] == 20 and drop["offloaded_sessions"] is None
    assert offload["observed"] and offload["evicted_sessions"] == 0 and offload["offloaded_sessions"] == 20
    assert drop["judged_by"] == ["responses"] and offload["judged_by"] == ["offload_counters"]
    # some sessions dropped, the rest loaded back: both count
    mixed = swap.observe_eviction(WARM, [5] * 5 + [944] * 15, OFFLOAD)
    assert (mixed["evicted_sessions"], mixed["offloaded_sessions"]) == (5, 15)
    # the counters moved only one way (stored out, never loaded back): no session counted as offloaded
    stored_only = {**OFFLOAD, "resume_end": {"swap_out": 9.0e8, "swap_in": 0.0}}
    assert swap.observe_eviction(WARM, [944] * 20, stored_only)["offloaded_sessions"] is None


def test_released_or_offloaded_both_earn_the_credit_and_resident_sessions_do_not():
    assert idle_release_share(dropping()) == 1.0
    assert idle_release_share(offloading()) == 1.0
    assert idle_release_share(swap.observe_eviction(WARM, [5] * 5 + [944] * 15, OFFLOAD)) == 1.0
    # 5 dropped, 15 still resident (no offload seen): only the dropped ones were released
    assert idle_release_share(swap.observe_eviction(WARM, [5] * 5 + [944] * 15, {})) == pytest.approx(0.25)
    assert idle_release_share({"observed": False, "sessions": 20, "evicted_sessions": 0}) is None


@pytest.fixture
def candidates(selection_with_constraints, architect, engines):
    return [
        add_candidate(
            selection=selection_with_constraints,
            user=architect,
            data={"engine": engines[slug], "engine_version": engines[slug].versions[0], "label": slug},
        )
        for slug in ("sglang", "vllm")
    ]


def lifecycle_score(selection, candidate) -> float:
    evidence = [e for e in evidence_for(selection) if e.candidate == str(candidate.pk)][0]
    row = next(r for r in MAPPINGS if r.indicator == "idle_release_share")
    return score_indicator(row, evidence, ScoringConstraints(), "C", include_simulated=True).score


def test_the_offloading_engine_is_credited_like_the_dropping_one(selection_with_constraints, candidates):
    for candidate, eviction in zip(candidates, (dropping(), offloading()), strict=True):
        BenchmarkRun.objects.create(
            candidate=candidate,
            test="swap_recovery",
            origin="harness",
            status="succeeded",
            evidence="SIMULATED",
            metadata={"eviction": eviction},
        )
    drop, offload = (lifecycle_score(selection_with_constraints, c) for c in candidates)
    assert drop == offload == 1.0  # the printed rule: released or swapped out; the audit saw 0.833 vs 0.167


def test_an_engines_own_eviction_counter_is_evidence_of_a_drop_not_an_offload():
    """SGLang without its hierarchical cache: its eviction counter moved while the sessions idled."""
    snapshots = {"pressure_start": {"evicted": 0.0}, "resume_start": {"evicted": 5400.0}, "resume_end": {}}
    seen = swap.observe_eviction([None] * 20, [None] * 20, snapshots)
    assert seen["observed"] and "eviction counter +5,400 tokens" in seen["how"][0]
    assert not seen["offloaded"] and seen["offloaded_sessions"] is None and seen["judged_by"] == ["engine_counters"]
