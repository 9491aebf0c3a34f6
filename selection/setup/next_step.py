"""What an architect should do next on a selection, and who leads so far (the dashboard's columns)."""

from __future__ import annotations

from dataclasses import dataclass

from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from benchmarks.models import BenchmarkRun
from selection.models import Constraints, DecisionRecord, Selection
from selection.records.open_items import unresolved
from selection.records.staleness import staleness
from selection.selectors import compared_candidates
from selection.templatetags.kvselect import when


@dataclass(frozen=True)
class NextStep:
    label: str
    hint: str
    url: str


def next_step(
    selection: Selection,
    *,
    has_constraints: bool | None = None,
    candidate_count: int | None = None,
    gate_count: int | None = None,
) -> NextStep:
    """What the architect should do next on this selection (the five steps of docs/domain.md)."""
    if has_constraints is None:
        has_constraints = Constraints.objects.filter(selection=selection).exists()
    pk = selection.pk
    if selection.status == Selection.Status.ARCHIVED:
        return NextStep(
            _("Archived"),
            _("Read-only: an architect restores the selection to continue."),
            reverse("selection:detail", args=[pk]),
        )
    if not has_constraints:
        return NextStep(
            _("Fill in the constraints"),
            _("One page of business constraints drives everything else."),
            reverse("selection:constraints", args=[pk]),
        )
    if not selection.scenario_accepted:
        return NextStep(
            _("Review the scenario"),
            _("Check the inferred scenario and its reasons, then accept it."),
            reverse("selection:scenario", args=[pk]),
        )
    if (gate_count if gate_count is not None else selection.gates.count()) == 0:
        return NextStep(
            _("Choose gates"),
            _("Pick 2-3 priority dimensions as first-round gates."),
            reverse("selection:gates", args=[pk]),
        )
    if (candidate_count if candidate_count is not None else compared_candidates(selection).count()) == 0:
        return NextStep(
            _("Add candidates"),
            _("Add the engines to compare, with their endpoints and hardware."),
            reverse("selection:candidates", args=[pk]),
        )
    record = selection.records.filter(archived_at__isnull=True).first()  # an archived draft is set aside
    if record is not None and record.status in ("signed", "superseded"):
        return _decided(selection, record)
    if record is not None and record.status in ("in_review", "approved"):
        return NextStep(
            _("Approve and sign the record"),
            _("Each named owner approves, then signs in turn."),
            reverse("selection:record", args=[pk, record.pk]),
        )
    if record is not None:
        return NextStep(
            _("Send the record to review"),
            _("Complete the draft decision record and start the review."),
            reverse("selection:record", args=[pk, record.pk]),
        )
    if BenchmarkRun.objects.filter(candidate__selection=selection, status=BenchmarkRun.Status.SUCCEEDED).exists():
        return NextStep(
            _("Compare and decide"),
            _("Read the side-by-side comparison, then draft the decision record."),
            reverse("selection:comparison", args=[pk]),
        )
    return NextStep(
        _("Validate the candidates"),
        _("Check each candidate's capacity, then run the validation tests or upload CI results."),
        reverse("selection:evidence", args=[pk]),
    )


def _decided(selection: Selection, record: DecisionRecord) -> NextStep:
    """A signed decision: stale, due, not for procurement (SIMULATED, development CA), or ready."""
    url = reverse("selection:record", args=[selection.pk, record.pk])
    stale = staleness(selection)
    if stale is not None:
        return NextStep(
            _("Decided — inputs changed since %(since)s") % {"since": when(stale.since)},
            _("The %(kinds)s changed after the record was signed: re-evaluate the decision.")
            % {"kinds": stale.kind_labels},
            url,
        )
    if record.reevaluation_due_since is not None:
        return NextStep(
            _("Decided — due for re-evaluation"),
            "; ".join(r.get("text", "") for r in record.reevaluation_reasons or []),
            url,
        )
    blockers = []
    if record.simulated:
        blockers.append(_("it rests on SIMULATED evidence"))
    if record.approvals.filter(development_certificate=True).exists():
        blockers.append(_("it is signed with development certificates (development CA)"))
    open_items = unresolved(record)
    if open_items:
        blockers.append(
            ngettext(
                "%(n)s open item is neither resolved nor waived",
                "%(n)s open items are neither resolved nor waived",
                open_items,
            )
            % {"n": open_items}
        )
    if blockers:
        return NextStep(
            _("Decided — not for procurement"),
            _("The signed decision record is not for procurement: %(why)s.") % {"why": _(" and ").join(blockers)},
            url,
        )
    return NextStep(_("Decided"), _("The signed decision record is ready for procurement."), url)


def _latest_decided(scores):
    """The newest scoring that recommends a candidate or names a tie (a tie is no leader, and no older
    scoring's leader stands in for it)."""
    for score in scores.only("leader", "coverage", "signable", "result")[:20]:
        if score.leader or ((score.result or {}).get("tie") or {}).get("candidates"):
            return score
    return None


def leading_candidate(selection: Selection) -> dict | None:
    """The latest scoring's leader and its evidence coverage (SIMULATED-only evidence is marked)."""
    score = _latest_decided(selection.scores.filter(include_simulated=False)) or _latest_decided(selection.scores.all())
    if score is None:
        return None
    candidates = score.result.get("candidates", [])
    tied = (score.result.get("tie") or {}).get("candidates") or []
    if not score.leader and tied:  # a tie names no leader: the tied candidates, as a tie
        labels = [c.get("label") for c in candidates if c.get("candidate") in tied]
        return {
            "label": _("tie: %(names)s") % {"names": ", ".join(labels)},
            "coverage": None,
            "simulated": not score.signable,
        }
    leader = next((c for c in candidates if c.get("candidate") == score.leader), {})
    return {"label": leader.get("label") or score.leader, "coverage": score.coverage, "simulated": not score.signable}
