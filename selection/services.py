"""Write operations on selections. Each validates first and writes inside one transaction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from .domain import criteria as criteria_domain
from .domain.scenarios import infer_scenario
from .models import (AuditEntry, Candidate, Constraints, CriterionWeight, Engine, Gate, Membership, Selection,
                     UploadToken, hash_token)
from .secretbox import encrypt
from .selectors import can_edit

CATALOG_PATH = Path(settings.BASE_DIR) / "selection" / "fixtures" / "engine_catalog.json"


def schedule_rescoring(selection_id: int) -> None:
    """After the current transaction commits, recompute scores on the `default` queue."""

    def send() -> None:
        from .tasks import recompute_scores

        try:
            recompute_scores.apply_async((selection_id,), retry=False)
        except Exception:  # broker down: scores are recomputed on the next read or change
            import logging

            logging.getLogger(__name__).warning("could not queue rescoring of selection %s", selection_id)

    transaction.on_commit(send)


def _require_editor(user, selection: Selection) -> None:
    if not can_edit(user, selection):
        raise PermissionDenied("Only architects of this selection's team can change it.")


def audit(selection: Selection, actor, action: str, field: str = "", old: Any = None, new: Any = None,
          justification: str = "") -> AuditEntry:
    return AuditEntry.objects.create(selection=selection, actor=actor, action=action, field=field,
                                     old=_jsonable(old), new=_jsonable(new), justification=justification)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str)) if value is not None else None


@transaction.atomic
def create_selection(*, user, team, name: str, description: str = "", business_owner, platform_owner,
                     security_owner, observer=None) -> Selection:
    if not Membership.objects.filter(team=team, user=user, role=Membership.Role.ARCHITECT).exists() and not user.is_superuser:
        raise PermissionDenied("Only an architect of the team can create a selection for it.")
    selection = Selection(team=team, name=name, description=description, business_owner=business_owner,
                          platform_owner=platform_owner, security_owner=security_owner, observer=observer,
                          created_by=user)
    selection.full_clean()
    selection.save()
    audit(selection, user, "selection.created", new={"name": name, "team": team.name})
    return selection


@transaction.atomic
def save_constraints(*, selection: Selection, user, data: dict[str, Any]) -> Constraints:
    """Create or update the one-pager, re-infer the scenario, and reset preset weights.

    Weights the architect edited are kept; preset weights follow the new scenario mix.
    """
    _require_editor(user, selection)
    selection = Selection.objects.select_for_update().get(pk=selection.pk)
    existing = Constraints.objects.filter(selection=selection).first()
    old = existing.as_domain() if existing else None
    constraints = existing or Constraints(selection=selection)
    for field, value in data.items():
        setattr(constraints, field, value)
    constraints.full_clean(exclude=["selection"])
    constraints.save()
    new = constraints.as_domain()
    changed = {k: (old.get(k) if old else None, v) for k, v in new.items() if not old or old.get(k) != v}
    for field, (before, after) in changed.items():
        audit(selection, user, "constraints.changed", field=field, old=before, new=after)
    _infer_and_apply(selection, user, new)
    return constraints


def _infer_and_apply(selection: Selection, user, constraints: dict[str, Any]) -> None:
    scenario, reasons, mix = infer_scenario(constraints)
    if scenario != selection.scenario or mix != selection.scenario_mix:
        audit(selection, user, "scenario.inferred", field="scenario",
              old={"scenario": selection.scenario, "mix": selection.scenario_mix},
              new={"scenario": scenario, "mix": mix})
        selection.scenario_accepted = False
    selection.scenario, selection.scenario_reasons, selection.scenario_mix = scenario, reasons, mix
    selection.save(update_fields=["scenario", "scenario_reasons", "scenario_mix", "scenario_accepted", "updated_at"])
    apply_preset_weights(selection=selection, user=user, keep_edited=True)


@transaction.atomic
def accept_scenario(*, selection: Selection, user) -> None:
    _require_editor(user, selection)
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
            CriterionWeight.objects.create(selection=selection, criterion=criterion, weight=round(value, 6),
                                           source=CriterionWeight.Source.PRESET, updated_by=user)
        elif abs(row.weight - value) > 1e-9 or row.source != CriterionWeight.Source.PRESET:
            row.weight, row.source, row.justification, row.updated_by = round(value, 6), CriterionWeight.Source.PRESET, "", user
            row.save()
    return presets


@transaction.atomic
def update_weights(*, selection: Selection, user, weights: dict[str, float], justification: str) -> dict[str, float]:
    """Edit weights (raw relative values, normalised to sum 1). A justification is required."""
    _require_editor(user, selection)
    errors: dict[str, str] = {}
    if not (justification or "").strip():
        errors["justification"] = "A justification is required to change weights."
    allowed = {c.id for c in criteria_domain.criteria_for(list((selection.scenario_mix or {"A": 1}).keys()))}
    for criterion, value in weights.items():
        if criterion not in allowed:
            errors[f"weights.{criterion}"] = f"unknown criterion for scenario {selection.scenario}; allowed: {', '.join(sorted(allowed))}"
        elif not isinstance(value, (int, float)) or value < 0 or value != value:
            errors[f"weights.{criterion}"] = f"must be a number >= 0, got {value!r}"
    if not errors and sum(weights.values()) <= 0:
        errors["weights"] = "at least one weight must be positive"
    if errors:
        raise ValidationError(errors)
    normalised = criteria_domain.normalise({c: float(v) for c, v in weights.items()})
    existing = {w.criterion: w for w in selection.weights.select_for_update()}
    for criterion, value in normalised.items():
        row = existing.get(criterion) or CriterionWeight(selection=selection, criterion=criterion, weight=0)
        old = row.weight if row.pk else None
        if row.pk and abs(old - value) < 1e-9:
            continue
        row.weight, row.source, row.justification, row.updated_by = round(value, 6), CriterionWeight.Source.EDITED, justification, user
        row.save()
        audit(selection, user, "weight.changed", field=criterion, old=old, new=round(value, 6), justification=justification)
    for criterion in set(existing) - set(normalised):
        audit(selection, user, "weight.removed", field=criterion, old=existing[criterion].weight, new=None,
              justification=justification)
        existing[criterion].delete()
    schedule_rescoring(selection.pk)
    return normalised


@transaction.atomic
def set_gates(*, selection: Selection, user, gates: dict[str, float]) -> list[str]:
    """Replace the gates. Returns warnings (more than 3 gates is allowed but discouraged)."""
    _require_editor(user, selection)
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
    return gate_warnings(gates)


def gate_warnings(gates: dict[str, float]) -> list[str]:
    if len(gates) > criteria_domain.MAX_GATES:
        return [f"{len(gates)} gates chosen: pick 2-3 priority dimensions. No candidate scores full marks everywhere."]
    return []


@transaction.atomic
def add_candidate(*, selection: Selection, user, data: dict[str, Any], api_key: str = "") -> Candidate:
    _require_editor(user, selection)
    candidate = Candidate(selection=selection, **data)
    if api_key:
        candidate.api_key_encrypted = encrypt(api_key)
    candidate.full_clean()
    candidate.save()
    audit(selection, user, "candidate.added", field="candidate", new={"id": candidate.pk, "engine": candidate.engine.slug,
                                                                    "version": candidate.engine_version})
    return candidate


@transaction.atomic
def update_candidate(*, candidate: Candidate, user, data: dict[str, Any], api_key: str | None = None) -> Candidate:
    _require_editor(user, candidate.selection)
    old = {k: getattr(candidate, k) for k in data}
    for field, value in data.items():
        setattr(candidate, field, value)
    if api_key is not None:
        candidate.api_key_encrypted = encrypt(api_key) if api_key else ""
    candidate.full_clean()
    candidate.save()
    audit(candidate.selection, user, "candidate.changed", field=f"candidate:{candidate.pk}", old=old,
          new={k: getattr(candidate, k) for k in data})
    return candidate


@transaction.atomic
def create_upload_token(*, selection: Selection, user, name: str) -> tuple[UploadToken, str]:
    """Returns the token row and the raw token, which is never stored and shown only once."""
    _require_editor(user, selection)
    if not name.strip():
        raise ValidationError({"name": "A name is required (e.g. 'github-actions')."})
    raw = UploadToken.generate()
    token = UploadToken.objects.create(selection=selection, name=name.strip(), key_hash=hash_token(raw),
                                       key_hint=raw[:8], created_by=user)
    audit(selection, user, "token.created", field="upload_token", new={"name": token.name, "hint": token.key_hint})
    return token, raw


@transaction.atomic
def revoke_upload_token(*, token: UploadToken, user) -> None:
    _require_editor(user, token.selection)
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit(token.selection, user, "token.revoked", field="upload_token", old={"name": token.name})


@transaction.atomic
def load_engine_catalog(path: Path | None = None) -> int:
    """Load (or update) the engine catalog fixture into Engine rows. Returns the engine count."""
    document = json.loads(Path(path or CATALOG_PATH).read_text(encoding="utf-8"))
    version = str(document.get("catalog_version", "unversioned"))
    count = 0
    for entry in document["engines"]:
        Engine.objects.update_or_create(slug=entry["slug"], defaults={
            "name": entry.get("name", entry["slug"]), "catalog_version": version, "data": entry})
        count += 1
    return count
