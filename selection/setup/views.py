"""The architect's pages. Thin: parse the form, call the service, redirect.

Every view resolves its selection through ``selectors.selections_for`` (another team's selection
is a 404) and every write checks ``selectors.can_edit`` (reviewers and procurement get a 403).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from selection import selectors
from selection.domain import criteria as criteria_domain
from selection.domain.scenarios import kv_not_decisive
from selection.i18n import dimension_name, scenario_name
from selection.models import PROCUREMENT_FIELDS, Constraints, DecisionRecord, Selection
from selection.records.reevaluation import due_records
from selection.setup.forms import (
    CONSTRAINT_GROUPS,
    CONSTRAINT_UNITS,
    ConstraintsForm,
    GatesForm,
    OwnersForm,
    ProcurementForm,
    SelectionCreateForm,
    WeightsForm,
)
from selection.setup.next_step import leading_candidate, next_step
from selection.setup.services import (
    accept_scenario,
    archive_selection,
    create_selection,
    restore_selection,
    save_constraints,
    set_gates,
    update_selection,
    update_weights,
)
from selection.web import (
    attach_service_errors,
    get_selection,
    page_context,
    recent_audit,
    require_archive,
    require_edit,
    service_saved,
)


def _evidence_label(source: str) -> str:
    """How a criterion is scored: from measurements, documented capabilities, or both."""
    return {"measured": _("measured"), "documented": _("documented"), "both": _("measured + documented")}.get(
        source, source
    )


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """The user's selections; archived ones only when asked for (`?archived=1`)."""
    show_archived = request.GET.get("archived") == "1"
    visible = selectors.selections_for(request.user)
    archived_count = visible.filter(status=Selection.Status.ARCHIVED).count()
    visible = (
        visible.filter(status=Selection.Status.ARCHIVED)
        if show_archived
        else visible.exclude(status=Selection.Status.ARCHIVED)
    )
    selections = visible.select_related("team", "constraints").annotate(
        candidate_count=Count("candidates", filter=Q(candidates__archived_at__isnull=True), distinct=True),
        gate_count=Count("gates", distinct=True),
    )
    context = {
        "rows": [_dashboard_row(selection) for selection in selections],
        "can_create": selectors.can_create_selection(request.user),
        "due": [] if show_archived else _due_reviews(request, selections),
        "show_archived": show_archived,
        "archived_count": archived_count,
    }
    return render(request, "selection/dashboard.html", context)


def _dashboard_row(selection: Selection) -> dict:
    """A selection on the dashboard: its leader and its next step."""
    return {
        "selection": selection,
        "leader": leading_candidate(selection),
        "next": next_step(
            selection,
            has_constraints=hasattr(selection, "constraints"),
            candidate_count=selection.candidate_count,
            gate_count=selection.gate_count,
        ),
    }


def _due_reviews(request: HttpRequest, selections) -> list[dict]:
    """Records due for review that no newer record supersedes yet, and whether this user may start one."""
    return [
        {"record": record, "can_start": selectors.can_edit(request.user, record.selection)}
        for record in due_records(selections)
        if not DecisionRecord.objects.filter(supersedes=record).exists()
    ]


@login_required
@require_http_methods(["GET", "POST"])
def selection_create(request: HttpRequest) -> HttpResponse:
    if not selectors.can_create_selection(request.user):
        raise PermissionDenied(_("Only a team's architects start selections; ask one to create it or to add you."))
    form = SelectionCreateForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            selection = create_selection(user=request.user, **form.cleaned_data)
        except ValidationError as error:
            attach_service_errors(form, error)
        else:
            messages.success(
                request, _("Selection “%(name)s” created. Next: fill in the constraints.") % {"name": selection.name}
            )
            return redirect("selection:constraints", pk=selection.pk)
    return render(request, "selection/create.html", {"form": form})


@login_required
@require_http_methods(["GET", "POST"])
def selection_procurement(request: HttpRequest, pk: int) -> HttpResponse:
    """Budget, licence terms, vendor and support, delivery owner: the record's first page states them."""
    selection = get_selection(request, pk)
    if request.method == "POST":
        require_edit(request, selection)
        form = ProcurementForm(request.POST, instance=Selection.objects.get(pk=selection.pk))
        if form.is_valid():
            try:
                update_selection(
                    selection=selection, user=request.user, **{k: form.cleaned_data[k] for k in PROCUREMENT_FIELDS}
                )
            except ValidationError as error:
                attach_service_errors(form, error)
            else:
                messages.success(request, _("Procurement details saved: the next record's first page states them."))
                return redirect("selection:records", pk=selection.pk)
    else:
        form = ProcurementForm(instance=selection)
    return render(
        request,
        "selection/procurement.html",
        page_context(request, selection, "records", form=form),
        status=400 if form.errors else 200,
    )


def _after_gates(selection: Selection) -> tuple[str, str]:
    """(url, label) of the step after the gates: add candidates, else gather their evidence."""
    if selectors.compared_candidates(selection).exists():
        return reverse("selection:evidence", args=[selection.pk]), _("Next: the evidence")
    return reverse("selection:candidates", args=[selection.pk]), _("Next: add the candidates to compare")


@login_required
@require_http_methods(["GET", "POST"])
def selection_owners(request: HttpRequest, pk: int) -> HttpResponse:
    """Change the owners and the observer: the API's rules (members of the team, three different people),
    and a security owner who is not the team's only architect (else nobody could draft the record)."""
    selection = get_selection(request, pk)
    form = OwnersForm(request.POST or None, selection=selection)
    if request.method == "POST":
        require_edit(request, selection)
        if form.is_valid() and service_saved(
            form, lambda: update_selection(selection=selection, user=request.user, **form.cleaned_data)
        ):
            messages.success(request, _("Owners saved. The audit trail records the change."))
            return redirect("selection:detail", pk=selection.pk)
    return render(
        request,
        "selection/owners.html",
        page_context(request, selection, "overview", form=form),
        status=400 if form.errors else 200,
    )


@login_required
def selection_detail(request: HttpRequest, pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    constraints = Constraints.objects.filter(selection=selection).first()
    summary = _constraints_summary(constraints) if constraints else []
    return render(
        request,
        "selection/detail.html",
        page_context(
            request,
            selection,
            "overview",
            constraints=constraints,
            summary=summary,
            weights=_weight_rows(selection),
            gates=_gate_rows(selection),
            candidates=selectors.compared_candidates(selection),
            audit=recent_audit(selection, 10),
            next=next_step(selection, has_constraints=constraints is not None),
            scenario_name=scenario_name(selection.scenario),
        ),
    )


def _constraints_summary(constraints: Constraints) -> list[tuple]:
    """The constraints by group: (title, [(label, value, unit)])."""
    return [
        (
            title,
            [
                (
                    Constraints._meta.get_field(name).verbose_name,
                    _display(constraints, name),
                    CONSTRAINT_UNITS.get(name, ""),
                )
                for name in names
            ],
        )
        for _key, title, names in CONSTRAINT_GROUPS
    ]


@login_required
@require_POST
def selection_archive(request: HttpRequest, pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    require_archive(request, selection)
    archive_selection(selection=selection, user=request.user)
    messages.success(
        request,
        _(
            "Selection “%(name)s” archived: it is off the dashboard and read-only; its records, evidence and audit "
            "trail are kept."
        )
        % {"name": selection.name},
    )
    return redirect("selection:detail", pk=selection.pk)


@login_required
@require_POST
def selection_restore(request: HttpRequest, pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    require_archive(request, selection)
    restore_selection(selection=selection, user=request.user)
    messages.success(request, _("Selection “%(name)s” restored.") % {"name": selection.name})
    return redirect("selection:detail", pk=selection.pk)


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
    selection = get_selection(request, pk)
    instance = Constraints.objects.filter(selection=selection).first() or Constraints(selection=selection)
    if request.method == "POST":
        require_edit(request, selection)
        form = ConstraintsForm(request.POST, instance=instance)
        if form.is_valid():
            try:
                save_constraints(selection=selection, user=request.user, data=form.service_data())
            except ValidationError as error:
                attach_service_errors(form, error)
            else:
                selection.refresh_from_db()
                messages.success(
                    request,
                    _("Constraints saved. Inferred scenario: %(scenario)s.")
                    % {"scenario": selection.get_scenario_display()},
                )
                return redirect("selection:scenario", pk=selection.pk)
    else:
        form = ConstraintsForm(instance=instance)
    return render(request, "selection/constraints.html", page_context(request, selection, "constraints", form=form))


def _weight_rows(selection: Selection) -> list[dict]:
    rows = []
    stored = list(selection.weights.select_related("updated_by"))
    shown = criteria_domain.percentages({w.criterion: w.weight for w in stored})
    for weight in stored:
        criterion = criteria_domain.CRITERIA_BY_ID.get(weight.criterion)
        rows.append(
            {
                "criterion": criterion,
                "id": weight.criterion,
                "weight": weight,
                "percent": shown[weight.criterion],
                "dimension": dimension_name(criterion.dimension) if criterion else "",
            }
        )
    return rows


def _gate_rows(selection: Selection) -> list[dict]:
    return [
        {"dimension": dimension_name(g.dimension), "id": g.dimension, "threshold": g.threshold}
        for g in selection.gates.all()
    ]


def _weight_table(form: WeightsForm, selection: Selection) -> list[dict]:
    """One row per criterion of the form: its input next to the stored weight (if any)."""
    stored = {w.criterion: w for w in selection.weights.all()}
    return [
        {
            "field": form[c.id],
            "criterion": c,
            "weight": stored.get(c.id),
            "percent": form.current_percent.get(c.id),
            "dimension": dimension_name(c.dimension),
            "evidence": _evidence_label(c.source),
        }
        for c in form.criteria
    ]


def _weights_form(selection: Selection, data=None) -> WeightsForm:
    scenarios = list((selection.scenario_mix or {selection.scenario or "A": 1}).keys())
    # What the scoring uses: each stored weight's share of their sum, shown to 0.1 % adding up to 100 %.
    current = criteria_domain.percentages({w.criterion: w.weight for w in selection.weights.all()})
    return WeightsForm(data, criteria=criteria_domain.criteria_for(scenarios), current_percent=current)


@login_required
@require_http_methods(["GET", "POST"])
def scenario(request: HttpRequest, pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    form = _weights_form(selection)
    has_constraints = Constraints.objects.filter(selection=selection).exists()
    if request.method == "POST":
        require_edit(request, selection)
        if not has_constraints:
            messages.error(request, _("Fill in the constraints first: the weights start from the inferred scenario."))
            return redirect("selection:constraints", pk=selection.pk)
        form = _weights_form(selection, request.POST)
        if form.is_valid() and service_saved(
            form,
            lambda: update_weights(
                selection=selection,
                user=request.user,
                weights=form.weights(),
                justification=form.cleaned_data["justification"],
            ),
            prefixes=("weights",),
        ):
            messages.success(request, _("Weights saved and recorded in the audit trail."))
            return redirect("selection:scenario", pk=selection.pk)
    context = page_context(
        request, selection, "scenario", form=form, **_scenario_page(selection, form, has_constraints)
    )
    return render(request, "selection/scenario.html", context)


def _scenario_page(selection: Selection, form: WeightsForm, has_constraints: bool) -> dict:
    """The scenario page beside its form: the weights table, the scenario mix and what decides here."""
    mix = [
        {"scenario": s, "name": scenario_name(s) or s, "percent": share * 100}
        for s, share in sorted((selection.scenario_mix or {}).items(), key=lambda kv: -kv[1])
    ]
    return {
        "weight_table": _weight_table(form, selection),
        "mix": mix,
        "has_constraints": has_constraints,
        "scenario_name": scenario_name(selection.scenario),
        # short traffic at low concurrency: say up front that KV-cache management does not decide here
        "kv_not_decisive": kv_not_decisive(selection.constraints.as_domain()) if has_constraints else None,
        "audit": recent_audit(selection, 30, actions=("constraints.", "scenario.", "weight.")),
    }


@login_required
@require_POST
def scenario_accept(request: HttpRequest, pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    require_edit(request, selection)
    if not selection.scenario:
        messages.error(request, _("Fill in the constraints first: the scenario is inferred from them."))
        return redirect("selection:constraints", pk=selection.pk)
    accept_scenario(selection=selection, user=request.user)
    messages.success(
        request, _("Scenario %(scenario)s accepted. Next: choose the gates.") % {"scenario": selection.scenario}
    )
    return redirect("selection:gates", pk=selection.pk)


@login_required
@require_http_methods(["GET", "POST"])
def gates(request: HttpRequest, pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    current = {g.dimension: g.threshold for g in selection.gates.all()}
    form = GatesForm(current=current)
    if request.method == "POST":
        require_edit(request, selection)
        form = GatesForm(request.POST, current=current)
        if form.is_valid() and service_saved(
            form, lambda: set_gates(selection=selection, user=request.user, gates=form.gates()), prefixes=("gates",)
        ):
            # The >3 warning is shown on the page itself (server-side and live), not as a flash.
            if not form.gates():
                messages.warning(
                    request,
                    _(
                        "Saved without gates: no candidate is screened out, the weights alone rank them, and the "
                        "documentation screen uses the scenario's priority dimensions. The method recommends 2-3 gates."
                    ),
                )
            messages.success(request, _("Gates saved."))
            return redirect("selection:gates", pk=selection.pk)
    priorities = criteria_domain.SCENARIO_PRIORITIES.get(selection.scenario, ())
    return render(
        request,
        "selection/gates.html",
        page_context(
            request,
            selection,
            "gates",
            form=form,
            max_gates=criteria_domain.MAX_GATES,
            gate_warnings=criteria_domain.gate_warnings(current),
            # the next step once gates are set: candidates (none yet) or the evidence
            next_step_url=None if not current else _after_gates(selection),
            audit=recent_audit(selection, 20, actions=("gates.",)),
            priorities=[dimension_name(d) for d in priorities],
        ),
    )
