"""What an architect may type: the bounds of every number and the rules between them.

Input is refused when it is saved, in the form and the API alike, never later when a test runs.
The bounds are generous (a real deployment is far inside them) and only stop typing accidents and
absurd values (10^12 GPUs, a 30-year latency budget) before they reach the capacity model, the
validation plan or a signed record. Rules between fields:

* constraints: averages and p95s do not exceed their maximums (the p95 concurrency its peak);
  never-swapped sessions do not exceed the concurrent sessions (and need them); the TTFT budget
  fits in the end-to-end budget;
* candidates: tensor parallelism does not exceed the GPU count, the GPU count does not exceed the
  selection's GPU budget, the KV precision is one the engine offers and the constraints allow,
  labels are unique within a selection (see ``selection.candidates.services``);
* a decision record's review-by date lies after today and at most ``REVIEW_BY_MAX_YEARS`` ahead.

Pure Python: the Django shells turn a breach into a field error in the user's language.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

# field -> (lowest, highest), inclusive. The one table of bounds; units are in the field names.
CONSTRAINT_BOUNDS: dict[str, tuple[float, float]] = {
    "peak_concurrency": (1, 1_000_000),
    "p95_concurrency": (0, 1_000_000),
    "request_rate": (0, 1_000_000),  # req/s
    "tenants": (1, 10_000_000),
    "throughput_target_tokens_s": (0, 1_000_000_000),
    "avg_input_tokens": (1, 10_000_000),
    "p95_input_tokens": (1, 10_000_000),
    "max_input_tokens": (1, 10_000_000),
    "avg_output_tokens": (1, 1_000_000),
    "p95_output_tokens": (1, 1_000_000),
    "max_output_tokens": (1, 1_000_000),
    "prefix_sharing_ratio": (0, 1),  # share of input tokens
    "average_turns": (1, 10_000),
    "idle_seconds_between_turns": (0, 30 * 86_400),  # a month
    "concurrent_sessions": (1, 100_000_000),
    "never_swap_sessions": (0, 100_000_000),
    "swap_in_delay_budget_ms": (0, 3_600_000),  # an hour
    "ttft_p95_ms": (1, 3_600_000),  # an hour
    "tpot_p95_ms": (0.1, 600_000),
    "e2e_p95_ms": (1, 86_400_000),  # a day
    "gpu_memory_gib": (1, 4096),
    "gpu_count_budget": (1, 100_000),
    "cost_per_gpu_hour": (0, 100_000),
    "host_memory_cost_per_gib_month": (0, 100_000),
    "growth_factor": (1, 1000),  # x today's traffic
    "growth_horizon_months": (1, 120),
    "ops_team_size": (1, 100_000),
}
CANDIDATE_BOUNDS: dict[str, tuple[float, float]] = {
    "gpu_count": (1, 100_000),
    "tensor_parallel": (1, 1024),
}
REVIEW_BY_MAX_YEARS = 5

# Which field may not exceed which (the smaller one carries the error).
NOT_ABOVE = (
    ("avg_input_tokens", "max_input_tokens"),
    ("p95_input_tokens", "max_input_tokens"),
    ("avg_output_tokens", "max_output_tokens"),
    ("p95_output_tokens", "max_output_tokens"),
    ("p95_concurrency", "peak_concurrency"),
    ("never_swap_sessions", "concurrent_sessions"),
    ("ttft_p95_ms", "e2e_p95_ms"),
)

# Breach kinds the shells translate: (field, kind, values).
OUT_OF_RANGE, NOT_FINITE, ABOVE_FIELD, NEEDS_FIELD = "out_of_range", "not_finite", "above_field", "needs_field"


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def out_of_bounds(values: Mapping[str, Any], bounds: Mapping[str, tuple[float, float]]) -> list[tuple[str, str, dict]]:
    """(field, kind, values) for each number outside its bounds or not finite; missing values pass."""
    breaches = []
    for field, (low, high) in bounds.items():
        number = _number(values.get(field))
        if number is None:
            continue
        if not math.isfinite(number):
            breaches.append((field, NOT_FINITE, {}))
        elif not low <= number <= high:
            breaches.append((field, OUT_OF_RANGE, {"min": low, "max": high}))
    return breaches


def constraint_breaches(values: Mapping[str, Any]) -> list[tuple[str, str, dict]]:
    """Every bound and cross-field rule the constraints one-pager breaks (empty when it is sane)."""
    breaches = out_of_bounds(values, CONSTRAINT_BOUNDS)
    seen = {field for field, _kind, _values in breaches}
    for small, large in NOT_ABOVE:
        a, b = _number(values.get(small)), _number(values.get(large))
        if small in seen or large in seen or a is None:
            continue
        if b is None:
            if small == "never_swap_sessions" and a > 0:
                breaches.append((small, NEEDS_FIELD, {"other": large}))
                seen.add(small)
            continue
        if a > b:
            breaches.append((small, ABOVE_FIELD, {"other": large, "limit": b}))
            seen.add(small)
    return breaches


def plain_number(value: float, grouping: bool = True) -> str:
    """1000000.0 -> "1,000,000" (or "1000000"), 0.1 -> "0.1": a bound as people read it (no 1e+06)."""
    comma = "," if grouping else ""
    if float(value).is_integer():
        return f"{int(value):{comma}}"
    return f"{value:{comma}.6f}".rstrip("0").rstrip(".")


IN_PAST, TOO_FAR = "in_past", "too_far"


def latest_review_by(today):
    """The furthest review-by date allowed from `today` (29 February falls back to the 28th)."""
    try:
        return today.replace(year=today.year + REVIEW_BY_MAX_YEARS)
    except ValueError:
        return today.replace(year=today.year + REVIEW_BY_MAX_YEARS, day=28)


def review_by_breach(review_by, today) -> str | None:
    """IN_PAST when the date is today or earlier, TOO_FAR beyond `latest_review_by`, else None."""
    if review_by is None:
        return None
    if review_by <= today:
        return IN_PAST
    if review_by > latest_review_by(today):
        return TOO_FAR
    return None
