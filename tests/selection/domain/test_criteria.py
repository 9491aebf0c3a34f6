import pytest

from selection.domain import criteria


def test_presets_for_a_and_b_follow_the_article_table():
    assert criteria.PRESET_LEVELS["A"]["cache_persistence"] == "L"
    assert criteria.PRESET_LEVELS["B"]["context_extension"] == "H"
    assert criteria.PRESET_LEVELS["A"]["concurrency_control"] == "H"
    assert criteria.PRESET_LEVELS["B"]["concurrency_control"] == "M"


@pytest.mark.parametrize("scenario", ["A", "B", "C", "D"])
def test_preset_weights_are_normalised(scenario):
    weights = criteria.preset_weights(scenario)
    assert sum(weights.values()) == pytest.approx(1.0)
    assert all(w > 0 for w in weights.values())


def test_h_is_three_times_l():
    weights = criteria.preset_weights("A")
    assert weights["memory_allocation"] == pytest.approx(3 * weights["cache_persistence"])


def test_scenario_c_adds_lifecycle_and_recovery_and_puts_persistence_first():
    weights = criteria.preset_weights("C")
    assert {"cache_lifecycle", "session_recovery"} <= set(weights)
    assert weights["cache_persistence"] == max(weights.values())
    assert "cache_lifecycle" not in criteria.preset_weights("A")


def test_scenario_d_puts_reuse_and_unit_cost_first_latency_last():
    weights = criteria.preset_weights("D")
    top = max(weights.values())
    assert weights["cache_reuse"] == top and weights["throughput_unit_cost"] == top
    assert weights["concurrency_control"] == min(weights.values())


def test_blended_weights_mix_presets():
    blended = criteria.blended_weights({"C": 0.6, "B": 0.4})
    assert sum(blended.values()) == pytest.approx(1.0)
    assert "session_recovery" in blended and "context_extension" in blended


def test_every_criterion_states_its_evidence_source():
    assert {c.source for c in criteria.CRITERIA} <= {"measured", "documented", "both"}
    assert {c.dimension for c in criteria.CRITERIA} == set(criteria.DIMENSION_IDS)


def test_normalise_rejects_negative_naming_the_criterion():
    with pytest.raises(ValueError, match="weights.cache_reuse"):
        criteria.normalise({"cache_reuse": -1, "cost_control": 1})
