"""What a procurement reader needs on the record's first page, and what keeps it from procurement.

Rules (the issue's "one page first"):

* Fit per constraint: each business constraint is compared with the chosen candidate's measured
  figure and the run that measured it. One rule for every outcome a reader sees (page 1, the
  comparison's headline, the record, the API): a figure outside its limit is ``fail``, and so is a
  figure beside a verdict of its run on the same behaviour that failed (the behaviour was measured
  and missed); ``not_validated`` only when nothing measured it or a verdict of its run on that
  behaviour did not settle (inconclusive, insufficient data, not exercised); ``pass`` only when the
  figure is within its limit and every such verdict passed. A compound constraint (concurrency
  *within the latency budget*, throughput *within the budget*) passes only when each of its parts
  does: its status is the worst of its own and its parts' (`FitRule.parts`). A figure from the
  simulator keeps its SIMULATED provenance. The table of constraints and the metric each one reads is
  `FIT_RULES`; `shortfalls` says by how much each failed constraint is missed (the headline names
  every one).
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

from selection.domain.messages import NAME_SEPARATOR, Message
from selection.domain.messages import marked as _

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
    the verdicts of the metric's run that judge the same behaviour (a figure beside a verdict that did
    not settle is not validated, beside one that failed it fails: the record never says "pass" next to
    an inconclusive or failed test), and the other rules that are parts of its claim ("within the
    latency budget": the TTFT and TPOT rows)."""

    key: str
    metric: str
    comparison: str
    unit: str
    verdicts: tuple[str, ...] = ()
    parts: tuple[str, ...] = ()


# The one place that says which measured metric (and verdict) shows which constraint is met.
FIT_RULES = (
    FitRule("ttft", "ttft_p95_ms", AT_MOST, "ms", ("ttft_p95_within_budget",)),
    FitRule("tpot", "tpot_p95_ms", AT_MOST, "ms", ("tpot_p95_within_budget",)),
    FitRule(
        "concurrency",
        "sustainable_concurrency_per_gpu",
        AT_LEAST,
        "requests/GPU",
        ("concurrency_held", "sustainable_load_meets_target"),
        ("ttft", "tpot"),
    ),
    FitRule("context", "max_context_rung_reached", AT_LEAST, "tokens", ("largest_rung_succeeds",)),
    FitRule("throughput", "output_tokens_per_s_per_gpu", AT_LEAST, "tokens/s/GPU", ("zero_errors",), ("ttft", "tpot")),
    FitRule("memory_headroom", "kv_headroom_at_target", AT_LEAST, "share", ("kv_peak_below_ceiling",)),
)
# The rollout rule: plan with 20-30 % KV headroom. The record requires the low end, and every place
# that states headroom reads it from here: page 1's fit, the rollout section's plan, the alert rules'
# KV and offload-tier warnings, the capacity chart's line.
KV_HEADROOM_PERCENT = 20.0
MIN_KV_HEADROOM = KV_HEADROOM_PERCENT / 100
# the order a reader meets the rows in (page 1, the API): the claim first, then its parts
FIT_ORDER = ("concurrency", "ttft", "tpot", "context", "throughput", "memory_headroom")


# Each row as a reader names it (page 1, the API, the headline), marked here, translated where shown.
FIT_NAMES = {
    "concurrency": _("Concurrency within the latency budget (per GPU)"),
    "ttft": _("TTFT p95"),
    "tpot": _("TPOT p95"),
    "context": _("Longest input served"),
    "throughput": _("Output throughput within the budget (per GPU)"),
    "memory_headroom": _("KV-cache headroom at the target load"),
    "gpu_budget": _("GPUs per replica within the GPU budget"),
    "team": _("Operations team"),
}
# How the headline says a constraint is missed by a figure outside its limit ("misses the TTFT budget 34x").
MISSES = {
    "ttft": _("misses the TTFT p95 budget %(factor)s× at the planned load (%(observed)s ms against %(required)s ms)"),
    "tpot": _("misses the TPOT p95 budget %(factor)s× at the planned load (%(observed)s ms against %(required)s ms)"),
    "concurrency": _(
        "holds %(observed)s requests per GPU within the latency budget, %(factor)s× short of the %(required)s needed"
    ),
    "context": _("served inputs up to %(observed)s tokens, %(factor)s× short of the %(required)s needed"),
    "throughput": _(
        "delivers %(observed)s output tokens/s per GPU within the budget, %(factor)s× short of the %(required)s needed"
    ),
    "memory_headroom": _("leaves %(observed)s KV-cache headroom at the target load, below the %(required)s rule"),
    "gpu_budget": _("needs %(observed)s GPUs per replica, over the budget of %(required)s"),
}
MISSES_BY_PART = _("fails “%(constraint)s” because %(parts)s fails")
MISSES_BY_VERDICT = _("fails “%(constraint)s”: a verdict of run %(runs)s on it failed")


def figure_text(value: float, unit: str) -> str:
    """A fit figure as the headline and the API write it: a share in percent, else grouped digits."""
    if unit == "share":
        return f"{value:.0%}"
    return f"{value:,.0f}" if value >= 100 or value == int(value) else f"{value:,.2f}"


def _factor(factor: float) -> str:
    return f"{factor:,.0f}" if factor >= 10 else f"{factor:.1f}"


def shortfall_messages(rows: list[Mapping[str, Any]]) -> list[Message]:
    """What each failed row of a candidate's fit misses, as the headline names it."""
    messages = []
    for row in shortfalls(list(rows)):
        key = row["key"]
        if row["factor"] is not None and key in MISSES:
            messages.append(
                Message(
                    MISSES[key],
                    {
                        "factor": _factor(row["factor"]),
                        "observed": figure_text(row["observed"], row["unit"]),
                        "required": figure_text(row["required"], row["unit"]),
                    },
                )
            )
        elif row.get("parts"):
            messages.append(
                Message(
                    MISSES_BY_PART,
                    {
                        "constraint": Message(FIT_NAMES[key]),
                        "parts": NAME_SEPARATOR.join(Message(FIT_NAMES[part]) for part, _status in row["parts"]),
                    },
                )
            )
        else:
            failed = [v for v in row.get("unsettled") or [] if v[2] == FAIL]
            messages.append(
                Message(
                    MISSES_BY_VERDICT,
                    {
                        "constraint": Message(FIT_NAMES.get(key, key)),
                        "runs": ", ".join(dict.fromkeys(f"run-{v[0]}" for v in failed)),
                    },
                )
            )
    return messages


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
            # a verdict the engine's documented cache model rules out judges nothing here (benchmarks.verdicts)
            if name.partition("[")[0] in rule.verdicts and status != NOT_APPLICABLE:
                found.append([run, name, status])
    return found


def _worst(statuses: list[str]) -> str:
    """FAIL over NOT_VALIDATED over PASS: a claim is as strong as its weakest part."""
    return FAIL if FAIL in statuses else NOT_VALIDATED if NOT_VALIDATED in statuses else PASS


def _within(observed: float, need: float, comparison: str) -> bool:
    return observed <= need if comparison == AT_MOST else observed >= need


def constraint_fit(
    constraints: Mapping[str, Any],
    metrics: Mapping[str, Mapping[str, Any]],
    run_verdicts: Mapping[str, Mapping[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """Each constraint the sheet states: required, observed (the chosen candidate's metric), status, runs.

    ``metrics`` maps a scoring metric name to ``{value, run_ids, evidence}`` (the score's inputs);
    ``run_verdicts`` maps a run id to its verdicts' statuses by name. The status follows the module's
    rule: outside the limit, or beside a failed verdict of its run on the same behaviour, it fails;
    without a figure, or beside a verdict that did not settle, it is not validated (`unsettled` names
    the verdicts that did not pass); a compound row is the worst of itself and its `parts` (the parts
    that did not pass are named in `parts`).
    """
    required = needs(constraints)
    own: dict[str, dict[str, Any]] = {}
    for rule in FIT_RULES:
        need = required[rule.key]
        if need is None:
            continue
        metric = metrics.get(rule.metric) or {}
        value = metric.get("value")
        observed = None if value is None or isinstance(value, bool) else float(value)
        runs = [str(r) for r in metric.get("run_ids") or []] if observed is not None else []
        unsettled = [v for v in observing_verdicts(rule, runs, run_verdicts or {}) if v[2] != PASS]
        if observed is None:
            status = NOT_VALIDATED
        elif not _within(observed, need, rule.comparison) or any(v[2] == FAIL for v in unsettled):
            status = FAIL
        else:
            status = NOT_VALIDATED if unsettled else PASS
        own[rule.key] = {
            "key": rule.key,
            "metric": rule.metric,
            "comparison": rule.comparison,
            "unit": rule.unit,
            "required": float(need),
            "observed": observed,
            "status": status,
            "own_status": status,
            "within_limit": observed is not None and _within(observed, need, rule.comparison),
            "runs": runs,
            "unsettled": unsettled,
            "parts": [],
            "simulated": observed is not None and metric.get("evidence") == "SIMULATED",
        }
    rules = {rule.key: rule for rule in FIT_RULES}
    for key, row in own.items():
        parts = [[part, own[part]["own_status"]] for part in rules[key].parts if part in own]
        row["parts"] = [part for part in parts if part[1] != PASS]
        row["status"] = _worst([row["own_status"], *(status for _part, status in parts)])
    return [own[key] for key in FIT_ORDER if key in own]


def shortfalls(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The failed rows, each with how far its figure misses the limit (`factor`: observed / required for
    a maximum, required / observed for a minimum; None when the figure is within its limit and a part or
    a failed verdict failed the row). What the headline names: "misses the TTFT budget 34x"."""
    out = []
    for row in rows:
        if row.get("status") != FAIL:
            continue
        observed, required = row.get("observed"), row.get("required")
        factor = None
        if observed is not None and required and not row.get("within_limit", False):
            if row.get("comparison") == AT_MOST:
                factor = observed / required
            elif observed > 0:
                factor = required / observed
        out.append({**row, "factor": factor})
    return out


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
        "within_limit": candidate_gpus <= budget,
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
        # a compound claim fails without a figure of its own when a part of it failed (no concurrency held
        # within a latency budget the TTFT missed)
        if row.get("status") in (PASS, FAIL) and not row.get("observed") and not row.get("parts"):
            problems.append(f"summary.fit[{i}]: a {row.get('status')} needs the observed figure")
        if row.get("status") == PASS and row.get("unsettled"):
            problems.append(f"summary.fit[{i}]: a pass beside a verdict that did not pass")
        if row.get("status") == PASS and row.get("parts"):
            problems.append(f"summary.fit[{i}]: a compound claim passes only when each of its parts does")
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
        "fit_parts": any(row.get("parts") for row in summary.get("fit") or []),
        "unresolved": unresolved,
        "blockers": blockers(simulated=simulated, development_certificates=development, open_items=unresolved),
    }
