"""The criteria maps: how each indicator becomes a score in [0, 1], in ONE table (`MAPPINGS`), with
the scenarios' bound overrides (`SCENARIO_BOUNDS`) and the table as JSON rows for the pages and the PDF.
Bounds are fixed per scenario or relative to the constraints, never min-max over the candidates."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from selection.domain.scoring.base import CRITERION_LABELS, DIMENSION_OF, check_scenario


@dataclass(frozen=True)
class Mapping:
    """One row of the scoring table: how one indicator becomes a score in [0, 1]."""

    criterion: str
    indicator: str
    inputs: tuple[str, ...]  # evidence keys / constraint fields read
    source: Literal["measured", "documented"]
    direction: Literal["higher_better", "lower_better", "levels"]
    low: float | None  # higher_better: score 0 at/below low, 1 at/above high
    high: float | None  # lower_better: score 1 at/below low, 0 at/above high
    unit: str
    formula: str
    weight: float  # weight inside its criterion
    levels: tuple[tuple[str, float], ...] = ()  # for direction == "levels"


M, D = "measured", "documented"
MAPPINGS: tuple[Mapping, ...] = (
    # memory
    Mapping(
        "memory_allocation",
        "kv_headroom_at_target",
        ("kv_headroom_at_target",),
        M,
        "higher_better",
        0.0,
        0.30,
        "share of KV pool",
        "free KV-pool share at target load; 0 -> 0, >= 0.30 (the article's 20-30% headroom) -> 1",
        2.0,
    ),
    Mapping(
        "memory_allocation",
        "soak_drift_p99_ratio",
        ("soak_drift_p99_ratio",),
        M,
        "lower_better",
        1.05,
        1.50,
        "ratio",
        "p99 latency late in the soak / early; <= 1.05 -> 1, >= 1.50 -> 0 (fragmentation drift)",
        2.0,
    ),
    Mapping(
        "memory_allocation",
        "allocation_strategy",
        ("documented.allocation_strategy",),
        D,
        "levels",
        None,
        None,
        "level",
        "paged/block 1.0, dynamic 0.6, static/preallocated 0.2",
        1.0,
        (("paged", 1.0), ("block", 1.0), ("dynamic", 0.6), ("static", 0.2), ("preallocated", 0.2)),
    ),
    Mapping(
        "cache_reuse",
        "prefix_saving_ratio",
        ("prefix_saving_ratio",),
        M,
        "higher_better",
        0.20,
        0.90,
        "ratio",
        "measured prefix-reuse saving / its best: KV memory against what the requests in flight need "
        "(the prefix held once at best) where requests share a prefix; prefill compute (prompt tokens from the "
        "cache, the prompt's shared share at best) where the engine caches per slot; <= 0.2 -> 0, >= 0.9 -> 1",
        2.0,
    ),
    Mapping(
        "cache_reuse",
        "prefix_cache_kind",
        ("documented.prefix_cache",),
        D,
        "levels",
        None,
        None,
        "level",
        "radix 1.0, automatic hash 0.9, manual/explicit 0.5, none 0.0",
        1.0,
        (("radix", 1.0), ("hash", 0.9), ("manual", 0.5), ("none", 0.0)),
    ),
    # scheduling
    Mapping(
        "concurrency_control",
        "ttft_p95_vs_budget",
        ("ttft_p95_ms", "constraints.ttft_p95_ms"),
        M,
        "lower_better",
        0.5,
        1.5,
        "x budget",
        "TTFT p95 at target concurrency / TTFT p95 budget; <= 0.5 -> 1, >= 1.5 -> 0",
        2.0,
    ),
    Mapping(
        "concurrency_control",
        "tpot_p95_vs_budget",
        ("tpot_p95_ms", "constraints.tpot_p95_ms"),
        M,
        "lower_better",
        0.5,
        1.5,
        "x budget",
        "TPOT p95 at target concurrency / TPOT p95 budget; <= 0.5 -> 1, >= 1.5 -> 0",
        2.0,
    ),
    Mapping(
        "concurrency_control",
        "error_rate",
        ("error_rate",),
        M,
        "lower_better",
        0.0,
        0.05,
        "share",
        "failed / all requests at target concurrency; 0 -> 1, >= 5% -> 0",
        2.0,
    ),
    Mapping(
        "concurrency_control",
        "achieved_concurrency_ratio",
        ("achieved_concurrency", "constraints.target_concurrency"),
        M,
        "higher_better",
        0.5,
        1.0,
        "ratio",
        "achieved / target concurrency; <= 0.5 -> 0, >= 1.0 -> 1",
        2.0,
    ),
    Mapping(
        "concurrency_control",
        "isolation_ttft_vs_budget",
        ("isolation_ttft_p95_ms", "constraints.ttft_p95_ms"),
        M,
        "lower_better",
        0.5,
        1.5,
        "x budget",
        "TTFT p95 of interactive traffic while a second client floods the engine with long requests (isolation "
        "test) / TTFT p95 budget; <= 0.5 -> 1, >= 1.5 -> 0",
        1.5,
    ),
    Mapping(
        "concurrency_control",
        "scheduling_isolation",
        ("documented.scheduling_features", "overload_handling"),
        D,
        "higher_better",
        0.0,
        1.0,
        "share",
        "share of {priority, fair, admission limit} scheduling documented; the overload test confirms the admission "
        "limit (rejection or queueing past the sustainable load) or refutes it (OOM or a crash)",
        1.0,
    ),
    # context
    Mapping(
        "context_extension",
        "context_reached_vs_required",
        ("max_context_rung_reached", "constraints.max_context_tokens"),
        M,
        "higher_better",
        0.25,
        1.0,
        "ratio",
        "largest input rung of the context ladder served / the longest input required; <= 0.25 -> 0, >= 1 -> 1",
        2.0,
    ),
    Mapping(
        "context_extension",
        "kv_quantisation",
        ("documented.kv_cache_dtypes",),
        D,
        "levels",
        None,
        None,
        "count",
        "low-precision KV dtypes documented: 0 -> 0.0, 1 -> 0.7, 2+ -> 1.0",
        1.0,
        (("0", 0.0), ("1", 0.7), ("2+", 1.0)),
    ),
    # persistence
    Mapping(
        "cache_persistence",
        "swap_resume_ttft_ratio",
        ("swap_resume_ttft_ratio",),
        M,
        "lower_better",
        0.2,
        1.0,
        "ratio",
        "TTFT resuming a swapped-out session / TTFT recomputing it; <= 0.2 -> 1, >= 1.0 -> 0",
        2.0,
    ),
    Mapping(
        "cache_persistence",
        "offload_tiers",
        ("documented.offload_tiers",),
        D,
        "levels",
        None,
        None,
        "count",
        "offload tiers beyond GPU (cpu, disk, remote): 0 -> 0.0, 1 -> 0.6, 2+ -> 1.0",
        1.0,
        (("0", 0.0), ("1", 0.6), ("2+", 1.0)),
    ),
    Mapping(
        "cache_lifecycle",
        "idle_release_share",
        ("idle_release_share",),
        M,
        "higher_better",
        0.5,
        1.0,
        "share",
        "idle sessions whose cache was released or offloaded (swapped out to CPU or disk and loaded back); "
        "<= 0.5 -> 0, 1.0 -> 1",
        2.0,
    ),
    Mapping(
        "cache_lifecycle",
        "preemption_mode",
        ("documented.preemption_mode",),
        D,
        "levels",
        None,
        None,
        "level",
        "swap 1.0, recompute 0.5, none 0.0",
        1.0,
        (("swap", 1.0), ("recompute", 0.5), ("none", 0.0)),
    ),
    Mapping(
        "session_recovery",
        "continuation_correct",
        ("continuation_correct",),
        M,
        "higher_better",
        0.9,
        1.0,
        "share",
        "share of resumed sessions continuing correctly; <= 0.9 -> 0, 1.0 -> 1",
        2.0,
    ),
    # cost
    Mapping(
        "cost_control",
        "sustainable_concurrency_vs_need",
        ("sustainable_concurrency_per_gpu", "constraints.target_concurrency", "constraints.gpu_count_budget"),
        M,
        "higher_better",
        0.5,
        1.5,
        "ratio",
        "concurrency per GPU within budget / (target concurrency / GPU budget); <= 0.5 -> 0, >= 1.5 -> 1",
        2.0,
    ),
    Mapping(
        "cost_control",
        "cost_per_mtok_vs_reference",
        (
            "cost_per_mtok",
            "constraints.gpu_count_budget",
            "constraints.cost_per_gpu_hour",
            "constraints.throughput_target_tok_s",
        ),
        M,
        "lower_better",
        0.5,
        1.5,
        "x reference",
        "cost per 1M output tokens / reference (GPU budget x cost per GPU-hour at the throughput target); "
        "<= 0.5 -> 1, >= 1.5 -> 0",
        2.0,
    ),
    Mapping(
        "cost_control",
        "ops_complexity_vs_team",
        ("documented.operating_complexity", "constraints.team_size"),
        D,
        "higher_better",
        0.5,
        1.0,
        "ratio",
        "team size / team needed (low 1, medium 2, high 4); <= 0.5 -> 0, >= 1 -> 1",
        1.0,
    ),
    Mapping(
        "throughput_unit_cost",
        "throughput_per_gpu_vs_need",
        ("output_tokens_per_s_per_gpu", "constraints.throughput_target_tok_s", "constraints.gpu_count_budget"),
        M,
        "higher_better",
        0.5,
        1.5,
        "ratio",
        "goodput tokens/s per GPU / (throughput target / GPU budget); <= 0.5 -> 0, >= 1.5 -> 1",
        2.0,
    ),
    # observability
    Mapping(
        "observability",
        "kv_metrics_exported",
        ("documented.metrics_exported",),
        D,
        "higher_better",
        0.0,
        1.0,
        "share",
        "share of {KV usage, prefix hit rate, preemptions, queue depth} metrics exported",
        1.0,
    ),
    Mapping(
        "observability",
        "capacity_prediction_error",
        ("capacity_prediction_error",),
        M,
        "lower_better",
        0.05,
        0.5,
        "relative error",
        "|predicted - measured capacity| / measured; <= 0.05 -> 1, >= 0.5 -> 0",
        2.0,
    ),
)

# Scenario-defined bound overrides: indicator -> (low, high). D: latency barely matters.
SCENARIO_BOUNDS: dict[str, dict[str, tuple[float, float]]] = {
    "D": {"ttft_p95_vs_budget": (0.5, 4.0), "tpot_p95_vs_budget": (0.5, 4.0)},
}


def mappings_for(scenario: str) -> list[Mapping]:
    """The table with the scenario's bound overrides applied."""
    check_scenario(scenario)
    overrides = SCENARIO_BOUNDS.get(scenario, {})
    rows = []
    for row in MAPPINGS:
        if row.indicator in overrides:
            low, high = overrides[row.indicator]
            formula = row.formula.replace(f"<= {row.low:g}", f"<= {low:g}").replace(f">= {row.high:g}", f">= {high:g}")
            row = replace(row, low=low, high=high, formula=formula)
        rows.append(row)
    return rows


def mapping_table(scenario: str) -> list[dict[str, Any]]:
    """The table as JSON-safe rows for the UI and the PDF."""
    return [
        {
            "criterion": row.criterion,
            "criterion_label": CRITERION_LABELS[row.criterion],
            "dimension": DIMENSION_OF[row.criterion],
            "indicator": row.indicator,
            "inputs": list(row.inputs),
            "source": row.source,
            "direction": row.direction,
            "low": row.low,
            "high": row.high,
            "unit": row.unit,
            "formula": row.formula,
            "weight_in_criterion": row.weight,
            "levels": [list(level) for level in row.levels],
        }
        for row in mappings_for(scenario)
    ]
