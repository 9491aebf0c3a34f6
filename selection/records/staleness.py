"""Has anything a signed decision rests on changed since it was signed?

A selection is "decided - inputs changed since <date>" when, after its current signed record was
signed, its constraints, weights, gates or candidates changed (the audit trail every service
writes through says what, when and who), or new evidence arrived (a run that finished later).
Derived each time from those two sources, so nothing can forget to mark it; signing a new record
clears it. Read on every selection page (the header), the dashboard and the API.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from benchmarks.models import BenchmarkRun
from benchmarks.suite import title_of
from selection.i18n import person_name
from selection.models import Constraints, DecisionRecord, Selection

# audit action -> what changed (the inputs a decision rests on)
INPUT_ACTIONS = {
    "constraints.changed": "constraints",
    "weight.changed": "weights",
    "weight.removed": "weights",
    "gates.changed": "gates",
    "candidate.added": "candidates",
    "candidate.changed": "candidates",
    "candidate.removed": "candidates",
}


KIND_LABELS = {
    "constraints": gettext_lazy("constraints"),
    "weights": gettext_lazy("weights"),
    "gates": gettext_lazy("gates"),
    "candidates": gettext_lazy("candidates"),
    "evidence": gettext_lazy("evidence"),
}


@dataclass(frozen=True)
class Change:
    what: str  # constraints | weights | gates | candidates | evidence
    at: dt.datetime
    summary: str  # one line, in the page's language
    by: str = ""


@dataclass(frozen=True)
class Staleness:
    record: DecisionRecord  # the signed record that no longer matches its inputs
    since: dt.datetime  # the first change after signing
    changes: list[Change] = field(default_factory=list)

    @property
    def kinds(self) -> list[str]:
        return sorted({c.what for c in self.changes})

    @property
    def kind_labels(self) -> str:
        return ", ".join(str(KIND_LABELS[k]) for k in self.kinds)

    def as_dict(self) -> dict[str, Any]:
        return {
            "record": self.record.version,
            "signed_at": self.record.signed_at,
            "since": self.since,
            "changed": self.kinds,
            "changes": [{"what": c.what, "at": c.at, "summary": c.summary, "by": c.by} for c in self.changes],
        }


def _value(value: Any) -> str:
    return "—" if value in (None, "", [], {}) else str(value)


def _summary(entry) -> str:
    what = INPUT_ACTIONS[entry.action]
    if what == "constraints":
        try:
            label = str(Constraints._meta.get_field(entry.field).verbose_name)
        except Exception:  # a field since removed: its name
            label = entry.field
        return _("%(field)s: %(old)s → %(new)s") % {"field": label, "old": _value(entry.old), "new": _value(entry.new)}
    if what == "weights":
        return _("weight of %(criterion)s: %(old)s → %(new)s") % {
            "criterion": entry.field,
            "old": _value(entry.old),
            "new": _value(entry.new),
        }
    if what == "gates":
        return _("gates: %(old)s → %(new)s") % {"old": _value(entry.old), "new": _value(entry.new)}
    if entry.action == "candidate.added":
        new = entry.new or {}
        return _("candidate added: %(engine)s %(version)s") % {
            "engine": new.get("engine", "?"),
            "version": new.get("version", ""),
        }
    return _("candidate changed: %(candidate)s") % {"candidate": entry.field}


def current_signed_record(selection: Selection) -> DecisionRecord | None:
    return (
        selection.records.filter(status=DecisionRecord.Status.SIGNED, signed_at__isnull=False)
        .order_by("-version")
        .first()
    )


def staleness(selection: Selection) -> Staleness | None:
    """What changed since the selection's current signed record was signed (None: nothing, or no such record)."""
    record = current_signed_record(selection)
    if record is None:
        return None
    changes = [
        Change(INPUT_ACTIONS[e.action], e.at, _summary(e), person_name(e.actor))
        for e in selection.audit.filter(at__gt=record.signed_at, action__in=INPUT_ACTIONS).select_related("actor")
    ]
    runs = (
        BenchmarkRun.objects.filter(candidate__selection=selection, status=BenchmarkRun.Status.SUCCEEDED)
        .annotate(done=Coalesce(F("finished_at"), F("created_at")))
        .filter(done__gt=record.signed_at)
        .select_related("candidate__engine")
    )
    for run in runs:
        changes.append(
            Change(
                "evidence",
                run.done,
                _("new evidence: %(test)s on %(candidate)s (run %(id)s, %(provenance)s)")
                % {
                    "test": title_of(run.test),
                    "candidate": run.candidate.display_name,
                    "id": run.pk,
                    "provenance": run.evidence,
                },
            )
        )
    if not changes:
        return None
    changes.sort(key=lambda c: c.at)
    return Staleness(record, changes[0].at, changes)
