"""TOPSIS, the second opinion beside the weighted sum that decides, on the criteria's fixed [0, 1]
scale; and the sentence saying which ranking decides and, when TOPSIS ranks another candidate first,
on which criteria its distance favours it."""

from __future__ import annotations

from typing import Any

import numpy as np

from selection.domain.messages import NAME_SEPARATOR, Message
from selection.domain.messages import marked as _
from selection.domain.scoring.base import CRITERION_LABELS
from selection.domain.scoring.results import CandidateScore


def topsis(matrix: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """TOPSIS closeness on the criteria's fixed [0, 1] scale. Rows: candidates.

    The ideal is full marks (1) and the anti-ideal zero on every criterion, weighted: closeness =
    d- / (d+ + d-). Not the set's best and worst: with two candidates those make the one ahead on
    every criterion where they differ 1.000 and the other 0.000, however small the difference (two
    totals of 0.775 and 0.764 read as 1 against 0), and adding a candidate would move them.
    """
    w = np.asarray(weights, dtype=float)
    weighted = np.asarray(matrix, dtype=float) * w
    d_plus = np.sqrt(((w - weighted) ** 2).sum(axis=1))
    d_minus = np.sqrt((weighted**2).sum(axis=1))
    denominator = d_plus + d_minus
    return np.divide(d_minus, denominator, out=np.full(len(weighted), 0.5), where=denominator > 0)


def ranking_method(
    order: list[CandidateScore],
    passing: list[CandidateScore],
    matrix: np.ndarray,
    weights: np.ndarray,
    criteria_ids: list[str],
    tied: bool = False,
) -> dict[str, Any]:
    """Which ranking decides (the weighted sum, with the tie-break), why, and what TOPSIS says (nothing
    that names a first for a tie: the second opinion does not pick between tied candidates).

    `passing` are the rows of `matrix` (each candidate's criterion scores). When TOPSIS ranks
    another candidate first, the sentence names the criteria where that candidate's weighted lead is
    largest: where TOPSIS's distance favours it.
    """
    method: dict[str, Any] = {
        "decides": "weighted_sum",
        "second_opinion": "topsis",
        "topsis_leader": None,
        "agrees": None,
    }
    scored = [c for c in passing if c.topsis is not None]
    if tied:
        method["sentence"] = Message(
            _(
                "The weighted sum decides, with the tie-break: here they leave a tie, and TOPSIS, the second "
                "opinion, does not pick between tied candidates."
            )
        )
        return method
    if not order or len(scored) < 2:
        method["sentence"] = Message(
            _(
                "The weighted sum decides: each criterion is scored against fixed bounds, so adding or removing "
                "a candidate cannot change the order. TOPSIS needs at least two candidates that pass the gates."
            )
        )
        return method
    winner = order[0]
    leader = min(scored, key=lambda c: (-round(c.topsis, 9), c.candidate))
    method["topsis_leader"] = leader.candidate
    method["agrees"] = leader.candidate == winner.candidate
    why = Message(
        _(
            "The weighted sum decides (with the tie-break): each criterion is scored against fixed bounds, so "
            "adding or removing a candidate cannot change the order. TOPSIS, the second opinion, measures each "
            "candidate's distance to full marks and to zero on the same fixed scale."
        )
    )
    if method["agrees"]:
        method["sentence"] = Message(
            _("%(why)s It agrees: %(name)s is also first by TOPSIS closeness (%(closeness)s)."),
            {"why": why, "name": winner.label, "closeness": f"{winner.topsis:.3f}"},
        )
        return method
    rows = {c.candidate: i for i, c in enumerate(passing)}
    scaled = matrix * weights
    lead = scaled[rows[leader.candidate]] - scaled[rows[winner.candidate]]
    favoured = [criteria_ids[k] for k in np.argsort(-lead, kind="stable")[:2] if lead[k] > 1e-9]
    values = {
        "why": why,
        "other": leader.label,
        "other_closeness": f"{leader.topsis:.3f}",
        "name": winner.label,
        "closeness": f"{(winner.topsis or 0.0):.3f}",
        "total": f"{winner.total:.3f}",
        "other_total": f"{leader.total:.3f}",
    }
    if favoured:
        method["favoured_criteria"] = favoured
        method["sentence"] = Message(
            _(
                "%(why)s TOPSIS ranks %(other)s first (closeness %(other_closeness)s against %(closeness)s for "
                "%(name)s): being a distance, it favours an even profile, and %(other)s's lead on %(criteria)s "
                "counts for more there than in the weighted sum (%(name)s %(total)s, %(other)s %(other_total)s)."
            ),
            {**values, "criteria": NAME_SEPARATOR.join(Message(CRITERION_LABELS[k]) for k in favoured)},
        )
    else:
        method["sentence"] = Message(
            _(
                "%(why)s TOPSIS ranks %(other)s first (closeness %(other_closeness)s against %(closeness)s for "
                "%(name)s): it measures the distance to full marks and to zero on each criterion, not the weighted "
                "sum (%(name)s %(total)s, %(other)s %(other_total)s)."
            ),
            values,
        )
    return method
