"""The audit trail: who changed what, when, from what to what, and why. Every service writes through here."""

from __future__ import annotations

import json
from typing import Any

from selection.models import AuditEntry, Selection


def audit(
    selection: Selection, actor, action: str, field: str = "", old: Any = None, new: Any = None, justification: str = ""
) -> AuditEntry:
    return AuditEntry.objects.create(
        selection=selection,
        actor=actor,
        action=action,
        field=field,
        old=jsonable(old),
        new=jsonable(new),
        justification=justification,
    )


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str)) if value is not None else None
