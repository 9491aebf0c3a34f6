"""Signed decisions due for re-evaluation, and starting one.

The periodic check (``flag_records_due``, a Celery beat job) marks a signed record due when:
- its review-by date has passed;
- the catalog gained a newer major version of the chosen engine (``domain.catalog.major_version``:
  below 1.0 a minor release counts, as semantic versioning allows it to break anything);
- the hardware in the selection's constraints no longer matches what was decided on.
Each record keeps since when it is due and why; its owners (and the observer) are emailed through
Django's mail backend whenever a new reason appears. The dashboard lists due records; starting the
re-evaluation (``services.start_reevaluation``) drafts the superseding record. The beat job calls
this module, which never imports the services (they enqueue through ``tasks.py``).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from selection.audit import audit
from selection.domain.catalog import newer_major_versions
from selection.models import Constraints, DecisionRecord, Engine

log = logging.getLogger(__name__)


def _review_by(record: DecisionRecord) -> dt.date | None:
    if record.review_by:
        return record.review_by
    text = ((record.snapshot or {}).get("review") or {}).get("review_by")
    try:
        return dt.date.fromisoformat(text) if text else None
    except ValueError:
        return None


def reasons_due(record: DecisionRecord, today: dt.date) -> list[dict[str, Any]]:
    """Why ``record`` is due for re-evaluation on ``today`` (empty: it is not). Each reason has a
    code, an English sentence and its values."""
    reasons: list[dict[str, Any]] = []
    review_by = _review_by(record)
    if review_by is not None and review_by < today:
        reasons.append(
            {
                "code": "review_by_passed",
                "text": f"the review-by date {review_by.isoformat()} has passed",
                "review_by": review_by.isoformat(),
            }
        )
    basis = (record.snapshot or {}).get("basis") or {}
    engine = Engine.objects.filter(slug=basis.get("engine")).first() if basis.get("engine") else None
    if engine is not None and basis.get("engine_version"):
        newer = newer_major_versions(basis["engine_version"], engine.versions)
        if newer:
            reasons.append(
                {
                    "code": "engine_major_version",
                    "text": f"the catalog has {engine.name} {', '.join(newer)}, a newer major version than the "
                    f"chosen {basis['engine_version']}",
                    "engine": engine.slug,
                    "chosen": basis["engine_version"],
                    "newer": newer,
                }
            )
    decided = basis.get("hardware") or {}
    constraints = Constraints.objects.filter(selection_id=record.selection_id).first()
    if decided and constraints is not None:
        now = {"gpu_model": constraints.gpu_model, "gpu_memory_gib": constraints.gpu_memory_gib}
        if now != decided:
            reasons.append(
                {
                    "code": "hardware_changed",
                    "text": f"the hardware in the constraints changed from {decided.get('gpu_model')} "
                    f"{decided.get('gpu_memory_gib'):g} GiB to {now['gpu_model']} {now['gpu_memory_gib']:g} GiB",
                    "decided": decided,
                    "now": now,
                }
            )
    return reasons


def _recipients(record: DecisionRecord) -> list[str]:
    selection = record.selection
    people = [selection.business_owner, selection.platform_owner, selection.security_owner, selection.observer]
    return sorted({p.email for p in people if p is not None and p.email})


def _notify(record: DecisionRecord, new_reasons: list[dict[str, Any]]) -> bool:
    recipients = _recipients(record)
    if not recipients:
        return False
    url = settings.KVSELECT_BASE_URL + reverse("selection:record", args=[record.selection_id, record.pk])
    lines = [
        f"The signed decision record v{record.version} of “{record.selection.name}” is due for re-evaluation:",
        "",
        *[f"- {r['text']}" for r in record.reevaluation_reasons],
        "",
        f"New since the last notice: {'; '.join(r['text'] for r in new_reasons)}.",
        "",
        f"Open the record and start the re-evaluation (an architect drafts the superseding record): {url}",
    ]
    send_mail(
        subject=f"[kvselect] {record.selection.name}: decision record v{record.version} is due for re-evaluation",
        message="\n".join(lines),
        from_email=None,
        recipient_list=recipients,
    )
    return True


def flag_records_due(now: dt.datetime | None = None) -> list[DecisionRecord]:
    """Mark every signed record that is due (idempotent); email its owners when a reason is new.
    A record whose reasons all went away (the hardware was put back) is unmarked. Returns the
    records marked or re-marked now."""
    now = now or timezone.now()
    today = timezone.localdate(now)
    flagged = []
    signed = DecisionRecord.objects.filter(status=DecisionRecord.Status.SIGNED).select_related(
        "selection__business_owner", "selection__platform_owner", "selection__security_owner", "selection__observer"
    )
    for record in signed:
        reasons = reasons_due(record, today)
        known = {r.get("code") for r in record.reevaluation_reasons or []}
        new = [r for r in reasons if r["code"] not in known]
        if not reasons and record.reevaluation_due_since is not None:
            _mark(record, [], None, None, "record.reevaluation_cleared")
        elif new or [r["code"] for r in reasons] != [r.get("code") for r in record.reevaluation_reasons or []]:
            _mark(record, reasons, record.reevaluation_due_since or now, new, "record.reevaluation_due")
            if new:
                flagged.append(record)
    return flagged


@transaction.atomic
def _mark(record: DecisionRecord, reasons, due_since, new_reasons, action: str) -> None:
    record.reevaluation_reasons = reasons
    record.reevaluation_due_since = due_since
    fields = ["reevaluation_reasons", "reevaluation_due_since"]
    if new_reasons:
        try:
            if _notify(record, new_reasons):
                record.owners_notified_at = timezone.now()
                fields.append("owners_notified_at")
        except Exception:  # the mark matters more than the mail: the next run tells them again
            log.exception("could not email the owners of record %s", record.pk)
    record.save(update_fields=fields)
    audit(
        record.selection,
        None,
        action,
        field=f"record:v{record.version}",
        new={"reasons": [r["code"] for r in reasons], "notified": "owners_notified_at" in fields},
    )


def due_records(selections) -> list[DecisionRecord]:
    """Signed records of ``selections`` due for re-evaluation, oldest due first."""
    return list(
        DecisionRecord.objects.filter(
            selection__in=selections, status=DecisionRecord.Status.SIGNED, reevaluation_due_since__isnull=False
        )
        .select_related("selection")
        .order_by("reevaluation_due_since", "pk")
    )
