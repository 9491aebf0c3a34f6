"""Write operations on selections. Each validates first and writes inside one transaction."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from selection.audit import audit
from selection.domain import criteria as criteria_domain
from selection.domain.messages import Message, to_json
from selection.domain.scenarios import infer_scenario
from selection.models import (
    OWNER_FIELDS,
    PROCUREMENT_FIELDS,
    Constraints,
    CriterionWeight,
    Gate,
    Membership,
    Selection,
    drafter_conflict,
)
from selection.selectors import require_archiver, require_editor
from selection.tasks import schedule_rescoring


@transaction.atomic
def create_selection(
    *,
    user,
    team,
    name: str,
    description: str = "",
    business_owner,
    platform_owner,
    security_owner,
    observer=None,
    **procurement: Any,
) -> Selection:
    """A new selection of `team`; `procurement` are the optional PROCUREMENT_FIELDS (budget, licence terms,
    vendor and support, delivery owner) the record's first page states."""
    if (
        not Membership.objects.filter(team=team, user=user, role=Membership.Role.ARCHITECT).exists()
        and not user.is_superuser
    ):
        raise PermissionDenied("Only an architect of the team can create a selection for it.")
    selection = Selection(
        team=team,
        name=name,
        description=description,
        business_owner=business_owner,
        platform_owner=platform_owner,
        security_owner=security_owner,
        observer=observer,
        created_by=user,
        **{k: v for k, v in procurement.items() if k in PROCUREMENT_FIELDS},
    )
    selection.full_clean()
    _refuse_dead_end(selection)
    selection.save()
    audit(
        selection,
        user,
        "selection.created",
        new={"name": name, "team": team.name, **{k: _shown(v) for k, v in procurement.items() if v not in (None, "")}},
    )
    return selection


SELECTION_FIELDS = ("name", "description", "team", *OWNER_FIELDS, "observer", *PROCUREMENT_FIELDS)


@transaction.atomic
def update_selection(*, selection: Selection, user, **fields: Any) -> Selection:
    """Rename, re-describe, re-assign the owners (three different people; the observer may be any) or
    change what the record's first page states for procurement (budget, licence terms, vendor, delivery)."""
    require_editor(user, selection)
    selection = Selection.objects.select_for_update().get(pk=selection.pk)
    changed = {k: v for k, v in fields.items() if k in SELECTION_FIELDS and getattr(selection, k) != v}
    old = {k: _shown(getattr(selection, k)) for k in changed}
    for key, value in changed.items():
        setattr(selection, key, value)
    selection.full_clean()
    if {"security_owner", "team"} & set(changed):
        _refuse_dead_end(selection)
    if changed:
        selection.save()
        audit(selection, user, "selection.changed", old=old, new={k: _shown(v) for k, v in changed.items()})
    return selection


def _refuse_dead_end(selection: Selection) -> None:
    """Owners that would stop the selection at its last step are refused when set (see `drafter_conflict`)."""
    problem = drafter_conflict(selection.team, selection.security_owner)
    if problem:
        raise ValidationError({"security_owner": problem})


def _shown(value: Any) -> Any:
    """A user or team as its name in the audit trail."""
    if hasattr(value, "get_username"):
        return value.get_username()
    return str(value) if value is not None and not isinstance(value, (str, int, float, bool)) else value


@transaction.atomic
def save_constraints(*, selection: Selection, user, data: dict[str, Any], justification: str = "") -> Constraints:
    """Create or update the one-pager, re-infer the scenario, and reset preset weights.

    Weights the architect edited are kept; preset weights follow the new scenario mix. The
    justification goes with every field's audit entry (a trace's proposal: "from trace <sha256>").
    """
    require_editor(user, selection)
    selection = Selection.objects.select_for_update().get(pk=selection.pk)
    existing = Constraints.objects.filter(selection=selection).first()
    old = existing.as_domain() if existing else None
    constraints = existing or Constraints(selection=selection)
    for field, value in data.items():
        setattr(constraints, field, value)
    constraints.full_clean(exclude=["selection"])
    constraints.save()
    new = constraints.as_domain()
    before = old or {}
    changed = {k: (before.get(k), v) for k, v in new.items() if _blank(before.get(k)) != _blank(v)}
    for field, (before, after) in changed.items():
        audit(selection, user, "constraints.changed", field=field, old=before, new=after, justification=justification)
    _infer_and_apply(selection, user, new)
    if changed:  # the scenario, the preset weights and the budgets the indicators are judged against
        schedule_rescoring(selection.pk)
    return constraints


def _blank(value: Any) -> Any:
    """An empty text or list is no value: saving "" over None is not a change worth an audit entry."""
    return None if value in ("", [], None) else value


def _infer_and_apply(selection: Selection, user, constraints: dict[str, Any]) -> None:
    scenario, reasons, mix = infer_scenario(constraints)
    reasons = to_json(reasons)  # stored as message dicts, rendered in the reader's language
    if scenario != selection.scenario or mix != selection.scenario_mix:
        audit(
            selection,
            user,
            "scenario.inferred",
            field="scenario",
            old={"scenario": selection.scenario, "mix": selection.scenario_mix},
            new={"scenario": scenario, "mix": mix},
        )
        selection.scenario_accepted = False
    selection.scenario, selection.scenario_reasons, selection.scenario_mix = scenario, reasons, mix
    selection.save(update_fields=["scenario", "scenario_reasons", "scenario_mix", "scenario_accepted", "updated_at"])
    apply_preset_weights(selection=selection, user=user, keep_edited=True)


@transaction.atomic
def archive_selection(*, selection: Selection, user) -> Selection:
    """Take a selection off the dashboard and make it read-only; its records (signed ones stay valid),
    evidence and audit trail are kept. The status it had is audited, and restored by `restore_selection`."""
    require_archiver(user, selection)
    selection = Selection.objects.select_for_update().get(pk=selection.pk)
    if selection.status != Selection.Status.ARCHIVED:
        old = selection.status
        selection.status = Selection.Status.ARCHIVED
        selection.save(update_fields=["status", "updated_at"])
        audit(selection, user, "selection.archived", field="status", old=old, new=selection.status)
    return selection


@transaction.atomic
def restore_selection(*, selection: Selection, user) -> Selection:
    """Back on the dashboard with the status it had when it was archived."""
    require_archiver(user, selection)
    selection = Selection.objects.select_for_update().get(pk=selection.pk)
    if selection.status == Selection.Status.ARCHIVED:
        archived = selection.audit.filter(action="selection.archived").order_by("-at", "-id").first()
        previous = archived.old if archived is not None else None
        known = previous in Selection.Status.values and previous != Selection.Status.ARCHIVED
        selection.status = previous if known else Selection.Status.DRAFT
        selection.save(update_fields=["status", "updated_at"])
        audit(
            selection, user, "selection.restored", field="status", old=Selection.Status.ARCHIVED, new=selection.status
        )
    return selection


@transaction.atomic
def accept_scenario(*, selection: Selection, user) -> None:
    require_editor(user, selection)
    selection.scenario_accepted = True
    selection.save(update_fields=["scenario_accepted", "updated_at"])
    audit(selection, user, "scenario.accepted", new={"scenario": selection.scenario, "mix": selection.scenario_mix})


def apply_preset_weights(*, selection: Selection, user, keep_edited: bool = True) -> dict[str, float]:
    """Write the mix-blended presets; edited weights stay unless keep_edited is False."""
    presets = criteria_domain.blended_weights(selection.scenario_mix or {selection.scenario or "A": 1.0})
    existing = {w.criterion: w for w in selection.weights.all()}
    for criterion in set(existing) - set(presets):
        if existing[criterion].source == CriterionWeight.Source.PRESET or not keep_edited:
            existing[criterion].delete()
    for criterion, value in presets.items():
        row = existing.get(criterion)
        if row and keep_edited and row.source == CriterionWeight.Source.EDITED:
            continue
        if row is None:
            CriterionWeight.objects.create(
                selection=selection,
                criterion=criterion,
                weight=round(value, 6),
                source=CriterionWeight.Source.PRESET,
                updated_by=user,
            )
        elif abs(row.weight - value) > 1e-9 or row.source != CriterionWeight.Source.PRESET:
            row.weight, row.source, row.justification, row.updated_by = (
                round(value, 6),
                CriterionWeight.Source.PRESET,
                "",
                user,
            )
            row.save()
    return presets


@transaction.atomic
def update_weights(*, selection: Selection, user, weights: dict[str, float], justification: str) -> dict[str, float]:
    """Edit weights (relative values, normalised to sum 1). A justification is required.

    A row counts as edited when its value differs from its current percentage as the page shows it
    (`criteria.percentages`); only those rows become "edited" and carry the justification. The
    others keep their exact share and their source: renormalised around the edit, not edited.
    """
    require_editor(user, selection)
    errors: dict[str, str] = {}
    if not (justification or "").strip():
        errors["justification"] = "A justification is required to change weights."
    allowed = {c.id for c in criteria_domain.criteria_for(list((selection.scenario_mix or {"A": 1}).keys()))}
    for criterion, value in weights.items():
        if criterion not in allowed:
            errors[f"weights.{criterion}"] = (
                f"unknown criterion for scenario {selection.scenario}; allowed: {', '.join(sorted(allowed))}"
            )
        elif not isinstance(value, (int, float)) or value < 0 or value != value:
            errors[f"weights.{criterion}"] = f"must be a number >= 0, got {value!r}"
    if not errors and sum(weights.values()) <= 0:
        errors["weights"] = _("At least one weight must be positive.")
    if errors:
        raise ValidationError(errors)
    existing = {w.criterion: w for w in selection.weights.select_for_update()}
    stored = {c: row.weight for c, row in existing.items()}
    shown = criteria_domain.percentages(stored)
    exact = {c: share * 100 for c, share in criteria_domain.normalise(stored).items()} if sum(stored.values()) else {}
    edited = {c for c, v in weights.items() if c not in shown or abs(float(v) - shown[c]) > 0.05}
    raw = {c: (float(v) if c in edited else exact.get(c, 0.0)) for c, v in weights.items()}
    normalised = criteria_domain.normalise(raw)
    for criterion, value in normalised.items():
        row = existing.get(criterion) or CriterionWeight(selection=selection, criterion=criterion, weight=0)
        old = row.weight if row.pk else None
        if row.pk and abs(old - value) < 1e-9:
            continue
        row.weight = round(value, 6)
        if criterion in edited:
            row.source, row.justification, row.updated_by = CriterionWeight.Source.EDITED, justification, user
        row.save()
        audit(
            selection,
            user,
            "weight.changed" if criterion in edited else "weight.renormalised",
            field=criterion,
            old=old,
            new=round(value, 6),
            justification=justification,
        )
    for criterion in set(existing) - set(normalised):
        audit(
            selection,
            user,
            "weight.removed",
            field=criterion,
            old=existing[criterion].weight,
            new=None,
            justification=justification,
        )
        existing[criterion].delete()
    schedule_rescoring(selection.pk)
    return normalised


@transaction.atomic
def set_gates(*, selection: Selection, user, gates: dict[str, float]) -> list[Message]:
    """Replace the gates. Returns `criteria_domain.gate_warnings` (more than 3 gates is allowed but discouraged)."""
    require_editor(user, selection)
    errors = {}
    for dimension, threshold in gates.items():
        if dimension not in criteria_domain.DIMENSION_IDS:
            errors[f"gates.{dimension}"] = f"unknown dimension; one of {', '.join(criteria_domain.DIMENSION_IDS)}"
        elif not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
            errors[f"gates.{dimension}"] = f"threshold must be between 0 and 1, got {threshold!r}"
    if errors:
        raise ValidationError(errors)
    old = {g.dimension: g.threshold for g in selection.gates.all()}
    if old != gates:
        selection.gates.all().delete()
        for dimension, threshold in gates.items():
            Gate.objects.create(selection=selection, dimension=dimension, threshold=float(threshold))
        audit(selection, user, "gates.changed", field="gates", old=old, new=gates)
        schedule_rescoring(selection.pk)
    return criteria_domain.gate_warnings(gates)
