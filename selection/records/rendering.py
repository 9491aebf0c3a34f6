"""An approved record's PDF: the frozen snapshot rendered with its signature fields in place.

`render_pdf` is the one service that renders: it loads the renderer (`records.pdf`, WeasyPrint and its
Pango bindings, about a second) when a record is rendered, so the web and scoring processes and every
`manage.py` command start without it (tests/architecture/test_lean_imports.py)."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import transaction

from config.outage import retry_database
from selection.certificates import signing
from selection.domain.records import OWNER_ROLES
from selection.i18n import person_name
from selection.models import DecisionRecord, RecordApproval
from selection.records.open_items import with_item_states


def stamp_font() -> Path | None:
    """The font for signer names outside Latin-1 in signature stamps (KVSELECT_STAMP_FONT, or Noto Sans CJK)."""
    if settings.KVSELECT_STAMP_FONT:
        return Path(settings.KVSELECT_STAMP_FONT)
    return signing.cjk_stamp_font(Path(settings.VAR_DIR) / "cache" / "fonts")


def with_approvals(snapshot: dict[str, Any], approvals: list[RecordApproval]) -> dict[str, Any]:
    """The frozen snapshot with who approved when: the snapshot is frozen when review starts, the
    owners approve after it, and the PDF is rendered once all three have (the snapshot itself never
    changes)."""
    context = copy.deepcopy(snapshot)
    by_role = {approval.role: approval for approval in approvals}
    for owner in context.get("owners") or []:
        approval = by_role.get(owner.get("role"))
        if approval is None:
            continue
        owner["approved_at"] = approval.approved_at.isoformat()  # written in the record's time zone (`when`)
        owner["approved_by"] = person_name(approval.user)
        owner["approval_comment"] = approval.comment
    tie = (context.get("decision") or {}).get("tie")
    confirmed = next((a for a in approvals if a.confirmed_tie_ground), None)
    if isinstance(tie, dict) and confirmed is not None:  # the business owner's confirmation of the stated ground
        tie["confirmed_by"] = person_name(confirmed.user)
        tie["confirmed_at"] = confirmed.approved_at.isoformat()
    return context


def render_pdf(record: DecisionRecord) -> DecisionRecord:
    """Render the frozen snapshot to PDF with the three signature fields in place (idempotent)."""
    from selection.records.pdf import render_record  # the renderer, loaded by the render (module docstring)

    record = DecisionRecord.objects.get(pk=record.pk)
    if record.pdf or record.status not in (DecisionRecord.Status.APPROVED,):
        return record
    context = with_approvals(record.snapshot, list(record.approvals.select_related("user")))
    rendered = render_record(with_item_states(context, record))  # open items as they stand now
    pdf = signing.prepare_signature_fields(
        rendered.pdf, {k: v for k, v in rendered.signature_boxes.items() if k in OWNER_ROLES or k == "seal"}
    )

    def store() -> DecisionRecord:
        with transaction.atomic():
            locked = DecisionRecord.objects.select_for_update().get(pk=record.pk)
            if locked.pdf:
                return locked
            locked.pdf.save(f"record-{locked.selection_id}-v{locked.version}.pdf", ContentFile(pdf), save=False)
            locked.pdf_sha256 = hashlib.sha256(pdf).hexdigest()
            locked.save(update_fields=["pdf", "pdf_sha256"])
        return locked

    # the render takes seconds to minutes: a database restarted meanwhile costs a retry of this write,
    # not the render again (the connection it left idle is dead)
    return retry_database(store, f"record {record.pk}: storing its PDF")
