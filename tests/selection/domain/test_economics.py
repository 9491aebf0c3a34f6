"""Cost against the budget and growth (selection.domain.economics): each verdict passes and fails."""

import pytest

from selection.domain import economics as eco
from selection.domain.launch_flags import flag_values, offload_tier

MEASURED_32 = eco.Figure(32.0, eco.MEASURED, ("5",))
GOODPUT = eco.Figure(1870.0, eco.MEASURED, ("5",))


def inputs(**changes):
    values = dict(
        peak_concurrency=32,
        throughput_target=1500,
        gpus_per_replica=1,
        gpu_price_per_hour=2.5,
        host_price_per_gib_month=3.0,
        offload=eco.OffloadTier(True, 8.0, "--kv-offloading-size 8"),
        budget=12000.0,
        gpu_budget=2,
        concurrency_per_gpu=MEASURED_32,
        goodput_per_gpu=GOODPUT,
        plan_sequences_per_replica=eco.Figure(305.0, eco.PLAN),
        growth_factor=1.5,
        growth_months=12,
    )
    values.update(changes)
    return eco.CostInputs(**values)


def test_monthly_cost_counts_gpus_and_the_offload_tiers_host_memory():
    result = eco.economics(inputs())
    target = result["target"]
    assert target["replicas"] == 1 and target["gpus"] == 1
    assert target["gpu_cost"] == pytest.approx(2.5 * 730)
    assert target["host_gib"] == 8.0 and target["host_cost"] == pytest.approx(24.0)
    assert target["monthly"] == pytest.approx(1825 + 24)
    assert target["budget"]["status"] == eco.WITHIN
    assert target["budget"]["difference"] == pytest.approx(12000 - 1849)


def test_a_cost_above_the_budget_is_over_by_the_difference_and_its_share():
    target = eco.economics(inputs(budget=1000.0))["target"]
    assert target["budget"]["status"] == eco.OVER
    assert target["budget"]["difference"] == pytest.approx(849.0)
    assert target["budget"]["share"] == pytest.approx(0.849)


def test_replicas_follow_the_larger_of_concurrency_and_throughput():
    by_concurrency = eco.deployment(inputs(peak_concurrency=100))
    assert by_concurrency["replicas"] == 4 and by_concurrency["decided_by"] == eco.CONCURRENCY
    by_throughput = eco.deployment(inputs(throughput_target=5000))
    assert by_throughput["replicas"] == 3 and by_throughput["decided_by"] == eco.THROUGHPUT


def test_an_offload_tier_without_a_size_or_a_price_is_never_free():
    unknown_size = eco.deployment(inputs(offload=eco.OffloadTier(True, None, "")))
    assert unknown_size["monthly"] is None
    assert eco.OFFLOAD_SIZE_UNKNOWN in unknown_size["budget"]["missing"]
    assert unknown_size["budget"]["status"] == eco.NOT_DERIVABLE
    no_price = eco.deployment(inputs(host_price_per_gib_month=None))
    assert no_price["monthly"] is None and eco.NO_HOST_PRICE in no_price["missing"]
    no_tier = eco.deployment(inputs(offload=eco.OffloadTier(), host_price_per_gib_month=None))
    assert no_tier["monthly"] == pytest.approx(1825.0) and no_tier["host_cost"] == 0.0


def test_without_a_measured_load_the_capacity_plan_stands_in_labelled_so():
    target = eco.deployment(inputs(concurrency_per_gpu=None, goodput_per_gpu=None, peak_concurrency=400))
    assert target["replicas"] == 2
    assert target["per_replica"]["source"] == eco.PLAN


def test_a_run_with_no_load_within_the_latency_budget_leaves_the_cost_undetermined():
    target = eco.deployment(inputs(concurrency_per_gpu=None, none_within_budget=("7",)))
    assert target["replicas"] is None and target["monthly"] is None
    assert target["budget"]["status"] == eco.NOT_DERIVABLE
    assert eco.NONE_WITHIN_BUDGET in target["budget"]["missing"]


def test_no_gpu_price_or_no_budget_cannot_be_derived_and_says_why():
    assert eco.NO_GPU_PRICE in eco.deployment(inputs(gpu_price_per_hour=None))["budget"]["missing"]
    assert eco.NO_BUDGET in eco.deployment(inputs(budget=None))["budget"]["missing"]


def test_growth_states_replicas_gpus_and_the_gpu_budget_at_the_expected_traffic():
    result = eco.economics(inputs(growth_factor=2.5))
    grown = result["growth"]
    assert grown["replicas"] == 3 and grown["gpus"] == 3 and grown["months"] == 12
    assert grown["gpu_budget"] == {"status": eco.OVER, "budget": 2, "difference": 1}
    assert eco.economics(inputs())["growth"]["gpu_budget"]["status"] == eco.WITHIN


def test_growth_limits_name_their_sources_and_a_lower_bound():
    bounded = eco.Figure(32.0, eco.MEASURED, ("5",), lower_bound=True)
    kv = eco.Figure(305.0, eco.ENGINE_STATED, ("5",))
    limits = eco.economics(inputs(concurrency_per_gpu=bounded, kv_sequences_per_replica=kv))["limits"]
    assert limits["kv"]["value"] == pytest.approx(305 / 32) and limits["kv"]["source"] == eco.ENGINE_STATED
    assert limits["latency"]["value"] == pytest.approx(1.0) and limits["latency"]["lower_bound"]
    planned = eco.economics(inputs())["limits"]
    assert planned["kv"]["source"] == eco.PLAN
    none = eco.economics(inputs(concurrency_per_gpu=None, plan_sequences_per_replica=None))
    assert none["limits"] == {"kv": None, "latency": None}


def test_kv_sequences_plan_with_headroom_and_slots():
    assert eco.kv_sequences(100_000, 1000) == 80
    assert eco.kv_sequences(100_000, 1000, slots=16) == 16
    assert eco.kv_sequences(0, 1000) == 0


def test_replicas_never_round_up_on_a_float_error():
    assert eco.replicas_for(3.0000000001, 1.0) == 3
    assert eco.replicas_for(0.5, 1.0) == 1
    with pytest.raises(ValueError):
        eco.replicas_for(1, 0)


def test_the_offload_tier_is_read_from_each_engines_flags():
    vllm = offload_tier("vllm", "--kv-offloading-size 8 --max-model-len 4096")
    assert vllm == {"enabled": True, "gib": 8.0, "basis": "--kv-offloading-size 8"}
    assert offload_tier("vllm", "--max-model-len 4096")["enabled"] is False
    lmcache = offload_tier("vllm", '--kv-transfer-config \'{"kv_connector":"LMCacheConnectorV1"}\'')
    assert lmcache["enabled"] and lmcache["gib"] is None
    ratio = offload_tier("sglang", "--enable-hierarchical-cache", tp=2, device_pool_bytes=10 * 2**30)
    assert ratio["gib"] == pytest.approx(40.0) and ratio["basis"] == "--hicache-ratio 2"
    sized = offload_tier("sglang", "--enable-hierarchical-cache --hicache-size=30", tp=2)
    assert sized["gib"] == pytest.approx(60e9 / 2**30)
    assert offload_tier("sglang", "--hicache-size 30")["enabled"] is False


def test_flag_values_read_both_spellings():
    assert flag_values("--a 1 --b=2 --c --d -5") == {"--a": "1", "--b": "2", "--c": "", "--d": "-5"}
