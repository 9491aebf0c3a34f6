"""Documented features count only when the candidate's launch flags enable them: scoring and screening."""

from selection.candidates.services import add_candidate
from selection.scoring.evidence import documented_features
from selection.scoring.services import compute_scores


def sglang(selection, architect, engines, flags: str):
    return add_candidate(
        selection=selection,
        user=architect,
        data={
            "engine": engines["sglang"],
            "engine_version": engines["sglang"].versions[0],
            "label": f"SGLang {flags or 'defaults'}",
            "launch_flags": flags,
        },
    )


def indicator(score, candidate, criterion, name):
    scored = next(c for c in score.result["candidates"] if c["candidate"] == str(candidate.pk))
    return next(i for i in scored["criteria"][criterion]["indicators"] if i["indicator"] == name)


def test_sglang_hicache_and_metrics_count_only_when_the_flags_enable_them(
    selection_with_constraints, architect, engines
):
    plain = sglang(selection_with_constraints, architect, engines, "--tp 1")
    enabled = sglang(selection_with_constraints, architect, engines, "--enable-hierarchical-cache --enable-metrics")
    off, on = documented_features(plain), documented_features(enabled)
    assert off.offload_tiers == () and off.metrics_exported == ()
    assert off.off_in_launch_flags["offload_tiers"] == (
        "off by default and --enable-hierarchical-cache is not in the launch flags"
    )
    assert "--enable-metrics" in off.off_in_launch_flags["metrics_exported"]
    assert on.offload_tiers and "kv_usage" in on.metrics_exported and on.off_in_launch_flags == {}
    assert off.prefix_cache == on.prefix_cache == "radix"  # radix cache on by default

    score = compute_scores(selection_with_constraints)
    absent = indicator(score, plain, "cache_persistence", "offload_tiers")
    present = indicator(score, enabled, "cache_persistence", "offload_tiers")
    assert absent["score"] == 0 and present["score"] > 0
    assert "--enable-hierarchical-cache" in absent["inputs"]["offload_tiers_off_in_launch_flags"]
    metrics = indicator(score, plain, "observability", "kv_metrics_exported")
    assert metrics["score"] == 0 and "metrics_exported_off_in_launch_flags" in metrics["inputs"]


def test_vllm_prefix_caching_turned_off_by_a_flag_scores_as_no_prefix_cache(
    selection_with_constraints, architect, engines
):
    candidate = add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={
            "engine": engines["vllm"],
            "engine_version": engines["vllm"].versions[0],
            "launch_flags": "--no-enable-prefix-caching",
        },
    )
    features = documented_features(candidate)
    assert features.prefix_cache == "none"
    reason = features.off_in_launch_flags["prefix_cache"]
    assert reason == "turned off by --no-enable-prefix-caching in the launch flags"
