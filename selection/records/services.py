"""Decision-record lifecycle: draft -> in review -> approved -> signed -> (superseded).

The snapshot is frozen when review starts; after the first signature nothing in the record can
change (also enforced by database triggers, see migration 0003). Signing happens in the request.

Owners sign three ways. Owner-side (the default, any trust root): ``prepare_signature`` keeps the
revision holding the owner's signature field and returns the CMS signed attributes, the owner signs
them with kvselect-sign (a PKCS#11 token or a local PKCS#12: the key never leaves their machine) and
``complete_signature`` checks and embeds the CMS. Server-side HSM (``sign_with_hsm``): the key stays
in the organisation's PKCS#11 HSM, the owner types the PIN, never stored. PKCS#12 upload (``sign``):
development CA only; the passphrase never reaches a broker or the database.

Separation of duties: the business, platform and security owners are three different people,
each of whom enrolled a signing certificate; review freezes who they are and which certificate
each signs with, and signing refuses any other key. The architect who drafted a record never
approves or signs it as security owner (nor drafts it, when they are the security owner).
Signatures carry an RFC 3161 timestamp when a TSA is configured and their validation data
(PAdES B-LT), see ``records.trust``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Max
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, gettext_noop

from benchmarks.models import BenchmarkRun
from selection.audit import audit
from selection.candidates.screening import documentation_screen, offered_for_tests
from selection.certificates import signing
from selection.certificates.services import current_certificate
from selection.certificates.trust import (
    HsmConfigurationError,
    certification_refusal,
    hsm_key_for,
    pkcs12_upload_refusal,
    timestamper,
    validation_material,
)
from selection.domain import project_checks as project_checks_domain
from selection.domain import records as records_domain
from selection.domain import tie_ground as tie_domain
from selection.domain.records import OWNER_ROLES
from selection.domain.roles import ROLE_LABELS
from selection.i18n import message_text, person_name, role_name
from selection.models import (
    OWNER_FIELDS,
    DecisionRecord,
    RecordApproval,
    RecordCitation,
    RecordComment,
    Selection,
    SignatureRequest,
    owner_conflicts,
)
from selection.records.context import build_context, record_runs
from selection.records.open_items import raise_open_items
from selection.records.rendering import render_pdf, stamp_font
from selection.scoring.services import latest_score
from selection.selectors import can_edit, can_review, compared_candidates, open_draft, owner_roles_of
from selection.tasks import queue_render

logger = logging.getLogger(__name__)

DRAFT_FIELDS = (
    "decision",
    "rationale",
    "applies_to",
    "does_not_apply_to",
    "review_by",
    "include_simulated",
    "project_checks",
    "tie_choice",
    "tie_ground",
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
    return owner_roles_of(user, selection)


# The signing library's fixed refusals (selection.certificates.signing), in the owner's language; a
# refusal that carries figures (digests, subjects, counts) comes with its Message (`SigningError.message`).
SIGNING_REFUSALS = (
    gettext_noop("the certificate file is empty"),
    gettext_noop(
        "cannot open the certificate file - wrong passphrase or not a PKCS#12 file containing a private key and "
        "certificate"
    ),
    gettext_noop("the file holds no usable private key and certificate"),
    gettext_noop("not a DER CMS SignedData (the .p7s kvselect-sign writes)"),
    gettext_noop("the signer's certificate is not in the CMS"),
    gettext_noop("the signature has no messageDigest attribute"),
    gettext_noop("the signed attributes differ from the ones kvselect prepared: sign them unchanged"),
    gettext_noop("the signature does not verify with the enrolled certificate's public key"),
    gettext_noop("the embedded signature does not cover the prepared revision: nothing was stored"),
    gettext_noop(
        "this signature is over an older revision of the record, prepared before the one now waiting for your "
        "signature: fetch the current attributes and sign again"
    ),
)


def signing_refusal(exc: Exception, *prefixes: str) -> str:
    """A SigningError as the owner reads it: without its field prefix, translated when it is one of
    the library's fixed sentences or carries its sentence as a message (digests, subjects, counts as
    its params; walk m11)."""
    message = getattr(exc, "message", None)
    if message is not None:  # a refusal carrying figures: its template translated, the figures as they are
        return message_text(message)
    text = str(exc)
    for prefix in prefixes:
        text = text.removeprefix(f"{prefix}: ")
    return _(text) if text in SIGNING_REFUSALS else text


OWNER_NAMES = {
    "business": gettext_lazy("business owner"),
    "platform": gettext_lazy("platform owner"),
    "security": gettext_lazy("security owner"),
}


def owner_name(role: str) -> str:
    """An owner role as the refusals name it ("the business owner signs next"), in the active language."""
    return str(OWNER_NAMES.get(role, role))


def record_state(record: DecisionRecord) -> dict[str, Any]:
    """A record's version and status (its label, in the active language), as the refusals name them."""
    return {"version": record.version, "status": record.get_status_display()}


def _refuse_drafter_as_security(record: DecisionRecord, user, role: str, action: str) -> None:
    if role == "security" and record.created_by_id == user.pk:
        refusals = {
            "approve": _(
                "You drafted record v%(version)s: someone else must approve it as security owner "
                "(separation of duties)."
            ),
            "sign": _(
                "You drafted record v%(version)s: someone else must sign it as security owner (separation of duties)."
            ),
        }
        raise PermissionDenied(refusals[action] % {"version": record.version})


@transaction.atomic
def create_draft(
    *, selection: Selection, user, supersedes: DecisionRecord | None = None, **fields: Any
) -> DecisionRecord:
    if not can_edit(user, selection):
        raise PermissionDenied(_("Only architects of this selection's team can draft a decision record."))
    if selection.security_owner_id == user.pk:
        raise PermissionDenied(
            _(
                "You are this selection's security owner: another architect drafts its decision record, so that "
                "the security owner reviews what someone else wrote (separation of duties). Change the owners on "
                "the selection's overview if nobody else can draft it."
            )
        )
    if supersedes is not None and supersedes.status != DecisionRecord.Status.SIGNED:
        raise ValidationError({"supersedes": _("Only a signed record can be superseded.")})
    successor = DecisionRecord.objects.filter(supersedes=supersedes).first() if supersedes is not None else None
    if successor is not None and successor.status != DecisionRecord.Status.DRAFT:
        raise ValidationError(
            {"supersedes": _("Record v%(version)s already has a successor.") % {"version": supersedes.version}}
        )
    _check_project_checks(fields)
    current = _draft_to_continue(selection, supersedes, user)
    if current is not None:  # a second attempt edits the open draft: no orphan version
        return update_draft(record=current, user=user, **fields)
    _normalise_tie_fields(fields)
    _check_tie_ground(selection, fields)
    _check_decision(selection, fields)
    version = (selection.records.aggregate(v=Max("version"))["v"] or 0) + 1
    record = DecisionRecord(
        selection=selection,
        version=version,
        created_by=user,
        supersedes=supersedes,
        **{k: v for k, v in fields.items() if k in (*DRAFT_FIELDS, "tie_choice_id")},
    )
    if record.tie_choice_id is not None:
        record.tie_ground_by, record.tie_ground_at = user, timezone.now()
    record.full_clean()
    record.save()
    audit(
        selection,
        user,
        "record.drafted",
        field=f"record:v{version}",
        new={"supersedes": supersedes.version if supersedes else None},
    )
    _audit_tie_ground(record, user, None)
    return record


def tied_candidates(selection: Selection, include_simulated: bool | None = None) -> list:
    """The candidates the latest scores tie between (empty: they name a winner, or there are none yet)."""
    score = latest_score(selection, include_simulated)
    ids = tie_domain.tied(score.result or {}) if score is not None else []
    return list(selection.candidates.filter(pk__in=[int(i) for i in ids if str(i).isdigit()]).select_related("engine"))


def _normalise_tie_fields(fields: dict[str, Any]) -> None:
    """`tie_choice` as a candidate id (a form or serializer gives the candidate), `tie_ground` stripped;
    an empty ground is None (no ground)."""
    if "tie_choice" in fields:
        choice = fields.pop("tie_choice")
        fields["tie_choice_id"] = getattr(choice, "pk", choice) or None
    if "tie_ground" in fields:
        fields["tie_ground"] = (fields["tie_ground"] or "").strip() or None


def _check_tie_ground(selection: Selection, fields: dict[str, Any]) -> None:
    """Refuse a draft that, when the scores tie, names no tied candidate or states no ground for it (and a
    ground stated when the scores name a winner), each refusal on its field (domain/tie_ground.py)."""
    score = latest_score(selection, bool(fields.get("include_simulated")))
    problems = _tie_problems(selection, (score.result or {}) if score is not None else {}, fields)
    if problems:
        raise ValidationError(problems)


def _tie_problems(selection: Selection, result: dict[str, Any], fields: dict[str, Any]) -> dict[str, list[str]]:
    labels = {str(c.pk): c.display_name for c in selection.candidates.select_related("engine")}
    winner = str(result.get("winner") or "")
    problems = tie_domain.problems(
        tie_domain.tied(result),
        labels,
        fields.get("tie_choice_id"),
        fields.get("tie_ground"),
        labels.get(winner) if winner else None,
    )
    return {field: [message_text(m) for m in messages] for field, messages in problems.items()}


def _audit_tie_ground(record: DecisionRecord, user, old: dict[str, Any] | None) -> None:
    """Audit the ground a drafter stated (or changed, or cleared) for choosing among tied candidates: who, when,
    and the ground in full."""
    new = {"candidate": record.tie_choice_id, "ground": record.tie_ground}
    if old == new or (old is None and record.tie_choice_id is None):
        return
    audit(
        record.selection,
        user,
        "record.tie_ground_stated" if record.tie_choice_id is not None else "record.tie_ground_cleared",
        field=f"record:v{record.version}",
        old=old,
        new=new,
        justification=record.tie_ground or "",
    )


def _check_decision(selection: Selection, fields: dict[str, Any]) -> None:
    """Refuse, when the draft is saved, a decision that names a candidate the record cannot choose."""
    problem = decision_problem(
        selection, fields.get("decision") or "", bool(fields.get("include_simulated")), fields.get("tie_choice_id")
    )
    if problem:
        raise ValidationError({"decision": problem})


def decision_problem(
    selection: Selection, decision: str, include_simulated: bool, tie_choice: int | str | None = None
) -> str | None:
    """Why a draft's decision text cannot stand (or None): it names a candidate (the longest name it
    contains) that is archived, ruled out by the documentation screen, stopped by the gates, or not the
    one the comparison recommends, which the record chooses (when the scores tie: not the tied candidate
    the draft chooses on its stated ground). Free text naming no candidate is the architect's summary and
    stands."""
    text = decision.casefold()
    named = [c for c in selection.candidates.select_related("engine") if str(c).strip() and str(c).casefold() in text]
    if not named:
        return None
    candidate = max(named, key=lambda c: len(str(c)))
    name = {"name": candidate.display_name}
    if candidate.archived_at is not None:
        return _("“%(name)s” is archived: a record decides for one of the compared candidates.") % name
    if not offered_for_tests(documentation_screen(candidate)):
        return (
            _(
                "“%(name)s” is ruled out by the documentation screen: a record cannot choose it. Keep it with a "
                "justification on the candidates page and test it first, or name the recommended candidate."
            )
            % name
        )
    score = latest_score(selection, include_simulated)
    result = score.result if score is not None else {}
    entry = next((c for c in result.get("candidates", []) if c.get("candidate") == str(candidate.pk)), None)
    if entry is not None and entry.get("screened_out"):
        return _("“%(name)s” does not pass the gates (see the comparison): a record cannot choose it.") % name
    tied = tie_domain.tied(result)
    if tied and str(candidate.pk) != str(tie_choice or ""):
        chosen = selection.candidates.filter(pk=tie_choice).select_related("engine").first() if tie_choice else None
        if chosen is None:
            return (
                _(
                    "The scores tie: “%(name)s” can be named only as the tied candidate chosen on a stated ground "
                    "(“which tied candidate” and “ground for choosing it”)."
                )
                % name
            )
        return _("The record chooses “%(chosen)s” among the tied candidates on its stated ground, not “%(name)s”.") % {
            **name,
            "chosen": chosen.display_name,
        }
    winner = str(result.get("winner") or "")
    if winner and winner != str(candidate.pk):
        chosen = selection.candidates.filter(pk=winner).select_related("engine").first()
        return _(
            "The comparison recommends “%(winner)s”, not “%(name)s”: the record chooses the recommendation. "
            "Name it, or leave the decision empty."
        ) % {**name, "winner": chosen.display_name if chosen else winner}
    return None


def _draft_to_continue(selection: Selection, supersedes: DecisionRecord | None, user) -> DecisionRecord | None:
    """The draft a new attempt continues: the open draft of the lineage, or the successor draft of
    `supersedes` even when archived (a record has one successor: it is brought back)."""
    if supersedes is not None:
        successor = DecisionRecord.objects.filter(supersedes=supersedes, status=DecisionRecord.Status.DRAFT).first()
        if successor is not None and successor.archived_at is not None:
            DecisionRecord.objects.filter(pk=successor.pk).update(archived_at=None)
            audit(successor.selection, user, "record.restored", field=f"record:v{successor.version}")
            successor.refresh_from_db()
        return successor
    return open_draft(selection)


@transaction.atomic
def archive_draft(*, record: DecisionRecord, user) -> DecisionRecord:
    """Set a draft aside: out of the records list, never sent to review; kept (and audited). Only a
    draft: a record in review, approved or signed is never archived."""
    record = DecisionRecord.objects.select_for_update().select_related("selection").get(pk=record.pk)
    if not can_edit(user, record.selection):
        raise PermissionDenied(_("Only architects can archive a draft."))
    if record.status != DecisionRecord.Status.DRAFT:
        raise ValidationError(
            {"status": _("Record v%(version)s is %(status)s: only a draft can be archived.") % record_state(record)}
        )
    if record.archived_at is None:
        record.archived_at = timezone.now()
        record.save(update_fields=["archived_at"])
        audit(record.selection, user, "record.archived", field=f"record:v{record.version}")
    return record


@transaction.atomic
def restore_draft(*, record: DecisionRecord, user) -> DecisionRecord:
    """An archived draft back in the list (refused while another draft of its lineage is open)."""
    record = (
        DecisionRecord.objects.select_for_update(of=("self",))
        .select_related("selection", "supersedes")
        .get(pk=record.pk)
    )
    if not can_edit(user, record.selection):
        raise PermissionDenied(_("Only architects can restore a draft."))
    if record.archived_at is None:
        return record
    other = open_draft(record.selection, record.supersedes)
    if other is not None:
        raise ValidationError(
            {
                "status": _("Draft v%(version)s is open: archive it or send it to review before restoring this one.")
                % {"version": other.version}
            }
        )
    record.archived_at = None
    record.save(update_fields=["archived_at"])
    audit(record.selection, user, "record.restored", field=f"record:v{record.version}")
    return record


@transaction.atomic
def update_draft(*, record: DecisionRecord, user, **fields: Any) -> DecisionRecord:
    record = DecisionRecord.objects.select_for_update().get(pk=record.pk)
    if not can_edit(user, record.selection):
        raise PermissionDenied(_("Only architects can edit a draft."))
    if record.status != DecisionRecord.Status.DRAFT:
        raise ValidationError(
            {
                "status": _("Record v%(version)s is %(status)s: frozen. Create a new version instead.")
                % record_state(record)
            }
        )
    if record.archived_at is not None:
        raise ValidationError(
            {"status": _("Draft v%(version)s is archived: restore it to edit it.") % {"version": record.version}}
        )
    _check_project_checks(fields)
    _normalise_tie_fields(fields)
    merged = {
        "include_simulated": record.include_simulated,
        "tie_choice_id": record.tie_choice_id,
        "tie_ground": record.tie_ground,
        # the saved decision text is checked again when the tied candidate it must name changes
        "decision": record.decision if "tie_choice_id" in fields else "",
        **fields,
    }
    _check_tie_ground(record.selection, merged)
    _check_decision(record.selection, merged)
    tie_before = {"candidate": record.tie_choice_id, "ground": record.tie_ground}
    editable = (*DRAFT_FIELDS, "tie_choice_id")
    old = {k: str(getattr(record, k)) for k in fields if k in editable}
    for key, value in fields.items():
        if key in editable:
            setattr(record, key, value)
    if {"candidate": record.tie_choice_id, "ground": record.tie_ground} != tie_before:
        stated = record.tie_choice_id is not None
        record.tie_ground_by, record.tie_ground_at = (user, timezone.now()) if stated else (None, None)
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
    _audit_tie_ground(record, user, tie_before)
    return record


@transaction.atomic
def start_review(*, record: DecisionRecord, user) -> DecisionRecord:
    """Freeze the snapshot (validated: every section present) and open the review."""

    record = DecisionRecord.objects.select_for_update().get(pk=record.pk)
    if not can_edit(user, record.selection):
        raise PermissionDenied(_("Only architects can send a record to review."))
    if record.status != DecisionRecord.Status.DRAFT:
        raise ValidationError({"status": _("Record v%(version)s is already %(status)s.") % record_state(record)})
    if record.archived_at is not None:
        raise ValidationError(
            {
                "status": _("Draft v%(version)s is archived: restore it before sending it to review.")
                % {"version": record.version}
            }
        )
    selection = record.selection
    owners = {n: getattr(selection, n) for n in OWNER_FIELDS}
    duties = [message_text(message) for message in owner_conflicts(owners).values()]
    if selection.security_owner_id == record.created_by_id:
        duties.append(
            _(
                "%(person)s drafted this record and is its security owner: another person must own security "
                "(separation of duties). Change the owners on the selection's overview."
            )
            % {"person": person_name(selection.security_owner)}
        )
    try:
        snapshot = build_context(record)
    except records_domain.RecordContextError as exc:
        raise ValidationError({"snapshot": duties + exc.problems}) from exc
    if duties:
        raise ValidationError({"snapshot": duties})
    record.snapshot = json.loads(json.dumps(snapshot, default=str))
    record.snapshot_sha256 = canonical_sha256(record.snapshot)
    record.status = DecisionRecord.Status.IN_REVIEW
    record.review_started_at = timezone.now()
    record.save()
    cite_evidence(record)
    opened = raise_open_items(record)  # each owner's "not ready" keeps the record from procurement until closed
    Selection.objects.filter(pk=record.selection_id).exclude(status=Selection.Status.DECIDED).update(
        status=Selection.Status.DECIDING
    )
    audit(
        record.selection,
        user,
        "record.review_started",
        field=f"record:v{record.version}",
        new={
            "snapshot_sha256": record.snapshot_sha256,
            "simulated": record.simulated,
            "open_items": [item.key for item in opened],
        },
    )
    return record


def cite_evidence(record: DecisionRecord) -> None:
    """Tie the frozen record to the candidates it compared and the runs it lists: from now on none
    of them (nor the runs' artifacts and points) can be deleted (PROTECT and database triggers)."""
    candidates = list(compared_candidates(record.selection))  # an archived candidate is not compared
    runs = record_runs(candidates, include_simulated=record.include_simulated)
    # and every run the snapshot shows a section for (page 1 may read a figure from an earlier run)
    listed = {
        int(entry["run"].removeprefix("run-"))
        for entry in (record.snapshot or {}).get("validation") or []
        if str(entry.get("run") or "").startswith("run-")
    }
    runs += list(BenchmarkRun.objects.filter(pk__in=listed - {run.pk for run in runs}))
    RecordCitation.objects.bulk_create(
        [RecordCitation(record=record, candidate=candidate) for candidate in candidates]
        + [RecordCitation(record=record, candidate_id=run.candidate_id, run=run) for run in runs]
    )


@transaction.atomic
def comment(*, record: DecisionRecord, user, text: str) -> RecordComment:
    if not can_review(user, record.selection) and not owner_role(user, record.selection):
        raise PermissionDenied(_("Only reviewers, architects and owners can comment."))
    if not text.strip():
        raise ValidationError({"text": _("A comment cannot be empty.")})
    return RecordComment.objects.create(record=record, author=user, text=text.strip())


@transaction.atomic
def approve(
    *, record: DecisionRecord, user, role: str, comment_text: str = "", confirm_tie_ground: bool = False
) -> DecisionRecord:
    """`role`'s approval. A record chosen among tied candidates on a stated ground is approved by the
    business owner only with `confirm_tie_ground` (they confirm the ground as the snapshot froze it)."""
    record = DecisionRecord.objects.select_for_update().select_related("selection").get(pk=record.pk)
    if role not in OWNER_ROLES:
        raise ValidationError({"role": _("must be one of %(roles)s") % {"roles": ", ".join(OWNER_ROLES)}})
    if role not in owner_role(user, record.selection):
        raise PermissionDenied(_("Only the named %(owner)s can approve as %(owner)s.") % {"owner": owner_name(role)})
    _refuse_drafter_as_security(record, user, role, "approve")
    if record.status != DecisionRecord.Status.IN_REVIEW:
        raise ValidationError({"status": _("Record v%(version)s is %(status)s, not in review.") % record_state(record)})
    if record.approvals.filter(role=role).exists():
        raise ValidationError({"role": _("The %(owner)s has already approved.") % {"owner": owner_name(role)}})
    ground = frozen_tie_ground(record)
    refusal = tie_domain.confirmation_needed(role, ground is not None, confirm_tie_ground)
    if refusal is not None:
        raise ValidationError(
            {
                tie_domain.CONFIRM_FIELD: _("%(why)s The stated ground: “%(ground)s”")
                % {"why": message_text(refusal), "ground": ground["ground"]}
            }
        )
    confirmed = ground["ground"] if ground is not None and role == tie_domain.BUSINESS_CONFIRMS else None
    RecordApproval.objects.create(
        record=record, role=role, user=user, comment=comment_text, confirmed_tie_ground=confirmed
    )
    audit(
        record.selection,
        user,
        "record.approved",
        field=f"record:v{record.version}",
        new={"role": role, **({"confirmed_tie_ground": confirmed} if confirmed is not None else {})},
        justification=comment_text,
    )
    if record.approvals.count() == len(OWNER_ROLES):
        record.status = DecisionRecord.Status.APPROVED
        record.save(update_fields=["status"])
        audit(record.selection, user, "record.fully_approved", field=f"record:v{record.version}")
        transaction.on_commit(lambda: queue_render(record.pk))
    return record


def frozen_tie_ground(record: DecisionRecord) -> dict[str, Any] | None:
    """The choice among tied candidates as the record's snapshot froze it (chosen, tied, ground, who stated it
    and when), or None: the record decides for the scores' recommendation."""
    tie = ((record.snapshot or {}).get("decision") or {}).get("tie")
    return tie if isinstance(tie, dict) and tie.get("ground") else None


def next_signer_role(record: DecisionRecord) -> str | None:
    signed = set(record.approvals.filter(signed_at__isnull=False).values_list("role", flat=True))
    return next((role for role in OWNER_ROLES if role not in signed), None)


def _enrolled_certificate_for(record: DecisionRecord, user, role: str) -> str:
    """The certificate `user` must sign `role`'s field with: the one the snapshot froze, still theirs."""
    frozen = next((o for o in (record.snapshot or {}).get("owners", []) if o.get("role") == role), {})
    expected = frozen.get("certificate_sha256")
    if not expected:
        raise ValidationError(
            {
                "pkcs12": _("Record v%(version)s names no certificate for the %(owner)s: create a new version.")
                % {"version": record.version, "owner": owner_name(role)}
            }
        )
    current = current_certificate(user)
    if current is None or current.sha256 != expected:
        raise ValidationError(
            {
                "pkcs12": _(
                    "Record v%(version)s was frozen with your certificate SHA-256 %(sha256)s…, which is no longer "
                    "your enrolled certificate: this record can no longer be signed by you; an architect creates a "
                    "new version."
                )
                % {"version": record.version, "sha256": expected[:16]}
            }
        )
    return expected


def _check_key(pkcs12: bytes, passphrase: str, expected: str, user) -> signing.CertificateInfo:
    try:
        info = signing.pkcs12_certificate(pkcs12, passphrase)
    except signing.SigningError as exc:
        raise ValidationError({"pkcs12": signing_refusal(exc, "pkcs12")}) from exc
    if info.sha256 != expected:
        raise ValidationError(
            {
                "pkcs12": _(
                    "This certificate (%(certificate)s) is not your enrolled signing certificate "
                    "(%(person)s, SHA-256 %(sha256)s…): sign with your own key."
                )
                % {"certificate": info.short, "person": person_name(user), "sha256": expected[:16]}
            }
        )
    return info


def _locked_for_signing(record: DecisionRecord, user, role: str) -> tuple[DecisionRecord, str]:
    """``record`` locked for ``role``'s signature by ``user``, and the certificate they must sign with.
    Call inside a transaction; every refusal is a ValidationError or PermissionDenied."""
    record = DecisionRecord.objects.select_for_update().select_related("selection").get(pk=record.pk)
    if record.status != DecisionRecord.Status.APPROVED:
        raise ValidationError(
            {
                "status": _("Record v%(version)s is %(status)s: only an approved record can be signed.")
                % record_state(record)
            }
        )
    if role not in owner_role(user, record.selection):
        raise PermissionDenied(_("Only the named %(owner)s can sign as %(owner)s.") % {"owner": owner_name(role)})
    _refuse_drafter_as_security(record, user, role, "sign")
    expected = next_signer_role(record)
    if role != expected:
        raise ValidationError(
            {
                "role": _("The %(owner)s signs next (order: business, platform, security).")
                % {"owner": owner_name(expected)}
            }
        )
    return record, _enrolled_certificate_for(record, user, role)


def _current_pdf(record: DecisionRecord) -> bytes:
    source = record.signed_pdf or record.pdf
    with source.open("rb") as handle:
        return handle.read()


def _long_term() -> dict[str, Any]:
    """The timestamper and validation data every signature carries (``records.trust``)."""
    try:
        return {"timestamper": timestamper(), "validation_material": validation_material()}
    except signing.SigningError as exc:  # the configured TSA cannot be used: nothing is signed
        raise ValidationError({"__all__": _("Timestamping is misconfigured: %(error)s") % {"error": exc}}) from exc


def _signature_reason(record: DecisionRecord) -> str:
    return f"Approves decision record v{record.version}"


# The stamp's heading (`signing.STAMP_HEADING`), marked for the catalogue; drawn in the record's language.
STAMP_HEADING = gettext_noop("Digitally signed (PAdES)")


def stamp_words(record: DecisionRecord, role: str) -> signing.StampWords:
    """The visible stamp's heading and `role`'s label in the language the record is written in (its
    snapshot's), whoever signs it and in whatever language their page is (walk p8: a Chinese record's
    stamps read "Digitally signed (PAdES) business owner")."""
    language = ((record.snapshot or {}).get("record") or {}).get("language") or "en"
    with translation.override(language):
        return signing.StampWords(heading=_(STAMP_HEADING), role=role_name(role))


def sign(
    *, record: DecisionRecord, user, role: str, pkcs12: bytes, passphrase: str, seal: tuple[bytes, str] | None = None
) -> DecisionRecord:
    """Add `role`'s PAdES signature with an uploaded PKCS#12 (owners sign in order business, platform,
    security), only with the signing certificate the owner enrolled and the record's snapshot names.
    Development CA only: refused, with the reason, once a non-development trust root is configured."""
    refusal = pkcs12_upload_refusal()
    if refusal:
        raise ValidationError({"pkcs12": refusal})
    record = render_pdf(record)
    with transaction.atomic():
        record, fingerprint = _locked_for_signing(record, user, role)
        certificate = _check_key(pkcs12, passphrase, fingerprint, user)
        long_term = _long_term()
        try:
            signed = signing.sign_pdf(
                _current_pdf(record),
                pkcs12,
                passphrase,
                field_name=role,
                signer_name=person_name(user),
                role=f"{role} owner",
                reason=_signature_reason(record),
                stamp_font=stamp_font(),
                stamp_words=stamp_words(record, role),
                expected_certificate_sha256=fingerprint,
                **long_term,
            )
            if role == OWNER_ROLES[-1] and seal is not None:
                signed = signing.sign_pdf(
                    signed,
                    seal[0],
                    seal[1],
                    field_name="seal",
                    signer_name="Organisation seal",
                    role="seal",
                    reason=ROLE_LABELS["seal"],
                    stamp_font=stamp_font(),
                    stamp_words=stamp_words(record, "seal"),
                    **long_term,
                )
        except signing.SigningError as exc:
            raise ValidationError({"pkcs12": signing_refusal(exc, "pkcs12")}) from exc
        return _store_signature(record, user, role, signed, certificate, method="pkcs12")


def prepare_signature(*, record: DecisionRecord, user, role: str) -> SignatureRequest:
    """Owner-side signing, step 1: prepare `role`'s signature revision for the owner's enrolled
    certificate and keep it; the owner signs its ``signed_attributes`` on their own machine
    (kvselect-sign) and returns the CMS (``complete_signature``). A pending request for the same field
    is superseded: a CMS made for it is refused as stale."""
    record = render_pdf(record)
    with transaction.atomic():
        record, fingerprint = _locked_for_signing(record, user, role)
        enrolled = current_certificate(user)
        _refuse_unusable_certificate(enrolled)
        current = _current_pdf(record)
        try:
            prepared = signing.prepare_owner_signature(
                current,
                enrolled.certificate_pem.encode(),
                field_name=role,
                signer_name=person_name(user),
                role=f"{role} owner",
                reason=_signature_reason(record),
                stamp_font=stamp_font(),
                stamp_words=stamp_words(record, role),
            )
        except signing.SigningError as exc:
            raise ValidationError({"__all__": str(exc)}) from exc
        superseded = record.signature_requests.filter(role=role, superseded_at__isnull=True, completed_at__isnull=True)
        _discard_after_commit([name for name in superseded.values_list("prepared_pdf", flat=True) if name])
        superseded.update(superseded_at=timezone.now(), prepared_pdf="")
        request = SignatureRequest(
            record=record,
            role=role,
            user=user,
            certificate_sha256=fingerprint,
            base_sha256=hashlib.sha256(current).hexdigest(),
            document_digest=prepared.document_digest.hex(),
            signed_attributes=prepared.signed_attributes,
            reserved_start=prepared.reserved_start,
            reserved_end=prepared.reserved_end,
        )
        request.prepared_pdf.save(
            f"record-{record.selection_id}-v{record.version}-{role}-prepared.pdf", ContentFile(prepared.pdf), save=False
        )
        request.save()
        audit(
            record.selection,
            user,
            "record.signature_prepared",
            field=f"record:v{record.version}",
            new={"role": role, "document_digest": request.document_digest, "certificate_sha256": fingerprint},
        )
    return request


def _refuse_unusable_certificate(enrolled) -> None:
    """Tell the owner before they sign, not after: an enrolled certificate that expired, or that a
    configured CRL now revokes, cannot sign (the embed step would refuse its signature)."""
    if enrolled.not_after <= timezone.now():
        raise ValidationError(
            {
                "__all__": _("Your enrolled certificate expired on %(date)s: enrol a new one.")
                % {"date": f"{enrolled.not_after:%Y-%m-%d}"}
            }
        )
    _root, refusal = certification_refusal(enrolled.certificate_pem.encode())
    if refusal:
        raise ValidationError(
            {"__all__": _("Your enrolled certificate cannot sign: %(reason)s.") % {"reason": refusal}}
        )


def _discard_after_commit(names: list[str]) -> None:
    """Delete prepared revisions no upload can complete any more, once the transaction commits."""

    def discard() -> None:
        for name in names:
            try:
                default_storage.delete(name)
            except OSError:  # best effort: an orphan file is harmless, a half row is not
                logger.warning("could not delete prepared signature revision %s", name)

    if names:
        transaction.on_commit(discard)


def signature_request_document(request: SignatureRequest) -> dict[str, Any]:
    """What the owner signs, as kvselect-sign reads it (the API's answer and the page's download)."""
    return {
        "record": request.record_id,
        "version": request.record.version,
        "role": request.role,
        "certificate_sha256": request.certificate_sha256,
        "document_digest": request.document_digest,
        "signed_attributes": base64.b64encode(bytes(request.signed_attributes)).decode("ascii"),
        "created_at": request.created_at.isoformat(),
    }


def pending_signature_request(record: DecisionRecord, user, role: str) -> SignatureRequest | None:
    """The signature prepared for ``user`` as ``role`` owner and still waiting for their CMS."""
    return record.signature_requests.filter(
        role=role, user=user, superseded_at__isnull=True, completed_at__isnull=True
    ).first()


def complete_signature(*, record: DecisionRecord, user, role: str, cms: bytes) -> DecisionRecord:
    """Owner-side signing, step 2: embed the owner's CMS into the revision prepared for them, after
    checking it is their enrolled certificate's valid signature over exactly that revision. A CMS for
    an older request, a record that moved on, another digest or another key is refused; nothing is stored."""
    with transaction.atomic():
        record, fingerprint = _locked_for_signing(record, user, role)
        pending = pending_signature_request(record, user, role)
        if pending is None:
            raise ValidationError(
                {
                    "cms": _(
                        "No %(owner)s's signature is being prepared for you on record v%(version)s: prepare it first."
                    )
                    % {"owner": owner_name(role), "version": record.version}
                }
            )
        current = _current_pdf(record)
        if hashlib.sha256(current).hexdigest() != pending.base_sha256 or pending.certificate_sha256 != fingerprint:
            raise ValidationError(
                {
                    "cms": _(
                        "The signature prepared at %(time)s UTC is stale: the record or your enrolled certificate "
                        "changed since. Prepare it again and sign the new attributes."
                    )
                    % {"time": f"{pending.created_at:%Y-%m-%d %H:%M}"}
                }
            )
        older = [
            bytes.fromhex(d)
            for d in record.signature_requests.filter(role=role)
            .exclude(pk=pending.pk)
            .values_list("document_digest", flat=True)
        ]
        with pending.prepared_pdf.open("rb") as handle:
            prepared = signing.PreparedSignature(
                pdf=handle.read(),
                document_digest=bytes.fromhex(pending.document_digest),
                signed_attributes=bytes(pending.signed_attributes),
                reserved_start=pending.reserved_start,
                reserved_end=pending.reserved_end,
            )
        try:
            signed = signing.finish_owner_signature(
                prepared, cms, fingerprint, base=current, older_digests=older, **_long_term()
            )
        except signing.SigningError as exc:
            raise ValidationError({"cms": signing_refusal(exc, "cms", "prepared")}) from exc
        _discard_after_commit([pending.prepared_pdf.name])
        pending.completed_at, pending.prepared_pdf = timezone.now(), ""
        pending.save(update_fields=["completed_at", "prepared_pdf"])
        certificate = signing.certificate_info(current_certificate(user).certificate_pem.encode())
        return _store_signature(record, user, role, signed, certificate, method="owner-side")


def sign_with_hsm(*, record: DecisionRecord, user, role: str, pin: str) -> DecisionRecord:
    """Sign `role`'s field with the owner's key in the organisation's HSM (PKCS#11, KVSELECT_HSM_KEYS);
    ``pin`` unlocks it for this signature only and is never stored. The token's certificate must be the
    owner's enrolled one."""
    try:
        key = hsm_key_for(user.get_username())
    except HsmConfigurationError as exc:
        raise ValidationError({"pin": str(exc)}) from exc
    if key is None:
        raise ValidationError(
            {
                "pin": _("No HSM key is configured for %(user)s (KVSELECT_HSM_KEYS): sign with kvselect-sign.")
                % {"user": user.get_username()}
            }
        )
    record = render_pdf(record)
    with transaction.atomic():
        record, fingerprint = _locked_for_signing(record, user, role)
        long_term = _long_term()
        try:
            with signing.pkcs11_session(key, pin) as signer:
                certificate = signing.certificate_info(signer.signing_cert.dump())
                if certificate.sha256 != fingerprint:
                    raise signing.refusal(
                        "pin",
                        gettext_noop(
                            "the HSM key %(key)s holds %(certificate)s, not your enrolled certificate "
                            "(SHA-256 %(sha256)s…)"
                        ),
                        key=repr(key.key_label),
                        certificate=certificate.short,
                        sha256=fingerprint[:16],
                    )
                signed = signing.sign_pdf_with(
                    _current_pdf(record),
                    signer,
                    field_name=role,
                    signer_name=person_name(user),
                    role=f"{role} owner",
                    reason=_signature_reason(record),
                    stamp_font=stamp_font(),
                    stamp_words=stamp_words(record, role),
                    **long_term,
                )
        except signing.SigningError as exc:
            raise ValidationError({"pin": signing_refusal(exc, "pin")}) from exc
        return _store_signature(record, user, role, signed, certificate, method="hsm")


def _store_signature(
    record: DecisionRecord, user, role: str, signed: bytes, certificate: signing.CertificateInfo, *, method: str
) -> DecisionRecord:
    """Record `role`'s signature: the approval, the signed PDF, the status and the audit entry
    (in the caller's transaction)."""
    approval = record.approvals.get(role=role)
    approval.signed_at = timezone.now()
    approval.certificate_subject = certificate.subject[:300]
    approval.certificate_sha256 = certificate.sha256
    approval.development_certificate = certificate.development
    approval.save(update_fields=["signed_at", "certificate_subject", "certificate_sha256", "development_certificate"])
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
        new={
            "role": role,
            "sha256": record.signed_sha256,
            "certificate_sha256": certificate.sha256,
            "development_certificate": certificate.development,
            "method": method,
        },
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


REEVALUATION_COPIED_FIELDS = ("decision", "rationale", "applies_to", "does_not_apply_to", "include_simulated")


@transaction.atomic
def start_reevaluation(*, record: DecisionRecord, user) -> DecisionRecord:
    """Draft the record that supersedes signed ``record``: its decision fields carried over, a new
    review-by date. Linked both ways: the draft supersedes ``record``, which names it as successor."""
    fields = {name: getattr(record, name) for name in REEVALUATION_COPIED_FIELDS}
    tied = {c.pk for c in tied_candidates(record.selection, record.include_simulated)}
    if record.tie_choice_id in tied:  # still tied: the ground is carried over, stated again by whoever re-evaluates
        fields.update(tie_choice_id=record.tie_choice_id, tie_ground=record.tie_ground)
    successor = create_draft(selection=record.selection, user=user, supersedes=record, **fields)
    audit(
        record.selection,
        user,
        "record.reevaluation_started",
        field=f"record:v{record.version}",
        new={"successor": successor.version, "reasons": [r.get("code") for r in record.reevaluation_reasons or []]},
    )
    return successor
