"""Scenario inference: which of the four scenarios (docs/domain.md) the constraints describe, and why.

Every threshold lives in THRESHOLDS, and every rule says in words what it saw (a
`messages.Message`, translated where it is shown). A selection can
match several scenarios (a coding agent with 128K contexts is C and B): the mix gives the
primary scenario a share of PRIMARY_SHARE and splits the rest equally among the others, and the
default weights blend the presets by that mix.
"""

from __future__ import annotations

from typing import Any, Mapping

from selection.domain.messages import Message
from selection.domain.messages import marked as _

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
    # Short traffic at low concurrency: the KV cache in flight (peak concurrency x average input +
    # output) stays a small share of any GPU's pool (an 8B model on one 80 GB GPU holds about 450K
    # tokens), so KV-cache management is not what decides the engine (docs/domain.md: match the
    # technique to the goal; KV management answers long-context and concurrency pressure).
    "small_kv_in_flight_tokens": 65_536,
}

SCENARIO_NAMES = {
    "A": _("High-concurrency short text"),
    "B": _("Long documents"),
    "C": _("Multi-turn and agents"),
    "D": _("Offline batch"),
}

# Precedence when several apply: the scenario whose failure mode is hardest to retrofit first.
PRECEDENCE = ("C", "B", "D", "A")
PRIMARY_SHARE = 0.6


def _fmt_tokens(value: float) -> str:
    return f"{value / 1024:g}K" if value >= 1024 and value % 1024 == 0 else f"{value:,.0f}"


KV_NOT_DECISIVE = _(
    "peak concurrency %(concurrency)s < %(threshold)s with requests of %(tokens)s tokens on average: at most "
    "%(in_flight)s tokens of KV cache in flight, a small share of a GPU's KV pool -> KV-cache management is not "
    "decisive for this traffic; choose on latency, operations and cost (KV-cache management answers long-context "
    "and concurrency pressure; latency pressure is met by batching and decoding, cost by quantisation and resource "
    "pools)"
)


def kv_not_decisive(constraints: Mapping[str, Any]) -> Message | None:
    """The reason KV-cache management is not decisive, for short traffic at low concurrency whose KV in
    flight stays small (THRESHOLDS); None when the constraints do not say so (a missing figure says nothing)."""
    t = THRESHOLDS
    concurrency, avg_input = constraints.get("peak_concurrency"), constraints.get("avg_input_tokens")
    if not concurrency or not avg_input:
        return None
    per_request = avg_input + (constraints.get("avg_output_tokens") or 0)
    in_flight = concurrency * per_request
    if (
        concurrency >= t["high_concurrency"]
        or avg_input > t["short_avg_input_tokens"]
        or in_flight > t["small_kv_in_flight_tokens"]
    ):
        return None
    return Message(
        KV_NOT_DECISIVE,
        {
            "concurrency": f"{concurrency:,}",
            "threshold": f"{t['high_concurrency']:,.0f}",
            "tokens": f"{per_request:,.0f}",
            "in_flight": f"{in_flight:,.0f}",
        },
    )


def infer_scenario(constraints: Mapping[str, Any]) -> tuple[str, list[Message], dict[str, float]]:
    """(scenario, reasons, mix) from a constraints mapping (field names of the one-pager); each
    reason is a `Message` (``str()`` gives the English sentence)."""
    t = THRESHOLDS
    get = constraints.get
    matched: dict[str, list[Message]] = {}

    max_input = get("max_input_tokens") or 0
    p95_input = get("p95_input_tokens") or 0
    if max_input >= t["long_max_input_tokens"]:
        matched.setdefault("B", []).append(
            Message(
                _("max input %(value)s tokens >= %(threshold)s -> long documents"),
                {"value": _fmt_tokens(max_input), "threshold": _fmt_tokens(t["long_max_input_tokens"])},
            )
        )
    elif p95_input >= t["long_p95_input_tokens"]:
        matched.setdefault("B", []).append(
            Message(
                _("p95 input %(value)s tokens >= %(threshold)s -> long documents"),
                {"value": _fmt_tokens(p95_input), "threshold": _fmt_tokens(t["long_p95_input_tokens"])},
            )
        )

    turns = get("average_turns") or 0
    if get("multi_turn") and turns >= t["multi_turn_min_turns"]:
        matched.setdefault("C", []).append(
            Message(
                _("multi-turn with %(turns)s turns on average -> cache must persist across turns"),
                {"turns": f"{turns:g}"},
            )
        )
    elif get("multi_turn"):
        matched.setdefault("C", []).append(Message(_("multi-turn sessions -> cache must persist across turns")))
    if get("never_swap_sessions"):
        matched.setdefault("C", []).append(
            Message(
                _("%(sessions)s sessions must never be swapped out -> persistence policy matters"),
                {"sessions": str(get("never_swap_sessions"))},
            )
        )

    ttft_budget = get("ttft_p95_ms")
    e2e_budget = get("e2e_p95_ms")
    interactive = (ttft_budget is not None and ttft_budget < t["batch_min_ttft_p95_ms"]) or (
        e2e_budget is not None and e2e_budget < t["batch_min_ttft_p95_ms"]
    )
    if not interactive and not get("multi_turn"):
        if ttft_budget is None and e2e_budget is None:
            reason = Message(_("no latency budget -> offline batch: throughput and unit cost first"))
        else:
            reason = Message(
                _("TTFT p95 budget %(budget)s ms >= %(threshold)s ms -> offline batch: throughput and unit cost first"),
                {"budget": f"{ttft_budget or e2e_budget:,.0f}", "threshold": f"{t['batch_min_ttft_p95_ms']:,.0f}"},
            )
        matched.setdefault("D", []).append(reason)

    concurrency = get("peak_concurrency") or 0
    avg_input = get("avg_input_tokens") or 0
    if concurrency >= t["high_concurrency"] and avg_input <= t["short_avg_input_tokens"] and "D" not in matched:
        matched.setdefault("A", []).append(
            Message(
                _(
                    "peak concurrency %(concurrency)s >= %(threshold)s with average input %(average)s <= %(short)s "
                    "tokens -> high-concurrency short text"
                ),
                {
                    "concurrency": f"{concurrency:,}",
                    "threshold": f"{t['high_concurrency']:,.0f}",
                    "average": _fmt_tokens(avg_input),
                    "short": _fmt_tokens(t["short_avg_input_tokens"]),
                },
            )
        )

    if not matched:
        matched["A"] = [Message(_("no long context, multi-turn or batch signal -> interactive short text (default)"))]
        small = kv_not_decisive(constraints)
        if small is not None:
            matched["A"].append(small)

    primary = next(s for s in PRECEDENCE if s in matched)
    others = [s for s in PRECEDENCE if s in matched and s != primary]
    if others:
        share = (1 - PRIMARY_SHARE) / len(others)
        mix = {primary: PRIMARY_SHARE, **{s: share for s in others}}
    else:
        mix = {primary: 1.0}
    reasons = list(matched[primary])
    for other in others:
        reasons += [
            Message(
                _("also %(scenario)s (%(name)s): %(reason)s"),
                {"scenario": other, "name": Message(SCENARIO_NAMES[other]), "reason": r},
            )
            for r in matched[other]
        ]
    return primary, reasons, mix
