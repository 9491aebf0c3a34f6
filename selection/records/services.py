"""Decision-record lifecycle: draft -> in review -> approved -> signed -> (superseded).

The snapshot is frozen when review starts; after the first signature nothing in the record can
change (also enforced by database triggers, see migration 0003). Signing happens in the request
because the owner's PKCS#12 passphrase must never reach a broker or the database.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from cryptography.hazmat.primitives.serialization import pkcs12 as p12
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.files.base import ContentFile
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from selection.audit import audit
from selection.domain import project_checks as project_checks_domain
from selection.domain import records as records_domain
from selection.domain.records import OWNER_ROLES
from selection.i18n import person_name
from selection.models import DecisionRecord, RecordApproval, RecordComment, Selection
from selection.records import signing
from selection.records.context import build_context
from selection.records.rendering import render_pdf, stamp_font
from selection.selectors import can_edit, can_review
from selection.tasks import queue_render

DRAFT_FIELDS = (
    "decision",
    "rationale",
    "applies_to",
    "does_not_apply_to",
    "review_by",
    "include_simulated",
    "project_checks",
)


def canonical_sha256(document: Any) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


def _check_project_checks(fields: dict[str, Any]) -> None:
    """Normalise `project_checks` in place; a wrong one is refused naming its fields."""
    if "project_checks" not in fields:
        return
    try:
        fields["project_checks"] = project_checks_domain.normalise(fields["project_checks"])
    except project_checks_domain.ProjectChecksError as exc:
        raise ValidationError({"project_checks": exc.problems}) from exc


def owner_role(user, selection: Selection) -> list[str]:
    return [role for role in OWNER_ROLES if getattr(selection, f"{role}_owner_id") == user.pk]


@transaction.atomic
def create_draft(
    *, selection: Selection, user, supersedes: DecisionRecord | None = None, **fields: Any
) -> DecisionRecord:
    if not can_edit(user, selection):
        raise PermissionDenied("Only architects of this selection's team can draft a decision record.")
    if supersedes is not None and supersedes.status != DecisionRecord.Status.SIGNED:
        raise ValidationError({"supersedes": "Only a signed record can be superseded."})
    if supersedes is not None and DecisionRecord.objects.filter(supersedes=supersedes).exists():
        raise ValidationError({"supersedes": f"Record v{supersedes.version} already has a successor."})
    _check_project_checks(fields)
    version = (selection.records.aggregate(v=Max("version"))["v"] or 0) + 1
    record = DecisionRecord(
        selection=selection,
        version=version,
        created_by=user,
        supersedes=supersedes,
        **{k: v for k, v in fields.items() if k in DRAFT_FIELDS},
    )
    record.full_clean()
    record.save()
    audit(
        selection,
        user,
        "record.drafted",
        field=f"record:v{version}",
        new={"supersedes": supersedes.version if supersedes else None},
    )
    return record


@transaction.atomic
def update_draft(*, record: DecisionRecord, user, **fields: Any) -> DecisionRecord:
    record = DecisionRecord.objects.select_for_update().get(pk=record.pk)
    if not can_edit(user, record.selection):
        raise PermissionDenied("Only architects can edit a draft.")
    if record.status != DecisionRecord.Status.DRAFT:
        raise ValidationError(
            {
                "status": f"Record v{record.version} is {record.get_status_display()}: frozen. "
                "Create a new version instead."
            }
        )
    _check_project_checks(fields)
    old = {k: str(getattr(record, k)) for k in fields if k in DRAFT_FIELDS}
    for key, value in fields.items():
        if key in DRAFT_FIELDS:
            setattr(record, key, value)
    record.full_clean()
    record.save()
    audit(
        record.selection,
        user,
        "record.edited",
        field=f"record:v{record.version}",
        old=old,
        new={k: str(getattr(record, k)) for k in old},
    )
    return record


@transaction.atomic
def start_review(*, record: DecisionRecord, user) -> DecisionRecord:
    """Freeze the snapshot (validated: every section present) and open the review."""

    record = DecisionRecord.objects.select_for_update().get(pk=record.pk)
    if not can_edit(user, record.selection):
        raise PermissionDenied("Only architects can send a record to review.")
    if record.status != DecisionRecord.Status.DRAFT:
        raise ValidationError({"status": f"Record v{record.version} is already {record.get_status_display()}."})
    try:
        snapshot = build_context(record)
    except records_domain.RecordContextError as exc:
        raise ValidationError({"snapshot": exc.problems}) from exc
    record.snapshot = json.loads(json.dumps(snapshot, default=str))
    record.snapshot_sha256 = canonical_sha256(record.snapshot)
    record.status = DecisionRecord.Status.IN_REVIEW
    record.review_started_at = timezone.now()
    record.save()
    Selection.objects.filter(pk=record.selection_id).exclude(status=Selection.Status.DECIDED).update(
        status=Selection.Status.DECIDING
    )
    audit(
        record.selection,
        user,
        "record.review_started",
        field=f"record:v{record.version}",
        new={"snapshot_sha256": record.snapshot_sha256, "simulated": record.simulated},
    )
    return record


@transaction.atomic
def comment(*, record: DecisionRecord, user, text: str) -> RecordComment:
    if not can_review(user, record.selection) and not owner_role(user, record.selection):
        raise PermissionDenied("Only reviewers, architects and owners can comment.")
    if not text.strip():
        raise ValidationError({"text": "A comment cannot be empty."})
    return RecordComment.objects.create(record=record, author=user, text=text.strip())


@transaction.atomic
def approve(*, record: DecisionRecord, user, role: str, comment_text: str = "") -> DecisionRecord:
    record = DecisionRecord.objects.select_for_update().select_related("selection").get(pk=record.pk)
    if role not in OWNER_ROLES:
        raise ValidationError({"role": f"must be one of {', '.join(OWNER_ROLES)}"})
    if role not in owner_role(user, record.selection):
        raise PermissionDenied(f"Only the named {role} owner can approve as {role} owner.")
    if record.status != DecisionRecord.Status.IN_REVIEW:
        raise ValidationError({"status": f"Record v{record.version} is {record.get_status_display()}, not in review."})
    if record.approvals.filter(role=role).exists():
        raise ValidationError({"role": f"The {role} owner has already approved."})
    RecordApproval.objects.create(record=record, role=role, user=user, comment=comment_text)
    audit(
        record.selection,
        user,
        "record.approved",
        field=f"record:v{record.version}",
        new={"role": role},
        justification=comment_text,
    )
    if record.approvals.count() == len(OWNER_ROLES):
        record.status = DecisionRecord.Status.APPROVED
        record.save(update_fields=["status"])
        audit(record.selection, user, "record.fully_approved", field=f"record:v{record.version}")
        transaction.on_commit(lambda: queue_render(record.pk))
    return record


def next_signer_role(record: DecisionRecord) -> str | None:
    signed = set(record.approvals.filter(signed_at__isnull=False).values_list("role", flat=True))
    return next((role for role in OWNER_ROLES if role not in signed), None)


def sign(
    *, record: DecisionRecord, user, role: str, pkcs12: bytes, passphrase: str, seal: tuple[bytes, str] | None = None
) -> DecisionRecord:
    """Add `role`'s PAdES signature (owners sign in order business, platform, security)."""
    record = render_pdf(record)
    with transaction.atomic():
        record = DecisionRecord.objects.select_for_update().select_related("selection").get(pk=record.pk)
        if record.status != DecisionRecord.Status.APPROVED:
            raise ValidationError(
                {
                    "status": f"Record v{record.version} is {record.get_status_display()}: "
                    "only an approved record can be signed."
                }
            )
        if role not in owner_role(user, record.selection):
            raise PermissionDenied(f"Only the named {role} owner can sign as {role} owner.")
        expected = next_signer_role(record)
        if role != expected:
            raise ValidationError({"role": f"The {expected} owner signs next (order: business, platform, security)."})
        source = record.signed_pdf or record.pdf
        with source.open("rb") as handle:
            current = handle.read()
        name = person_name(user)
        try:
            signed = signing.sign_pdf(
                current,
                pkcs12,
                passphrase,
                field_name=role,
                signer_name=name,
                role=f"{role} owner",
                reason=f"Approves decision record v{record.version}",
                stamp_font=stamp_font(),
            )
            if role == OWNER_ROLES[-1] and seal is not None:
                signed = signing.sign_pdf(
                    signed,
                    seal[0],
                    seal[1],
                    field_name="seal",
                    signer_name="Organisation seal",
                    role="seal",
                    reason="Organisational seal",
                )
        except signing.SigningError as exc:
            raise ValidationError({"pkcs12": str(exc)}) from exc
        approval = record.approvals.get(role=role)
        approval.signed_at = timezone.now()
        approval.certificate_subject = _subject(pkcs12, passphrase)
        approval.save(update_fields=["signed_at", "certificate_subject"])
        record.signed_pdf.save(
            f"record-{record.selection_id}-v{record.version}-signed.pdf", ContentFile(signed), save=False
        )
        record.signed_sha256 = hashlib.sha256(signed).hexdigest()
        fields = ["signed_pdf", "signed_sha256"]
        if next_signer_role(record) is None:
            record.status, record.signed_at = DecisionRecord.Status.SIGNED, timezone.now()
            fields += ["status", "signed_at"]
            Selection.objects.filter(pk=record.selection_id).update(status=Selection.Status.DECIDED)
        record.save(update_fields=fields)
        audit(
            record.selection,
            user,
            "record.signed",
            field=f"record:v{record.version}",
            new={"role": role, "sha256": record.signed_sha256},
        )
        if record.status == DecisionRecord.Status.SIGNED and record.supersedes_id:
            DecisionRecord.objects.filter(pk=record.supersedes_id, status=DecisionRecord.Status.SIGNED).update(
                status=DecisionRecord.Status.SUPERSEDED
            )
            audit(
                record.selection,
                user,
                "record.superseded",
                field=f"record:v{record.supersedes.version}",
                new={"superseded_by": record.version},
            )
    return record


def _subject(pkcs12: bytes, passphrase: str) -> str:

    try:
        _, cert, _ = p12.load_key_and_certificates(pkcs12, passphrase.encode() if passphrase else None)
        return cert.subject.rfc4514_string()[:300] if cert else ""
    except ValueError:
        return ""
