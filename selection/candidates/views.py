"""The candidates page of a selection: the list, the add form, the edit page, and archiving (a
candidate set aside leaves the comparison, the scores and new records, and can be restored)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from selection.candidates import probing
from selection.candidates.forms import CandidateForm
from selection.candidates.screening import documentation_screen, override_screen, selection_priorities
from selection.candidates.services import add_candidate, archive_candidate, restore_candidate, update_candidate
from selection.domain.screening import DIMENSION_NAMES
from selection.models import Candidate, Constraints, Selection
from selection.selectors import archived_candidates, compared_candidates
from selection.web import attach_service_errors, get_candidate, get_selection, page_context, require_edit


@login_required
@require_http_methods(["GET", "POST"])
def candidates(request: HttpRequest, pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    form = CandidateForm(initial=_hardware_from_constraints(selection))
    if request.method == "POST":
        require_edit(request, selection)
        form = CandidateForm(request.POST, instance=Candidate(selection=selection))
        candidate = _add_candidate(request, selection, form) if form.is_valid() else None
        if candidate is not None:
            messages.success(request, _("Candidate “%(name)s” added.") % {"name": candidate.display_name})
            return redirect("selection:candidates", pk=selection.pk)
    context = page_context(request, selection, "candidates", form=form, **_candidates_page(selection))
    return render(request, "selection/candidates.html", context)


def _hardware_from_constraints(selection: Selection) -> dict:
    """A new candidate starts on the constraints' hardware: their GPU model and budget and their first KV
    precision (each can be changed)."""
    constraints = Constraints.objects.filter(selection=selection).first()
    if constraints is None:
        return {}
    initial = {"gpu_model": constraints.gpu_model}
    if constraints.gpu_count_budget:
        initial["gpu_count"] = constraints.gpu_count_budget
    if constraints.kv_precisions_allowed:
        initial["kv_precision"] = constraints.kv_precisions_allowed[0]
    return {k: v for k, v in initial.items() if v}


def _add_candidate(request: HttpRequest, selection: Selection, form: CandidateForm) -> Candidate | None:
    """The candidate added from a valid form, or None with the service's errors on the form."""
    try:
        return add_candidate(
            selection=selection,
            user=request.user,
            data=form.service_data(),
            api_key=form.service_api_key() or "",
            model_justification=form.service_justification(),
        )
    except ValidationError as error:
        attach_service_errors(form, error)
        return None


def _candidates_page(selection: Selection) -> dict:
    """The compared candidates with their documentation screen, and the archived ones."""
    compared = list(compared_candidates(selection))
    for candidate in compared:  # flagged where the candidate is listed: never planned silently
        candidate.version_note = probing.version_note(candidate)
        candidate.probe_notes = [
            probing.finding_text(f) for f in (candidate.endpoint_probe or {}).get("findings") or []
        ]
    priorities = selection_priorities(selection)
    return {
        "candidates": compared,
        # decision step 3, before any test: what the documentation says for the priority dimensions
        "screens": [{"candidate": c, **documentation_screen(c, priorities)} for c in compared],
        "priority_names": [DIMENSION_NAMES[d] for d in priorities],
        "gates_set": selection.gates.exists(),
        "archived": archived_candidates(selection),
    }


@login_required
@require_http_methods(["GET", "POST"])
def candidate_edit(request: HttpRequest, pk: int, candidate_pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    candidate = get_object_or_404(selection.candidates.select_related("engine"), pk=candidate_pk)
    form = CandidateForm(instance=candidate)
    if request.method == "POST":
        require_edit(request, selection)
        form = CandidateForm(request.POST, instance=Candidate.objects.get(pk=candidate.pk))
        if form.is_valid():
            try:
                update_candidate(
                    candidate=Candidate.objects.get(pk=candidate.pk),
                    user=request.user,
                    data=form.service_data(),
                    api_key=form.service_api_key(),
                    model_justification=form.service_justification(),
                )
            except ValidationError as error:
                attach_service_errors(form, error)
            else:
                messages.success(request, _("Candidate saved."))
                return redirect("selection:candidates", pk=selection.pk)
    return render(
        request,
        "selection/candidate_edit.html",
        page_context(request, selection, "candidates", form=form, candidate=candidate),
    )


@login_required
@require_POST
def candidate_archive(request: HttpRequest, pk: int, candidate_pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    require_edit(request, selection)
    candidate = archive_candidate(candidate=get_candidate(selection, candidate_pk), user=request.user)
    messages.success(
        request,
        _("Candidate “%(name)s” archived: it is out of the comparison and new records, and kept with its runs.")
        % {"name": candidate.display_name},
    )
    return redirect("selection:candidates", pk=selection.pk)


@login_required
@require_POST
def candidate_restore(request: HttpRequest, pk: int, candidate_pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    require_edit(request, selection)
    candidate = get_candidate(selection, candidate_pk)
    try:
        restore_candidate(candidate=candidate, user=request.user)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, _("Candidate “%(name)s” restored.") % {"name": candidate.display_name})
    return redirect("selection:candidates", pk=selection.pk)


@login_required
@require_POST
def candidate_screen_override(request: HttpRequest, pk: int, candidate_pk: int) -> HttpResponse:
    """Keep a candidate the documentation screen rules out (a justification is required; audited)."""
    selection = get_selection(request, pk)
    require_edit(request, selection)
    candidate = get_candidate(selection, candidate_pk)
    try:
        override_screen(candidate=candidate, user=request.user, justification=request.POST.get("justification", ""))
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(
            request,
            _("“%(name)s” is kept despite the documentation screen; its tests can run. Recorded in the audit trail.")
            % {"name": candidate.display_name},
        )
    return redirect(reverse("selection:candidates", args=[selection.pk]) + "#screen")
