"""The constraints one-pager a trace proposes: the traffic fields, each with what it was taken from.

Field names are the one-pager's (`selection.models.Constraints`). A trace speaks only to the
traffic: hardware, model, latency budget and team stay as the architect typed them. Fields the
trace has no data for are left out (a trace without session ids says nothing about multi-turn,
one without tenants nothing about tenants), so accepting a proposal never blanks what it cannot
see. Each field carries its basis as a message: a template (also the gettext msgid) and its
parameters, translated where it is shown.

The rules, in one table (`RULES`' docstrings below say the same in words):
- concurrency: the peak and the time-weighted p95 of the concurrency replayed from the trace, each
  request held for its own latency when the trace recorded it (the figure at the latency budget
  given beside it), else for the latency budget (or kvselect's default): said which
- request rate: requests / span of the trace (mean), with the busiest minute and second and the
  share of empty seconds beside it
- prefix sharing: the share of input tokens repeating a prefix already sent, assuming an
  unbounded cache, with what each candidate's KV pool reuses (LRU over 512-token blocks) beside it
- lengths: mean (rounded), p95 and max of input and output tokens (exact)
- multi-turn: on when at least MULTI_TURN_SHARE of the requests are turns of multi-turn sessions;
  then turns per session (mean over sessions), idle time between turns (mean), peak concurrent
  sessions; off: the multi-turn fields are cleared so the one-pager stays consistent
- tenants: the number of distinct tenants
"""

from __future__ import annotations

import math
from typing import Any

from selection.domain.messages import marked as _

MULTI_TURN_SHARE = 0.10


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
    if stats["rows"] - stats["failed"] > 0:
        how = concurrency_basis(concurrency)
        add("peak_concurrency", max(int(concurrency["peak"]), 1), how)
        if concurrency["p95"] is not None:
            add("p95_concurrency", int(concurrency["p95"]), how)
    rate = stats["rate"]
    if rate["mean_rps"] is not None:
        add("request_rate", round(rate["mean_rps"], 3), rate_basis(stats))
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
        add("prefix_sharing_ratio", round(prefix["sharing_ratio"], 4), prefix_basis(prefix))
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


def concurrency_basis(concurrency: dict[str, Any]) -> dict[str, Any]:
    """How long each request was held in flight, and where that came from: the trace's own latencies
    (then what the latency budget would have given), or the budget (or the default) for all."""
    model = concurrency["service_model"]
    held = {"ttft": f"{model['ttft_ms']:g}", "tpot": f"{model['tpot_ms']:g}"}
    budget = model.get("source") == "latency budget"
    alternative = concurrency.get("at_service_model") or {}
    if concurrency["basis"] == "observed e2e_ms":
        if alternative.get("peak") is not None:
            return _basis(
                _(
                    "replayed from the arrival times, each request held for its own end-to-end latency in the trace "
                    "(held for TTFT %(ttft)s ms + %(tpot)s ms per output token instead: peak %(peak)s, p95 %(p95)s)"
                ),
                peak=alternative["peak"],
                p95=alternative["p95"],
                **held,
            )
        return _basis(_("replayed from the arrival times and the observed end-to-end latencies"))
    if concurrency["basis"] != "model":
        observed = concurrency.get("observed_e2e_rows", 0)
        if budget:
            message = _(
                "replayed from the arrival times: %(observed)s requests held for their own end-to-end latency in "
                "the trace, the others for the latency budget, TTFT %(ttft)s ms + %(tpot)s ms per output token"
            )
        else:
            message = _(
                "replayed from the arrival times: %(observed)s requests held for their own end-to-end latency in "
                "the trace, the others for kvselect's default TTFT %(ttft)s ms + %(tpot)s ms per output token "
                "(no latency budget set)"
            )
        return _basis(message, observed=observed, **held)
    if budget:
        return _basis(
            _(
                "assumed: the trace records no latency, so each request is held for the latency budget, TTFT "
                "%(ttft)s ms + %(tpot)s ms per output token; another budget gives another figure"
            ),
            **held,
        )
    return _basis(
        _(
            "assumed: the trace records no latency and no latency budget is set, so each request is held for "
            "kvselect's default TTFT %(ttft)s ms + %(tpot)s ms per output token"
        ),
        **held,
    )


def rate_basis(stats: dict[str, Any]) -> dict[str, Any]:
    """The mean rate with the bursts it hides: the busiest minute and second, and the empty seconds."""
    rate = stats["rate"]
    return _basis(
        _(
            "mean: %(rows)s requests over %(span)s s; busiest minute %(minute)s req/s, busiest second %(peak)s, "
            "p95 second %(p95)s; %(empty)s of the seconds without a request"
        ),
        rows=stats["rows"],
        span=f"{stats['span_s']:.0f}",
        minute=f"{rate['peak_minute_rps']:.3g}" if rate.get("peak_minute_rps") is not None else "—",
        peak=rate["peak_rps"],
        p95=f"{rate['p95_rps']:g}",
        empty=f"{rate['empty_seconds_share']:.0%}" if rate.get("empty_seconds_share") is not None else "—",
    )


def prefix_basis(prefix: dict[str, Any]) -> dict[str, Any]:
    """The unbounded figure, said to be one, with what each candidate's KV pool would reuse."""
    pools = prefix.get("pools") or {}
    common = {
        "shared": prefix["shared_tokens"],
        "total": prefix["input_tokens"],
        "bases": ", ".join(prefix["bases"]),
    }
    if not pools:
        return _basis(
            _(
                "%(shared)s of %(total)s input tokens repeat a prefix already sent (%(bases)s), assuming every "
                "prefix stays cached (an unbounded cache)"
            ),
            **common,
        )
    within = "; ".join(
        f"{name} ({pool['capacity_tokens']:,}): {pool['sharing_ratio']:.1%}"
        for name, pool in pools.items()
        if pool.get("sharing_ratio") is not None
    )
    return _basis(
        _(
            "%(shared)s of %(total)s input tokens repeat a prefix already sent (%(bases)s), assuming every prefix "
            "stays cached (an unbounded cache); within each candidate's KV pool (its size in tokens), LRU over "
            "512-token blocks: %(pools)s"
        ),
        pools=within,
        **common,
    )


def proposal_values(proposal: list[dict[str, Any]]) -> dict[str, Any]:
    """field -> value, what accepting the proposal writes into the one-pager."""
    return {item["field"]: item["value"] for item in proposal}
