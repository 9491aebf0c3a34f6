"""The scoring's vocabulary: the rules version, evidence kinds, the scenarios, the six dimensions and
their criteria (labels, which criteria a gate judges), documented-feature vocabularies, the input
error, and `json_safe` for what is stored."""

from __future__ import annotations

import math
import sys
from typing import Any

from selection.domain.messages import Join, Message, to_json
from selection.domain.messages import marked as _

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


def json_safe(value: Any) -> Any:
    if isinstance(value, (Message, Join)):
        return to_json(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    np = sys.modules.get("numpy")  # a numpy scalar exists only once numpy is loaded: no import here
    if isinstance(value, float) or (np is not None and isinstance(value, np.floating)):
        number = float(value)
        return number if math.isfinite(number) else None
    if np is not None and isinstance(value, np.integer):
        return int(value)
    if np is not None and isinstance(value, np.bool_):
        return bool(value)
    return value


def check_scenario(scenario: str) -> None:
    if scenario not in SCENARIOS:
        raise ScoringInputError(f"scenario: must be one of {', '.join(SCENARIOS)}, got {scenario!r}")
