"""The capacity page of a candidate: the capacity model's plan, verdict, estimates, predicted vs
measured, the memory chart, and what-if controls that re-plan without saving (htmx GET partial)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_POST

from benchmarks.presentation import chart_svg
from benchmarks.run_charts import selection_colours
from selection.capacity.display import attention_label, concurrency_rows, memory_lines, split_estimates
from selection.capacity.forms import CapacityWhatIfForm
from selection.capacity.measured import measured_capacity
from selection.capacity.plans import plan_for_candidate
from selection.capacity.stating import LOG_ENGINES, state_capacity_from_log
from selection.domain.capacity.base import GPU_MEMORY_GIB, KV_DTYPES, CapacityError
from selection.domain.procurement import MIN_KV_HEADROOM
from selection.i18n import message_text
from selection.web import get_candidate, get_selection, page_context, require_edit

HEADROOM = MIN_KV_HEADROOM  # the chart's dashed line: the record's headroom (docs/domain.md: plan with 20-30%)
CLIP = 2.0  # lines stop above twice the GPU memory, so the region around the limit stays readable


def _plan(candidate, overrides: dict) -> tuple[dict | None, dict | None]:
    """(plan, None) or (None, {field, message}) with the capacity model's own message."""
    try:
        return plan_for_candidate(candidate, measured=measured_capacity(candidate), **overrides), None
    except CapacityError as error:
        field, sep, message = str(error).partition(": ")
        return None, {"field": field if sep else "", "message": message if sep else field}


def _chart(plan: dict, peak: int | None, colour: str | None) -> str:
    concurrencies = [1] + ([peak] if peak and peak > 1 else [])
    contexts, lines = memory_lines(
        plan,
        concurrencies,
        clip_gib=CLIP * float(plan.get("gpu_memory_gib") or 0) or None,
        label=lambda n: ngettext("weights + KV, %(n)d sequence", "weights + KV, %(n)d sequences", n) % {"n": n},
    )
    if not contexts:
        return ""
    return chart_svg(
        "capacity_memory_vs_context",
        contexts=contexts,
        memory_gib=lines,
        gpu_memory_gib=plan.get("gpu_memory_gib"),
        headroom=HEADROOM,
        title=_("Memory per GPU against context length"),
        colour=colour,
    )


def _what_if(candidate, form: CapacityWhatIfForm) -> tuple[dict, dict | None, dict | None]:
    """(what-if overrides, plan, error): the candidate re-planned with the form's overrides, or
    nothing planned when the what-if inputs are wrong."""
    if form.is_bound and not form.is_valid():
        return {}, None, {"field": "", "message": _("Correct the what-if inputs: nothing was re-planned.")}
    overrides = form.overrides(GPU_MEMORY_GIB) if form.is_bound else {}
    plan, error = _plan(candidate, overrides)
    return overrides, plan, error


def _plan_display(selection, candidate, plan: dict, peak: int | None) -> dict:
    """The plan's chart, estimates, concurrency table, and the comparison with the measured capacity."""
    return {
        "chart": _chart(plan, peak, selection_colours(selection).get(candidate.display_name)),
        "attention": attention_label(str(plan.get("attention") or ""), translate=_),
        "estimates": split_estimates(plan, translate=_, render_message=message_text),
        "concurrency_rows": concurrency_rows(plan),
        "comparison": plan.get("predicted_vs_measured"),
        "measured": plan.get("measured"),
        "verdict": plan.get("verdict"),
    }


@login_required
@require_GET
def capacity_page(request: HttpRequest, pk: int, candidate_pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    candidate = get_object_or_404(selection.candidates.select_related("engine", "selection"), pk=candidate_pk)
    form = CapacityWhatIfForm(request.GET or None, kv_dtypes=KV_DTYPES, gpus=list(GPU_MEMORY_GIB))
    overrides, plan, error = _what_if(candidate, form)
    constraints = getattr(selection, "constraints", None)
    peak = constraints.peak_concurrency if constraints is not None else None
    context = page_context(
        request,
        selection,
        "evidence",
        candidate=candidate,
        form=form,
        plan=plan,
        error=error,
        what_if=bool(overrides),
        peak=peak,
        headroom_pct=int(HEADROOM * 100),
        reads_log=candidate.engine.slug in LOG_ENGINES,  # a pasted start-up log kvselect can read
    )
    if plan is not None:
        context.update(_plan_display(selection, candidate, plan, peak))
    # the what-if's fragment; a whole page for a reload or for htmx restoring a pushed URL from history
    fragment = (
        request.headers.get("HX-Request") == "true" and request.headers.get("HX-History-Restore-Request") != "true"
    )
    template = "selection/_capacity_plan.html" if fragment else "selection/capacity.html"
    return render(request, template, context, status=200)


@login_required
@require_POST
def capacity_log(request: HttpRequest, pk: int, candidate_pk: int) -> HttpResponse:
    """The engine-stated capacity from a pasted start-up log (an engine kvselect does not launch)."""
    selection = get_selection(request, pk)
    require_edit(request, selection)
    candidate = get_candidate(selection, candidate_pk)
    try:
        measured = state_capacity_from_log(candidate=candidate, user=request.user, log_text=request.POST.get("log", ""))
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(
            request,
            _(
                "The engine states %(tokens)s tokens of KV capacity: shown beside the prediction and recorded in the "
                "audit trail."
            )
            % {"tokens": f"{measured['token_capacity']:,}"},
        )
    return redirect("selection:capacity", pk=selection.pk, candidate_pk=candidate.pk)
