"""Cost against the budget and growth for each candidate: the Django side of `domain.economics`.

Reads a score snapshot's evidence (the same figures the scores used, with their runs), the
candidate's capacity plan and engine-stated KV pool, its launch flags (the offload tier) and the
selection's prices, budget and growth; the comparison page, the record's first page and its body
all show what `economics_table` and `economics_headline` make of it, so every figure reads the same
everywhere. Figures are worded here, in the active language.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from benchmarks.models import BenchmarkRun
from selection.capacity.measured import measured_capacity
from selection.capacity.plans import plan_for_candidate
from selection.domain import economics as eco
from selection.domain import launch_flags
from selection.domain.capacity.base import CapacityError
from selection.i18n import clauses, names
from selection.models import Candidate, Score, Selection

SIMULATED = "SIMULATED"

MISSING_TEXT = {
    eco.NO_PEAK: gettext_noop("the constraints state no peak concurrency"),
    eco.NO_GPU_PRICE: gettext_noop("the constraints state no GPU price"),
    eco.NO_CAPACITY: gettext_noop("no run measured the sustainable concurrency and no capacity plan could be made"),
    eco.NONE_WITHIN_BUDGET: gettext_noop("no load the stress run tested was within the latency budget"),
    eco.OFFLOAD_SIZE_UNKNOWN: gettext_noop("the launch flags enable an offload tier without stating its size"),
    eco.NO_HOST_PRICE: gettext_noop("the constraints state no host memory price for the offload tier"),
    eco.NO_BUDGET: gettext_noop("the selection states no monthly budget"),
}


def _metric_figure(metric: dict[str, Any] | None, include_simulated: bool) -> eco.Figure | None:
    """A score's metric as a measured figure (None when missing, or SIMULATED in a measured-only view)."""
    if not metric or metric.get("value") is None or isinstance(metric.get("value"), bool):
        return None
    simulated = metric.get("evidence") == SIMULATED
    if simulated and not include_simulated:
        return None
    runs = tuple(str(r) for r in metric.get("run_ids") or ())
    return eco.Figure(float(metric["value"]), eco.MEASURED, runs, simulated=simulated)


HELD_SHARE = 0.95  # the harness's `load_held`: a closed loop holding 95 % of its concurrency applied it


def _load_points(run_ids: Iterable[str]) -> list:
    """The runs' load points (a traffic group's point is a part of a load, not a load of its own)."""
    return [
        point
        for run in BenchmarkRun.objects.filter(pk__in=[int(r) for r in run_ids if str(r).isdigit()])
        for point in run.points.all()
        if not (point.extra or {}).get("traffic_group")
    ]


def _held_level(points: list, achieved: float) -> float | None:
    """The concurrency level of the point that held `achieved` requests in flight, when the client held
    it (the gap to the level is the client's turnaround between a response and its next request)."""
    for point in points:
        level = point.concurrency
        if level and point.achieved_concurrency and math.isclose(point.achieved_concurrency, achieved, rel_tol=1e-6):
            return float(level) if achieved >= HELD_SHARE * level else None
    return None


def _sustainable(metrics: dict, held_out: dict, gpus: int, constraints, include_simulated: bool):
    """(sustainable concurrency per GPU, runs that measured no load within budget). A closed-loop level
    the client held counts at its nominal concurrency (31.7 in flight at a held 32 is 32)."""
    figure = _metric_figure(metrics.get("sustainable_concurrency_per_gpu"), include_simulated)
    if figure is not None:
        points = _load_points(figure.runs)
        level = _held_level(points, figure.value * gpus)
        loads = [float(load) for load in (p.achieved_concurrency or p.concurrency for p in points) if load]
        loads += [float(p.concurrency) for p in points if p.concurrency]
        bound = bool(loads) and (level or figure.value * gpus) >= max(loads) * 0.999
        value = level / gpus if level else figure.value
        return eco.Figure(value, figure.source, figure.runs, bound, figure.simulated), ()
    judged = constraints.ttft_p95_ms and constraints.tpot_p95_ms
    stress = _metric_figure(metrics.get("achieved_concurrency"), include_simulated)
    if judged and stress is not None and "sustainable_concurrency_per_gpu" not in held_out:
        return None, stress.runs or ("?",)
    return None, ()


def _plan_figures(candidate: Candidate, constraints) -> tuple[dict | None, eco.Figure | None, eco.Figure | None]:
    """(the capacity plan, its sequences in 80 % of the pool, the engine-stated pool's sequences)."""
    try:
        plan = plan_for_candidate(candidate)
    except (CapacityError, ValueError):
        plan = None
    avg_context = constraints.avg_input_tokens + constraints.avg_output_tokens
    planned = None
    if plan is not None and (plan.get("verdict") or {}).get("sequences_at_80pct"):
        sequences = float(plan["verdict"]["sequences_at_80pct"])
        planned = eco.Figure(min(sequences, plan["slots"]) if plan.get("slots") else sequences, eco.PLAN)
    stated = measured_capacity(candidate)
    engine = None
    if stated.get("token_capacity"):
        sequences = eco.kv_sequences(stated["token_capacity"], avg_context, (plan or {}).get("slots"))
        runs = tuple(str(r) for r in stated.get("run_ids") or ())
        engine = eco.Figure(sequences, eco.ENGINE_STATED, runs, simulated=stated.get("evidence") == SIMULATED)
    return plan, planned, engine


def cost_inputs(selection: Selection, candidate: Candidate, entry: dict, include_simulated: bool) -> eco.CostInputs:
    """What `domain.economics` reads for one candidate: its score evidence `entry` (metrics, held out)."""
    c = selection.constraints
    metrics, held_out = entry.get("metrics") or {}, entry.get("held_out") or {}
    gpus = max(candidate.gpu_count, 1)
    sustainable, none_within = _sustainable(metrics, held_out, gpus, c, include_simulated)
    plan, planned, engine_stated = _plan_figures(candidate, c)
    tier = launch_flags.offload_tier(
        candidate.engine.slug,
        f"{candidate.launch_recipe} {candidate.launch_flags}",
        tp=candidate.tensor_parallel,
        device_pool_bytes=(plan or {}).get("kv_memory_bytes"),
    )
    as_float = lambda value: float(value) if value is not None else None  # noqa: E731
    return eco.CostInputs(
        peak_concurrency=c.peak_concurrency,
        throughput_target=c.throughput_target_tokens_s or None,
        gpus_per_replica=gpus,
        gpu_price_per_hour=as_float(c.cost_per_gpu_hour),
        host_price_per_gib_month=as_float(c.host_memory_cost_per_gib_month),
        offload=eco.OffloadTier(tier["enabled"], tier["gib"], tier["basis"]),
        budget=as_float(selection.monthly_budget),
        gpu_budget=c.gpu_count_budget,
        concurrency_per_gpu=sustainable,
        none_within_budget=none_within,
        goodput_per_gpu=_metric_figure(metrics.get("output_tokens_per_s_per_gpu"), include_simulated),
        plan_sequences_per_replica=planned,
        kv_sequences_per_replica=engine_stated,
        growth_factor=c.growth_factor,
        growth_months=c.growth_horizon_months,
    )


def candidate_economics(selection: Selection, candidate: Candidate, score: Score) -> dict[str, Any]:
    """`domain.economics` of one candidate from the snapshot's evidence, with its cost per million
    output tokens (the score's metric, with its run) beside it."""
    entry = next(
        (e for e in (score.inputs or {}).get("evidence") or [] if str(e.get("candidate")) == str(candidate.pk)), {}
    )
    inputs = cost_inputs(selection, candidate, entry, score.include_simulated)
    result = eco.economics(inputs)
    sustainable = inputs.concurrency_per_gpu
    result["sustainable_per_gpu"] = sustainable.as_dict() if sustainable is not None else None
    in_flight = _metric_figure((entry.get("metrics") or {}).get("sustainable_concurrency_per_gpu"), True)
    if sustainable is not None and in_flight is not None and not math.isclose(in_flight.value, sustainable.value):
        result["sustainable_per_gpu"]["in_flight"] = in_flight.value  # the level held, as the scores read it
    mtok = _metric_figure((entry.get("metrics") or {}).get("cost_per_mtok"), score.include_simulated)
    goodput = _metric_figure((entry.get("metrics") or {}).get("output_tokens_per_s_per_gpu"), score.include_simulated)
    result["cost_per_mtok"] = mtok.as_dict() if mtok is not None else None
    result["goodput_per_gpu"] = goodput.as_dict() if goodput is not None else None
    return result


# ---------------------------------------------------------------------------------------------- words


def money(value: float | None, currency: str) -> str:
    if value is None:
        return ""
    return f"{value:,.2f} {currency}".strip()


def factor(value: float) -> str:
    return f"×{value:,.1f}" if value < 100 else f"×{value:,.0f}"


def source_text(figure: dict[str, Any] | None) -> str:
    """Where a figure comes from, as a reader names it: "run-5 · SIMULATED", "capacity plan (not measured)"."""
    if not figure:
        return ""
    runs = ", ".join(f"run-{r}" for r in figure.get("runs") or [])
    if figure["source"] == eco.PLAN:
        text = _("capacity plan (not measured)")
    elif figure["source"] == eco.ENGINE_STATED:
        text = _("engine-stated KV pool (%(runs)s)") % {"runs": runs or "—"}
    else:
        text = runs
    return text + (" · SIMULATED" if figure.get("simulated") else "")


def missing_text(reasons: Iterable[str]) -> str:
    return clauses(_(MISSING_TEXT[r]) if r in MISSING_TEXT else r for r in dict.fromkeys(reasons))


def budget_verdict(deployment: dict[str, Any], currency: str) -> tuple[str, str]:
    """(status, sentence): within the budget by X, over the budget by X (Y %), or cannot be derived (why)."""
    budget = deployment["budget"]
    if budget["status"] == eco.WITHIN:
        return eco.WITHIN, _("within the budget by %(amount)s (%(share)s)") % {
            "amount": money(budget["difference"], currency),
            "share": f"{budget['share']:.0%}",
        }
    if budget["status"] == eco.OVER:
        return eco.OVER, _("over the budget by %(amount)s (%(share)s)") % {
            "amount": money(budget["difference"], currency),
            "share": f"{budget['share']:.0%}",
        }
    return eco.NOT_DERIVABLE, _("cannot be derived: %(why)s") % {"why": missing_text(budget["missing"])}


def cost_breakdown(data: dict[str, Any], deployment: dict[str, Any], currency: str) -> str:
    """How the monthly cost is made: replicas x GPUs x price x hours + host memory x price."""
    if deployment["replicas"] is None:
        return ""
    text = _("%(replicas)s replica(s) × %(gpus)s GPU(s) × %(price)s per GPU-hour × %(hours)s h") % {
        "replicas": deployment["replicas"],
        "gpus": deployment["gpus"] // max(deployment["replicas"], 1),
        "price": money(data["gpu_price_per_hour"], currency) or "—",
        "hours": f"{data['hours_per_month']:g}",
    }
    if data["offload"]["enabled"]:
        text += " + " + _("%(gib)s GiB host memory (%(basis)s) × %(price)s per GiB-month") % {
            "gib": f"{deployment['host_gib']:,.1f}" if deployment["host_gib"] is not None else "?",
            "basis": data["offload"]["basis"] or _("size not stated"),
            "price": money(data["host_price_per_gib_month"], currency) or "—",
        }
    return text


def replicas_basis(deployment: dict[str, Any]) -> str:
    """Why this many replicas: the concurrency one replica holds (and its source), or the throughput."""
    per_replica, serves = deployment["per_replica"], deployment["throughput_per_replica"]
    if deployment["decided_by"] == eco.THROUGHPUT and serves:
        return _("throughput target over %(value)s output tokens/s per replica (%(source)s)") % {
            "value": f"{serves['value']:,.0f}",
            "source": source_text(serves),
        }
    if per_replica:
        return _("peak concurrency over %(value)s concurrent requests per replica (%(source)s)") % {
            "value": f"{per_replica['value']:,.0f}",
            "source": source_text(per_replica),
        }
    return ""


def _bound(figure: dict[str, Any]) -> str:
    value = factor(figure["value"])
    return _("%(factor)s or more") % {"factor": value} if figure.get("lower_bound") else value


def limit_text(figure: dict[str, Any] | None) -> str:
    """The growth at which a resource runs out, with its source ("×9.5 (capacity plan (not measured))")."""
    if not figure:
        return ""
    value = factor(figure["value"])
    if figure.get("lower_bound"):
        value = _("%(factor)s or more (the highest load tested was within the budget)") % {"factor": value}
    # its source in brackets as the language writes them ("×9.5 (…)"; Chinese "×9.5（…）")
    return _("%(limit)s (%(source)s)") % {"limit": value, "source": source_text(figure)}


ROW_LABELS = {
    "sustainable": gettext_noop("Sustainable concurrency per GPU (within the latency budget)"),
    "goodput": gettext_noop("Output throughput per GPU within the budget"),
    "cost_per_mtok": gettext_noop("Cost per million output tokens"),
    "replicas": gettext_noop("Replicas at the target load"),
    "gpus": gettext_noop("GPUs at the target load"),
    "monthly": gettext_noop("Monthly cost at the target load"),
    "budget": gettext_noop("Against the monthly budget"),
    "growth": gettext_noop("At the expected growth"),
    "kv_limit": gettext_noop("KV pool runs out at traffic"),
    "latency_limit": gettext_noop("Latency budget runs out at traffic"),
}


def _cell(text: str, meta: str = "", status: str = "") -> dict[str, str]:
    return {"text": text or "—", "meta": meta, "status": status}


def _gpus_cell(deployment: dict[str, Any]) -> dict[str, str]:
    if deployment["gpus"] is None:
        return _cell("")
    gpu_budget = deployment["gpu_budget"]
    if gpu_budget is None:
        return _cell(str(deployment["gpus"]))
    words = (
        _("within the GPU budget of %(n)s") if gpu_budget["status"] == eco.WITHIN else _("over the GPU budget of %(n)s")
    ) % {"n": gpu_budget["budget"]}
    return _cell(str(deployment["gpus"]), words, "pass" if gpu_budget["status"] == eco.WITHIN else "fail")


def growth_text(data: dict[str, Any], currency: str) -> tuple[str, str, str]:
    """(what the deployment needs at the expected growth, the budget verdict, its status)."""
    grown = data["growth"]
    if grown is None:
        return "", _("the constraints state no expected growth"), ""
    if grown["replicas"] is None:
        status, verdict = budget_verdict(grown, currency)
        return "", verdict, ""
    text = _("%(replicas)s replica(s), %(gpus)s GPU(s), %(monthly)s per month") % {
        "replicas": grown["replicas"],
        "gpus": grown["gpus"],
        "monthly": money(grown["monthly"], currency) or "—",
    }
    status, verdict = budget_verdict(grown, currency)
    if grown["gpu_budget"] is not None and grown["gpu_budget"]["status"] == eco.OVER:
        verdict = clauses([verdict, _("over the GPU budget of %(n)s") % {"n": grown["gpu_budget"]["budget"]}])
        status = eco.OVER
    return text, verdict, status


def growth_label(data: dict[str, Any]) -> str:
    grown = data["growth"]
    if grown is None:
        return _(ROW_LABELS["growth"])
    if grown.get("months"):
        return _("At the expected growth (%(factor)s in %(months)s months)") % {
            "factor": factor(grown["factor"]),
            "months": grown["months"],
        }
    return _("At the expected growth (%(factor)s)") % {"factor": factor(grown["factor"])}


def _figure_cell(figure: dict[str, Any] | None, fmt: str, why: str = "") -> dict[str, str]:
    if not figure:
        return _cell("", why)
    return _cell(fmt.format(figure["value"]), source_text(figure))


STATUS_CLASS = {eco.WITHIN: "pass", eco.OVER: "fail", eco.NOT_DERIVABLE: ""}


def candidate_cells(data: dict[str, Any], currency: str) -> dict[str, dict[str, str]]:
    """One candidate's column of the cost table, by row key (`ROW_LABELS`)."""
    target = data["target"]
    status, verdict = budget_verdict(target, currency)
    grown, grown_verdict, grown_status = growth_text(data, currency)
    sustainable_why = missing_text(r for r in target["missing"] if r in (eco.NONE_WITHIN_BUDGET, eco.NO_CAPACITY))
    sustainable = _figure_cell(data.get("sustainable_per_gpu"), "{:,.1f}", sustainable_why or _("not measured"))
    if (data.get("sustainable_per_gpu") or {}).get("in_flight") is not None:
        sustainable["meta"] += " · " + _("the level held: %(n)s in flight on average") % {
            "n": f"{data['sustainable_per_gpu']['in_flight']:,.1f}"
        }
    return {
        "sustainable": sustainable,
        "goodput": _figure_cell(data.get("goodput_per_gpu"), "{:,.0f}", _("not measured")),
        "cost_per_mtok": _figure_cell(data.get("cost_per_mtok"), "{:,.2f}", _("not measured")),
        "replicas": _cell(str(target["replicas"] or ""), replicas_basis(target)),
        "gpus": _gpus_cell(target),
        "monthly": _cell(money(target["monthly"], currency), cost_breakdown(data, target, currency)),
        "budget": _cell(verdict, "", STATUS_CLASS[status]),
        "growth": _cell(grown, grown_verdict, STATUS_CLASS.get(grown_status, "")),
        "kv_limit": _cell(limit_text(data["limits"]["kv"])),
        "latency_limit": _cell(limit_text(data["limits"]["latency"])),
    }


COLUMNS_PER_TABLE = 3  # candidates per table beside the quantity column: fits A4 portrait and 1280 px


def economics_table(selection: Selection, score: Score, candidates: list[Candidate]) -> dict[str, Any]:
    """The cost tables of the comparison and of the record: rows as `ROW_LABELS`, a column per
    candidate, at most `COLUMNS_PER_TABLE` candidates per table."""
    currency = selection.budget_currency
    data = [candidate_economics(selection, candidate, score) for candidate in candidates]
    columns = [candidate_cells(d, currency) for d in data]
    tables = []
    for start in range(0, len(candidates), COLUMNS_PER_TABLE):
        part = slice(start, start + COLUMNS_PER_TABLE)
        rows = [
            {
                "key": key,
                "label": growth_label(data[0]) if key == "growth" else _(label),
                "cells": [column[key] for column in columns[part]],
            }
            for key, label in ROW_LABELS.items()
        ]
        tables.append({"columns": [c.display_name for c in candidates[part]], "rows": rows})
    first = data[0] if data else None
    return {
        "tables": tables,
        "budget": money(float(selection.monthly_budget), currency) if selection.monthly_budget is not None else "",
        "hours_per_month": f"{eco.HOURS_PER_MONTH:g}",
        "host_price": money(first["host_price_per_gib_month"], currency) if first else "",
    }


def economics_headline(selection: Selection, winner: Candidate, score: Score) -> dict[str, Any]:
    """The chosen configuration's cost against the budget and its growth, as page 1 states them."""
    currency = selection.budget_currency
    data = candidate_economics(selection, winner, score)
    target = data["target"]
    status, verdict = budget_verdict(target, currency)
    grown, grown_verdict, grown_status = growth_text(data, currency)
    limits = [
        text
        for text in (
            _("KV pool runs out at %(limit)s") % {"limit": limit_text(data["limits"]["kv"])}
            if data["limits"]["kv"]
            else "",
            _("latency budget at %(limit)s") % {"limit": limit_text(data["limits"]["latency"])}
            if data["limits"]["latency"]
            else "",
        )
        if text
    ]
    short = [
        text
        for text in (
            _("the KV pool lasts to %(factor)s") % {"factor": factor(data["limits"]["kv"]["value"])}
            if data["limits"]["kv"]
            else "",
            _("the latency budget to %(factor)s") % {"factor": _bound(data["limits"]["latency"])}
            if data["limits"]["latency"]
            else "",
        )
        if text
    ]
    return {
        "monthly": money(target["monthly"], currency),
        "status": status,
        # page 1's short form; the sources, the breakdown and every candidate are in section 7
        "limits_short": (
            _("Traffic growth: %(limits)s (sources and breakdown: section 7)") % {"limits": names(short)}
            if short
            else ""
        ),
        "verdict": verdict,
        "breakdown": cost_breakdown(data, target, currency),
        "replicas": replicas_basis(target),
        "growth_label": growth_label(data),
        "growth": grown,
        "growth_verdict": grown_verdict,
        "growth_status": grown_status,
        "limits": clauses(limits),
    }
