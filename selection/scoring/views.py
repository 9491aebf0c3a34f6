"""The side-by-side comparison: the decision as its headline (leader, margin with its measurement
interval, coverage, robustness, a plain verdict), scores per dimension and criterion, gates,
sensitivity and the evidence charts of every candidate."""

from __future__ import annotations

import hashlib
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.db.models import Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import get_language, gettext_noop
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from benchmarks.charts import candidates as candidate_charts
from benchmarks.charts import style as chart_style
from benchmarks.models import BenchmarkRun
from benchmarks.run_charts import Budgets, comparison_charts, selection_colours
from benchmarks.selectors import latest_runs, simulated_run_count
from selection.domain import criteria as criteria_domain
from selection.domain import procurement
from selection.domain.headline import decision_headline
from selection.i18n import criterion_name, dimension_name
from selection.models import Selection
from selection.scoring.economics import economics_table
from selection.scoring.services import ScoresState, latest_score, refresh_scores, scores_state
from selection.selectors import compared_candidates
from selection.web import get_selection, page_context, require_edit


def comparison_table(result: dict[str, Any]) -> dict[str, Any]:
    """The Score.result reshaped for a side-by-side table: candidates as columns (by rank), then
    one block per dimension with its criteria. A missing score stays None (shown as "missing")."""
    columns = sorted(
        result.get("candidates", []),
        key=lambda c: (c.get("screened_out", False), c.get("rank") or 10**6, c.get("label", "")),
    )
    dimension_names = {d.id: dimension_name(d.id) for d in criteria_domain.DIMENSIONS}
    weights = result.get("weights") or {}
    seen = [d.id for d in criteria_domain.DIMENSIONS if any(d.id in (c.get("dimensions") or {}) for c in columns)]
    gate_rows = [
        {
            "id": dimension,
            "name": dimension_names.get(dimension, dimension),
            "threshold": threshold,
            "cells": [_gate_cell(c, dimension) for c in columns],
        }
        for dimension, threshold in (result.get("gates") or {}).items()
    ]
    return {
        "columns": columns,
        "fit": fit_table(result, columns),
        "dimensions": [_dimension_block(dimension, dimension_names, columns, weights) for dimension in seen],
        "gates": gate_rows,
        "missing": [_missing_indicators(c) for c in columns],
        "winner": next((c for c in columns if c.get("candidate") == result.get("winner")), None),
    }


def fit_table(result: dict[str, Any], columns: list[dict]) -> list[dict[str, Any]]:
    """Each constraint the sheet states, with every candidate's figure and outcome as the scores judged it
    (`Score.result["fit"]`: the same rows as the record's page 1 and the headline)."""
    fits = result.get("fit") or {}
    keys = list(dict.fromkeys(row["key"] for c in columns for row in fits.get(c.get("candidate")) or []))
    table = []
    for key in keys:
        cells, required = [], ""
        for column in columns:
            row = next((r for r in fits.get(column.get("candidate")) or [] if r.get("key") == key), None)
            if row is None:
                cells.append({})
                continue
            sign = "≤" if row.get("comparison") == procurement.AT_MOST else "≥"
            required = f"{sign} {procurement.figure_text(row['required'], row['unit'])} {_unit(row['unit'])}".strip()
            observed = row.get("observed")
            cells.append(
                {
                    "status": row.get("status"),
                    "observed": (
                        f"{procurement.figure_text(observed, row['unit'])} {_unit(row['unit'])}".strip()
                        if observed is not None
                        else ""
                    ),
                    "runs": [f"run-{r}" for r in row.get("runs") or []],
                }
            )
        table.append({"key": key, "name": _(procurement.FIT_NAMES.get(key, key)), "required": required, "cells": cells})
    return table


FIT_UNITS = {
    "requests/GPU": gettext_noop("requests/GPU"),
    "ms": "ms",
    "tokens": gettext_noop("tokens"),
    "tokens/s/GPU": gettext_noop("tokens/s per GPU"),
    "GPUs": gettext_noop("GPUs"),
    "share": "",
}


def _unit(unit: str) -> str:
    text = FIT_UNITS.get(unit, unit)
    return _(text) if text and text != "ms" else text


def _dimension_block(dimension: str, dimension_names: dict, columns: list[dict], weights: dict) -> dict:
    """One dimension's row of cells and its criteria's rows, in the columns' order."""
    criteria_ids = dict.fromkeys(
        cid for c in columns for cid, crit in (c.get("criteria") or {}).items() if crit.get("dimension") == dimension
    )
    criteria_rows = []
    for cid in criteria_ids:
        criterion = criteria_domain.CRITERIA_BY_ID.get(cid)
        criteria_rows.append(
            {
                "id": cid,
                "name": criterion_name(cid) if criterion else cid,
                "weight": weights.get(cid),
                "cells": [_cell((c.get("criteria") or {}).get(cid)) for c in columns],
            }
        )
    return {
        "id": dimension,
        "name": dimension_names.get(dimension, dimension),
        "cells": [_cell((c.get("dimensions") or {}).get(dimension)) for c in columns],
        "criteria": criteria_rows,
    }


def _gate_cell(column: dict, dimension: str) -> dict:
    gate = next((g for g in column.get("gates") or [] if g.get("dimension") == dimension), None)
    return gate or {"passed": None, "score": None, "reason": ""}


def _missing_indicators(column: dict) -> list[str]:
    """The indicators a candidate has no evidence for, by name."""
    return sorted(
        {
            ind.get("indicator")
            for crit in (column.get("criteria") or {}).values()
            for ind in crit.get("indicators") or []
            if ind.get("status") == "missing"
        }
    )


def _cell(data: dict | None) -> dict:
    data = data or {}
    score = data.get("score")
    return {
        "score": score,
        "upper": data.get("score_upper"),
        "coverage": data.get("coverage"),
        "status": data.get("status") or ("missing" if score is None else "ok"),
        "missing": score is None,
        "explanation": data.get("explanation", ""),
        "simulated": data.get("uses_simulated", False),
    }


def _dimension_bars(table: dict, score, colours: dict[str, str]) -> str:
    """The scores per dimension as bars with the gates ("" when there is nothing to draw)."""
    bars = {
        c["label"]: {d: (c.get("dimensions") or {}).get(d, {}).get("score") for d in c.get("dimensions") or {}}
        for c in table["columns"]
    }
    if not bars or not any(bars.values()):
        return ""
    try:
        return candidate_charts.dimension_bars(
            bars,
            dimensions=[b["id"] for b in table["dimensions"]],
            labels={b["id"]: b["name"] for b in table["dimensions"]},
            gates={g["id"]: float(g["threshold"]) for g in table["gates"]},
            simulated=not score.signable,
            title=_("Score per dimension"),
            colours=colours,
        )
    except chart_style.ChartInputError:
        return ""


def _charts(selection: Selection, score, table: dict, include_simulated: bool) -> dict[str, Any]:
    """The comparison's SVG charts (cached per score snapshot, language and toggle): the scores per
    dimension, then each evidence chart once over every candidate (`benchmarks.run_charts`)."""
    # The evidence charts read runs the scoring inputs do not cover (time series, ladder points):
    # the newest run and finish time of the selection are part of the key.
    runs = BenchmarkRun.objects.filter(candidate__selection=selection).aggregate(
        last=Max("id"), done=Max("finished_at")
    )
    parts = f"{selection.pk}:{score.pk}:{score.inputs_hash}:{runs['last']}:{runs['done']}:{int(include_simulated)}"
    key = f"kvselect:cmp-charts:{hashlib.sha256(parts.encode()).hexdigest()}:{get_language()}"  # no spaces (memcached)
    cached = cache.get(key)
    if cached is not None:
        return cached
    colours = selection_colours(selection)  # one colour per candidate in every chart of the page
    out: dict[str, Any] = {"dimension_bars": _dimension_bars(table, score, colours), "evidence": []}
    latest = [
        (
            candidate.display_name,
            {test: run for test, run in latest_runs(candidate).items() if include_simulated or not run.is_simulated},
        )
        for candidate in compared_candidates(selection)
    ]
    constraints = getattr(selection, "constraints", None)
    out["evidence"] = comparison_charts(
        latest,
        Budgets(getattr(constraints, "ttft_p95_ms", None), getattr(constraints, "tpot_p95_ms", None)),
        colours,
    )
    cache.set(key, out, 600)
    return out


def scores_view_state(scores: ScoresState) -> str:
    """What the page says about its scores: `current`; `recomputing` (a recompute is queued: the page
    polls); `error` (the last scoring failed, it names the field); `stale` (the inputs changed and no
    recompute is queued: a button asks for one); `none` (nothing scored yet: a button asks for it)."""
    if scores.current:
        return "current"
    if scores.recomputing:
        return "recomputing"
    if scores.error:
        return "error"
    return "stale" if scores.score is not None else "none"


def _scores_context(selection: Selection, include_simulated: bool) -> dict[str, Any]:
    scores = scores_state(selection, include_simulated)
    return {"scores": scores, "score": scores.score, "scores_view": scores_view_state(scores)}


@login_required
@require_GET
def comparison(request: HttpRequest, pk: int) -> HttpResponse:
    """The comparison reads the latest snapshot only (a GET never writes): scores are written by the
    `recompute_scores` task when evidence changes, or by the POST below."""
    selection = get_selection(request, pk)
    include_simulated = request.GET.get("simulated") == "1"
    candidate_count = compared_candidates(selection).count()
    scores = _scores_context(selection, include_simulated) if candidate_count else {"score": None}
    score = scores["score"]
    table = comparison_table(score.result) if score else None
    economics = _economics(selection, score, table) if score and hasattr(selection, "constraints") else None
    headline = decision_headline(score.result) if score else None
    # the default view leaves SIMULATED runs out: say that they exist, and offer the view with them
    simulated_runs = simulated_run_count(compared_candidates(selection)) if headline and not include_simulated else 0
    return render(
        request,
        "selection/decision/comparison.html",
        page_context(
            request,
            selection,
            "comparison",
            **scores,
            table=table,
            candidate_count=candidate_count,
            include_simulated=include_simulated,
            charts=_charts(selection, score, table, include_simulated) if score else {},
            result=score.result if score else {},
            headline=headline,
            simulated_runs=simulated_runs,
            economics=economics,
        ),
    )


def _economics(selection: Selection, score, table: dict) -> dict[str, Any] | None:
    """Cost against the budget and growth of every compared candidate, in the table's order (the
    leader first), from the same snapshot as the scores (`selection.scoring.economics`)."""
    by_id = {str(c.pk): c for c in compared_candidates(selection)}
    ordered = [by_id[c["candidate"]] for c in table["columns"] if c.get("candidate") in by_id]
    return economics_table(selection, score, ordered) if ordered else None


@login_required
@require_GET
def comparison_status(request: HttpRequest, pk: int) -> HttpResponse:
    """The notice about the scores, polled by htmx while a recompute is queued; once it is no longer
    "being recomputed", htmx reloads the page (HX-Refresh) to show the new snapshot."""
    selection = get_selection(request, pk)
    include_simulated = request.GET.get("simulated") == "1"
    scores = _scores_context(selection, include_simulated)
    response = render(
        request,
        "selection/decision/_scores_status.html",
        page_context(request, selection, "comparison", **scores, include_simulated=include_simulated),
    )
    if scores["scores_view"] != "recomputing":
        response["HX-Refresh"] = "true"
    return response


@login_required
@require_POST
def comparison_recompute(request: HttpRequest, pk: int) -> HttpResponse:
    """Score now (a POST may write): both views, whatever the queue is doing."""
    selection = get_selection(request, pk)
    require_edit(request, selection)
    include_simulated = request.POST.get("simulated") == "1"
    target = redirect("selection:comparison", pk=selection.pk)
    if include_simulated:
        target["Location"] += "?simulated=1"
    if not compared_candidates(selection).exists():
        messages.error(request, _("Nothing to score yet: add candidates and evidence first."))
        return target
    error = refresh_scores(selection.pk, force=True)
    score = latest_score(selection, include_simulated)
    if error or score is None:
        messages.error(request, _("Scoring failed: %(error)s") % {"error": error})
    else:
        messages.success(
            request,
            _("Scores recomputed (rules %(rules)s, inputs %(hash)s).")
            % {"rules": score.rules_version, "hash": score.inputs_hash[:12]},
        )
    return target
