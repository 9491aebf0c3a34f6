"""Documented features count only when the candidate's launch flags enable them."""

import shlex

from selection.domain import catalog, launch_flags
from selection.domain.launch_flags import (
    DEFAULT_OFF,
    DEFAULT_ON,
    FLAG_OFF,
    FLAG_ON,
    METRICS,
    OFFLOAD,
    PREFIX_CACHING,
    apply_to_capabilities,
    feature_states,
    prefix_off_flags,
)


def test_sglang_hicache_and_metrics_are_off_unless_the_flags_enable_them():
    states = feature_states("sglang", "--model-path m --tp 2")
    assert states[OFFLOAD].enabled is False and states[OFFLOAD].reason == DEFAULT_OFF
    assert states[OFFLOAD].flag == "--enable-hierarchical-cache"  # what would turn it on
    assert states[METRICS].enabled is False and states[METRICS].flag == "--enable-metrics"
    assert states[PREFIX_CACHING].enabled is True and states[PREFIX_CACHING].reason == DEFAULT_ON
    on = feature_states("sglang", "--enable-hierarchical-cache --hicache-ratio 2 --enable-metrics")
    assert on[OFFLOAD] == launch_flags.FeatureState(OFFLOAD, True, FLAG_ON, "--enable-hierarchical-cache")
    assert on[METRICS].enabled and feature_states("sglang", "--disable-radix-cache")[PREFIX_CACHING].reason == FLAG_OFF


def test_vllm_caches_prefixes_by_default_and_offloads_only_with_a_connector():
    assert feature_states("vllm", "")[PREFIX_CACHING].enabled is True
    assert feature_states("vllm", "--no-enable-prefix-caching")[PREFIX_CACHING].enabled is False
    assert feature_states("vllm", "--enable-prefix-caching=false")[PREFIX_CACHING].enabled is False
    assert feature_states("vllm", "")[OFFLOAD].enabled is False
    lmcache = """--kv-transfer-config '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'"""
    assert feature_states("vllm", lmcache)[OFFLOAD].reason == FLAG_ON
    assert feature_states("vllm", "--disable-log-stats")[METRICS].enabled is False


def test_engines_without_rules_keep_the_catalogs_documented_default():
    assert feature_states("tgi", "", {PREFIX_CACHING: True})[PREFIX_CACHING].enabled is True
    assert feature_states("tgi", "")[METRICS].enabled is None
    assert feature_states("lmdeploy", "", {METRICS: True})[METRICS].enabled is True
    assert feature_states("lmdeploy", "--disable-metrics", {METRICS: True})[METRICS].enabled is False


def test_a_feature_off_in_the_flags_is_absent_from_the_capabilities_with_its_reason():
    caps = catalog.capabilities("sglang")
    assert caps["offload_tiers"] and caps["metrics_endpoint"] and caps["metrics_enabled_by_default"] is False
    deployed = apply_to_capabilities(caps, "sglang", "--tp 2")
    assert deployed["offload_tiers"] == [] and deployed["metrics_endpoint"] is None
    assert deployed["monitoring_metrics"] == {} and deployed["prefix_cache_kind"] == "radix_tree"
    assert set(deployed["off_in_launch_flags"]) == {OFFLOAD, METRICS}
    assert deployed["off_in_launch_flags"][METRICS]["flag"] == "--enable-metrics"
    enabled = apply_to_capabilities(caps, "sglang", "--enable-metrics --enable-hierarchical-cache")
    assert enabled["offload_tiers"] == caps["offload_tiers"] and enabled["off_in_launch_flags"] == {}
    # screening sees the deployed capabilities: HiCache documented, but off, fails an offload requirement
    rows = catalog.screen(deployed, {"offload_tiers": "cpu"})
    assert rows[0]["status"] == catalog.FAIL


def test_prefix_off_variant_flags_per_engine():
    assert prefix_off_flags("vllm", "--max-model-len 8192 --enable-prefix-caching") == (
        "--max-model-len 8192 --no-enable-prefix-caching"
    )
    assert shlex.split(prefix_off_flags("sglang", "--enable-metrics")) == ["--enable-metrics", "--disable-radix-cache"]
    assert prefix_off_flags("llama-cpp", "-np 4") is None  # llama.cpp: cache_prompt: false per request


def test_monitoring_says_metrics_are_off_in_the_launch_flags_not_that_the_engine_has_none():
    from selection.domain import monitoring

    caps = apply_to_capabilities(catalog.capabilities("sglang"), "sglang", "")
    operations = {
        "engine": {"slug": "sglang", "name": "SGLang"},
        "metrics": caps["monitoring_metrics"],
        "metrics_off_in_launch_flags": caps["off_in_launch_flags"][METRICS],
        "thresholds": {},
    }
    rows = monitoring.plan_signals(operations)
    memory = next(r for r in rows if r["signal"] == "memory")
    assert memory["metric"] is None and memory["rules"] == []
    said = monitoring.render(memory["threshold"])
    assert "off in the launch flags" in said and "--enable-metrics" in said
    enabled = apply_to_capabilities(catalog.capabilities("sglang"), "sglang", "--enable-metrics")
    rows = monitoring.plan_signals(
        {**operations, "metrics": enabled["monitoring_metrics"], "metrics_off_in_launch_flags": None}
    )
    assert next(r for r in rows if r["signal"] == "memory")["metric"]
