"""The six evaluation dimensions of docs/domain.md, their criteria, and the scenario weight presets.

The article gives H/M/L suggestions for scenarios A and B (seven criteria); C and D are derived
from its text: C "puts persistence and swap-out first" and adds cache lifecycle management and
session recovery consistency; D "puts cache reuse and throughput/unit cost first and latency last".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Literal

from selection.domain.messages import Message
from selection.domain.messages import marked as _

Source = Literal["measured", "documented", "both"]


@dataclass(frozen=True)
class Dimension:
    id: str
    name: str
    question: str


@dataclass(frozen=True)
class Criterion:
    id: str
    dimension: str
    name: str
    looks_at: str
    source: Source
    scenarios: tuple[str, ...] = ("A", "B", "C", "D")


DIMENSIONS: tuple[Dimension, ...] = (
    Dimension(
        "memory",
        _("Memory allocation and reuse"),
        _("Pre-allocation vs paged, fragmentation, prefix reuse: sets the concurrency ceiling."),
    ),
    Dimension(
        "scheduling",
        _("Concurrency scheduling and isolation"),
        _("Concurrency limits, isolation between requests and tenants, rejection policy: prevents OOM."),
    ),
    Dimension(
        "context",
        _("Context extension and compression"),
        _("Supported context, cache quantisation or compression, control of one long request's cache."),
    ),
    Dimension(
        "persistence",
        _("Cross-turn persistence and offload"),
        _("Keeping cache across turns, swapping idle sessions out and back, cost and correctness of swap-in."),
    ),
    Dimension("cost", _("Cost structure"), _("Memory and compute per unit of concurrency, utilisation.")),
    Dimension(
        "observability",
        _("Observability"),
        _("Monitoring, alerting, capacity-planning data: memory, hit rate, swaps, fragmentation."),
    ),
)
DIMENSION_IDS = tuple(d.id for d in DIMENSIONS)

CRITERIA: tuple[Criterion, ...] = (
    Criterion(
        "memory_allocation",
        "memory",
        _("Memory allocation strategy"),
        _("pre-allocation / dynamic, fragmentation"),
        "both",
    ),
    Criterion("cache_reuse", "memory", _("Cache reuse"), _("prefix cache, identical-input de-duplication"), "both"),
    Criterion(
        "concurrency_control", "scheduling", _("Concurrency control"), _("limit, isolation, rejection policy"), "both"
    ),
    Criterion("context_extension", "context", _("Context extension"), _("long context, cache compression"), "both"),
    Criterion(
        "cache_persistence", "persistence", _("Cache persistence"), _("cross-turn keep, swap out / swap in"), "both"
    ),
    Criterion(
        "observability", "observability", _("Observability"), _("monitoring, alerting, capacity planning"), "both"
    ),
    Criterion("cost_control", "cost", _("Cost control"), _("cost per unit of concurrency, utilisation"), "both"),
    Criterion(
        "cache_lifecycle",
        "persistence",
        _("Cache lifecycle management"),
        _("release, reclamation of aborted and idle sessions"),
        "both",
        ("C",),
    ),
    Criterion(
        "session_recovery",
        "persistence",
        _("Session recovery consistency"),
        _("continuation after swap-in equals continuation without it"),
        "measured",
        ("C",),
    ),
    Criterion(
        "throughput_unit_cost",
        "cost",
        _("Throughput / unit cost"),
        _("output tokens per GPU-second, cost per million tokens"),
        "measured",
        ("D",),
    ),
)
CRITERIA_BY_ID = {c.id: c for c in CRITERIA}

# The one place where the article's H/M/L become numbers (relative importance, normalised later).
LEVEL_VALUES = {"H": 3.0, "M": 2.0, "L": 1.0}

PRESET_LEVELS: dict[str, dict[str, str]] = {
    # From the article's table.
    "A": {
        "memory_allocation": "H",
        "cache_reuse": "H",
        "concurrency_control": "H",
        "context_extension": "M",
        "cache_persistence": "L",
        "observability": "M",
        "cost_control": "H",
    },
    "B": {
        "memory_allocation": "H",
        "cache_reuse": "M",
        "concurrency_control": "M",
        "context_extension": "H",
        "cache_persistence": "M",
        "observability": "M",
        "cost_control": "H",
    },
    # Derived from the text: persistence and swap first, plus the two C-only criteria.
    "C": {
        "memory_allocation": "M",
        "cache_reuse": "M",
        "concurrency_control": "M",
        "context_extension": "M",
        "cache_persistence": "H",
        "cache_lifecycle": "H",
        "session_recovery": "H",
        "observability": "M",
        "cost_control": "M",
    },
    # Derived from the text: reuse and throughput/unit cost first, latency-driven criteria last.
    "D": {
        "memory_allocation": "M",
        "cache_reuse": "H",
        "concurrency_control": "L",
        "context_extension": "L",
        "cache_persistence": "L",
        "observability": "L",
        "cost_control": "H",
        "throughput_unit_cost": "H",
    },
}

SCENARIO_PRIORITIES = {
    "A": ("memory", "scheduling"),
    "B": ("context", "memory"),
    "C": ("persistence",),
    "D": ("memory", "cost"),
}

MAX_GATES = 3
TOO_MANY_GATES = _("%(count)s gates chosen: pick 2-3 priority dimensions. No candidate scores full marks everywhere.")


def gate_warnings(gates: Collection[str]) -> list[Message]:
    """Warnings about a choice of gate dimensions: more than MAX_GATES is allowed but discouraged,
    since no candidate scores full marks everywhere."""
    return [Message(TOO_MANY_GATES, {"count": len(gates)})] if len(gates) > MAX_GATES else []


def criteria_for(scenarios: list[str] | tuple[str, ...]) -> list[Criterion]:
    """Criteria that apply to any of the given scenarios, in table order."""
    return [c for c in CRITERIA if any(s in c.scenarios for s in scenarios)]


def preset_weights(scenario: str) -> dict[str, float]:
    """Normalised preset weights (sum 1) for one scenario."""
    levels = PRESET_LEVELS[scenario]
    total = sum(LEVEL_VALUES[level] for level in levels.values())
    return {criterion: LEVEL_VALUES[level] / total for criterion, level in levels.items()}


def blended_weights(mix: dict[str, float]) -> dict[str, float]:
    """Presets blended by the scenario mix (shares sum to 1), normalised to sum 1."""
    blended: dict[str, float] = {}
    for scenario, share in mix.items():
        for criterion, weight in preset_weights(scenario).items():
            blended[criterion] = blended.get(criterion, 0.0) + share * weight
    total = sum(blended.values())
    return {c: blended[c] / total for c in (crit.id for crit in CRITERIA) if c in blended}


def normalise(weights: dict[str, float]) -> dict[str, float]:
    """Weights scaled to sum 1. Raises ValueError naming the criterion for negatives."""
    for criterion, value in weights.items():
        if value < 0:
            raise ValueError(f"weights.{criterion}: must be >= 0, got {value}")
    total = sum(weights.values())
    if total <= 0:
        raise ValueError("weights: at least one weight must be positive")
    return {c: v / total for c, v in weights.items()}


def percentages(weights: dict[str, float], decimals: int = 1) -> dict[str, float]:
    """Weights (any scale) as percentages rounded to `decimals` that add up to exactly 100
    (largest remainder), so a table of them and its "100 %" total agree. Empty or all-zero
    weights give zeros."""
    total = sum(max(v, 0.0) for v in weights.values())
    if total <= 0:
        return {c: 0.0 for c in weights}
    unit = 10**decimals
    exact = {c: max(v, 0.0) * 100 * unit / total for c, v in weights.items()}
    floors = {c: int(x) for c, x in exact.items()}
    left = 100 * unit - sum(floors.values())
    for c in sorted(exact, key=lambda c: floors[c] - exact[c])[:left]:
        floors[c] += 1
    return {c: floors[c] / unit for c in weights}
