"""Open items: each owner's "not ready" on a record, which keeps it from procurement until closed.

Raised when review starts, from the frozen snapshot's project checks (`domain.procurement.
open_items_from_checks`). An owner who confirms the item's section (the platform owner for platform
readiness, the security owner for the security checklist) resolves it, saying how, or waives it,
saying why; the service validates first, writes in one transaction and audits. The record itself
stays frozen: an item's state lives in its own row, and the PDF shows the states it was rendered
with.
"""

from __future__ import annotations

import copy
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from selection.audit import audit
from selection.domain import procurement
from selection.i18n import person_name, role_name
from selection.models import DecisionRecord, OpenItem
from selection.records.summary import item_label
from selection.selectors import owner_roles_of

CLOSABLE_STATUSES = (
    DecisionRecord.Status.IN_REVIEW,
    DecisionRecord.Status.APPROVED,
    DecisionRecord.Status.SIGNED,
)


def raise_open_items(record: DecisionRecord) -> list[OpenItem]:
    """One open item per "not ready" in the record's frozen project checks (called when review starts)."""
    checks = (record.snapshot or {}).get("project_checks") or {}
    items = [
        OpenItem(
            record=record,
            key=entry["key"],
            section=entry["section"],
            item=entry["item"],
            note=entry["note"],
            owner_roles=entry["owner_roles"],
        )
        for entry in procurement.open_items_from_checks(checks)
    ]
    return OpenItem.objects.bulk_create(items)


def unresolved(record: DecisionRecord) -> int:
    """How many of the record's open items are neither resolved nor waived."""
    return record.open_items.filter(status=OpenItem.Status.OPEN).count()


@transaction.atomic
def close_open_item(*, item: OpenItem, user, status: str, reason: str) -> OpenItem:
    """Resolve (how) or waive (why) an open item: by an owner who confirms its section, audited."""
    item = OpenItem.objects.select_for_update().select_related("record__selection").get(pk=item.pk)
    record = item.record
    roles = [role for role in owner_roles_of(user, record.selection) if role in item.owner_roles]
    label = item_label(item.section, item.item)
    if not roles:
        raise PermissionDenied(
            _("Only the %(roles)s of this selection can close “%(item)s”.")
            % {"roles": _(" or ").join(role_name(role).lower() for role in item.owner_roles), "item": label}
        )
    problems = procurement.decision_problems(status, reason)
    if item.status != OpenItem.Status.OPEN:
        problems["status"] = _("“%(item)s” is already %(status)s.") % {
            "item": label,
            "status": item.get_status_display(),
        }
    if record.status not in CLOSABLE_STATUSES:
        problems["status"] = _("Record v%(version)s is %(status)s: its items are closed.") % {
            "version": record.version,
            "status": record.get_status_display(),
        }
    if problems:
        raise ValidationError(problems)
    item.status, item.reason = status, reason.strip()
    item.decided_by, item.decided_at = user, timezone.now()
    item.save(update_fields=["status", "reason", "decided_by", "decided_at"])
    audit(
        record.selection,
        user,
        f"record.open_item_{status}",
        field=f"record:v{record.version}:{item.key}",
        old={"status": OpenItem.Status.OPEN},
        new={"status": status, "role": roles[0]},
        justification=item.reason,
    )
    return item


def as_rows(record: DecisionRecord) -> list[dict[str, Any]]:
    """The record's open items as plain data (the API, the page, the PDF when it is rendered)."""
    return [
        {
            "id": item.pk,
            "key": item.key,
            "label": item_label(item.section, item.item),
            "section": item.section,
            "item": item.item,
            "note": item.note,
            "owner_roles": list(item.owner_roles),
            "status": item.status,
            "reason": item.reason,
            "decided_by": person_name(item.decided_by) if item.decided_by_id else "",
            "decided_at": item.decided_at.isoformat() if item.decided_at else None,
        }
        for item in record.open_items.select_related("decided_by")
    ]


def record_blockers(record: DecisionRecord) -> list[str]:
    """Why `record` is not ready for procurement as kvselect holds it (its PDF is verified separately):
    not signed yet, SIMULATED evidence, a development certificate, open items (`procurement.blockers`)."""
    reasons = [] if record.status == DecisionRecord.Status.SIGNED else ["not_signed"]
    development = record.approvals.filter(development_certificate=True).exists()
    return reasons + procurement.blockers(
        simulated=record.simulated, development_certificates=development, open_items=unresolved(record)
    )


def with_item_states(context: dict[str, Any], record: DecisionRecord) -> dict[str, Any]:
    """The snapshot with each open item's state when the PDF is rendered (the snapshot stays frozen)."""
    summary = context.get("summary")
    if not summary:
        return context
    context = copy.deepcopy(context)
    states = {row["key"]: row for row in as_rows(record)}
    for entry in context["summary"].get("open_items") or []:
        state = states.get(entry.get("key"))
        if state is not None:
            entry.update(status=state["status"], reason=state["reason"], decided_by=state["decided_by"])
    return context
