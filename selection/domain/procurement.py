"""What a procurement reader needs on the record's first page, and what keeps it from procurement.

Rules (the issue's "one page first"):

* Fit per constraint: each business constraint is compared with the chosen candidate's measured
  figure and the run that measured it. ``pass`` and ``fail`` need an observed figure; without one
  the constraint is ``not_validated`` (never assumed to pass). A figure from the simulator keeps its
  SIMULATED provenance. The table of constraints and the metric each one reads is `FIT_RULES`.
* Budget: a monthly budget and its currency (ISO 4217, three capital letters) are stated together
  or not at all. The cost per million output tokens comes from the scores' ``cost_per_mtok``
  metric (GPU price over goodput within the latency budget); without it the cost is missing,
  never estimated.
* Tests: the chosen engine's tests that failed, were inconclusive or never ran are listed by name.
* Open items: every readiness or security item an owner marked ``not_ready`` becomes an open item
  of the record. A record is ready for procurement only when every open item is resolved or
  waived with a reason, its evidence is measured and no owner signed with a development
  certificate (`blockers`).

Pure: plain data in and out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

PASS, FAIL, NOT_VALIDATED = "pass", "fail", "not_validated"
NOT_APPLICABLE = "not_applicable"  # benchmarks.verdicts.NOT_APPLICABLE: a test the engine's cache model rules out
AT_MOST, AT_LEAST = "at_most", "at_least"
OPEN, RESOLVED, WAIVED = "open", "resolved", "waived"
ITEM_STATUSES = (OPEN, RESOLVED, WAIVED)
CHECK_SECTIONS = ("readiness", "security")
MAX_REASON_CHARS = 2000
CURRENCY = re.compile(r"^[A-Z]{3}$")
BUDGET_RANGE = (1.0, 1e12)  # a monthly budget, in its currency


@dataclass(frozen=True)
class FitRule:
    """One constraint: the constraint field(s) giving the need, the metric observing it, the direction,
    and the verdicts of the metric's run that judge the same behaviour (a figure beside a verdict that
    did not pass is not validated: the record never says "pass" next to an inconclusive test)."""

    key: str
    metric: str
    comparison: str
    unit: str
    verdicts: tuple[str, ...] = ()


# The one place that says which measured metric (and verdict) shows which constraint is met.
FIT_RULES = (
    FitRule(
        "concurrency",
        "sustainable_concurrency_per_gpu",
        AT_LEAST,
        "requests/GPU",
        ("concurrency_held", "sustainable_load_meets_target"),
    ),
    FitRule("ttft", "ttft_p95_ms", AT_MOST, "ms", ("ttft_p95_within_budget",)),
    FitRule("tpot", "tpot_p95_ms", AT_MOST, "ms", ("tpot_p95_within_budget",)),
    FitRule("context", "max_context_rung_reached", AT_LEAST, "tokens", ("largest_rung_succeeds",)),
    FitRule("throughput", "output_tokens_per_s_per_gpu", AT_LEAST, "tokens/s/GPU", ("zero_errors",)),
    FitRule("memory_headroom", "kv_headroom_at_target", AT_LEAST, "share", ("kv_peak_below_ceiling",)),
)
# The rollout rule: plan with 20-30 % KV headroom. The record requires the low end, and every place
# that states headroom reads it from here: page 1's fit, the rollout section's plan, the alert rules'
# KV and offload-tier warnings, the capacity chart's line.
KV_HEADROOM_PERCENT = 20.0
MIN_KV_HEADROOM = KV_HEADROOM_PERCENT / 100


def needs(constraints: Mapping[str, Any]) -> dict[str, float | None]:
    """What each rule requires, from the constraints sheet (None: the sheet states no such need)."""
    gpus = constraints.get("gpu_count_budget") or None
    peak = constraints.get("peak_concurrency")
    throughput = constraints.get("throughput_target_tokens_s")
    return {
        "concurrency": peak / gpus if peak and gpus else None,
        "ttft": constraints.get("ttft_p95_ms") or None,
        "tpot": constraints.get("tpot_p95_ms") or None,
        "context": constraints.get("max_input_tokens") or None,
        "throughput": throughput / gpus if throughput and gpus else None,
        "memory_headroom": MIN_KV_HEADROOM,
    }


def observing_verdicts(
    rule: FitRule, run_ids: list[str], run_verdicts: Mapping[str, Mapping[str, str]]
) -> list[list[str]]:
    """[run, verdict, status] of each verdict of the metric's runs that judges the rule's behaviour
    (every load point's: `ttft_p95_within_budget[resume]` counts as `ttft_p95_within_budget`). An
    upload whose tool wrote no such verdict has none: its figure alone speaks."""
    found = []
    for run in run_ids:
        for name, status in (run_verdicts.get(run) or {}).items():
            if name.partition("[")[0] in rule.verdicts:
                found.append([run, name, status])
    return found


def constraint_fit(
    constraints: Mapping[str, Any],
    metrics: Mapping[str, Mapping[str, Any]],
    run_verdicts: Mapping[str, Mapping[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """Each constraint the sheet states: required, observed (the chosen candidate's metric), status, runs.

    ``metrics`` maps a scoring metric name to ``{value, run_ids, evidence}`` (the score's inputs);
    ``run_verdicts`` maps a run id to its verdicts' statuses by name. A figure meeting the need is a
    pass only when every observing verdict of its run passed; otherwise the row is not validated and
    names the verdicts that did not pass (`unsettled`).
    """
    required = needs(constraints)
    rows = []
    for rule in FIT_RULES:
        need = required[rule.key]
        if need is None:
            continue
        metric = metrics.get(rule.metric) or {}
        value = metric.get("value")
        observed = None if value is None or isinstance(value, bool) else float(value)
        runs = [str(r) for r in metric.get("run_ids") or []] if observed is not None else []
        unsettled = [v for v in observing_verdicts(rule, runs, run_verdicts or {}) if v[2] != PASS]
        if observed is None or unsettled:
            status = NOT_VALIDATED
        elif rule.comparison == AT_MOST:
            status = PASS if observed <= need else FAIL
        else:
            status = PASS if observed >= need else FAIL
        rows.append(
            {
                "key": rule.key,
                "metric": rule.metric,
                "comparison": rule.comparison,
                "unit": rule.unit,
                "required": float(need),
                "observed": observed,
                "status": status,
                "runs": runs,
                "unsettled": unsettled,
                "simulated": observed is not None and metric.get("evidence") == "SIMULATED",
            }
        )
    return rows


def gpu_fit(constraints: Mapping[str, Any], candidate_gpus: int) -> dict[str, Any] | None:
    """The candidate's GPUs against the GPU budget: a configuration fact, checked as stated."""
    budget = constraints.get("gpu_count_budget")
    if not budget:
        return None
    return {
        "key": "gpu_budget",
        "comparison": AT_MOST,
        "unit": "GPUs",
        "required": float(budget),
        "observed": float(candidate_gpus),
        "status": PASS if candidate_gpus <= budget else FAIL,
        "runs": [],
        "simulated": False,
    }


def team_fit(team_size: Any, ops_complexity: str | None) -> dict[str, Any] | None:
    """The operations team against the engine's documented operating complexity: documentation, not
    an observation, so never more than not validated (the scores weigh it: ops_complexity_vs_team)."""
    if not team_size:
        return None
    return {
        "key": "team",
        "comparison": AT_LEAST,
        "unit": "people",
        "required": float(team_size),
        "observed": None,
        "documented": ops_complexity or "",
        "status": NOT_VALIDATED,
        "runs": [],
        "simulated": False,
    }


def cost_per_mtok(metrics: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The measured cost per million output tokens and the run behind it; None when not derivable."""
    metric = metrics.get("cost_per_mtok") or {}
    value = metric.get("value")
    if value is None or isinstance(value, bool):
        return None
    return {
        "value": float(value),
        "runs": [str(r) for r in metric.get("run_ids") or []],
        "simulated": metric.get("evidence") == "SIMULATED",
    }


BUDGET_NEEDS_AMOUNT, BUDGET_NOT_A_NUMBER, BUDGET_OUT_OF_RANGE, BAD_CURRENCY = (
    "needs_amount",
    "not_a_number",
    "out_of_range",
    "bad_currency",
)


def budget_problems(monthly_budget: Any, currency: str) -> dict[str, str]:
    """Field -> problem code for a monthly budget and its currency (both are stated, or neither)."""
    currency = (currency or "").strip()
    if monthly_budget in (None, ""):
        return {"monthly_budget": BUDGET_NEEDS_AMOUNT} if currency else {}
    try:
        amount = float(monthly_budget)
    except (TypeError, ValueError):
        return {"monthly_budget": BUDGET_NOT_A_NUMBER}
    problems = {}
    lo, hi = BUDGET_RANGE
    if not lo <= amount <= hi:  # also refuses NaN
        problems["monthly_budget"] = BUDGET_OUT_OF_RANGE
    if not CURRENCY.match(currency):
        problems["budget_currency"] = BAD_CURRENCY
    return problems


def test_gaps(test_ids: list[str], verdicts: Mapping[str, str]) -> list[dict[str, str]]:
    """The chosen candidate's tests that did not pass: failed, inconclusive (or insufficient data), not run.

    ``test_ids``: the suite's tests in the articles' order; ``verdicts``: test id -> pass|fail|... of
    the chosen candidate's latest run of that test (absent: never run)."""
    gaps = []
    for test in test_ids:
        verdict = verdicts.get(test)
        if verdict in (PASS, NOT_APPLICABLE):  # not applicable: the engine's documented design, not a risk
            continue
        gaps.append({"test": test, "outcome": verdict or "not_exercised"})
    return gaps


def open_items_from_checks(project_checks: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every readiness or security item an owner marked not ready, as an open item of the record.

    ``project_checks`` is the snapshot's section (`project_checks.record_section`); each item names
    the owner roles whose approval confirms it."""
    items = []
    for section in CHECK_SECTIONS:
        part = project_checks.get(section) or {}
        for entry in part.get("items") or []:
            if entry.get("status") != "not_ready":
                continue
            items.append(
                {
                    "key": f"{section}.{entry.get('item')}",
                    "section": section,
                    "item": str(entry.get("item")),
                    "note": str(entry.get("note") or ""),
                    "owner_roles": list(part.get("confirmed_by") or []),
                }
            )
    return items


def decision_problems(status: str, reason: str) -> dict[str, str]:
    """Field -> problem for closing an open item: resolved or waived, each with its reason."""
    problems = {}
    if status not in (RESOLVED, WAIVED):
        problems["status"] = f"must be {RESOLVED} or {WAIVED}"
    text = (reason or "").strip()
    if not text:
        problems["reason"] = (
            "say why it may be waived" if status == WAIVED else "say how it was resolved (the evidence)"
        )
    elif len(text) > MAX_REASON_CHARS:
        problems["reason"] = f"at most {MAX_REASON_CHARS} characters"
    return problems


def blockers(*, simulated: bool, development_certificates: bool, open_items: int) -> list[str]:
    """Why a record is not ready for procurement (empty: ready, as far as the record goes)."""
    reasons = []
    if simulated:
        reasons.append("simulated")
    if development_certificates:
        reasons.append("development_certificate")
    if open_items:
        reasons.append("open_items")
    return reasons


FIT_STATUSES = (PASS, FAIL, NOT_VALIDATED)


def checked_summary(
    summary: dict[str, Any], *, simulated: bool, owners: list[dict[str, Any]], problems: list[str]
) -> dict[str, Any]:
    """The record context's ``summary`` checked (wrong parts appended to ``problems``), with derived
    ``fit_unsettled`` (the fit rows' verdicts that did not pass, once each), ``unresolved`` (open items
    neither resolved nor waived) and ``blockers`` (`blockers`)."""
    for i, row in enumerate(summary.get("fit") or []):
        if row.get("status") not in FIT_STATUSES:
            problems.append(f"summary.fit[{i}].status: must be one of {', '.join(FIT_STATUSES)}")
        if row.get("status") in (PASS, FAIL) and not row.get("observed"):
            problems.append(f"summary.fit[{i}]: a {row.get('status')} needs the observed figure")
        if row.get("status") == PASS and row.get("unsettled"):
            problems.append(f"summary.fit[{i}]: a pass beside a verdict that did not pass")
    for i, item in enumerate(summary.get("open_items") or []):
        if item.get("status") not in ITEM_STATUSES:
            problems.append(f"summary.open_items[{i}].status: must be one of {', '.join(ITEM_STATUSES)}")
        elif item["status"] == WAIVED and not item.get("reason"):
            problems.append(f"summary.open_items[{i}]: a waived item needs its reason")
    unresolved = sum(1 for item in summary.get("open_items") or [] if item.get("status") == OPEN)
    development = any(o.get("development_certificate") for o in owners)
    # each verdict that leaves a figure not validated, once: one footnote under the fit table
    unsettled = list(dict.fromkeys(why for row in summary.get("fit") or [] for why in row.get("unsettled") or []))
    return {
        **summary,
        "fit_unsettled": unsettled,
        "unresolved": unresolved,
        "blockers": blockers(simulated=simulated, development_certificates=development, open_items=unresolved),
    }
