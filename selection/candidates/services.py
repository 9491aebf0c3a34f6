"""Candidates (a catalog engine, its version, flags, endpoint and hardware) and the engine catalog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from benchmarks.models import BenchmarkRun
from benchmarks.validation.dispatch import request_cancel
from benchmarks.validation.target import candidate_urls, lenient_resolver, refused_urls
from selection.audit import audit
from selection.candidates import probing
from selection.domain import catalog as catalog_domain
from selection.domain import limits
from selection.domain.capacity.memory import valid_tensor_parallel
from selection.domain.capacity.model_config import model_spec
from selection.i18n import message_text
from selection.models import KV_PRECISION_CHOICES, Candidate, Constraints, Engine, Selection, breach_message
from selection.secretbox import encrypt
from selection.selectors import archived_refusal
from selection.setup.services import require_editor
from selection.tasks import schedule_rescoring

CATALOG_PATH = Path(settings.BASE_DIR) / "selection" / "fixtures" / "engine_catalog.json"


@transaction.atomic
def add_candidate(
    *, selection: Selection, user, data: dict[str, Any], api_key: str = "", model_justification: str = ""
) -> Candidate:
    """Add a candidate; its endpoint is probed first (`probing`): one serving another model than the
    selection's is refused unless `model_justification` keeps it (audited)."""
    require_editor(user, selection)
    candidate = Candidate(selection=selection, **data)
    if api_key:
        candidate.api_key_encrypted = encrypt(api_key)
    check_candidate(candidate)
    check_served_model(candidate, user, model_justification)
    candidate.save()
    audit(
        selection,
        user,
        "candidate.added",
        field="candidate",
        new={"id": candidate.pk, "engine": candidate.engine.slug, "version": candidate.engine_version},
    )
    audit_kept_model(candidate, user)
    schedule_rescoring(selection.pk)
    return candidate


PROBED_FIELDS = ("endpoint_url", "metrics_url", "model_name", "engine_version")
MAX_JUSTIFICATION_CHARS = 2000


def check_served_model(candidate: Candidate, user, justification: str = "") -> None:
    """Probe the endpoint and keep the answer on the candidate; refuse (naming both models) an endpoint
    serving another model than the selection's, unless a justification keeps it. An endpoint that does
    not answer yet is probed again before each run."""
    probe = probing.probe_candidate(candidate)
    if probe is None:
        return
    candidate.endpoint_probe = probe
    mismatch = probing.model_mismatch(probe)
    justification = (justification or "").strip()
    if mismatch is None or (probing.kept(candidate, mismatch) and not justification):
        return
    if not justification:
        raise ValidationError({"model_name": probing.refusal(mismatch)})
    if len(justification) > MAX_JUSTIFICATION_CHARS:
        raise ValidationError(
            {
                "model_justification": _("a justification of at most %(n)s characters")
                % {"n": f"{MAX_JUSTIFICATION_CHARS:,}"}
            }
        )
    candidate.model_justification = {
        "by": user.get_username(),
        "at": timezone.now().isoformat(),
        "justification": justification,
        "served": mismatch["served"],
        "target": mismatch["target"],
        "new": True,  # audited once the candidate is saved (`audit_kept_model`)
    }


def audit_kept_model(candidate: Candidate, user) -> None:
    """The audit entry of a model kept by a justification, once per justification."""
    kept = dict(candidate.model_justification or {})
    if not kept.pop("new", False):
        return
    candidate.model_justification = kept
    Candidate.objects.filter(pk=candidate.pk).update(model_justification=kept)
    audit(
        candidate.selection,
        user,
        "candidate.model_kept",
        field=f"candidate:{candidate.pk}",
        new={"served": kept["served"], "target": kept["target"]},
        justification=kept["justification"],
    )


@transaction.atomic
def update_candidate(
    *,
    candidate: Candidate,
    user,
    data: dict[str, Any],
    api_key: str | None = None,
    model_justification: str = "",
) -> Candidate:
    require_editor(user, candidate.selection)
    require_compared(candidate)
    old = {k: getattr(candidate, k) for k in data}
    for field, value in data.items():
        setattr(candidate, field, value)
    if api_key is not None:
        candidate.api_key_encrypted = encrypt(api_key) if api_key else ""
    check_candidate(candidate)
    if model_justification or any(old[k] != getattr(candidate, k) for k in PROBED_FIELDS if k in data):
        check_served_model(candidate, user, model_justification)
    candidate.save()
    audit_kept_model(candidate, user)
    audit(
        candidate.selection,
        user,
        "candidate.changed",
        field=f"candidate:{candidate.pk}",
        old=old,
        new={k: getattr(candidate, k) for k in data},
    )
    schedule_rescoring(candidate.selection_id)  # version, flags and GPUs are scoring inputs
    return candidate


def require_compared(candidate: Candidate) -> None:
    """Refuse a change to an archived candidate (its edits, its screen override, new evidence), naming it."""
    refused = archived_refusal(candidate)
    if refused:
        raise ValidationError({"candidate": refused})


@transaction.atomic
def archive_candidate(*, candidate: Candidate, user) -> Candidate:
    """Take a candidate out of the comparison, the scores and new records, and stop it taking evidence:
    its queued and running validation runs are cancelled (a running one keeps its partial data). Its
    runs, its capacity plan and the records that already cite it stay, and the audit trail says who
    archived it. Uploads already being parsed finish: they were received before."""
    require_editor(user, candidate.selection)
    candidate = Candidate.objects.select_for_update().select_related("selection", "engine").get(pk=candidate.pk)
    if candidate.archived_at is None:
        candidate.archived_at = timezone.now()
        candidate.save(update_fields=["archived_at"])
        active = candidate.runs.filter(origin=BenchmarkRun.Origin.HARNESS).exclude(status__in=BenchmarkRun.TERMINAL)
        cancelled = [request_cancel(run, user).pk for run in active]
        audit(
            candidate.selection,
            user,
            "candidate.archived",
            field=f"candidate:{candidate.pk}",
            new={
                "id": candidate.pk,
                "name": candidate.display_name,
                **({"runs_cancelled": cancelled} if cancelled else {}),
            },
        )
        schedule_rescoring(candidate.selection_id)
    return candidate


@transaction.atomic
def restore_candidate(*, candidate: Candidate, user) -> Candidate:
    """Bring an archived candidate back into the comparison (refused when a compared candidate took its name)."""
    require_editor(user, candidate.selection)
    candidate = Candidate.objects.select_for_update().select_related("selection", "engine").get(pk=candidate.pk)
    if candidate.archived_at is None:
        return candidate
    candidate.archived_at = None
    other = duplicate_label(candidate)
    if other is not None:
        raise ValidationError(
            {"label": _("another candidate is already called “%(other)s”: rename one of them first") % {"other": other}}
        )
    candidate.save(update_fields=["archived_at"])
    audit(
        candidate.selection,
        user,
        "candidate.restored",
        field=f"candidate:{candidate.pk}",
        new={"id": candidate.pk, "name": candidate.display_name},
    )
    schedule_rescoring(candidate.selection_id)
    return candidate


def check_candidate(candidate: Candidate) -> None:
    """Refuse a candidate that cannot be tested or compared, naming the field: the model's own rules,
    then `selection.domain.limits` (GPU count and TP), the selection's GPU budget and allowed KV
    precisions, the engine's documented KV precisions, a label another candidate already has, and
    endpoints the outbound allow-list refuses (the rule the worker applies before a run)."""
    errors: dict[str, list[str]] = {}
    try:
        candidate.full_clean()
    except ValidationError as error:
        errors = error.message_dict
    for field, message in candidate_errors(candidate).items():
        if field not in errors or field in limits.CANDIDATE_BOUNDS:  # "between 1 and 100,000", not the database's range
            errors[field] = [message]
    if errors:
        raise ValidationError(errors)


def candidate_errors(candidate: Candidate) -> dict[str, str]:
    """field -> why, for each rule of `check_candidate` beyond the model's own (empty when sane)."""
    errors: dict[str, str] = {}
    values = {"gpu_count": candidate.gpu_count, "tensor_parallel": candidate.tensor_parallel}
    for field, kind, params in limits.out_of_bounds(values, limits.CANDIDATE_BOUNDS):
        errors[field] = breach_message(kind, params, Candidate._meta)
    constraints = Constraints.objects.filter(selection_id=candidate.selection_id).first()
    budget = constraints.gpu_count_budget if constraints else None
    if "gpu_count" not in errors and budget and candidate.gpu_count and candidate.gpu_count > budget:
        errors["gpu_count"] = _("%(count)s GPUs exceed the selection's GPU budget of %(budget)s") % {
            "count": candidate.gpu_count,
            "budget": budget,
        }
    if (
        "tensor_parallel" not in errors
        and candidate.tensor_parallel
        and candidate.gpu_count
        and candidate.tensor_parallel > candidate.gpu_count
    ):
        errors["tensor_parallel"] = _("TP %(tp)s needs at least %(tp)s GPUs; the candidate has %(count)s") % {
            "tp": candidate.tensor_parallel,
            "count": candidate.gpu_count,
        }
    tp_problem = (
        None if {"tensor_parallel", "gpu_count"} & set(errors) else tensor_parallel_problem(candidate, constraints)
    )
    if tp_problem:
        errors["tensor_parallel"] = tp_problem
    precision = candidate.kv_precision
    names = dict(KV_PRECISION_CHOICES)
    allowed = (constraints.kv_precisions_allowed or []) if constraints else []
    offered = offered_kv_precisions(candidate.engine, candidate.engine_version) if candidate.engine_id else None
    if precision and offered is not None and precision not in offered:
        errors["kv_precision"] = _("%(engine)s has no %(precision)s KV cache (it offers: %(offered)s)") % {
            "engine": candidate.engine.name,
            "precision": names.get(precision, precision),
            "offered": ", ".join(names.get(p, p) for p in sorted(offered, key=list(names).index)),
        }
    elif precision and allowed and precision not in allowed:
        errors["kv_precision"] = _("the constraints allow only %(allowed)s") % {
            "allowed": ", ".join(names.get(p, p) for p in allowed)
        }
    label = duplicate_label(candidate)
    if label and candidate.label.strip():
        errors["label"] = _("another candidate of this selection is already called “%(label)s”") % {"label": label}
    elif label:
        errors["label"] = _(
            "another candidate of this selection is already called “%(label)s”: give this one a label"
        ) % {"label": label}
    refused = refused_urls(candidate_urls(candidate), resolver=lenient_resolver)
    for field, reason in refused.items():
        errors[field] = _("the outbound allow-list refuses this URL: %(reason)s") % {"reason": message_text(reason)}
    return errors


def tensor_parallel_problem(candidate: Candidate, constraints: Constraints | None) -> str | None:
    """Why the target model cannot be split over the candidate's TP (its attention and KV heads must
    divide evenly), with the sizes that can; None when it can or the model is not one kvselect ships.
    Said when the candidate is saved, not later by its capacity plan."""
    spec = model_spec(constraints.target_model) if constraints is not None else None
    tp = candidate.tensor_parallel
    if spec is None or not tp:
        return None
    valid = valid_tensor_parallel(spec, max(candidate.gpu_count or 1, tp))
    if tp in valid:
        return None
    return _(
        "%(model)s cannot be split over TP %(tp)s: its %(heads)s attention heads and %(kv)s KV heads must divide "
        "evenly over the GPUs (possible here: %(valid)s)"
    ) % {
        "model": constraints.target_model,
        "tp": tp,
        "heads": spec.num_attention_heads,
        "kv": spec.num_kv_heads,
        "valid": ", ".join(map(str, valid)) or "—",
    }


def offered_kv_precisions(engine: Engine, version: str) -> set[str] | None:
    """The KV precisions (of KV_PRECISION_CHOICES) the catalog documents for the engine's version,
    or for any of its versions when this one is not in the catalog; None when undocumented."""
    versions = [version] if version in engine.versions else engine.versions
    offered: set[str] | None = None
    for name in versions:
        try:
            families = catalog_domain.capabilities(engine.slug, name).get("kv_quant_families")
        except catalog_domain.CatalogError:
            continue
        if families is not None:
            offered = (offered or {"bf16"}) | set(families)  # every engine runs its model's native bf16/fp16
    return None if offered is None else offered & set(dict(KV_PRECISION_CHOICES))


def duplicate_label(candidate: Candidate) -> str | None:
    """The other compared candidate's name when it is this one's display name, ignoring case; else
    None (an archived candidate's name is free again)."""
    name = str(candidate).strip() if candidate.engine_id else candidate.label.strip()
    if not name:
        return None
    others = Candidate.objects.filter(selection_id=candidate.selection_id, archived_at__isnull=True).select_related(
        "engine"
    )
    if candidate.pk:
        others = others.exclude(pk=candidate.pk)
    return next((str(other).strip() for other in others if str(other).strip().casefold() == name.casefold()), None)


class EvidenceCited(ValidationError):
    """The candidate (or its runs) is cited by a decision record that left draft."""


@transaction.atomic
def delete_candidate(*, candidate: Candidate, user) -> None:
    """Delete a candidate, its runs and their files, audited; refused when a record that left draft
    cites it or its runs (archive the selection instead). The caller checks the user may delete
    (the admin: Django's delete permission)."""
    records = sorted(
        {(c.record.version, c.record.get_status_display()) for c in candidate.citations.select_related("record")}
    )
    if records:
        cited = ", ".join(f"v{version} ({status})" for version, status in records)
        raise EvidenceCited(
            {"candidate": f"{candidate} is evidence of decision record {cited}: it cannot be deleted; archive instead."}
        )
    runs = list(candidate.runs.prefetch_related("artifacts"))
    audit(
        candidate.selection,
        user,
        "candidate.deleted",
        field=f"candidate:{candidate.pk}",
        old={
            "id": candidate.pk,
            "name": str(candidate),
            "engine": candidate.engine.slug,
            "version": candidate.engine_version,
            "runs": [run.pk for run in runs],
            "files": [artifact.file.name for run in runs for artifact in run.artifacts.all()],
        },
    )
    selection_id = candidate.selection_id
    candidate.delete()  # the artifact files are removed once this commits (benchmarks.storage)
    schedule_rescoring(selection_id)


@transaction.atomic
def load_engine_catalog(path: Path | None = None) -> int:
    """Load (or update) the engine catalog fixture into Engine rows. Returns the engine count."""
    document = json.loads(Path(path or CATALOG_PATH).read_text(encoding="utf-8"))
    version = str(document.get("catalog_version", "unversioned"))
    count = 0
    for entry in document["engines"]:
        before = Engine.objects.filter(slug=entry["slug"]).values_list("data", flat=True).first()
        engine, _ = Engine.objects.update_or_create(
            slug=entry["slug"],
            defaults={"name": entry.get("name", entry["slug"]), "catalog_version": version, "data": entry},
        )
        if before is not None and before != entry:  # documented facts are scoring inputs
            for selection_id in set(engine.candidates.values_list("selection_id", flat=True)):
                schedule_rescoring(selection_id)
        count += 1
    return count
