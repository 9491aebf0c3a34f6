"""What scoring reads: measured metrics with their provenance, the catalog's documented features, a
candidate's evidence, the constraints and the options; the cost and sustainable-load figures runs
derive; evidence rebuilt from its stored JSON."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable
from typing import Mapping as TMapping

from selection.domain import noise as noise_domain
from selection.domain.messages import Message, is_message_dict, load
from selection.domain.scoring.base import MEASURED, SIMULATED, ScoringInputError


@dataclass(frozen=True)
class Metric:
    """One measured quantity with its provenance."""

    value: float | bool
    run_ids: tuple[str, ...] = ()
    evidence: str = MEASURED  # MEASURED or SIMULATED
    # 95 % interval of the value (bootstrap over the run's requests), widened to span the values of
    # re-runs of the same test (`reruns`: their run ids); None: not known
    interval: tuple[float, float] | None = None
    reruns: tuple[str, ...] = ()
    # measured by a client-bound run that still applied the load (the reason): a latency the client
    # can only have lengthened, scored with its lateness in the interval; "" when not client-bound
    client_bound: str | Message = ""


@dataclass(frozen=True)
class DocumentedFeatures:
    """What the engine catalog documents for this candidate's engine version. None = unknown.

    An empty tuple means "documented as having none" (scores 0), unlike None (missing).
    """

    allocation_strategy: str | None = None  # paged | block | dynamic | static | preallocated
    prefix_cache: str | None = None  # radix | hash | manual | none
    kv_cache_dtypes: tuple[str, ...] | None = None  # e.g. ("auto", "fp8_e4m3")
    offload_tiers: tuple[str, ...] | None = None  # subset of OFFLOAD_TIERS
    scheduling_features: tuple[str, ...] | None = None  # subset of SCHEDULING_FEATURES
    preemption_mode: str | None = None  # swap | recompute | none
    metrics_exported: tuple[str, ...] | None = None  # subset of KV_METRIC_CATEGORIES
    operating_complexity: str | None = None  # low | medium | high
    sources: dict[str, str] = field(default_factory=dict)  # feature name -> source URL(s), space-separated
    # feature name -> why the candidate's launch flags leave a documented feature off (it then counts
    # as absent: selection.domain.launch_flags); empty when the flags enable everything documented
    off_in_launch_flags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CandidateEvidence:
    """Everything known about one candidate: measured metrics and documented features.

    Metric keys (see MAPPINGS for which indicator reads which): ttft_p95_ms, tpot_p95_ms,
    error_rate, achieved_concurrency, kv_headroom_at_target (free share of the KV pool, 0..1),
    soak_drift_p99_ratio (late p99 / early p99), prefix_saving_ratio (measured memory saving /
    theoretical saving), max_context_rung_reached (the longest input the ladder served, tokens),
    swap_resume_ttft_ratio (TTFT after swap-in / TTFT of a full recompute of the same history),
    continuation_correct (share or bool),
    idle_release_share (share of idle sessions whose cache was released or offloaded),
    capacity_prediction_error (|predicted - measured| / measured), sustainable_concurrency_per_gpu
    (within the latency budget), cost_per_mtok (currency per million output tokens within the
    budget; see cost_per_million_output_tokens), output_tokens_per_s_per_gpu (goodput),
    overload_handling (the overload test's level past the sustainable load, 0..1).
    """

    candidate: str
    label: str = ""
    metrics: dict[str, Metric] = field(default_factory=dict)
    documented: DocumentedFeatures = field(default_factory=DocumentedFeatures)
    # metric key -> why a figure that was measured is not the engine's and is held out of the scoring
    # (e.g. "client-bound (held 9.1 requests in flight on average, 32 requested)"); such a metric is
    # missing, whatever value the run measured, so it can neither lift nor sink the candidate
    held_out: dict[str, str | Message] = field(default_factory=dict)
    # run id -> verdict name -> status, of the runs its metrics come from: what settles a figure's fit
    # to its constraint (`procurement.constraint_fit`)
    verdicts: dict[str, dict[str, str]] = field(default_factory=dict)
    gpu_count: int | None = None  # GPUs per replica (the configuration, against the GPU budget)


Evidence = CandidateEvidence  # the name used in the issue


@dataclass(frozen=True)
class ScoringConstraints:
    """The parts of the constraints sheet that scoring reads."""

    target_concurrency: float | None = None
    ttft_p95_ms: float | None = None
    tpot_p95_ms: float | None = None
    gpu_count_budget: float | None = None
    cost_per_gpu_hour: float | None = None
    team_size: float | None = None
    max_context_tokens: float | None = None  # the longest input the context ladder must serve (tokens)
    throughput_target_tok_s: float | None = None  # output tokens/s for the whole deployment


@dataclass(frozen=True)
class ScoringOptions:
    include_simulated: bool = False
    tie_margin: float = 0.02
    acceptability_draws: int = 10_000
    acceptability_spread: float = 0.3
    seed: int = 20260101
    noise_draws: int = noise_domain.DRAWS  # draws of the measurements within their intervals


def cost_per_million_output_tokens(
    goodput_output_tokens_per_s: float, gpu_count: float, cost_per_gpu_hour: float
) -> float:
    """Cost of one million output tokens served within the latency budget.

    gpu_count * cost_per_gpu_hour buys an hour; in it the deployment serves goodput * 3600 tokens.
    """
    if not goodput_output_tokens_per_s or goodput_output_tokens_per_s <= 0:
        raise ScoringInputError(f"goodput_output_tokens_per_s: must be positive, got {goodput_output_tokens_per_s!r}")
    if gpu_count is None or gpu_count <= 0:
        raise ScoringInputError(f"gpu_count: must be positive, got {gpu_count!r}")
    if cost_per_gpu_hour is None or cost_per_gpu_hour < 0:
        raise ScoringInputError(f"cost_per_gpu_hour: must be non-negative, got {cost_per_gpu_hour!r}")
    return gpu_count * cost_per_gpu_hour / (goodput_output_tokens_per_s * 3600.0) * 1e6


def sustainable_concurrency(
    points: Iterable[TMapping[str, Any]],
    ttft_p95_budget_ms: float,
    tpot_p95_budget_ms: float,
    max_error_rate: float = 0.01,
) -> float | None:
    """Highest concurrency of a sweep whose TTFT p95, TPOT p95 and error rate are all within budget.

    points: [{"concurrency", "ttft_p95_ms", "tpot_p95_ms", "error_rate"}, ...]. A point with a
    missing value cannot prove it is within budget and is skipped. None when no point qualifies.
    Divide by the GPU count for `sustainable_concurrency_per_gpu`.
    """
    best = None
    for index, point in enumerate(points):
        concurrency = point.get("concurrency")
        if concurrency is None:
            raise ScoringInputError(f"points[{index}].concurrency: required")
        values = [point.get("ttft_p95_ms"), point.get("tpot_p95_ms"), point.get("error_rate")]
        if any(v is None or not math.isfinite(float(v)) for v in values):
            continue
        ttft, tpot, errors = (float(v) for v in values)
        if ttft <= ttft_p95_budget_ms and tpot <= tpot_p95_budget_ms and errors <= max_error_rate:
            best = float(concurrency) if best is None else max(best, float(concurrency))
    return best


def _reason(stored: Any) -> str | Message:
    """A stored reason back as the message it was written as (its text when written as text)."""
    return load(stored) if is_message_dict(stored) else str(stored or "")


def evidence_from_dict(data: TMapping[str, Any]) -> CandidateEvidence:
    """Rebuild a CandidateEvidence from its `dataclasses.asdict` / JSON form (e.g. a stored snapshot)."""
    try:
        metrics = {
            key: Metric(
                value=m["value"],
                run_ids=tuple(m.get("run_ids") or ()),
                evidence=m.get("evidence", MEASURED),
                interval=tuple(m["interval"]) if m.get("interval") else None,
                reruns=tuple(m.get("reruns") or ()),
                client_bound=_reason(m.get("client_bound")),
            )
            for key, m in (data.get("metrics") or {}).items()
        }
        documented = dict(data.get("documented") or {})
        held_out = {str(key): _reason(reason) for key, reason in (data.get("held_out") or {}).items()}
        verdicts = {
            str(run): {str(name): str(status) for name, status in (statuses or {}).items()}
            for run, statuses in (data.get("verdicts") or {}).items()
        }
        gpu_count = int(data["gpu_count"]) if data.get("gpu_count") is not None else None
    except (TypeError, KeyError, ValueError, AttributeError) as error:
        raise ScoringInputError(f"evidence.metrics: each metric needs a value ({error})") from None
    for key, value in documented.items():
        if isinstance(value, list):
            documented[key] = tuple(value)
    unknown = set(documented) - set(DocumentedFeatures.__dataclass_fields__)
    if unknown:
        raise ScoringInputError(f"evidence.documented: unknown field(s) {sorted(unknown)}")
    for key, metric in metrics.items():
        if metric.evidence not in (MEASURED, SIMULATED):
            raise ScoringInputError(
                f"evidence.metrics.{key}.evidence: must be MEASURED or SIMULATED, got {metric.evidence!r}"
            )
    if not data.get("candidate"):
        raise ScoringInputError("evidence.candidate: required")
    return CandidateEvidence(
        candidate=str(data["candidate"]),
        label=str(data.get("label") or ""),
        metrics=metrics,
        documented=DocumentedFeatures(**documented),
        held_out=held_out,
        verdicts=verdicts,
        gpu_count=gpu_count,
    )
