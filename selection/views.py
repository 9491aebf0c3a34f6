"""The architect's pages. Thin: parse the form, call the service, redirect.

Every view resolves its selection through ``selectors.selections_for`` (another team's selection
is a 404) and every write checks ``selectors.can_edit`` (reviewers and procurement get a 403).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from benchmarks.models import BenchmarkRun

from . import selectors, services
from .domain import criteria as criteria_domain
from .domain.scenarios import SCENARIO_NAMES
from .forms import (CONSTRAINT_GROUPS, CONSTRAINT_UNITS, CandidateForm, ConstraintsForm, GatesForm, SelectionCreateForm, WeightsForm,
                    attach_service_errors)
from .i18n_names import translate_name
from .models import Candidate, Constraints, Membership, Selection


def _evidence_label(source: str) -> str:
    """How a criterion is scored: from measurements, documented capabilities, or both."""
    return {"measured": _("measured"), "documented": _("documented"),
            "both": _("measured + documented")}.get(source, source)


@dataclass(frozen=True)
class NextStep:
    label: str
    hint: str
    url: str


def next_step(selection: Selection, *, has_constraints: bool | None = None, candidate_count: int | None = None,
              gate_count: int | None = None) -> NextStep:
    """What the architect should do next on this selection (the five steps of DOMAIN.md)."""
    if has_constraints is None:
        has_constraints = Constraints.objects.filter(selection=selection).exists()
    pk = selection.pk
    if not has_constraints:
        return NextStep(_("Fill in the constraints"), _("One page of business constraints drives everything else."),
                        reverse("selection:constraints", args=[pk]))
    if not selection.scenario_accepted:
        return NextStep(_("Review the scenario"), _("Check the inferred scenario and its reasons, then accept it."),
                        reverse("selection:scenario", args=[pk]))
    if (gate_count if gate_count is not None else selection.gates.count()) == 0:
        return NextStep(_("Choose gates"), _("Pick 2-3 priority dimensions as first-round gates."),
                        reverse("selection:gates", args=[pk]))
    if (candidate_count if candidate_count is not None else selection.candidates.count()) == 0:
        return NextStep(_("Add candidates"), _("Add the engines to compare, with their endpoints and hardware."),
                        reverse("selection:candidates", args=[pk]))
    record = selection.records.first()
    if record is not None and record.status in ("signed", "superseded"):
        return NextStep(_("Decided"), _("The signed decision record is ready for procurement."),
                        reverse("selection:record", args=[pk, record.pk]))
    if record is not None and record.status in ("in_review", "approved"):
        return NextStep(_("Approve and sign the record"), _("Each named owner approves, then signs in turn."),
                        reverse("selection:record", args=[pk, record.pk]))
    if record is not None:
        return NextStep(_("Send the record to review"), _("Complete the draft decision record and start the review."),
                        reverse("selection:record", args=[pk, record.pk]))
    if BenchmarkRun.objects.filter(candidate__selection=selection, status=BenchmarkRun.Status.SUCCEEDED).exists():
        return NextStep(_("Compare and decide"), _("Read the side-by-side comparison, then draft the decision record."),
                        reverse("selection:comparison", args=[pk]))
    return NextStep(_("Validate the candidates"), _("Check each candidate's capacity, then run the validation tests or "
                                                    "upload CI results."),
                    reverse("selection:evidence", args=[pk]))


def leading_candidate(selection: Selection) -> dict | None:
    """The latest scoring's leader and its evidence coverage (SIMULATED-only evidence is marked)."""
    score = selection.scores.filter(include_simulated=False).exclude(leader="").first() \
        or selection.scores.exclude(leader="").first()
    if score is None:
        return None
    leader = next((c for c in score.result.get("candidates", []) if c.get("candidate") == score.leader), {})
    return {"label": leader.get("label") or score.leader, "coverage": score.coverage,
            "simulated": not score.signable}


def _get_selection(request: HttpRequest, pk: int) -> Selection:
    return get_object_or_404(selectors.selections_for(request.user).select_related("team"), pk=pk)


def _require_edit(request: HttpRequest, selection: Selection) -> None:
    if not selectors.can_edit(request.user, selection):
        raise PermissionDenied(_("Only architects of this selection's team can change it."))


def _context(request: HttpRequest, selection: Selection, section: str, **extra) -> dict:
    return {"selection": selection, "section": section, "can_edit": selectors.can_edit(request.user, selection),
            "role": selectors.role_in(request.user, selection), **extra}


def _audit(selection: Selection, limit: int = 50):
    return selection.audit.select_related("actor")[:limit]


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    selections = (selectors.selections_for(request.user).select_related("team", "constraints")
                  .annotate(candidate_count=Count("candidates", distinct=True), gate_count=Count("gates", distinct=True)))
    rows = []
    for selection in selections:
        has_constraints = hasattr(selection, "constraints")
        rows.append({"selection": selection, "leader": leading_candidate(selection), "next": next_step(
            selection, has_constraints=has_constraints, candidate_count=selection.candidate_count,
            gate_count=selection.gate_count)})
    can_create = request.user.is_superuser or Membership.objects.filter(
        user=request.user, role=Membership.Role.ARCHITECT).exists()
    return render(request, "selection/dashboard.html", {"rows": rows, "can_create": can_create})


@login_required
@require_http_methods(["GET", "POST"])
def selection_create(request: HttpRequest) -> HttpResponse:
    form = SelectionCreateForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            selection = services.create_selection(user=request.user, **form.cleaned_data)
        except ValidationError as error:
            attach_service_errors(form, error)
        else:
            messages.success(request, _("Selection “%(name)s” created. Next: fill in the constraints.") % {
                "name": selection.name})
            return redirect("selection:constraints", pk=selection.pk)
    return render(request, "selection/create.html", {"form": form})


@login_required
def selection_detail(request: HttpRequest, pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    constraints = Constraints.objects.filter(selection=selection).first()
    summary = []
    if constraints:
        for _key, title, names in CONSTRAINT_GROUPS:
            summary.append((title, [(Constraints._meta.get_field(name).verbose_name, _display(constraints, name),
                                     CONSTRAINT_UNITS.get(name, "")) for name in names]))
    return render(request, "selection/detail.html", _context(
        request, selection, "overview", constraints=constraints, summary=summary,
        weights=_weight_rows(selection), gates=_gate_rows(selection),
        candidates=selection.candidates.select_related("engine"), audit=_audit(selection, 10),
        next=next_step(selection, has_constraints=constraints is not None),
        scenario_name=SCENARIO_NAMES.get(selection.scenario, "")))


def _display(constraints: Constraints, name: str):
    value = getattr(constraints, name)
    if name == "kv_precisions_allowed":
        return ", ".join(value or []) or "—"
    if isinstance(value, bool):
        return _("yes") if value else _("no")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return "—" if value in (None, "") else value


@login_required
@require_http_methods(["GET", "POST"])
def constraints_edit(request: HttpRequest, pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    instance = Constraints.objects.filter(selection=selection).first() or Constraints(selection=selection)
    if request.method == "POST":
        _require_edit(request, selection)
        form = ConstraintsForm(request.POST, instance=instance)
        if form.is_valid():
            try:
                services.save_constraints(selection=selection, user=request.user, data=form.service_data())
            except ValidationError as error:
                attach_service_errors(form, error)
            else:
                selection.refresh_from_db()
                messages.success(request, _("Constraints saved. Inferred scenario: %(scenario)s.") % {
                    "scenario": selection.get_scenario_display()})
                return redirect("selection:scenario", pk=selection.pk)
    else:
        form = ConstraintsForm(instance=instance)
    return render(request, "selection/constraints.html", _context(request, selection, "constraints", form=form))


def _weight_rows(selection: Selection) -> list[dict]:
    rows = []
    for weight in selection.weights.select_related("updated_by"):
        criterion = criteria_domain.CRITERIA_BY_ID.get(weight.criterion)
        rows.append({"criterion": criterion, "id": weight.criterion, "weight": weight, "percent": weight.weight * 100,
                     "dimension": _dimension_name(criterion.dimension) if criterion else ""})
    return rows


def _dimension_name(dimension_id: str) -> str:
    return next((translate_name(d.name) for d in criteria_domain.DIMENSIONS if d.id == dimension_id), dimension_id)


def _gate_warnings(gates: dict[str, float]) -> list[str]:
    """services.gate_warnings, in the active language (one warning per condition it raises)."""
    return [_("%(count)s gates chosen: pick 2-3 priority dimensions. No candidate scores full marks everywhere.")
            % {"count": len(gates)} for _warning in services.gate_warnings(gates)]


def _gate_rows(selection: Selection) -> list[dict]:
    return [{"dimension": _dimension_name(g.dimension), "id": g.dimension, "threshold": g.threshold}
            for g in selection.gates.all()]


def _weight_table(form: WeightsForm, selection: Selection) -> list[dict]:
    """One row per criterion of the form: its input next to the stored weight (if any)."""
    stored = {w.criterion: w for w in selection.weights.all()}
    return [{"field": form[c.id], "criterion": c, "weight": stored.get(c.id), "dimension": _dimension_name(c.dimension),
             "evidence": _evidence_label(c.source)} for c in form.criteria]


def _weights_form(selection: Selection, data=None) -> WeightsForm:
    scenarios = list((selection.scenario_mix or {selection.scenario or "A": 1}).keys())
    current = {w.criterion: w.weight for w in selection.weights.all()}
    return WeightsForm(data, criteria=criteria_domain.criteria_for(scenarios), current=current)


@login_required
@require_http_methods(["GET", "POST"])
def scenario(request: HttpRequest, pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    form = _weights_form(selection)
    has_constraints = Constraints.objects.filter(selection=selection).exists()
    if request.method == "POST":
        _require_edit(request, selection)
        if not has_constraints:
            messages.error(request, _("Fill in the constraints first: the weights start from the inferred scenario."))
            return redirect("selection:constraints", pk=selection.pk)
        form = _weights_form(selection, request.POST)
        if form.is_valid():
            try:
                services.update_weights(selection=selection, user=request.user, weights=form.weights(),
                                        justification=form.cleaned_data["justification"])
            except ValidationError as error:
                attach_service_errors(form, error, prefixes=("weights",))
            else:
                messages.success(request, _("Weights saved and recorded in the audit trail."))
                return redirect("selection:scenario", pk=selection.pk)
    mix = [{"scenario": s, "name": SCENARIO_NAMES.get(s, s), "percent": share * 100}
           for s, share in sorted((selection.scenario_mix or {}).items(), key=lambda kv: -kv[1])]
    return render(request, "selection/scenario.html", _context(
        request, selection, "scenario", form=form, weight_table=_weight_table(form, selection), mix=mix,
        has_constraints=has_constraints, scenario_name=SCENARIO_NAMES.get(selection.scenario, ""),
        audit=_audit(selection, 30)))


@login_required
@require_POST
def scenario_accept(request: HttpRequest, pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    _require_edit(request, selection)
    if not selection.scenario:
        messages.error(request, _("Fill in the constraints first: the scenario is inferred from them."))
        return redirect("selection:constraints", pk=selection.pk)
    services.accept_scenario(selection=selection, user=request.user)
    messages.success(request, _("Scenario %(scenario)s accepted. Next: choose the gates.") % {
        "scenario": selection.scenario})
    return redirect("selection:gates", pk=selection.pk)


@login_required
@require_http_methods(["GET", "POST"])
def gates(request: HttpRequest, pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    current = {g.dimension: g.threshold for g in selection.gates.all()}
    form = GatesForm(current=current)
    if request.method == "POST":
        _require_edit(request, selection)
        form = GatesForm(request.POST, current=current)
        if form.is_valid():
            try:
                services.set_gates(selection=selection, user=request.user, gates=form.gates())
            except ValidationError as error:
                attach_service_errors(form, error, prefixes=("gates",))
            else:
                # The >3 warning is shown on the page itself (server-side and live), not as a flash.
                messages.success(request, _("Gates saved."))
                return redirect("selection:gates", pk=selection.pk)
    priorities = criteria_domain.SCENARIO_PRIORITIES.get(selection.scenario, ())
    return render(request, "selection/gates.html", _context(
        request, selection, "gates", form=form, max_gates=criteria_domain.MAX_GATES,
        gate_warnings=_gate_warnings(current), audit=_audit(selection, 20),
        priorities=[_dimension_name(d) for d in priorities]))


@login_required
@require_http_methods(["GET", "POST"])
def candidates(request: HttpRequest, pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    form = CandidateForm()
    if request.method == "POST":
        _require_edit(request, selection)
        form = CandidateForm(request.POST, instance=Candidate(selection=selection))
        if form.is_valid():
            try:
                candidate = services.add_candidate(selection=selection, user=request.user, data=form.service_data(),
                                                   api_key=form.service_api_key() or "")
            except ValidationError as error:
                attach_service_errors(form, error)
            else:
                messages.success(request, _("Candidate “%(name)s” added.") % {"name": candidate.display_name})
                return redirect("selection:candidates", pk=selection.pk)
    return render(request, "selection/candidates.html", _context(
        request, selection, "candidates", form=form, candidates=selection.candidates.select_related("engine")))


@login_required
@require_http_methods(["GET", "POST"])
def candidate_edit(request: HttpRequest, pk: int, candidate_pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    candidate = get_object_or_404(selection.candidates.select_related("engine"), pk=candidate_pk)
    form = CandidateForm(instance=candidate)
    if request.method == "POST":
        _require_edit(request, selection)
        form = CandidateForm(request.POST, instance=Candidate.objects.get(pk=candidate.pk))
        if form.is_valid():
            try:
                services.update_candidate(candidate=Candidate.objects.get(pk=candidate.pk), user=request.user,
                                          data=form.service_data(), api_key=form.service_api_key())
            except ValidationError as error:
                attach_service_errors(form, error)
            else:
                messages.success(request, _("Candidate saved."))
                return redirect("selection:candidates", pk=selection.pk)
    return render(request, "selection/candidate_edit.html", _context(
        request, selection, "candidates", form=form, candidate=candidate))
