"""The record's one-page procurement summary (the snapshot's ``summary``; see `domain.procurement`).

Written when the snapshot is frozen, in the record's language: the fit of the chosen candidate
against each constraint with the figure and the run that shows it, the budget and the measured cost
per million output tokens, the licence (the engine catalog's, with its source, and the terms the
selection states), vendor and support, the delivery owner, the chosen candidate's tests that failed
or never ran, and the open items (each owner's "not ready"). Nothing here is estimated: a figure
that the evidence does not give is missing.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from benchmarks import presentation, suite
from benchmarks import verdicts as verdict_status
from benchmarks.models import BenchmarkRun
from selection.domain import catalog as catalog_domain
from selection.domain import procurement
from selection.i18n import clauses, labelled, message_text
from selection.models import Candidate, Score, Selection
from selection.scoring.economics import economics_headline

# marked in the domain, translated when the snapshot is written (in the record's language)
FIT_LABELS = procurement.FIT_NAMES
OPS_LEVELS = (gettext_noop("low"), gettext_noop("medium"), gettext_noop("high"))  # the catalog's ops_complexity
UNITS = {
    "requests/GPU": gettext_noop("requests/GPU"),
    "ms": "ms",
    "tokens": gettext_noop("tokens"),
    "tokens/s/GPU": gettext_noop("tokens/s per GPU"),
    "GPUs": gettext_noop("GPUs"),
}


def _figure(value: float, unit: str) -> str:
    if unit == "share":
        return f"{value:.0%}"
    text = f"{value:,.0f}" if value >= 100 or value == int(value) else f"{value:,.2f}"
    if unit == "GPUs" and value == 1:
        return "1 GPU"
    return f"{text} {_(UNITS[unit]) if unit in UNITS else unit}".strip()


def _ops_complexity(winner: Candidate) -> str | None:
    catalog = catalog_domain.default_catalog()
    if winner.engine.slug not in catalog.slugs:
        return None
    known = [v.version for v in catalog.engine(winner.engine.slug).versions]
    version = winner.engine_version if winner.engine_version in known else None
    return catalog.capabilities(winner.engine.slug, version).get("ops_complexity")


def _run_verdicts(winner: Candidate, runs: list[BenchmarkRun]) -> dict[str, dict[str, str]]:
    """The chosen candidate's runs' verdict statuses by name, by run id (what each fit row rests on)."""
    return {
        str(run.pk): {str(v.get("name") or ""): verdict_status.status_of(v) for v in run.verdicts or []}
        for run in runs
        if run.candidate_id == winner.pk
    }


def fit_rows(selection: Selection, winner: Candidate, score: Score, runs: list[BenchmarkRun]) -> list[dict[str, Any]]:
    """The chosen candidate's fit as the scores judged it (`Score.result["fit"]`, the rows the comparison's
    headline names its failures from: one judgement, every reader), then the operations team; a snapshot
    stored before the scores carried it is judged here by the same rule."""
    constraints = selection.constraints.as_domain()
    rows = [dict(row) for row in ((score.result or {}).get("fit") or {}).get(str(winner.pk)) or []]
    if not rows:
        rows = procurement.constraint_fit(constraints, _winner_metrics(score, winner), _run_verdicts(winner, runs))
        rows += [row for row in (procurement.gpu_fit(constraints, winner.gpu_count),) if row is not None]
    team = procurement.team_fit(constraints.get("ops_team_size"), _ops_complexity(winner))
    return rows + ([team] if team else [])


def _fit_rows(selection: Selection, winner: Candidate, score: Score, runs: list[BenchmarkRun]) -> list[dict[str, Any]]:
    shown = []
    for row in fit_rows(selection, winner, score, runs):
        sign = "≤" if row["comparison"] == procurement.AT_MOST else "≥"
        if row["key"] == "team":
            required = _("%(n)s people") % {"n": f"{row['required']:g}"}
            documented = _("documented complexity: %(level)s") % {"level": _(row["documented"])}
        shown.append(
            {
                "key": row["key"],
                "constraint": _(FIT_LABELS[row["key"]]),
                "required": required if row["key"] == "team" else f"{sign} {_figure(row['required'], row['unit'])}",
                "observed": (
                    _figure(row["observed"], row["unit"])
                    if row["observed"] is not None
                    else (documented if row["key"] == "team" and row["documented"] else "")
                ),
                "status": row["status"],
                "runs": [f"run-{r}" for r in row["runs"]],
                # the verdicts that leave the figure not validated (or fail it), in words: "TTFT p95 within
                # the budget: inconclusive (run-12)"
                "unsettled": [
                    labelled(presentation.verdict_label(name, _), presentation.status_label(status, _))
                    + f" (run-{run})"
                    for run, name, status in row.get("unsettled") or []
                ],
                # the parts of a compound claim that did not pass: "TTFT p95: fail"
                "parts": [
                    labelled(_(FIT_LABELS[part]), _(PART_STATUS[status])) for part, status in row.get("parts") or []
                ],
                "simulated": row["simulated"],
                "configuration": row["key"] == "gpu_budget",
                "documented": row["key"] == "team",
            }
        )
    return shown


PART_STATUS = {
    "fail": gettext_noop("fail"),
    "not_validated": gettext_noop("not validated"),
    "pass": gettext_noop("pass"),
}


def _winner_metrics(score: Score, winner: Candidate) -> dict[str, Any]:
    """The chosen candidate's metrics as the score read them (value, run ids, provenance)."""
    for evidence in (score.inputs or {}).get("evidence") or []:
        if str(evidence.get("candidate")) == str(winner.pk):
            return evidence.get("metrics") or {}
    return {}


def _licence(winner: Candidate) -> dict[str, Any]:
    catalog = catalog_domain.default_catalog()
    if winner.engine.slug not in catalog.slugs:
        return {"value": "", "source": "", "note": ""}
    fact = catalog.engine(winner.engine.slug).licence
    licence = {"value": str(fact.value) if fact.known else "", "source": fact.source or "", "note": fact.note or ""}
    read = catalog_domain.read_note(fact.note)
    if read is not None:  # the quoted field as code, where it was read in the record's language
        licence["note_field"] = read.field
        licence["note_where"] = message_text(read.where)
        licence["note_remark"] = message_text(read.remark) if read.remark else ""
    return licence


ITEM_LABELS = {
    "readiness": gettext_noop("Platform readiness: %(item)s"),
    "security": gettext_noop("Security checklist: %(item)s"),
    "affected": gettext_noop("Affected: %(item)s"),
    "acceptance": gettext_noop("Business acceptance: %(item)s"),
}
ITEMS = {
    "permissions": gettext_noop("permissions"),
    "monitoring": gettext_noop("monitoring"),
    "logs": gettext_noop("logs"),
    "capacity": gettext_noop("capacity"),
    "rollback": gettext_noop("rollback"),
    "audit_trail": gettext_noop("audit trail"),
    # the record's other open items (`project_checks.record_section`): what is affected, the pilot's result
    "applications": gettext_noop("applications"),
    "teams": gettext_noop("teams"),
    "data": gettext_noop("data"),
    "pilot_result": gettext_noop("pilot result"),
}


def item_name(item: str) -> str:
    """A project check's item ("audit_trail") by its name in the active language, never its key."""
    return _(ITEMS[item]) if item in ITEMS else item.replace("_", " ")


def item_label(section: str, item: str) -> str:
    """An open item as a reader names it ("Platform readiness: logs"), in the active language."""
    name = item_name(item)
    return _(ITEM_LABELS[section]) % {"item": name} if section in ITEM_LABELS else name


OUTCOMES = {
    "fail": gettext_noop("failed"),
    "inconclusive": gettext_noop("inconclusive"),
    "insufficient_data": gettext_noop("insufficient data"),
    "not_exercised": gettext_noop("not run"),
    "not_applicable": gettext_noop("not applicable"),
}


def _test_gaps(winner: Candidate, runs: list[BenchmarkRun]) -> list[dict[str, str]]:
    mine = {run.test: run for run in runs if run.candidate_id == winner.pk}
    numbered = [test.id for test in sorted(suite.TESTS, key=lambda t: t.number or 99) if test.number is not None]
    verdicts = {test: presentation.run_verdict(run.verdicts) for test, run in mine.items()}
    gaps = []
    for gap in procurement.test_gaps(numbered, verdicts):
        run = mine.get(gap["test"])
        # every verdict that did not pass (a fit row's † points here): "name" when failed, else "name (status)"
        unsettled = [
            (str(v.get("name")), verdict_status.status_of(v)) for v in (run.verdicts if run is not None else []) or []
        ]
        failed = [  # the criterion in words (its title and load point), never its id
            presentation.verdict_label(name, _)
            if status == "fail"
            else f"{presentation.verdict_label(name, _)} ({presentation.status_label(status, _)})"
            for name, status in unsettled
            if status not in ("pass", "not_applicable")  # the engine's documented design, not a gap
        ]
        gaps.append(
            {
                "test": _(suite.title_of(gap["test"])),
                "outcome": _(OUTCOMES.get(gap["outcome"], gap["outcome"])),
                "detail": clauses(failed),
                "run": f"run-{run.pk}" if run is not None else "",
            }
        )
    return gaps


def build_summary(
    selection: Selection,
    winner: Candidate,
    runs: list[BenchmarkRun],
    score: Score,
    project_checks: dict[str, Any],
) -> dict[str, Any]:
    """The snapshot's ``summary`` section (see `domain.records`)."""
    metrics = _winner_metrics(score, winner)
    cost = procurement.cost_per_mtok(metrics)
    result = score.result or {}
    fit = ((result.get("fit") or {}).get(str(winner.pk))) or []
    return {
        # what the choice rests on (the tie rule, `domain.tiebreak`) and every constraint the chosen
        # engine fails (the comparison's headline names the same), in the record's language
        "rests_on": message_text(result.get("rests_on")) if result.get("rests_on") else "",
        "misses": [message_text(m) for m in procurement.shortfall_messages(fit)],
        "fit": _fit_rows(selection, winner, score, runs),
        "budget": {
            "monthly": f"{selection.monthly_budget:,.2f}" if selection.monthly_budget is not None else "",
            "currency": selection.budget_currency,
        },
        "cost_per_mtok": (
            {
                "value": f"{cost['value']:,.2f}",
                "runs": [f"run-{r}" for r in cost["runs"]],
                "simulated": cost["simulated"],
            }
            if cost
            else None
        ),
        "gpu_price": (
            f"{selection.constraints.cost_per_gpu_hour}" if selection.constraints.cost_per_gpu_hour is not None else ""
        ),
        # the chosen configuration's monthly cost at the target load against the budget, and its growth
        # (selection.scoring.economics: the same figures as the record's section 7 and the comparison)
        "economics": economics_headline(selection, winner, score),
        "licence": {**_licence(winner), "terms": selection.licence_terms},
        "vendor_support": selection.vendor_support,
        "delivery_owner": selection.delivery_owner,
        "test_gaps": _test_gaps(winner, runs),
        "open_items": [
            {
                **entry,
                "label": item_label(entry["section"], entry["item"]),
                "status": procurement.OPEN,
                "reason": "",
                "decided_by": "",
            }
            for entry in procurement.open_items_from_checks(project_checks)
        ],
    }
