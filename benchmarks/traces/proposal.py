"""The constraints one-pager a trace proposes: the traffic fields, each with what it was taken from.

Field names are the one-pager's (`selection.models.Constraints`). A trace speaks only to the
traffic: hardware, model, latency budget and team stay as the architect typed them. Fields the
trace has no data for are left out (a trace without session ids says nothing about multi-turn,
one without tenants nothing about tenants), so accepting a proposal never blanks what it cannot
see. Each field carries its basis as a message: a template (also the gettext msgid) and its
parameters, translated where it is shown.

The rules, in one table (`RULES`' docstrings below say the same in words):
- concurrency: the peak and the time-weighted p95 of the concurrency replayed from the trace
- request rate: requests / span of the trace (mean)
- lengths: mean (rounded), p95 and max of input and output tokens (exact)
- multi-turn: on when at least MULTI_TURN_SHARE of the requests are turns of multi-turn sessions;
  then turns per session (mean over sessions), idle time between turns (mean), peak concurrent
  sessions; off: the multi-turn fields are cleared so the one-pager stays consistent
- prefix sharing: the share of input tokens repeating a prefix already sent
- tenants: the number of distinct tenants
"""

from __future__ import annotations

import math
from typing import Any

MULTI_TURN_SHARE = 0.10


def _(text: str) -> str:  # named `_` so `makemessages` collects the templates; translated where shown
    return text


def _basis(message: str, **params: Any) -> dict[str, Any]:
    return {"message": message, "params": params}


def _round(value: float | None, digits: int = 0) -> float | int | None:
    if value is None or not math.isfinite(value):
        return None
    return int(round(value)) if digits == 0 else round(float(value), digits)


def propose_constraints(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """[{field, value, basis: {message, params}}] in the one-pager's order, from `trace_statistics`."""
    proposed: list[dict[str, Any]] = []

    def add(field: str, value: Any, basis: dict[str, Any]) -> None:
        proposed.append({"field": field, "value": value, "basis": basis})

    concurrency = stats["concurrency"]
    model = concurrency["service_model"]
    if concurrency["basis"] == "observed e2e_ms":
        how = _basis(_("replayed from the arrival times and the observed end-to-end latencies"))
    else:
        how = _basis(
            _(
                "replayed from the arrival times; requests without an observed latency held for TTFT "
                "%(ttft)s ms + %(tpot)s ms per output token"
            ),
            ttft=f"{model['ttft_ms']:g}",
            tpot=f"{model['tpot_ms']:g}",
        )
    if stats["rows"] - stats["failed"] > 0:
        add("peak_concurrency", max(int(concurrency["peak"]), 1), how)
        if concurrency["p95"] is not None:
            add("p95_concurrency", int(concurrency["p95"]), how)
    rate = stats["rate"]["mean_rps"]
    if rate is not None:
        add(
            "request_rate",
            round(rate, 3),
            _basis(
                _("%(rows)s requests over %(span)s s (p95 %(p95)s, peak %(peak)s req/s)"),
                rows=stats["rows"],
                span=f"{stats['span_s']:.0f}",
                p95=f"{stats['rate']['p95_rps']:g}",
                peak=stats["rate"]["peak_rps"],
            ),
        )
    for kind in ("input", "output"):
        summary = stats[f"{kind}_tokens"]
        if not summary["count"]:
            continue
        basis = _basis(_("exact over %(count)s requests"), count=summary["count"])
        add(f"avg_{kind}_tokens", max(_round(summary["mean"]), 1), basis)
        add(f"p95_{kind}_tokens", int(summary["p95"]), basis)
        add(f"max_{kind}_tokens", max(int(summary["max"]), 1), basis)
    sessions = stats["sessions"]
    if sessions["present"]:
        total = sum(stats["groups"].values())
        share = stats["groups"]["multi_turn"] / total if total else 0.0
        multi = share >= MULTI_TURN_SHARE
        add(
            "multi_turn",
            multi,
            _basis(
                _("%(share)s of the requests are turns of multi-turn sessions (threshold %(threshold)s)"),
                share=f"{share:.0%}",
                threshold=f"{MULTI_TURN_SHARE:.0%}",
            ),
        )
        if multi:
            turns = sessions["turns"]
            add(
                "average_turns",
                _round(turns["mean"], 2),
                _basis(
                    _("mean over %(count)s sessions (p95 %(p95)s, max %(max)s turns)"),
                    count=turns["count"],
                    p95=turns["p95"],
                    max=turns["max"],
                ),
            )
            idle = sessions["idle_s"]
            if idle["count"]:
                add(
                    "idle_seconds_between_turns",
                    _round(idle["mean"], 1),
                    _basis(
                        _("mean gap between an answer and the next turn over %(count)s gaps (p95 %(p95)s s)"),
                        count=idle["count"],
                        p95=f"{idle['p95']:.1f}",
                    ),
                )
            if sessions["concurrent_peak"] is not None:
                add(
                    "concurrent_sessions",
                    sessions["concurrent_peak"],
                    _basis(_("peak of sessions open between their first turn and their last answer")),
                )
        else:
            cleared = _basis(_("the trace has no multi-turn traffic to speak of"))
            for field in ("average_turns", "idle_seconds_between_turns", "concurrent_sessions", "never_swap_sessions"):
                add(field, None, cleared)
    prefix = stats["prefix"]
    if prefix["sharing_ratio"] is not None:
        add(
            "prefix_sharing_ratio",
            round(prefix["sharing_ratio"], 4),
            _basis(
                _("%(shared)s of %(total)s input tokens repeat a prefix already sent (%(bases)s)"),
                shared=prefix["shared_tokens"],
                total=prefix["input_tokens"],
                bases=", ".join(prefix["bases"]),
            ),
        )
    tenants = stats["tenants"]
    if tenants["requests_with_tenant"]:
        add(
            "tenants",
            tenants["count"],
            _basis(
                _("distinct tenants in %(rows)s requests that name one"),
                rows=tenants["requests_with_tenant"],
            ),
        )
    return proposed


def proposal_values(proposal: list[dict[str, Any]]) -> dict[str, Any]:
    """field -> value, what accepting the proposal writes into the one-pager."""
    return {item["field"]: item["value"] for item in proposal}
