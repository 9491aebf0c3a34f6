"""Indicators: one piece of evidence (a measured metric, or a documented feature, confirmed or refuted
by a test where one observed it) scored by its row of `MAPPINGS`, with its explanation, the reason when
it is missing, and its score at the ends of its measurements' 95 % intervals."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from selection.domain.scoring.base import (
    ADMISSION_FAILED,
    ADMISSION_HELD,
    DEFAULT_REQUIRED_CONTEXT,
    DOCUMENTED,
    HIGH_PRECISION_KV,
    KV_METRIC_CATEGORIES,
    MEASURED,
    OFFLOAD_TIERS,
    SCHEDULING_FEATURES,
    SIMULATED,
    TEAM_NEEDED,
)
from selection.domain.scoring.inputs import (
    CandidateEvidence,
    DocumentedFeatures,
    Metric,
    ScoringConstraints,
    cost_per_million_output_tokens,
)
from selection.domain.scoring.mappings import M, Mapping


def linear_higher_better(x: float, low: float, high: float) -> float:
    """0 at/below low, 1 at/above high, linear between."""
    return float(min(1.0, max(0.0, (x - low) / (high - low))))


def linear_lower_better(x: float, low: float, high: float) -> float:
    """1 at/below low, 0 at/above high, linear between."""
    return float(min(1.0, max(0.0, (high - x) / (high - low))))


def level_score(level: str, levels: tuple[tuple[str, float], ...]) -> float | None:
    for name, value in levels:
        if name == level:
            return value
    return None


def _count_level(count: int) -> str:
    return "2+" if count >= 2 else str(count)


@dataclass
class IndicatorScore:
    indicator: str
    source: str
    status: Literal["ok", "missing", "excluded_simulated"]
    score: float | None = None
    input_value: Any = None
    inputs: dict[str, Any] = field(default_factory=dict)
    low: float | None = None
    high: float | None = None
    unit: str = ""
    formula: str = ""
    weight: float = 1.0
    evidence: str | None = None  # MEASURED | SIMULATED | DOCUMENTED
    run_ids: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    reason: str = ""
    # the score with every measured input at the ends of its 95 % interval; None: no interval
    score_interval: tuple[float, float] | None = None


class _Missing(Exception):
    """Raised inside an input derivation when a needed value is absent (message = reason)."""


def _constraint(constraints: ScoringConstraints, name: str) -> float:
    value = getattr(constraints, name)
    if value is None:
        raise _Missing(f"constraints.{name} not set")
    if value <= 0:
        raise _Missing(f"constraints.{name} must be positive, got {value}")
    return float(value)


def _metric(evidence: CandidateEvidence, key: str, used: list[Metric]) -> float:
    if key in evidence.held_out:
        raise _Missing(f"{key} held out: {evidence.held_out[key]}")
    metric = evidence.metrics.get(key)
    if metric is None or metric.value is None:
        raise _Missing(f"no evidence for {key}")
    value = float(metric.value)
    if not math.isfinite(value):
        raise _Missing(f"{key} is not a finite number")
    used.append(metric)
    return value


def _derive(
    row: Mapping,
    ev: CandidateEvidence,
    cons: ScoringConstraints,
    scenario: str,
    used: list[Metric],
    inputs: dict[str, Any],
    include_simulated: bool = False,
) -> Any:
    """The indicator's input value x (a number, or a level name for `levels` rows)."""
    value = _derive_measured(row, ev, cons, scenario, used, inputs)
    if value is _NOT_MEASURED:
        value = _derive_documented(row, ev, cons, used, inputs, include_simulated)
    return value


_NOT_MEASURED = object()  # _derive_measured's answer for a documented indicator


def _derive_measured(
    row: Mapping, ev: CandidateEvidence, cons: ScoringConstraints, scenario: str, used: list[Metric], inputs: dict
) -> Any:
    """x for a measured indicator (a metric, or a metric against the constraints); _NOT_MEASURED for a
    documented one."""
    name = row.indicator
    if name in ("ttft_p95_vs_budget", "tpot_p95_vs_budget"):
        key = name.split("_vs_")[0] + "_ms"
        inputs[key] = _metric(ev, key, used)
        inputs[f"budget_{key}"] = _constraint(cons, key)
        return inputs[key] / inputs[f"budget_{key}"]
    if name == "isolation_ttft_vs_budget":
        inputs["isolation_ttft_p95_ms"] = _metric(ev, "isolation_ttft_p95_ms", used)
        inputs["budget_ttft_p95_ms"] = _constraint(cons, "ttft_p95_ms")
        return inputs["isolation_ttft_p95_ms"] / inputs["budget_ttft_p95_ms"]
    if name == "achieved_concurrency_ratio":
        inputs["achieved_concurrency"] = _metric(ev, "achieved_concurrency", used)
        inputs["target_concurrency"] = _constraint(cons, "target_concurrency")
        return inputs["achieved_concurrency"] / inputs["target_concurrency"]
    if name == "context_reached_vs_required":
        inputs["max_context_rung_reached"] = _metric(ev, "max_context_rung_reached", used)
        required = cons.max_context_tokens or DEFAULT_REQUIRED_CONTEXT[scenario]
        inputs["required_context"] = float(required)
        inputs["required_context_from"] = (
            "constraints.max_context_tokens" if cons.max_context_tokens else f"scenario {scenario} default"
        )
        return inputs["max_context_rung_reached"] / inputs["required_context"]
    if name == "continuation_correct":
        inputs[name] = _metric(ev, name, used)
        return inputs[name]
    if name == "sustainable_concurrency_vs_need":
        inputs["sustainable_concurrency_per_gpu"] = _metric(ev, "sustainable_concurrency_per_gpu", used)
        need = _constraint(cons, "target_concurrency") / _constraint(cons, "gpu_count_budget")
        inputs["needed_concurrency_per_gpu"] = need
        return inputs["sustainable_concurrency_per_gpu"] / need
    if name == "cost_per_mtok_vs_reference":
        inputs["cost_per_mtok"] = _metric(ev, "cost_per_mtok", used)
        reference = cost_per_million_output_tokens(
            _constraint(cons, "throughput_target_tok_s"),
            _constraint(cons, "gpu_count_budget"),
            _constraint(cons, "cost_per_gpu_hour"),
        )
        inputs["reference_cost_per_mtok"] = reference
        return inputs["cost_per_mtok"] / reference
    if name == "throughput_per_gpu_vs_need":
        inputs["output_tokens_per_s_per_gpu"] = _metric(ev, "output_tokens_per_s_per_gpu", used)
        need = _constraint(cons, "throughput_target_tok_s") / _constraint(cons, "gpu_count_budget")
        inputs["needed_tokens_per_s_per_gpu"] = need
        return inputs["output_tokens_per_s_per_gpu"] / need
    if row.source == M:  # a plain metric read directly
        inputs[row.inputs[0]] = _metric(ev, row.inputs[0], used)
        return inputs[row.inputs[0]]
    return _NOT_MEASURED


def _derive_documented(
    row: Mapping,
    ev: CandidateEvidence,
    cons: ScoringConstraints,
    used: list[Metric],
    inputs: dict,
    include_simulated: bool,
) -> Any:
    """x for a documented indicator (the catalog's facts, some checked against measurements)."""
    doc = ev.documented
    name = row.indicator
    if name == "allocation_strategy":
        return _documented(doc.allocation_strategy, "allocation_strategy", inputs)
    if name == "prefix_cache_kind":
        return _documented(doc.prefix_cache, "prefix_cache", inputs, doc)
    if name == "preemption_mode":
        return _documented(doc.preemption_mode, "preemption_mode", inputs)
    if name == "kv_quantisation":
        dtypes = _documented(doc.kv_cache_dtypes, "kv_cache_dtypes", inputs)
        low = sorted({d.lower() for d in dtypes} - HIGH_PRECISION_KV)
        inputs["low_precision_kv_dtypes"] = low
        return _count_level(len(low))
    if name == "offload_tiers":
        tiers = _documented(doc.offload_tiers, "offload_tiers", inputs, doc)
        known = sorted({t.lower() for t in tiers} & set(OFFLOAD_TIERS))
        return _count_level(len(known))
    if name == "scheduling_isolation":
        return _scheduling_isolation(ev, used, inputs, include_simulated)
    if name == "kv_metrics_exported":
        exported = {f.lower() for f in _documented(doc.metrics_exported, "metrics_exported", inputs, doc)}
        return sum(c in exported for c in KV_METRIC_CATEGORIES) / len(KV_METRIC_CATEGORIES)
    if name == "ops_complexity_vs_team":
        complexity = _documented(doc.operating_complexity, "operating_complexity", inputs)
        if complexity not in TEAM_NEEDED:
            raise _Missing(f"operating_complexity {complexity!r} is not one of {sorted(TEAM_NEEDED)}")
        inputs["team_size"] = _constraint(cons, "team_size")
        inputs["team_needed"] = TEAM_NEEDED[complexity]
        return inputs["team_size"] / TEAM_NEEDED[complexity]
    raise AssertionError(f"no derivation for indicator {name}")  # pragma: no cover - table and code out of sync


def _scheduling_isolation(ev: CandidateEvidence, used: list[Metric], inputs: dict, include_simulated: bool) -> float:
    """Share of the scheduling features present: documented, with admission limits as the overload test showed."""
    doc = ev.documented
    overload = _overload_level(ev, include_simulated, used)
    if doc.scheduling_features is None and overload is None:
        raise _Missing("catalog does not document scheduling_features (unknown)")
    features = {f.lower() for f in doc.scheduling_features or ()}
    if doc.scheduling_features is not None:
        inputs["scheduling_features"] = list(doc.scheduling_features)
    if overload is not None:
        inputs["overload_handling"] = overload
        if overload >= ADMISSION_HELD:
            features.add("admission_limit")
            inputs["admission_limit"] = "held in the overload test (rejection or queueing, no OOM)"
        elif overload <= ADMISSION_FAILED:
            features.discard("admission_limit")
            inputs["admission_limit"] = "failed in the overload test (OOM or a crash past the sustainable load)"
    return sum(f in features for f in SCHEDULING_FEATURES) / len(SCHEDULING_FEATURES)


def _overload_level(ev: CandidateEvidence, include_simulated: bool, used: list[Metric]) -> float | None:
    """The overload test's level, when measured (SIMULATED only when it may be used)."""
    metric = ev.metrics.get("overload_handling")
    if (
        "overload_handling" in ev.held_out
        or metric is None
        or metric.value is None
        or (metric.evidence == SIMULATED and not include_simulated)
    ):
        return None
    used.append(metric)
    return float(metric.value)


def _documented(value: Any, name: str, inputs: dict[str, Any], doc: DocumentedFeatures | None = None) -> Any:
    if value is None:
        raise _Missing(f"catalog does not document {name} (unknown)")
    inputs[name] = list(value) if isinstance(value, (tuple, list)) else value
    if doc is not None and name in doc.off_in_launch_flags:
        inputs[f"{name}_off_in_launch_flags"] = doc.off_in_launch_flags[name]  # documented, not deployed
    return value


def score_indicator(
    row: Mapping,
    evidence: CandidateEvidence,
    constraints: ScoringConstraints,
    scenario: str,
    include_simulated: bool = False,
) -> IndicatorScore:
    """Score one indicator of one candidate, with its explanation."""
    result = IndicatorScore(
        indicator=row.indicator,
        source=row.source,
        status="missing",
        low=row.low,
        high=row.high,
        unit=row.unit,
        formula=row.formula,
        weight=row.weight,
    )
    used: list[Metric] = []
    try:
        x = _derive(row, evidence, constraints, scenario, used, result.inputs, include_simulated)
    except _Missing as missing:
        result.reason = str(missing)
        return result
    if row.source == M:
        result.run_ids = sorted({run for metric in used for run in metric.run_ids})
        simulated = any(metric.evidence == SIMULATED for metric in used)
        result.evidence = SIMULATED if simulated else MEASURED
        if simulated and not include_simulated:
            result.status = "excluded_simulated"
            result.reason = "SIMULATED evidence excluded from a final scoring"
            return result
    else:
        result.evidence = DOCUMENTED
        result.run_ids = sorted({run for metric in used for run in metric.run_ids})  # a test that confirmed it
        keys = [key.split(".", 1)[1] for key in row.inputs if key.startswith("documented.")]
        result.sources = [url for k in keys for url in evidence.documented.sources.get(k, "").split()]
    result.input_value = x
    if row.direction == "levels":
        value = level_score(str(x).lower(), row.levels)
        if value is None:
            result.reason = f"{x!r} is not in the level table ({', '.join(n for n, _score in row.levels)})"
            return result
    elif row.direction == "higher_better":
        value = linear_higher_better(float(x), row.low, row.high)
    else:
        value = linear_lower_better(float(x), row.low, row.high)
    result.score = value
    result.status = "ok"
    if row.source == M and row.direction != "levels" and any(m.interval for m in used):
        result.score_interval = _score_interval(row, evidence, constraints, scenario, include_simulated, value)
    return result


def _score_interval(
    row: Mapping,
    evidence: CandidateEvidence,
    constraints: ScoringConstraints,
    scenario: str,
    include_simulated: bool,
    score: float,
) -> tuple[float, float]:
    """The indicator's score with its measured inputs at the low ends, then the high ends, of their
    intervals (exact for the usual one-metric indicator; both ends kept for several)."""
    scores = [score]
    for end in (0, 1):
        moved = {
            key: replace(metric, value=metric.interval[end]) if metric.interval else metric
            for key, metric in evidence.metrics.items()
        }
        x = _derive(row, replace(evidence, metrics=moved), constraints, scenario, [], {}, include_simulated)
        if row.direction == "higher_better":
            scores.append(linear_higher_better(float(x), row.low, row.high))
        else:
            scores.append(linear_lower_better(float(x), row.low, row.high))
    return min(scores), max(scores)
