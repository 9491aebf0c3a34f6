"""Scenario inference: which of DOMAIN.md's four scenarios the constraints describe, and why.

Every threshold lives in THRESHOLDS, and every rule says in words what it saw. A selection can
match several scenarios (a coding agent with 128K contexts is C and B): the mix gives the
primary scenario a share of PRIMARY_SHARE and splits the rest equally among the others, and the
default weights blend the presets by that mix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

THRESHOLDS: dict[str, float] = {
    # B, long documents: the article's "64K-128K+" documents; 32K is where one request's cache
    # starts to dominate a typical pool.
    "long_max_input_tokens": 32_768,
    "long_p95_input_tokens": 16_384,
    # C, multi-turn: a session with at least two turns on average.
    "multi_turn_min_turns": 2,
    # D, offline batch: no interactive latency budget (TTFT p95 of a minute or more, or none).
    "batch_min_ttft_p95_ms": 60_000,
    # A, high concurrency short text.
    "high_concurrency": 32,
    "short_avg_input_tokens": 4_096,
}

SCENARIO_NAMES = {
    "A": "High-concurrency short text",
    "B": "Long documents",
    "C": "Multi-turn and agents",
    "D": "Offline batch",
}

# Precedence when several apply: the scenario whose failure mode is hardest to retrofit first.
PRECEDENCE = ("C", "B", "D", "A")
PRIMARY_SHARE = 0.6


@dataclass(frozen=True)
class ScenarioInference:
    scenario: str
    reasons: list[str]
    mix: dict[str, float]

    def as_tuple(self) -> tuple[str, list[str], dict[str, float]]:
        return self.scenario, self.reasons, self.mix


def _fmt_tokens(value: float) -> str:
    return f"{value / 1024:g}K" if value >= 1024 and value % 1024 == 0 else f"{value:,.0f}"


def infer_scenario(constraints: Mapping[str, Any]) -> tuple[str, list[str], dict[str, float]]:
    """(scenario, reasons, mix) from a constraints mapping (field names of the one-pager)."""
    t = THRESHOLDS
    get = constraints.get
    matched: dict[str, list[str]] = {}

    max_input = get("max_input_tokens") or 0
    p95_input = get("p95_input_tokens") or 0
    if max_input >= t["long_max_input_tokens"]:
        matched.setdefault("B", []).append(
            f"max input {_fmt_tokens(max_input)} tokens >= {_fmt_tokens(t['long_max_input_tokens'])} -> long documents"
        )
    elif p95_input >= t["long_p95_input_tokens"]:
        matched.setdefault("B", []).append(
            f"p95 input {_fmt_tokens(p95_input)} tokens >= {_fmt_tokens(t['long_p95_input_tokens'])} -> long documents"
        )

    turns = get("average_turns") or 0
    if get("multi_turn") and turns >= t["multi_turn_min_turns"]:
        matched.setdefault("C", []).append(
            f"multi-turn with {turns:g} turns on average -> cache must persist across turns"
        )
    elif get("multi_turn"):
        matched.setdefault("C", []).append("multi-turn sessions -> cache must persist across turns")
    if get("never_swap_sessions"):
        matched.setdefault("C", []).append(
            f"{get('never_swap_sessions')} sessions must never be swapped out -> persistence policy matters"
        )

    ttft_budget = get("ttft_p95_ms")
    e2e_budget = get("e2e_p95_ms")
    interactive = (ttft_budget is not None and ttft_budget < t["batch_min_ttft_p95_ms"]) or (
        e2e_budget is not None and e2e_budget < t["batch_min_ttft_p95_ms"]
    )
    if not interactive and not get("multi_turn"):
        if ttft_budget is None and e2e_budget is None:
            reason = "no latency budget -> offline batch: throughput and unit cost first"
        else:
            reason = (f"TTFT p95 budget {ttft_budget or e2e_budget:,.0f} ms >= "
                      f"{t['batch_min_ttft_p95_ms']:,.0f} ms -> offline batch: throughput and unit cost first")
        matched.setdefault("D", []).append(reason)

    concurrency = get("peak_concurrency") or 0
    avg_input = get("avg_input_tokens") or 0
    if concurrency >= t["high_concurrency"] and avg_input <= t["short_avg_input_tokens"] and "D" not in matched:
        matched.setdefault("A", []).append(
            f"peak concurrency {concurrency:,} >= {t['high_concurrency']:,.0f} with average input "
            f"{_fmt_tokens(avg_input)} <= {_fmt_tokens(t['short_avg_input_tokens'])} tokens -> high-concurrency short text"
        )

    if not matched:
        matched["A"] = ["no long context, multi-turn or batch signal -> interactive short text (default)"]

    primary = next(s for s in PRECEDENCE if s in matched)
    others = [s for s in PRECEDENCE if s in matched and s != primary]
    if others:
        share = (1 - PRIMARY_SHARE) / len(others)
        mix = {primary: PRIMARY_SHARE, **{s: share for s in others}}
    else:
        mix = {primary: 1.0}
    reasons = list(matched[primary])
    for other in others:
        reasons += [f"also {other} ({SCENARIO_NAMES[other]}): {r}" for r in matched[other]]
    return primary, reasons, mix
