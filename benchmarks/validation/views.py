"""The validation page of a candidate: the planned tests with their editable parameters, and Run."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET

from benchmarks import suite
from benchmarks.harness import estimates
from benchmarks.presentation import run_progress_context
from benchmarks.validation import specs
from benchmarks.validation.dispatch import ValidationError, start_validation
from benchmarks.validation.forms import ValidationParamsForm
from benchmarks.validation.plan import priority_order, validation_plan
from selection.candidates.screening import documentation_screen, offered_for_tests
from selection.domain import launch_flags
from selection.domain.screening import DIMENSION_NAMES
from selection.i18n import message_text, translate_test
from selection.models import Candidate, Selection
from selection.selectors import archived_refusal
from selection.web import action_of, get_candidate, get_selection, page_context, page_url, require_edit


def _plan_forms(candidate: Candidate, bound: ValidationParamsForm | None = None) -> list[dict]:
    """The plan's cards, the priority dimensions' tests first and the others marked optional."""
    plan = validation_plan(candidate)
    priority = dict(priority_order(candidate))
    cards = []
    for test, params in plan.items():
        form = bound if bound is not None and bound.test == test else ValidationParamsForm(plan=params, test=test)
        info = suite.BY_ID[test]
        cards.append(
            {
                "test": test,
                "form": form,
                "title": f"{info.number}. {_(info.title)}",
                "text": _(info.description),
                "estimate": estimate_view(specs.estimate(test, params)),
                "off_variant": prefix_off_view(candidate) if suite.BY_ID[test].off_variant else None,
                "priority": priority.get(test, True),
                "feeds": [DIMENSION_NAMES[d] for d in info.feeds],
            }
        )
    return cards


def prefix_off_view(candidate: Candidate) -> dict:
    """What the prefix-reuse test compares caching on with: the candidate's caching-off endpoint, the
    same llama.cpp endpoint with cache_prompt: false, or nothing (theory only), and the launch flags
    that start the off variant of the candidate's engine."""
    flags = launch_flags.prefix_off_flags(candidate.engine.slug, candidate.launch_flags)
    if candidate.prefix_off_endpoint_url:
        kind = "endpoint"
    elif candidate.engine.slug == "llama-cpp":
        kind = "cache_prompt"
    else:
        kind = "none"
    return {"kind": kind, "url": candidate.prefix_off_endpoint_url, "flags": flags}


def estimate_view(figures: dict | None) -> dict | None:
    """An estimate (`benchmarks.harness.estimates`) in words: duration, load, and its warnings."""
    if figures is None:
        return None
    return {
        **figures,
        "duration": duration_words(figures["seconds"]),
        "tokens_text": compact_number(figures["tokens"]),
        "requests_text": compact_number(figures["requests"]),
        "long": estimates.LONG in figures["warnings"],
        "heavy": estimates.HEAVY in figures["warnings"],
    }


def duration_words(seconds: float) -> str:
    if seconds < 90:
        return _("about %(n)s s") % {"n": int(round(seconds))}
    minutes = int(round(seconds / 60))
    if minutes < 60:
        return _("about %(n)s min") % {"n": minutes}
    if minutes % 60 == 0:
        return _("about %(h)s h") % {"h": minutes // 60}
    return _("about %(h)s h %(m)s min") % {"h": minutes // 60, "m": minutes % 60}


def compact_number(value: float) -> str:
    """12 345 678 -> "12.3 M", 45 600 -> "45.6 K": an estimate's size, not its digits."""
    for limit, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " K")):
        if value >= limit:
            return f"{value / limit:.1f}".rstrip("0").rstrip(".") + suffix
    return str(int(value))


def _validation_page(
    request: HttpRequest,
    selection: Selection,
    candidate: Candidate,
    bound: ValidationParamsForm | None = None,
    refusal: dict | None = None,
    status: int = 200,
) -> HttpResponse:
    context = page_context(
        request,
        selection,
        "evidence",
        candidate=candidate,
        refusal=refusal,
        page_url=page_url("selection:validation", pk=selection.pk, candidate_pk=candidate.pk),
    )
    context["cards"] = _plan_forms(candidate, bound)
    context["screen"] = screen = documentation_screen(candidate)
    context["archived"] = archived_refusal(candidate)
    context["testable"] = offered_for_tests(screen) and not context["archived"]
    runs = candidate.runs.all()[:50]
    context["runs"] = [run_progress_context(selection, run, context["can_edit"]) for run in runs]
    return render(request, "benchmarks/validation.html", context, status=status)


@login_required
@require_GET
def validation(request: HttpRequest, pk: int, candidate_pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    return _validation_page(request, selection, get_candidate(selection, candidate_pk))


@login_required
@action_of("selection:validation", "pk", "candidate_pk")
def validation_start(request: HttpRequest, pk: int, candidate_pk: int, test: str) -> HttpResponse:
    selection = get_selection(request, pk)
    require_edit(request, selection)
    candidate = get_candidate(selection, candidate_pk)
    plan = validation_plan(candidate)
    if test not in plan:
        messages.error(request, _("Unknown test “%(test)s”: choose one of the tests below.") % {"test": test})
        return redirect("selection:validation", pk=selection.pk, candidate_pk=candidate.pk)
    form = ValidationParamsForm(request.POST, plan=plan[test], test=test)
    if not form.is_valid():
        return _validation_page(request, selection, candidate, bound=form, status=400)
    try:
        run = start_validation(
            candidate=candidate,
            test=test,
            user=request.user,
            params=form.params(),
            label=form.cleaned_data.get("label") or "",
        )
    except ValidationError as error:
        field, _sep, reason = str(error).partition(": ")
        shown = message_text(error.reason) if error.reason is not None else reason or field  # the page's language
        refusal = {"test": test, "field": field if reason else "", "reason": shown}
        return _validation_page(request, selection, candidate, bound=form, refusal=refusal, status=400)
    messages.success(
        request,
        _("Run #%(run)s of %(test)s queued. Its progress updates below.")
        % {"run": run.pk, "test": translate_test(test)},
    )
    return redirect(reverse("selection:validation", args=[selection.pk, candidate.pk]) + "#runs")
