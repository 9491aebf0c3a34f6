"""Scoring: from evidence to an explainable, bounded recommendation (docs/domain.md, step 5).

Pure Python + numpy; no Django, no MCDA library. The rules, in one place:

* **Indicators.** Each criterion is scored from one or more indicators. An indicator turns one
  piece of evidence (a measured metric, or a documented feature from the engine catalog) into a
  score in [0, 1] with a small named mapping whose bounds live in ONE table, `MAPPINGS`
  (scenario overrides in `SCENARIO_BOUNDS`). Bounds are fixed per scenario, or relative to the
  selection's constraints (e.g. TTFT p95 / budget); they are never min-max over the candidate
  set, so adding or removing a weak candidate can never flip the winner. A documented feature
  that a test observed overrides the documentation: the overload test confirms an admission limit
  (rejection or queueing past the sustainable load) or refutes it (OOM or a crash), see
  `ADMISSION_HELD`.
* **Missing evidence** is reported as missing, never as 0 or 1. A criterion's `score` is the
  conservative lower bound (missing indicators contribute nothing; measured indicators weigh 2,
  documented ones 1) and `score_upper` the value if every missing indicator came in at full
  marks; `score` is None when no indicator of the criterion has evidence. The total is **not**
  renormalised over the criteria present: it is sum(w_c * lower_c) with weights summing to 1 over
  all weighted criteria, so missing evidence can never reward a candidate; `total_upper` shows
  how far the missing evidence could lift it and `coverage` how much of the weight was evidenced.
* **SIMULATED** evidence is excluded (reported as missing, reason given) from a final scoring
  unless `include_simulated=True`; then it is used, marked, and the result is not signable.
* **Gates** (dimension -> minimum score, on the lower bound): the dimension's score and each of its
  own criteria (`GATE_CRITERIA`: the article's, not the scenario C/D additions) must reach it, so
  another criterion's credit never carries a gate (a session-recovery credit cannot pass a
  persistence gate whose cache persistence scores 0); an own criterion without evidence fails the
  gate. A failing candidate is screened out with the reason and still appears in the comparison
  with all its scores.
* **Ranking** among candidates that pass the gates: weighted sum (the decision), TOPSIS over the
  passing candidates as a second opinion (shown beside it; a distance, it favours even profiles,
  which is why it does not decide).
  Tie-break (the article's rule): candidates within `tie_margin` of the weighted-sum leader are
  compared on the observability dimension score, then on lower operating complexity, then on
  total, then by id. `method` says so in a sentence, and when TOPSIS ranks another candidate
  first it says which, by how much, and on which criteria its distance favours it (the criteria
  where that candidate's weighted lead is largest). TOPSIS measures the distance to full marks and
  to zero on the same fixed [0, 1] scale, not to the set's best and worst (with two candidates that
  reads any lead as 1.000 against 0.000).
* **Sensitivity** is analysed on the weighted-sum ranking of the passing candidates (screening
  held fixed, tie-break not applied), with weights normalised to sum to 1:
  (a) per criterion k: weight w_k moves to t in [0, 1] and the other weights are rescaled
      proportionally to keep the sum 1 (w_j -> w_j (1 - t) / (1 - w_k)); every total is then
      linear in t and the flip point against each challenger has a closed form. Reported: the
      smallest rise and the smallest fall of w_k beyond which another candidate leads, or none.
  (b) per challenger: the smallest L2 (Euclidean) change of the normalised weight vector, staying
      on the simplex (weights >= 0, summing to 1), that makes the challenger tie the leader.
      Closed form d~ = d - mean(d), |delta| = gap / |d~| when that stays non-negative; otherwise
      an active-set projection pins weights at 0.
  (c) rank acceptability: N draws (default 10,000, fixed seed) of weights perturbed
      multiplicatively by a uniform factor in [1 - spread, 1 + spread] and renormalised; the share
      of draws in which each candidate ranks first.
* **Sentences** for people (the headline, tie-break explanation, notes, gate and screening
  reasons, sensitivity sentences) are `messages.Message`s: ``str()`` is the English text, the
  shell renders them in the reader's language.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Literal
from typing import Mapping as TMapping

import numpy as np

from selection.domain import noise as noise_domain
from selection.domain import procurement, tiebreak
from selection.domain.criteria import SCENARIO_PRIORITIES
from selection.domain.headline import INCONCLUSIVE, decision_headline
from selection.domain.messages import CLAUSE_SEPARATOR, NAME_SEPARATOR, Join, Message, to_json


def _(text: str) -> str:  # named `_` so `makemessages` collects the templates; translated where shown
    return text


# 8: the article's tie rule (closeness on the core dimensions, then observability, then operating complexity;
# a tie names no winner), the fit to each constraint per candidate, screened-out candidates unranked
# 7: cache lifecycle credits idle sessions released or offloaded (the offload counters)
# 6: prefix saving against the in-flight need, prefill compute on per-slot engines; not-applicable verdicts
# 5: an offloading engine's idle-release share is missing (its sessions' cached tokens never fall), not 0;
# 4: a gate also judges its dimension's own criteria, client-bound figures held out, measurement-noise draws,
# TOPSIS on the fixed scale; 3: noise ties, isolation indicator, launch-flag features; 2: longest input
RULES_VERSION = "kvselect-scoring/8"

MEASURED = "MEASURED"
SIMULATED = "SIMULATED"
DOCUMENTED = "DOCUMENTED"

SCENARIOS = ("A", "B", "C", "D")

DIMENSIONS: dict[str, str] = {
    "memory": _("Memory allocation and reuse"),
    "scheduling": _("Concurrency scheduling and isolation"),
    "context": _("Context extension and compression"),
    "persistence": _("Cross-turn persistence and offload"),
    "cost": _("Cost structure"),
    "observability": _("Observability"),
}

DIMENSION_OF: dict[str, str] = {
    "memory_allocation": "memory",
    "cache_reuse": "memory",
    "concurrency_control": "scheduling",
    "context_extension": "context",
    "cache_persistence": "persistence",
    "cache_lifecycle": "persistence",
    "session_recovery": "persistence",
    "cost_control": "cost",
    "throughput_unit_cost": "cost",
    "observability": "observability",
}

# The criteria a gate on each dimension needs on their own (each at or above the gate): the
# article's own criteria of the dimension. The scenario C and D additions (cache lifecycle, session
# recovery, throughput / unit cost) add to the dimension's score but cannot carry its gate.
GATE_CRITERIA: dict[str, tuple[str, ...]] = {
    "memory": ("memory_allocation", "cache_reuse"),
    "scheduling": ("concurrency_control",),
    "context": ("context_extension",),
    "persistence": ("cache_persistence",),
    "cost": ("cost_control",),
    "observability": ("observability",),
}

CRITERION_LABELS: dict[str, str] = {  # as they read inside a sentence
    "memory_allocation": _("memory allocation strategy"),
    "cache_reuse": _("cache reuse"),
    "concurrency_control": _("concurrency control"),
    "context_extension": _("context extension"),
    "cache_persistence": _("cache persistence"),
    "cache_lifecycle": _("cache lifecycle management"),
    "session_recovery": _("session recovery consistency"),
    "cost_control": _("cost control"),
    "throughput_unit_cost": _("throughput / unit cost"),
    "observability": _("observability"),
}
OR_SEPARATOR = Message(_(" or "))

# Operating complexity, ordered (lower is better); and the team it needs to run it well.
COMPLEXITY_RANK = {"low": 0, "medium": 1, "high": 2}
TEAM_NEEDED = {"low": 1, "medium": 2, "high": 4}

# Documented-feature vocabularies.
HIGH_PRECISION_KV = {"auto", "bf16", "bfloat16", "fp16", "float16", "half", "fp32", "float32", "f16", "f32"}
SCHEDULING_FEATURES = ("priority", "fair", "admission_limit")
# The overload test's level past the sustainable load (metric overload_handling: rejection 1.0,
# queueing 0.7, latency collapse 0.3, OOM or crash 0.0) confirms a bounded admission at or above
# the first value and refutes a documented one at or below the second.
ADMISSION_HELD, ADMISSION_FAILED = 0.7, 0.0
KV_METRIC_CATEGORIES = ("kv_usage", "prefix_hit_rate", "preemptions", "queue_depth")
OFFLOAD_TIERS = ("cpu", "disk", "remote")

# Default longest input a scenario must serve when the constraints do not state one (tokens).
DEFAULT_REQUIRED_CONTEXT = {"A": 8192, "B": 131072, "C": 32768, "D": 8192}


class ScoringInputError(ValueError):
    """Bad input to scoring: the message names the field and the problem."""


# --------------------------------------------------------------------------- inputs


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
    client_bound: str = ""


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
    held_out: dict[str, str] = field(default_factory=dict)
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
                client_bound=str(m.get("client_bound") or ""),
            )
            for key, m in (data.get("metrics") or {}).items()
        }
        documented = dict(data.get("documented") or {})
        held_out = {str(key): str(reason) for key, reason in (data.get("held_out") or {}).items()}
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


# --------------------------------------------------------------------------- the mapping table


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
        "share of {priority, fair, admission_limit} documented; the overload test confirms the admission limit "
        "(rejection or queueing past the sustainable load) or refutes it (OOM or a crash)",
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
        "share of {kv_usage, prefix_hit_rate, preemptions, queue_depth} exported",
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
    _check_scenario(scenario)
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


# --------------------------------------------------------------------------- mapping functions


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


# --------------------------------------------------------------------------- results


@dataclass
class CriterionScore:
    criterion: str
    dimension: str
    weight: float  # normalised over all weighted criteria
    score: float | None  # lower bound; None = no evidence at all
    score_upper: float | None
    coverage: float  # share of the indicator weight that has evidence
    status: Literal["complete", "partial", "missing"]
    uses_simulated: bool
    indicators: list[IndicatorScore]
    explanation: str
    score_interval: tuple[float, float] | None = None  # the lower-bound score at its inputs' interval ends


@dataclass
class DimensionScore:
    dimension: str
    score: float | None  # lower bound, weighted mean of its criteria (None: no evidence)
    score_upper: float | None
    coverage: float


@dataclass
class GateOutcome:
    dimension: str
    threshold: float
    score: float | None
    passed: bool
    reason: Message


@dataclass
class CandidateScore:
    candidate: str
    label: str
    criteria: dict[str, CriterionScore]
    dimensions: dict[str, DimensionScore]
    total: float  # weighted sum of lower bounds (missing contributes nothing)
    total_upper: float
    coverage: float  # weight share with evidence
    gates: list[GateOutcome]
    screened_out: bool
    screen_reasons: list[Message]
    topsis: float | None = None
    rank: int | None = None
    uses_simulated: bool = False
    operating_complexity: str | None = None
    # the total with every measured input at the ends of its 95 % interval (None: no interval)
    total_interval: tuple[float, float] | None = None


@dataclass
class ScoringResult:
    rules_version: str
    inputs_hash: str
    scenario: str
    final: bool  # True: SIMULATED evidence excluded
    signable: bool  # final, and no SIMULATED evidence used
    weights: dict[str, float]
    gates: dict[str, float]
    options: ScoringOptions
    candidates: list[CandidateScore]
    ranking: list[str]  # passing candidates by recommendation order, then screened ones by total
    winner: str | None
    weighted_sum_leader: str | None
    tie_break: dict[str, Any]
    sensitivity: dict[str, Any]
    sentences: list[Message]
    mappings: list[dict[str, Any]]
    notes: list[Message]
    # which ranking decides and what the other says: {decides, second_opinion, topsis_leader,
    # agrees (None with fewer than two passing candidates), sentence}
    method: dict[str, Any] = field(default_factory=dict)
    # candidate -> its fit to each constraint the sheet states (`procurement.constraint_fit`, then the GPU
    # budget): the headline names every failed one, the record's page 1 prints the winner's
    fit: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    rests_on: Message | None = None  # what the choice rests on (`tiebreak`), page 1's line
    # a tie (`tiebreak`: winner None): {candidates, separate: what would separate them}; empty otherwise
    tie: dict[str, Any] = field(default_factory=dict)
    core_dimensions: list[str] = field(default_factory=list)  # the dimensions closeness is judged on

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (no NaN/inf, tuples become lists, messages become their stored dicts)."""
        return json_safe(asdict(self))

    def candidate(self, candidate_id: str) -> CandidateScore:
        for cand in self.candidates:
            if cand.candidate == candidate_id:
                return cand
        raise KeyError(candidate_id)


def json_safe(value: Any) -> Any:
    if isinstance(value, (Message, Join)):
        return to_json(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (np.floating, float)):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


# --------------------------------------------------------------------------- scoring


def _check_scenario(scenario: str) -> None:
    if scenario not in SCENARIOS:
        raise ScoringInputError(f"scenario: must be one of {', '.join(SCENARIOS)}, got {scenario!r}")


def normalise_weights(weights: TMapping[str, float]) -> dict[str, float]:
    """Validate and scale criterion weights to sum to 1 (order kept)."""
    if not weights:
        raise ScoringInputError("weights: at least one criterion needs a weight")
    for criterion, weight in weights.items():
        if criterion not in DIMENSION_OF:
            raise ScoringInputError(f"weights.{criterion}: unknown criterion (known: {', '.join(DIMENSION_OF)})")
        if weight is None or not math.isfinite(float(weight)) or float(weight) < 0:
            raise ScoringInputError(f"weights.{criterion}: must be a non-negative number, got {weight!r}")
    total = float(sum(float(w) for w in weights.values()))
    if total <= 0:
        raise ScoringInputError("weights: must not all be zero")
    return {criterion: float(weight) / total for criterion, weight in weights.items()}


def _score_criterion(
    criterion: str,
    weight: float,
    rows: list[Mapping],
    ev: CandidateEvidence,
    cons: ScoringConstraints,
    scenario: str,
    include_simulated: bool,
) -> CriterionScore:
    indicators = [
        score_indicator(row, ev, cons, scenario, include_simulated) for row in rows if row.criterion == criterion
    ]
    total_weight = sum(ind.weight for ind in indicators)
    present = [ind for ind in indicators if ind.status == "ok"]
    covered = sum(ind.weight for ind in present)
    coverage = covered / total_weight if total_weight else 0.0
    interval = None
    if not present:
        score = upper = None
        status = "missing"
    else:
        score = sum(ind.weight * ind.score for ind in present) / total_weight
        if any(ind.score_interval for ind in present):
            interval = tuple(
                sum(ind.weight * (ind.score_interval[end] if ind.score_interval else ind.score) for ind in present)
                / total_weight
                for end in (0, 1)
            )
        upper = score + (total_weight - covered) / total_weight
        status = "complete" if covered == total_weight else "partial"
    parts = []
    for ind in indicators:
        if ind.status == "ok":
            shown = f"{ind.input_value:.3g}" if isinstance(ind.input_value, float) else str(ind.input_value)
            runs = f" [runs {', '.join(ind.run_ids)}]" if ind.run_ids else ""
            tag = f" {ind.evidence}" if ind.evidence == SIMULATED else ""
            parts.append(f"{ind.indicator} = {shown} -> {ind.score:.2f}{tag}{runs}")
        else:
            parts.append(f"{ind.indicator}: missing ({ind.reason})")
    head = (
        "no evidence" if score is None else f"{score:.3f}" + ("" if status == "complete" else f" (up to {upper:.3f})")
    )
    explanation = f"{CRITERION_LABELS[criterion]}: {head}; " + "; ".join(parts)
    return CriterionScore(
        criterion=criterion,
        dimension=DIMENSION_OF[criterion],
        weight=weight,
        score=score,
        score_upper=upper,
        coverage=coverage,
        status=status,
        uses_simulated=any(ind.status == "ok" and ind.evidence == SIMULATED for ind in present),
        indicators=indicators,
        explanation=explanation,
        score_interval=interval,
    )


def _dimension_scores(criteria: dict[str, CriterionScore]) -> dict[str, DimensionScore]:
    result = {}
    for dimension in DIMENSIONS:
        members = [c for c in criteria.values() if c.dimension == dimension]
        if not members:
            continue
        total_w = sum(c.weight for c in members)
        shares = [(c.weight / total_w if total_w > 0 else 1 / len(members)) for c in members]
        if all(c.score is None for c in members):
            result[dimension] = DimensionScore(dimension, None, None, 0.0)
            continue
        lower = sum(s * (c.score or 0.0) for s, c in zip(shares, members, strict=True))
        upper = sum(
            s * (c.score_upper if c.score_upper is not None else 1.0) for s, c in zip(shares, members, strict=True)
        )
        coverage = sum(s * c.coverage for s, c in zip(shares, members, strict=True))
        result[dimension] = DimensionScore(dimension, lower, upper, coverage)
    return result


def _gate_members(dimension: str, criteria: dict[str, CriterionScore]) -> list[CriterionScore]:
    """The criteria a gate on `dimension` judges on their own: its weighted `GATE_CRITERIA`."""
    members = [criteria[c] for c in GATE_CRITERIA[dimension] if c in criteria]
    return [c for c in members if c.weight > 0] or members


def _gate_outcomes(
    gates: TMapping[str, float], dims: dict[str, DimensionScore], criteria: dict[str, CriterionScore]
) -> list[GateOutcome]:
    """Each gate on its dimension: the dimension's score and each of its weighted `GATE_CRITERIA`
    must reach the threshold on their lower bound, so a credit of another criterion never carries
    the gate (session recovery cannot pass a persistence gate whose cache persistence scores 0); the
    outcome's score is the dimension's. Such a criterion without evidence fails the gate."""
    outcomes = []
    for dimension, threshold in gates.items():
        dim = dims[dimension]
        name = Message(DIMENSIONS[dimension])
        limit = {"threshold": f"{threshold:.2f}"}
        members = _gate_members(dimension, criteria)
        unevidenced = [c for c in members if c.score is None]
        below = [c for c in members if c.score is not None and c.score + 1e-12 < threshold]
        if dim.score is None:
            passed, reason = (
                False,
                Message(_("%(dimension)s: no evidence (gate %(threshold)s)"), {"dimension": name, **limit}),
            )
        elif dim.score + 1e-12 < threshold:
            passed = False
            reason = Message(
                _("%(dimension)s %(score)s < gate %(threshold)s"),
                {"dimension": name, "score": f"{dim.score:.2f}", **limit},
            )
        elif below:
            worst = min(below, key=lambda c: c.score)
            passed = False
            reason = Message(
                _(
                    "%(dimension)s %(score)s, but %(criterion)s %(criterion_score)s < gate %(threshold)s: "
                    "one criterion's credit cannot carry another"
                ),
                {
                    "dimension": name,
                    "score": f"{dim.score:.2f}",
                    "criterion": Message(CRITERION_LABELS[worst.criterion]),
                    "criterion_score": f"{worst.score:.2f}",
                    **limit,
                },
            )
        elif unevidenced:
            passed = False
            reason = Message(
                _("%(dimension)s %(score)s, but %(criterion)s has no evidence (gate %(threshold)s)"),
                {
                    "dimension": name,
                    "score": f"{dim.score:.2f}",
                    "criterion": Message(CRITERION_LABELS[unevidenced[0].criterion]),
                    **limit,
                },
            )
        else:
            passed = True
            reason = Message(
                _("%(dimension)s %(score)s >= gate %(threshold)s"),
                {"dimension": name, "score": f"{dim.score:.2f}", **limit},
            )
        outcomes.append(GateOutcome(dimension, threshold, dim.score, passed, reason))
    return outcomes


def _validate_gates(gates: TMapping[str, float], weights: dict[str, float]) -> None:
    for dimension, threshold in gates.items():
        if dimension not in DIMENSIONS:
            raise ScoringInputError(f"gates.{dimension}: unknown dimension (known: {', '.join(DIMENSIONS)})")
        if threshold is None or not (0.0 <= float(threshold) <= 1.0):
            raise ScoringInputError(f"gates.{dimension}: threshold must be in [0, 1], got {threshold!r}")
        if not any(DIMENSION_OF[c] == dimension for c in weights):
            raise ScoringInputError(f"gates.{dimension}: no weighted criterion belongs to this dimension")


def inputs_hash(
    scenario: str,
    evidence: Iterable[CandidateEvidence],
    constraints: ScoringConstraints,
    weights: TMapping[str, float],
    gates: TMapping[str, float],
    options: ScoringOptions,
) -> str:
    """SHA-256 of the canonical JSON of every input and the rules version."""
    document = {
        "rules_version": RULES_VERSION,
        "scenario": scenario,
        "evidence": [asdict(ev) for ev in evidence],
        "constraints": asdict(constraints),
        "weights": dict(weights),
        "gates": dict(gates),
        "options": asdict(options),
    }
    canonical = json.dumps(json_safe(document), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def topsis(matrix: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """TOPSIS closeness on the criteria's fixed [0, 1] scale. Rows: candidates.

    The ideal is full marks (1) and the anti-ideal zero on every criterion, weighted: closeness =
    d- / (d+ + d-). Not the set's best and worst: with two candidates those make the one ahead on
    every criterion where they differ 1.000 and the other 0.000, however small the difference (two
    totals of 0.775 and 0.764 read as 1 against 0), and adding a candidate would move them.
    """
    w = np.asarray(weights, dtype=float)
    weighted = np.asarray(matrix, dtype=float) * w
    d_plus = np.sqrt(((w - weighted) ** 2).sum(axis=1))
    d_minus = np.sqrt((weighted**2).sum(axis=1))
    denominator = d_plus + d_minus
    return np.divide(d_minus, denominator, out=np.full(len(weighted), 0.5), where=denominator > 0)


def _candidate_score(
    ev: CandidateEvidence,
    norm_w: dict[str, float],
    rows: list[Mapping],
    constraints: ScoringConstraints,
    scenario: str,
    gates: dict[str, float],
    include_simulated: bool,
) -> CandidateScore:
    """One candidate's criteria, dimensions, totals (with the upper bound and the interval) and gate outcomes."""
    criteria = {c: _score_criterion(c, norm_w[c], rows, ev, constraints, scenario, include_simulated) for c in norm_w}
    dims = _dimension_scores(criteria)
    total = sum(cs.weight * (cs.score or 0.0) for cs in criteria.values())
    total_upper = sum(cs.weight * (cs.score_upper if cs.score_upper is not None else 1.0) for cs in criteria.values())
    coverage = sum(cs.weight * cs.coverage for cs in criteria.values())
    total_interval = None
    if any(cs.score_interval for cs in criteria.values()):
        total_interval = tuple(
            sum(
                cs.weight * (cs.score_interval[end] if cs.score_interval else (cs.score or 0.0))
                for cs in criteria.values()
            )
            for end in (0, 1)
        )
    outcomes = _gate_outcomes(gates, dims, criteria)
    reasons = [g.reason for g in outcomes if not g.passed]
    return CandidateScore(
        candidate=ev.candidate,
        label=ev.label or ev.candidate,
        criteria=criteria,
        dimensions=dims,
        total=total,
        total_upper=total_upper,
        coverage=coverage,
        gates=outcomes,
        screened_out=bool(reasons),
        screen_reasons=reasons,
        uses_simulated=any(cs.uses_simulated for cs in criteria.values()),
        operating_complexity=ev.documented.operating_complexity,
        total_interval=total_interval,
    )


def _result_notes(
    candidates: list[CandidateScore], passing: list[CandidateScore], include_simulated: bool
) -> list[Message]:
    """What a reader of the scores must know: SIMULATED evidence, missing evidence, screened-out candidates."""
    notes: list[Message] = []
    if not include_simulated:
        excluded = sum(
            1
            for c in candidates
            for cs in c.criteria.values()
            for i in cs.indicators
            if i.status == "excluded_simulated"
        )
        if excluded:
            notes.append(
                Message(
                    _("%(excluded)s SIMULATED indicator value(s) excluded from this final scoring"),
                    {"excluded": str(excluded)},
                )
            )
    else:
        notes.append(Message(_("SIMULATED evidence included: this scoring is not signable")))
    if any(c.coverage < 1.0 - 1e-12 for c in candidates):
        notes.append(
            Message(
                _(
                    "Some evidence is missing: totals are lower bounds (missing evidence contributes "
                    "nothing); the upper bound (≤) shows the most it could add"
                )
            )
        )
    if len(passing) < len(candidates):
        notes.append(
            Message(
                _("%(count)s candidate(s) screened out by the gates"), {"count": str(len(candidates) - len(passing))}
            )
        )
    return notes


def score_candidates(
    scenario: str,
    evidence: list[CandidateEvidence],
    constraints: ScoringConstraints,
    weights: TMapping[str, float],
    gates: TMapping[str, float] | None = None,
    options: ScoringOptions | None = None,
) -> ScoringResult:
    """Score, screen, rank and analyse the candidates. See the module docstring for the rules."""
    _check_scenario(scenario)
    options = options or ScoringOptions()
    gates = dict(gates or {})
    if not evidence:
        raise ScoringInputError("evidence: at least one candidate is needed")
    ids = [ev.candidate for ev in evidence]
    if len(set(ids)) != len(ids):
        raise ScoringInputError(f"evidence: candidate ids must be unique, got {ids}")
    if not (0.0 <= options.tie_margin < 1.0):
        raise ScoringInputError(f"options.tie_margin: must be in [0, 1), got {options.tie_margin}")
    norm_w = normalise_weights(weights)
    _validate_gates(gates, norm_w)
    rows = mappings_for(scenario)
    criteria_ids = list(norm_w)

    candidates = [
        _candidate_score(ev, norm_w, rows, constraints, scenario, gates, options.include_simulated) for ev in evidence
    ]

    passing = [c for c in candidates if not c.screened_out]
    matrix = score_matrix(passing, criteria_ids)
    w_vec = np.array([norm_w[c] for c in criteria_ids])
    if len(passing) >= 2:
        for cand, closeness in zip(passing, topsis(matrix, w_vec), strict=True):
            cand.topsis = float(closeness)

    core = core_dimensions(gates, scenario)
    decision = tiebreak.decide([contender(c, core) for c in passing], options.tie_margin, core_label(core))
    leader = min(passing, key=lambda c: (-c.total, c.candidate)).candidate if passing else None
    labels = {c.candidate: c.label for c in candidates}
    sensitivity = analyse_sensitivity(matrix, w_vec, [c.candidate for c in passing], criteria_ids, options, labels)
    by_id = {c.candidate: c for c in candidates}
    order = [by_id[cid] for cid in decision.order]
    tie = tie_break_dict(decision, options.tie_margin)
    sensitivity["noise"] = measurement_noise(
        passing, order, tie, criteria_ids, w_vec, options, labels, core_weights(passing, criteria_ids, w_vec, core)
    )
    decision = _noise_tie(decision, passing, sensitivity["noise"], core)
    order, tie = [by_id[cid] for cid in decision.order], tie_break_dict(decision, options.tie_margin)
    for cand in candidates:  # a screened-out candidate is never ranked
        cand.rank = decision.ranks.get(cand.candidate)
    screened = sorted((c for c in candidates if c.screened_out), key=lambda c: (-c.total, c.candidate))
    ranking = [c.candidate for c in order] + [c.candidate for c in screened]
    fit = {
        c.candidate: candidate_fit(ev, constraints, options.include_simulated)
        for c, ev in zip(candidates, evidence, strict=True)
    }
    tied = _tie_section(decision, by_id, criteria_ids)
    if tied:  # weight robustness is not reported for a tie: nothing is first to be robust
        sensitivity = _without_weight_robustness(sensitivity)
    else:
        sensitivity["sentences"].append(sensitivity["noise"]["sentence"])
    uses_sim = any(c.uses_simulated for c in candidates)
    notes = _result_notes(candidates, passing, options.include_simulated)
    sentences = _headline(order, tie, labels, candidates, decision.winner, fit)
    sentences += held_out_sentences(evidence, labels)
    method = ranking_method(order, passing, matrix, w_vec, criteria_ids, tied=bool(tied))
    sentences.append(method["sentence"])
    if decision.winner is not None and leader is not None and decision.winner != leader and len(passing) >= 2:
        sentences.append(
            Message(
                _(
                    "The sensitivity figures below concern the weighted-sum ranking, which %(leader)s "
                    "leads; the tie-break prefers %(preferred)s within the margin."
                ),
                {"leader": labels[leader], "preferred": order[0].label},
            )
        )
    sentences += sensitivity["sentences"]

    result = ScoringResult(
        rules_version=RULES_VERSION,
        inputs_hash=inputs_hash(scenario, evidence, constraints, weights, gates, options),
        scenario=scenario,
        final=not options.include_simulated,
        signable=(not options.include_simulated) and not uses_sim,
        weights=norm_w,
        gates=gates,
        options=options,
        candidates=candidates,
        ranking=ranking,
        winner=decision.winner,
        weighted_sum_leader=leader,
        tie_break=tie,
        sensitivity=sensitivity,
        sentences=sentences,
        mappings=mapping_table(scenario),
        notes=notes,
        method=method,
        fit=fit,
        rests_on=decision.rests_on,
        tie=tied,
        core_dimensions=core,
    )
    verdict = decision_headline(result.to_dict())
    if verdict["verdict"] == INCONCLUSIVE and order and decision.winner is not None:
        first = order[0]
        result.sentences[0] = Message(
            _(
                "Inconclusive: %(name)s leads with a weighted total of %(total)s (evidence coverage %(coverage)s), "
                "but %(reasons)s."
            ),
            {
                "name": first.label,
                "total": f"{first.total:.3f}",
                "coverage": f"{first.coverage:.0%}",
                "reasons": CLAUSE_SEPARATOR.join(verdict["inconclusive_reasons"]),
            },
        )
    return result


def score_matrix(candidates: list[CandidateScore], criteria_ids: list[str]) -> np.ndarray:
    """Candidates x criteria matrix of lower-bound scores (missing = 0, as in the total)."""
    return np.array([[c.criteria[k].score or 0.0 for k in criteria_ids] for c in candidates], dtype=float).reshape(
        len(candidates), len(criteria_ids)
    )


def _observability(c: CandidateScore) -> float:
    dim = c.dimensions.get("observability")
    return dim.score if dim is not None and dim.score is not None else -1.0


def _complexity_rank(c: CandidateScore) -> int:
    return COMPLEXITY_RANK.get(c.operating_complexity or "", len(COMPLEXITY_RANK))


def core_dimensions(gates: TMapping[str, float], scenario: str) -> list[str]:
    """The core (priority) dimensions closeness is judged on (the article's step 5): the gates, or the
    scenario's priorities when no gate is set (as the documentation screen reads them)."""
    if gates:
        return [d for d in DIMENSIONS if d in gates]
    return [d for d in SCENARIO_PRIORITIES.get(scenario, ()) if d in DIMENSIONS]


def core_label(core: list[str]) -> Message:
    """The core dimensions inside a sentence: "the core dimensions (Memory ..., Cross-turn ...)"."""
    if not core:
        return Message(_("the weighted total"))
    return Message(
        _("the core dimensions (%(names)s)"), {"names": NAME_SEPARATOR.join(Message(DIMENSIONS[d]) for d in core)}
    )


def _core_members(candidate: CandidateScore, core: list[str]) -> list[CriterionScore]:
    return [cs for cs in candidate.criteria.values() if cs.dimension in core and cs.weight > 0]


def core_score(candidate: CandidateScore, core: list[str]) -> tuple[float, tuple[float, float] | None]:
    """The weighted mean of the candidate's core criteria (lower bounds; missing counts 0, as in the total)
    and its value with every measurement at the ends of its interval; the total when no core criterion
    is weighted."""
    members = _core_members(candidate, core)
    weight = sum(cs.weight for cs in members)
    if not members or weight <= 0:
        return candidate.total, candidate.total_interval
    value = sum(cs.weight * (cs.score or 0.0) for cs in members) / weight
    interval = None
    if any(cs.score_interval for cs in members):
        ends = [
            sum(cs.weight * (cs.score_interval[end] if cs.score_interval else (cs.score or 0.0)) for cs in members)
            / weight
            for end in (0, 1)
        ]
        interval = (min(ends), max(ends))
    return value, interval


def contender(candidate: CandidateScore, core: list[str]) -> tiebreak.Contender:
    """A passing candidate as the tie rule reads it."""
    value, interval = core_score(candidate, core)
    return tiebreak.Contender(
        id=candidate.candidate,
        label=candidate.label,
        total=candidate.total,
        core=value,
        observability=_observability(candidate),
        complexity_rank=_complexity_rank(candidate),
        complexity=candidate.operating_complexity,
        total_interval=candidate.total_interval,
        core_interval=interval,
    )


def core_weights(
    passing: list[CandidateScore], criteria_ids: list[str], weights: np.ndarray, core: list[str]
) -> np.ndarray | None:
    """The weights of the core criteria (summing to 1, the others 0) for the noise draws; None: the total."""
    mask = np.array([DIMENSION_OF[k] in core for k in criteria_ids], dtype=float)
    core_w = weights * mask
    return core_w / core_w.sum() if passing and core_w.sum() > 0 else None


def tie_break_dict(decision: tiebreak.Decision, margin: float) -> dict[str, Any]:
    """The stored `tie_break`: whether the tie rule ran, who was close, what decided, and why."""
    return {
        "applied": decision.applied,
        "margin": margin,
        "group": decision.group,
        "noise": decision.noise,
        "decided_by": decision.decided_by,
        "tied": decision.tied,
        "explanation": decision.explanation,
    }


def _noise_tie(
    decision: tiebreak.Decision, passing: list[CandidateScore], noise: dict[str, Any], core: list[str]
) -> tiebreak.Decision:
    """A winner the draws of the measurements do not hold (and no documented property chose) is a tie
    with every candidate that wins a share of the draws the winner's lead cannot dismiss."""
    if decision.winner is None or noise.get("stable") is not False:
        return decision
    shares = noise.get("first_share") or {}
    tied = [cid for cid, share in shares.items() if share >= 1.0 - noise_domain.STABLE_SHARE]
    tied = list(dict.fromkeys([decision.winner, *tied]))
    return tiebreak.within_noise(decision, [contender(c, core) for c in passing], tied, core_label(core))


def _tie_section(
    decision: tiebreak.Decision, by_id: dict[str, CandidateScore], criteria_ids: list[str]
) -> dict[str, Any]:
    """A tie's candidates and what would separate them: the evidence still missing for them, narrower
    intervals when they overlap, and the criteria they differ on (a justified, audited weight change or
    gate on those). Empty when there is a winner."""
    if decision.winner is not None or len(decision.tied) < 2:
        return {}
    tied = [by_id[cid] for cid in decision.tied]
    separate: list[Message] = []
    missing = [
        k for k in criteria_ids if any(c.criteria[k].weight > 0 and c.criteria[k].status != "complete" for c in tied)
    ]
    if missing:
        separate.append(
            Message(
                _("the evidence still missing on %(criteria)s"),
                {"criteria": NAME_SEPARATOR.join(Message(CRITERION_LABELS[k]) for k in missing[:4])},
            )
        )
    if any(c.total_interval is not None for c in tied):
        separate.append(Message(_("more requests per run, to narrow the overlapping 95%% intervals")))
    differ = [k for k in criteria_ids if len({round(c.criteria[k].score or 0.0, 6) for c in tied}) > 1]
    if differ:
        separate.append(
            Message(
                _("a justified weight change or gate on the criteria where they differ: %(criteria)s"),
                {"criteria": NAME_SEPARATOR.join(Message(CRITERION_LABELS[k]) for k in differ[:4])},
            )
        )
    else:
        separate.append(
            Message(_("they score the same on every weighted criterion: only new evidence can separate them"))
        )
    return {"candidates": [c.candidate for c in tied], "separate": separate}


def _without_weight_robustness(sensitivity: dict[str, Any]) -> dict[str, Any]:
    """The sensitivity of a tie: no weight robustness (the share of weight vectors "won", the flip points
    and nearest ties all measure a lead that does not exist), only why."""
    return {
        **sensitivity,
        "leader": None,
        "per_criterion": [],
        "nearest_ties": [],
        "acceptability": {},
        "sentences": [
            Message(
                _(
                    "Weight robustness is not reported for a tie: nothing separates the tied candidates, so no "
                    "candidate is first to be robust."
                )
            )
        ],
    }


def candidate_fit(
    evidence: CandidateEvidence, constraints: ScoringConstraints, include_simulated: bool
) -> list[dict[str, Any]]:
    """The candidate's fit to each constraint the sheet states (`procurement.constraint_fit`, then the GPU
    budget), from the figures this scoring reads (SIMULATED ones only when it includes them)."""
    sheet = {
        "peak_concurrency": constraints.target_concurrency,
        "gpu_count_budget": constraints.gpu_count_budget,
        "throughput_target_tokens_s": constraints.throughput_target_tok_s,
        "ttft_p95_ms": constraints.ttft_p95_ms,
        "tpot_p95_ms": constraints.tpot_p95_ms,
        "max_input_tokens": constraints.max_context_tokens,
    }
    metrics = {
        name: {"value": m.value, "run_ids": list(m.run_ids), "evidence": m.evidence}
        for name, m in evidence.metrics.items()
        if include_simulated or m.evidence != SIMULATED
    }
    rows = procurement.constraint_fit(sheet, metrics, evidence.verdicts)
    gpus = procurement.gpu_fit(sheet, evidence.gpu_count) if evidence.gpu_count else None
    return rows + ([gpus] if gpus else [])


def ranking_method(
    order: list[CandidateScore],
    passing: list[CandidateScore],
    matrix: np.ndarray,
    weights: np.ndarray,
    criteria_ids: list[str],
    tied: bool = False,
) -> dict[str, Any]:
    """Which ranking decides (the weighted sum, with the tie-break), why, and what TOPSIS says (nothing
    that names a first for a tie: the second opinion does not pick between tied candidates).

    `passing` are the rows of `matrix` (each candidate's criterion scores). When TOPSIS ranks
    another candidate first, the sentence names the criteria where that candidate's weighted lead is
    largest: where TOPSIS's distance favours it.
    """
    method: dict[str, Any] = {
        "decides": "weighted_sum",
        "second_opinion": "topsis",
        "topsis_leader": None,
        "agrees": None,
    }
    scored = [c for c in passing if c.topsis is not None]
    if tied:
        method["sentence"] = Message(
            _(
                "The weighted sum decides, with the tie-break: here they leave a tie, and TOPSIS, the second "
                "opinion, does not pick between tied candidates."
            )
        )
        return method
    if not order or len(scored) < 2:
        method["sentence"] = Message(
            _(
                "The weighted sum decides: each criterion is scored against fixed bounds, so adding or removing "
                "a candidate cannot change the order. TOPSIS needs at least two candidates that pass the gates."
            )
        )
        return method
    winner = order[0]
    leader = min(scored, key=lambda c: (-round(c.topsis, 9), c.candidate))
    method["topsis_leader"] = leader.candidate
    method["agrees"] = leader.candidate == winner.candidate
    why = Message(
        _(
            "The weighted sum decides (with the tie-break): each criterion is scored against fixed bounds, so "
            "adding or removing a candidate cannot change the order. TOPSIS, the second opinion, measures each "
            "candidate's distance to full marks and to zero on the same fixed scale."
        )
    )
    if method["agrees"]:
        method["sentence"] = Message(
            _("%(why)s It agrees: %(name)s is also first by TOPSIS closeness (%(closeness)s)."),
            {"why": why, "name": winner.label, "closeness": f"{winner.topsis:.3f}"},
        )
        return method
    rows = {c.candidate: i for i, c in enumerate(passing)}
    scaled = matrix * weights
    lead = scaled[rows[leader.candidate]] - scaled[rows[winner.candidate]]
    favoured = [criteria_ids[k] for k in np.argsort(-lead, kind="stable")[:2] if lead[k] > 1e-9]
    values = {
        "why": why,
        "other": leader.label,
        "other_closeness": f"{leader.topsis:.3f}",
        "name": winner.label,
        "closeness": f"{(winner.topsis or 0.0):.3f}",
        "total": f"{winner.total:.3f}",
        "other_total": f"{leader.total:.3f}",
    }
    if favoured:
        method["favoured_criteria"] = favoured
        method["sentence"] = Message(
            _(
                "%(why)s TOPSIS ranks %(other)s first (closeness %(other_closeness)s against %(closeness)s for "
                "%(name)s): being a distance, it favours an even profile, and %(other)s's lead on %(criteria)s "
                "counts for more there than in the weighted sum (%(name)s %(total)s, %(other)s %(other_total)s)."
            ),
            {**values, "criteria": NAME_SEPARATOR.join(Message(CRITERION_LABELS[k]) for k in favoured)},
        )
    else:
        method["sentence"] = Message(
            _(
                "%(why)s TOPSIS ranks %(other)s first (closeness %(other_closeness)s against %(closeness)s for "
                "%(name)s): it measures the distance to full marks and to zero on each criterion, not the weighted "
                "sum (%(name)s %(total)s, %(other)s %(other_total)s)."
            ),
            values,
        )
    return method


def _headline(
    order: list[CandidateScore],
    tie: dict[str, Any],
    labels: dict[str, str],
    candidates: list[CandidateScore],
    winner: str | None = None,
    fit: dict[str, list[dict[str, Any]]] | None = None,
) -> list[Message]:
    """The scoring's first sentences: the recommendation (naming every constraint it fails) or the tie,
    the tie-break, and why each screened-out candidate is out."""
    sentences = []
    if order and winner is None:
        sentences.append(
            Message(
                _("No candidate is recommended: %(explanation)s."),
                {"explanation": tie["explanation"]},
            )
        )
    elif order:
        first = order[0]
        values = {"name": first.label, "total": f"{first.total:.3f}", "coverage": f"{first.coverage:.0%}"}
        misses = procurement.shortfall_messages((fit or {}).get(first.candidate) or [])
        if misses:
            sentences.append(
                Message(
                    _(
                        "%(name)s is recommended by the gates with a weighted total of %(total)s (evidence coverage "
                        "%(coverage)s), but %(misses)s."
                    ),
                    {**values, "misses": CLAUSE_SEPARATOR.join(misses)},
                )
            )
        elif first.total_upper > first.total + 1e-9:
            sentences.append(
                Message(
                    _(
                        "%(name)s is recommended with a weighted total of %(total)s (up to %(upper)s if "
                        "missing evidence came in at full marks), evidence coverage %(coverage)s."
                    ),
                    {**values, "upper": f"{first.total_upper:.3f}"},
                )
            )
        else:
            sentences.append(
                Message(
                    _("%(name)s is recommended with a weighted total of %(total)s, evidence coverage %(coverage)s."),
                    values,
                )
            )
        if tie.get("applied"):
            sentences.append(Message(_("Tie-break applied: %(explanation)s."), {"explanation": tie["explanation"]}))
    else:
        sentences.append(Message(_("No candidate passes the gates.")))
    for cand in candidates:
        if cand.screened_out:
            sentences.append(
                Message(
                    _("%(name)s is screened out: %(reasons)s."),
                    {"name": cand.label, "reasons": CLAUSE_SEPARATOR.join(cand.screen_reasons)},
                )
            )
    return sentences


def held_out_sentences(evidence: Iterable[CandidateEvidence], labels: dict[str, str]) -> list[Message]:
    """Per candidate, the figures held out of the scoring and why (a client-bound run's figures are
    the client's, not the engine's), and the latencies scored with the client's lateness as their
    interval (the client still applied the load; its lateness can only have lengthened them)."""
    sentences = []
    for ev in evidence:
        name = labels.get(ev.candidate, ev.candidate)
        if ev.held_out:
            sentences.append(
                Message(
                    _("%(name)s: %(metrics)s held out of the scoring: %(reasons)s."),
                    {
                        "name": name,
                        "metrics": ", ".join(sorted(ev.held_out)),
                        "reasons": CLAUSE_SEPARATOR.join(dict.fromkeys(ev.held_out[k] for k in sorted(ev.held_out))),
                    },
                )
            )
        late = {key: m.client_bound for key, m in sorted(ev.metrics.items()) if m.client_bound}
        if late:
            sentences.append(
                Message(
                    _(
                        "%(name)s: %(metrics)s scored with the client's lateness in their interval (the load was "
                        "held; the lateness can only have lengthened them): %(reasons)s."
                    ),
                    {
                        "name": name,
                        "metrics": ", ".join(late),
                        "reasons": CLAUSE_SEPARATOR.join(dict.fromkeys(late.values())),
                    },
                )
            )
    return sentences


# --------------------------------------------------------------------------- sensitivity


def weights_with(weights: np.ndarray, k: int, t: float) -> np.ndarray:
    """Weights with w_k set to t and the others rescaled proportionally to sum 1 - t.

    If every other weight is zero they share 1 - t equally.
    """
    weights = np.asarray(weights, dtype=float)
    rest = 1.0 - weights[k]
    if rest > 1e-12:
        new = weights * (1.0 - t) / rest
    else:
        new = np.full_like(weights, (1.0 - t) / max(len(weights) - 1, 1))
    new[k] = t
    return new


def flip_points(matrix: np.ndarray, weights: np.ndarray, leader: int, k: int) -> dict[str, Any]:
    """Where, moving w_k alone (others rescaled), another candidate overtakes the leader.

    Returns {"up": (t, challenger) | None, "down": (t, challenger) | None}: the nearest t above
    (below) the current w_k at which a challenger ties the leader and beyond which it leads.
    """
    weights = np.asarray(weights, dtype=float)
    wk = weights[k]
    rest = 1.0 - wk
    others = np.delete(np.arange(len(weights)), k)
    if rest > 1e-12:
        remainder = matrix[:, others] @ (weights[others] / rest)
    else:
        remainder = matrix[:, others].mean(axis=1) if len(others) else np.zeros(len(matrix))
    s_k = matrix[:, k]
    up, down = None, None
    for c in range(len(matrix)):
        if c == leader:
            continue
        # d(t) = t * a + (1 - t) * b, leader minus challenger
        a = s_k[leader] - s_k[c]
        b = remainder[leader] - remainder[c]
        if abs(a - b) < 1e-15:
            continue  # the gap does not depend on w_k
        t = b / (b - a)
        if not (1e-12 < t < 1 - 1e-12):
            continue  # a tie only at t = 0 or 1 (or outside [0, 1]) is not a flip
        slope = a - b
        if t > wk + 1e-12 and slope < 0 and (up is None or t < up[0]):
            up = (t, c)  # gap shrinks as w_k rises and crosses 0 at t
        if t < wk - 1e-12 and slope > 0 and (down is None or t > down[0]):
            down = (t, c)
    return {"up": up, "down": down}


def nearest_tie(matrix: np.ndarray, weights: np.ndarray, leader: int, challenger: int) -> dict[str, Any] | None:
    """Smallest L2 change of the weight vector, on the simplex, making `challenger` tie `leader`.

    Minimise |delta|_2 subject to (w + delta) . d = 0 with d = s_leader - s_challenger,
    sum(delta) = 0 and w + delta >= 0. Closed form on the free set F:
    delta_F = A^T (A A^T)^-1 b with A = [d_F; 1_F]; a primal active set pins weights that would go
    negative at 0 (delta_j = -w_j) and releases them when the KKT conditions ask. None if no weight
    vector ties.
    """
    w = np.asarray(weights, dtype=float)
    d = matrix[leader] - matrix[challenger]
    gap = float(w @ d)
    if gap <= 0:
        return {"distance": 0.0, "delta": np.zeros_like(w), "weights": w.copy()}
    if d.min() > 0 or np.ptp(d) < 1e-15:
        return None  # leader at least as good on every criterion under any weights
    fixed = np.zeros(len(w), dtype=bool)
    for _step in range(4 * len(w) + 4):
        free = ~fixed
        delta = np.where(fixed, -w, 0.0)
        rhs = np.array([-gap - d[fixed] @ delta[fixed], -delta[fixed].sum()])
        a = np.vstack([d[free], np.ones(int(free.sum()))])
        gram = a @ a.T
        if free.sum() < 2 or abs(np.linalg.det(gram)) < 1e-15:
            return None
        multipliers = np.linalg.solve(gram, rhs)
        delta[free] = a.T @ multipliers
        negative = np.where(free & (w + delta < -1e-12), w + delta, np.inf)
        if np.isfinite(negative).any():
            fixed[int(np.argmin(negative))] = True  # pin the most negative weight at 0
            continue
        # KKT: a pinned weight whose unconstrained move would be upward must be released
        wanted = multipliers[0] * d + multipliers[1]
        violation = np.where(fixed & (wanted > -w + 1e-12), wanted + w, -np.inf)
        if np.isfinite(violation).any():
            fixed[int(np.argmax(violation))] = False
            continue
        break
    else:  # pragma: no cover - the active set does not cycle for a least-distance problem
        return None
    new = np.clip(w + delta, 0.0, None)
    return {"distance": float(np.linalg.norm(delta)), "delta": delta, "weights": new}


def rank_acceptability(matrix: np.ndarray, weights: np.ndarray, draws: int, spread: float, seed: int) -> np.ndarray:
    """Share of perturbed weight vectors in which each candidate ranks first.

    Each draw multiplies every weight by an independent uniform factor in [1 - spread, 1 + spread]
    and renormalises to sum 1 (zero weights stay zero). Exact ties go to the lower index.
    """
    if not (0.0 <= spread < 1.0):
        raise ScoringInputError(f"options.acceptability_spread: must be in [0, 1), got {spread}")
    if draws < 1:
        raise ScoringInputError(f"options.acceptability_draws: must be positive, got {draws}")
    rng = np.random.default_rng(seed)
    factors = rng.uniform(1.0 - spread, 1.0 + spread, size=(draws, len(weights)))
    sampled = factors * np.asarray(weights, dtype=float)
    sampled /= sampled.sum(axis=1, keepdims=True)
    winners = np.argmax(sampled @ matrix.T, axis=1)
    return np.bincount(winners, minlength=len(matrix)) / draws


def analyse_sensitivity(
    matrix: np.ndarray,
    weights: np.ndarray,
    ids: list[str],
    criteria_ids: list[str],
    options: ScoringOptions,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Sensitivity (a), (b), (c) of the weighted-sum leader among `ids` (rows of `matrix`)."""
    labels = labels or {}
    name = lambda i: labels.get(ids[i], ids[i])  # noqa: E731
    result: dict[str, Any] = {
        "leader": None,
        "per_criterion": [],
        "nearest_ties": [],
        "acceptability": {},
        "norm": "L2",
        "sentences": [],
    }
    if len(ids) < 2:
        result["sentences"].append(Message(_("Sensitivity needs at least two candidates that pass the gates.")))
        return result
    totals = matrix @ weights
    leader = min(range(len(ids)), key=lambda i: (-totals[i], ids[i]))
    result["leader"] = ids[leader]
    sentences = result["sentences"]
    for k, criterion in enumerate(criteria_ids):
        points = flip_points(matrix, weights, leader, k)
        label = Message(CRITERION_LABELS[criterion])
        entry = {"criterion": criterion, "weight": float(weights[k]), "rise": None, "fall": None}
        clauses = []
        if points["up"] is not None:
            t, c = points["up"]
            entry["rise"] = {"to": t, "by": t - weights[k], "challenger": ids[c]}
            clauses.append(
                Message(
                    _("rises by more than %(by)s (above %(to)s, %(challenger)s would lead)"),
                    {"by": f"{t - weights[k]:.2f}", "to": f"{t:.2f}", "challenger": name(c)},
                )
            )
        if points["down"] is not None:
            t, c = points["down"]
            entry["fall"] = {"to": t, "by": weights[k] - t, "challenger": ids[c]}
            clauses.append(
                Message(
                    _("falls by more than %(by)s (below %(to)s, %(challenger)s would lead)"),
                    {"by": f"{weights[k] - t:.2f}", "to": f"{t:.2f}", "challenger": name(c)},
                )
            )
        if clauses:
            entry["sentence"] = Message(
                _("%(leader)s stays first unless the %(criterion)s weight %(clauses)s."),
                {"leader": name(leader), "criterion": label, "clauses": OR_SEPARATOR.join(clauses)},
            )
        else:
            entry["sentence"] = Message(
                _("%(leader)s stays first for any %(criterion)s weight in [0, 1]."),
                {"leader": name(leader), "criterion": label},
            )
        result["per_criterion"].append(entry)
        sentences.append(entry["sentence"])
    ties = []
    for c in range(len(ids)):
        if c == leader:
            continue
        tie = nearest_tie(matrix, weights, leader, c)
        if tie is None:
            ties.append(
                {
                    "challenger": ids[c],
                    "distance": None,
                    "sentence": Message(
                        _("No weighting makes %(challenger)s tie %(leader)s: it is nowhere better."),
                        {"challenger": name(c), "leader": name(leader)},
                    ),
                }
            )
            continue
        moves = sorted(
            ((float(tie["delta"][j]), criteria_ids[j]) for j in range(len(criteria_ids))), key=lambda m: -abs(m[0])
        )
        main = [
            Message(
                _("%(criterion)s %(change)s"), {"criterion": Message(CRITERION_LABELS[cid]), "change": f"{dv:+.2f}"}
            )
            for dv, cid in moves[:3]
            if abs(dv) >= 0.005
        ]
        values = {"challenger": name(c), "leader": name(leader), "distance": f"{tie['distance']:.2f}"}
        ties.append(
            {
                "challenger": ids[c],
                "distance": tie["distance"],
                "delta": {cid: float(tie["delta"][j]) for j, cid in enumerate(criteria_ids)},
                "weights": {cid: float(tie["weights"][j]) for j, cid in enumerate(criteria_ids)},
                "sentence": Message(
                    _(
                        "%(challenger)s would tie %(leader)s if the weights moved by %(distance)s (L2), "
                        "mainly %(main)s."
                    ),
                    {**values, "main": NAME_SEPARATOR.join(main)},
                )
                if main
                else Message(
                    _("%(challenger)s would tie %(leader)s if the weights moved by %(distance)s (L2)."), values
                ),
            }
        )
    ties.sort(key=lambda t: (t["distance"] is None, t["distance"] or 0.0))
    result["nearest_ties"] = ties
    sentences.extend(t["sentence"] for t in ties)
    shares = rank_acceptability(
        matrix, weights, options.acceptability_draws, options.acceptability_spread, options.seed
    )
    result["acceptability"] = {
        "draws": options.acceptability_draws,
        "spread": options.acceptability_spread,
        "seed": options.seed,
        "method": "multiplicative uniform perturbation, renormalised",
        "first_share": {ids[i]: float(shares[i]) for i in range(len(ids))},
    }
    ranked = sorted(range(len(ids)), key=lambda i: -shares[i])
    parts = [
        Message(_("%(name)s in %(share)s"), {"name": name(i), "share": f"{shares[i]:.1%}"})
        for i in ranked
        if shares[i] > 0
    ]
    sentences.append(
        Message(
            _(
                "Across %(draws)s weight vectors within ±%(spread)s of the chosen weights, the first "
                "place goes to %(shares)s."
            ),
            {
                "draws": f"{options.acceptability_draws:,}",
                "spread": f"{options.acceptability_spread:.0%}",
                "shares": CLAUSE_SEPARATOR.join(parts),
            },
        )
    )
    return result


def _noise_parts(candidate: CandidateScore, criteria_ids: list[str]) -> list[noise_domain.Part]:
    """The candidate's scored indicators as noise parts (their share of the criterion score)."""
    parts = []
    for column, criterion in enumerate(criteria_ids):
        indicators = candidate.criteria[criterion].indicators
        total_weight = sum(ind.weight for ind in indicators)
        for ind in indicators:
            if ind.status == "ok" and total_weight:
                parts.append(
                    noise_domain.Part(
                        column, ind.weight / total_weight, ind.score, ind.score_interval, f"{criterion}:{ind.indicator}"
                    )
                )
    return parts


def measurement_noise(
    passing: list[CandidateScore],
    order: list[CandidateScore],
    tie: dict[str, Any],
    criteria_ids: list[str],
    weights: np.ndarray,
    options: ScoringOptions,
    labels: dict[str, str],
    core: np.ndarray | None = None,
) -> dict[str, Any]:
    """Robustness to measurement noise (`domain.noise`): the share of draws of the measurements, each
    within its interval, in which each passing candidate wins under the decision rule (weights fixed),
    and whether the recommended candidate holds (`stable`: None when nothing has an interval). It
    holds when it wins at least `noise.STABLE_SHARE` of the draws, or when the tie-break chose it
    within the noise on a documented property (observability, operating complexity), which no draw
    of the measurements moves."""
    result: dict[str, Any] = {
        "draws": options.noise_draws,
        "seed": options.seed,
        "method": "each measured score drawn uniformly within its 95% interval; weights fixed; tie margin applied",
        "first_share": {},
        "with_interval": 0,
        "measured": 0,
        "stable": None,
    }
    if len(passing) < 2 or not order:
        result["sentence"] = Message(
            _("Robustness to measurement noise needs a second candidate that passes the gates.")
        )
        return result
    if options.noise_draws < 1:
        raise ScoringInputError(f"options.noise_draws: must be positive, got {options.noise_draws}")
    parts = [_noise_parts(c, criteria_ids) for c in passing]
    measured = [p for c, own in zip(passing, parts, strict=True) for p in own if _is_measured(c, p, criteria_ids)]
    result["measured"] = len(measured)
    result["with_interval"] = sum(1 for p in measured if p.interval is not None)
    keys = sorted({(-round(_observability(c), 9), _complexity_rank(c)) for c in passing})
    preference = [keys.index((-round(_observability(c), 9), _complexity_rank(c))) for c in passing]
    shares = noise_domain.first_shares(
        parts,
        [c.candidate for c in passing],
        weights,
        preference,
        options.tie_margin,
        options.noise_draws,
        options.seed,
        core_weights=core,
    )
    result["first_share"] = {c.candidate: float(share) for c, share in zip(passing, shares, strict=True)}
    ranked = sorted(range(len(passing)), key=lambda i: (-shares[i], passing[i].candidate))
    result["shares"] = CLAUSE_SEPARATOR.join(
        Message(_("%(name)s in %(share)s"), {"name": labels.get(passing[i].candidate), "share": f"{shares[i]:.1%}"})
        for i in ranked
        if shares[i] > 0
    )
    values = {
        "draws": f"{options.noise_draws:,}",
        "count": str(result["with_interval"]),
        "measured": str(result["measured"]),
        "shares": result["shares"],
    }
    if not result["with_interval"]:
        result["sentence"] = Message(
            _(
                "No measured figure has a 95%% interval yet (%(measured)s measured indicators): robustness to "
                "measurement noise is unknown."
            ),
            values,
        )
        return result
    share = float(shares[passing.index(order[0])])
    by_rule = bool(tie.get("applied")) and tie.get("decided_by") in ("observability", "operating_complexity")
    result["stable"] = share >= noise_domain.STABLE_SHARE or by_rule
    result["sentence"] = Message(
        _(
            "Across %(draws)s draws of the measurements, each of the %(count)s of %(measured)s measured indicators "
            "with a 95%% interval drawn within it (the others held), the first place goes to %(shares)s."
        ),
        values,
    )
    return result


def _is_measured(candidate: CandidateScore, part: noise_domain.Part, criteria_ids: list[str]) -> bool:
    criterion, indicator = part.name.split(":", 1)
    return any(i.indicator == indicator and i.source == M for i in candidate.criteria[criterion].indicators)
