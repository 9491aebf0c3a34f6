"""An approved record's PDF: the frozen snapshot rendered with its signature fields in place."""

from __future__ import annotations

import hashlib
from pathlib import Path

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import transaction

from selection.domain.records import OWNER_ROLES
from selection.models import DecisionRecord
from selection.records import signing
from selection.records.pdf import render_record


def stamp_font() -> Path | None:
    """The font for signer names outside Latin-1 in signature stamps (KVSELECT_STAMP_FONT, or Noto Sans CJK)."""
    if settings.KVSELECT_STAMP_FONT:
        return Path(settings.KVSELECT_STAMP_FONT)
    return signing.cjk_stamp_font(Path(settings.VAR_DIR) / "cache" / "fonts")


def render_pdf(record: DecisionRecord) -> DecisionRecord:
    """Render the frozen snapshot to PDF with the three signature fields in place (idempotent)."""

    record = DecisionRecord.objects.get(pk=record.pk)
    if record.pdf or record.status not in (DecisionRecord.Status.APPROVED,):
        return record
    rendered = render_record(record.snapshot)
    pdf = signing.prepare_signature_fields(
        rendered.pdf, {k: v for k, v in rendered.signature_boxes.items() if k in OWNER_ROLES or k == "seal"}
    )
    with transaction.atomic():
        locked = DecisionRecord.objects.select_for_update().get(pk=record.pk)
        if locked.pdf:
            return locked
        locked.pdf.save(f"record-{locked.selection_id}-v{locked.version}.pdf", ContentFile(pdf), save=False)
        locked.pdf_sha256 = hashlib.sha256(pdf).hexdigest()
        locked.save(update_fields=["pdf", "pdf_sha256"])
    return locked
