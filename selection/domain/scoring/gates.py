"""Gates: a dimension's minimum score, judged on the lower bound, on the dimension and on each of its
own criteria (`GATE_CRITERIA`), so one criterion's credit never carries another's gate; a failing
candidate is screened out with the reason."""

from __future__ import annotations

from typing import Mapping as TMapping

from selection.domain.messages import Message
from selection.domain.messages import marked as _
from selection.domain.scoring.base import (
    CRITERION_LABELS,
    DIMENSION_OF,
    DIMENSIONS,
    GATE_CRITERIA,
    ScoringInputError,
)
from selection.domain.scoring.results import CriterionScore, DimensionScore, GateOutcome


def _gate_members(dimension: str, criteria: dict[str, CriterionScore]) -> list[CriterionScore]:
    """The criteria a gate on `dimension` judges on their own: its weighted `GATE_CRITERIA`."""
    members = [criteria[c] for c in GATE_CRITERIA[dimension] if c in criteria]
    return [c for c in members if c.weight > 0] or members


def gate_outcomes(
    gates: TMapping[str, float], dims: dict[str, DimensionScore], criteria: dict[str, CriterionScore]
) -> list[GateOutcome]:
    """Each gate on its dimension: the dimension's score and each of its weighted `GATE_CRITERIA`
    must reach the threshold on their lower bound, so a credit of another criterion never carries
    the gate (session recovery cannot pass a persistence gate whose cache persistence scores 0); the
    outcome's score is the dimension's. Such a criterion without evidence fails the gate."""
    outcomes = []
    for dimension, threshold in gates.items():
        dim = dims[dimension]
        name = Message(DIMENSIONS[dimension])
        limit = {"threshold": f"{threshold:.2f}"}
        members = _gate_members(dimension, criteria)
        unevidenced = [c for c in members if c.score is None]
        below = [c for c in members if c.score is not None and c.score + 1e-12 < threshold]
        if dim.score is None:
            passed, reason = (
                False,
                Message(_("%(dimension)s: no evidence (gate %(threshold)s)"), {"dimension": name, **limit}),
            )
        elif dim.score + 1e-12 < threshold:
            passed = False
            reason = Message(
                _("%(dimension)s %(score)s < gate %(threshold)s"),
                {"dimension": name, "score": f"{dim.score:.2f}", **limit},
            )
        elif below:
            worst = min(below, key=lambda c: c.score)
            passed = False
            reason = Message(
                _(
                    "%(dimension)s %(score)s, but %(criterion)s %(criterion_score)s < gate %(threshold)s: "
                    "one criterion's credit cannot carry another"
                ),
                {
                    "dimension": name,
                    "score": f"{dim.score:.2f}",
                    "criterion": Message(CRITERION_LABELS[worst.criterion]),
                    "criterion_score": f"{worst.score:.2f}",
                    **limit,
                },
            )
        elif unevidenced:
            passed = False
            reason = Message(
                _("%(dimension)s %(score)s, but %(criterion)s has no evidence (gate %(threshold)s)"),
                {
                    "dimension": name,
                    "score": f"{dim.score:.2f}",
                    "criterion": Message(CRITERION_LABELS[unevidenced[0].criterion]),
                    **limit,
                },
            )
        else:
            passed = True
            reason = Message(
                _("%(dimension)s %(score)s >= gate %(threshold)s"),
                {"dimension": name, "score": f"{dim.score:.2f}", **limit},
            )
        outcomes.append(GateOutcome(dimension, threshold, dim.score, passed, reason))
    return outcomes


def validate_gates(gates: TMapping[str, float], weights: dict[str, float]) -> None:
    for dimension, threshold in gates.items():
        if dimension not in DIMENSIONS:
            raise ScoringInputError(f"gates.{dimension}: unknown dimension (known: {', '.join(DIMENSIONS)})")
        if threshold is None or not (0.0 <= float(threshold) <= 1.0):
            raise ScoringInputError(f"gates.{dimension}: threshold must be in [0, 1], got {threshold!r}")
        if not any(DIMENSION_OF[c] == dimension for c in weights):
            raise ScoringInputError(f"gates.{dimension}: no weighted criterion belongs to this dimension")
