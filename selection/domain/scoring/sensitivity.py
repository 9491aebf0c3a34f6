"""Sensitivity of the weighted-sum ranking to the weights: (a) each criterion's flip points, (b) the
nearest tie per challenger (smallest L2 move on the simplex), (c) rank acceptability under perturbed
weights; and a tie's sensitivity, which reports no weight robustness."""

from __future__ import annotations

from typing import Any

import numpy as np

from selection.domain.messages import CLAUSE_SEPARATOR, NAME_SEPARATOR, Message
from selection.domain.messages import marked as _
from selection.domain.scoring.base import CRITERION_LABELS, OR_SEPARATOR, ScoringInputError
from selection.domain.scoring.inputs import ScoringOptions


def weights_with(weights: np.ndarray, k: int, t: float) -> np.ndarray:
    """Weights with w_k set to t and the others rescaled proportionally to sum 1 - t.

    If every other weight is zero they share 1 - t equally.
    """
    weights = np.asarray(weights, dtype=float)
    rest = 1.0 - weights[k]
    if rest > 1e-12:
        new = weights * (1.0 - t) / rest
    else:
        new = np.full_like(weights, (1.0 - t) / max(len(weights) - 1, 1))
    new[k] = t
    return new


def flip_points(matrix: np.ndarray, weights: np.ndarray, leader: int, k: int) -> dict[str, Any]:
    """Where, moving w_k alone (others rescaled), another candidate overtakes the leader.

    Returns {"up": (t, challenger) | None, "down": (t, challenger) | None}: the nearest t above
    (below) the current w_k at which a challenger ties the leader and beyond which it leads.
    """
    weights = np.asarray(weights, dtype=float)
    wk = weights[k]
    rest = 1.0 - wk
    others = np.delete(np.arange(len(weights)), k)
    if rest > 1e-12:
        remainder = matrix[:, others] @ (weights[others] / rest)
    else:
        remainder = matrix[:, others].mean(axis=1) if len(others) else np.zeros(len(matrix))
    s_k = matrix[:, k]
    up, down = None, None
    for c in range(len(matrix)):
        if c == leader:
            continue
        # d(t) = t * a + (1 - t) * b, leader minus challenger
        a = s_k[leader] - s_k[c]
        b = remainder[leader] - remainder[c]
        if abs(a - b) < 1e-15:
            continue  # the gap does not depend on w_k
        t = b / (b - a)
        if not (1e-12 < t < 1 - 1e-12):
            continue  # a tie only at t = 0 or 1 (or outside [0, 1]) is not a flip
        slope = a - b
        if t > wk + 1e-12 and slope < 0 and (up is None or t < up[0]):
            up = (t, c)  # gap shrinks as w_k rises and crosses 0 at t
        if t < wk - 1e-12 and slope > 0 and (down is None or t > down[0]):
            down = (t, c)
    return {"up": up, "down": down}


def nearest_tie(matrix: np.ndarray, weights: np.ndarray, leader: int, challenger: int) -> dict[str, Any] | None:
    """Smallest L2 change of the weight vector, on the simplex, making `challenger` tie `leader`.

    Minimise |delta|_2 subject to (w + delta) . d = 0 with d = s_leader - s_challenger,
    sum(delta) = 0 and w + delta >= 0. Closed form on the free set F:
    delta_F = A^T (A A^T)^-1 b with A = [d_F; 1_F]; a primal active set pins weights that would go
    negative at 0 (delta_j = -w_j) and releases them when the KKT conditions ask. None if no weight
    vector ties.
    """
    w = np.asarray(weights, dtype=float)
    d = matrix[leader] - matrix[challenger]
    gap = float(w @ d)
    if gap <= 0:
        return {"distance": 0.0, "delta": np.zeros_like(w), "weights": w.copy()}
    if d.min() > 0 or np.ptp(d) < 1e-15:
        return None  # leader at least as good on every criterion under any weights
    fixed = np.zeros(len(w), dtype=bool)
    for _step in range(4 * len(w) + 4):
        free = ~fixed
        delta = np.where(fixed, -w, 0.0)
        rhs = np.array([-gap - d[fixed] @ delta[fixed], -delta[fixed].sum()])
        a = np.vstack([d[free], np.ones(int(free.sum()))])
        gram = a @ a.T
        if free.sum() < 2 or abs(np.linalg.det(gram)) < 1e-15:
            return None
        multipliers = np.linalg.solve(gram, rhs)
        delta[free] = a.T @ multipliers
        negative = np.where(free & (w + delta < -1e-12), w + delta, np.inf)
        if np.isfinite(negative).any():
            fixed[int(np.argmin(negative))] = True  # pin the most negative weight at 0
            continue
        # KKT: a pinned weight whose unconstrained move would be upward must be released
        wanted = multipliers[0] * d + multipliers[1]
        violation = np.where(fixed & (wanted > -w + 1e-12), wanted + w, -np.inf)
        if np.isfinite(violation).any():
            fixed[int(np.argmax(violation))] = False
            continue
        break
    else:  # pragma: no cover - the active set does not cycle for a least-distance problem
        return None
    new = np.clip(w + delta, 0.0, None)
    return {"distance": float(np.linalg.norm(delta)), "delta": delta, "weights": new}


def rank_acceptability(matrix: np.ndarray, weights: np.ndarray, draws: int, spread: float, seed: int) -> np.ndarray:
    """Share of perturbed weight vectors in which each candidate ranks first.

    Each draw multiplies every weight by an independent uniform factor in [1 - spread, 1 + spread]
    and renormalises to sum 1 (zero weights stay zero). Exact ties go to the lower index.
    """
    if not (0.0 <= spread < 1.0):
        raise ScoringInputError(f"options.acceptability_spread: must be in [0, 1), got {spread}")
    if draws < 1:
        raise ScoringInputError(f"options.acceptability_draws: must be positive, got {draws}")
    rng = np.random.default_rng(seed)
    factors = rng.uniform(1.0 - spread, 1.0 + spread, size=(draws, len(weights)))
    sampled = factors * np.asarray(weights, dtype=float)
    sampled /= sampled.sum(axis=1, keepdims=True)
    winners = np.argmax(sampled @ matrix.T, axis=1)
    return np.bincount(winners, minlength=len(matrix)) / draws


def analyse_sensitivity(
    matrix: np.ndarray,
    weights: np.ndarray,
    ids: list[str],
    criteria_ids: list[str],
    options: ScoringOptions,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Sensitivity (a), (b), (c) of the weighted-sum leader among `ids` (rows of `matrix`)."""
    labels = labels or {}
    name = lambda i: labels.get(ids[i], ids[i])  # noqa: E731
    result: dict[str, Any] = {
        "leader": None,
        "per_criterion": [],
        "nearest_ties": [],
        "acceptability": {},
        "norm": "L2",
        "sentences": [],
    }
    if len(ids) < 2:
        result["sentences"].append(Message(_("Sensitivity needs at least two candidates that pass the gates.")))
        return result
    totals = matrix @ weights
    leader = min(range(len(ids)), key=lambda i: (-totals[i], ids[i]))
    result["leader"] = ids[leader]
    sentences = result["sentences"]
    for k, criterion in enumerate(criteria_ids):
        points = flip_points(matrix, weights, leader, k)
        label = Message(CRITERION_LABELS[criterion])
        entry = {"criterion": criterion, "weight": float(weights[k]), "rise": None, "fall": None}
        clauses = []
        if points["up"] is not None:
            t, c = points["up"]
            entry["rise"] = {"to": t, "by": t - weights[k], "challenger": ids[c]}
            clauses.append(
                Message(
                    _("rises by more than %(by)s (above %(to)s, %(challenger)s would lead)"),
                    {"by": f"{t - weights[k]:.2f}", "to": f"{t:.2f}", "challenger": name(c)},
                )
            )
        if points["down"] is not None:
            t, c = points["down"]
            entry["fall"] = {"to": t, "by": weights[k] - t, "challenger": ids[c]}
            clauses.append(
                Message(
                    _("falls by more than %(by)s (below %(to)s, %(challenger)s would lead)"),
                    {"by": f"{weights[k] - t:.2f}", "to": f"{t:.2f}", "challenger": name(c)},
                )
            )
        if clauses:
            entry["sentence"] = Message(
                _("%(leader)s stays first unless the %(criterion)s weight %(clauses)s."),
                {"leader": name(leader), "criterion": label, "clauses": OR_SEPARATOR.join(clauses)},
            )
        else:
            entry["sentence"] = Message(
                _("%(leader)s stays first for any %(criterion)s weight in [0, 1]."),
                {"leader": name(leader), "criterion": label},
            )
        result["per_criterion"].append(entry)
        sentences.append(entry["sentence"])
    ties = []
    for c in range(len(ids)):
        if c == leader:
            continue
        tie = nearest_tie(matrix, weights, leader, c)
        if tie is None:
            ties.append(
                {
                    "challenger": ids[c],
                    "distance": None,
                    "sentence": Message(
                        _("No weighting makes %(challenger)s tie %(leader)s: it is nowhere better."),
                        {"challenger": name(c), "leader": name(leader)},
                    ),
                }
            )
            continue
        moves = sorted(
            ((float(tie["delta"][j]), criteria_ids[j]) for j in range(len(criteria_ids))), key=lambda m: -abs(m[0])
        )
        main = [
            Message(
                _("%(criterion)s %(change)s"), {"criterion": Message(CRITERION_LABELS[cid]), "change": f"{dv:+.2f}"}
            )
            for dv, cid in moves[:3]
            if abs(dv) >= 0.005
        ]
        values = {"challenger": name(c), "leader": name(leader), "distance": f"{tie['distance']:.2f}"}
        ties.append(
            {
                "challenger": ids[c],
                "distance": tie["distance"],
                "delta": {cid: float(tie["delta"][j]) for j, cid in enumerate(criteria_ids)},
                "weights": {cid: float(tie["weights"][j]) for j, cid in enumerate(criteria_ids)},
                "sentence": Message(
                    _(
                        "%(challenger)s would tie %(leader)s if the weights moved by %(distance)s (L2), "
                        "mainly %(main)s."
                    ),
                    {**values, "main": NAME_SEPARATOR.join(main)},
                )
                if main
                else Message(
                    _("%(challenger)s would tie %(leader)s if the weights moved by %(distance)s (L2)."), values
                ),
            }
        )
    ties.sort(key=lambda t: (t["distance"] is None, t["distance"] or 0.0))
    result["nearest_ties"] = ties
    sentences.extend(t["sentence"] for t in ties)
    shares = rank_acceptability(
        matrix, weights, options.acceptability_draws, options.acceptability_spread, options.seed
    )
    result["acceptability"] = {
        "draws": options.acceptability_draws,
        "spread": options.acceptability_spread,
        "seed": options.seed,
        "method": "multiplicative uniform perturbation, renormalised",
        "first_share": {ids[i]: float(shares[i]) for i in range(len(ids))},
    }
    ranked = sorted(range(len(ids)), key=lambda i: -shares[i])
    parts = [
        Message(_("%(name)s in %(share)s"), {"name": name(i), "share": f"{shares[i]:.1%}"})
        for i in ranked
        if shares[i] > 0
    ]
    sentences.append(
        Message(
            _(
                "Across %(draws)s weight vectors within ±%(spread)s of the chosen weights, the first "
                "place goes to %(shares)s."
            ),
            {
                "draws": f"{options.acceptability_draws:,}",
                "spread": f"{options.acceptability_spread:.0%}",
                "shares": CLAUSE_SEPARATOR.join(parts),
            },
        )
    )
    return result


def without_weight_robustness(sensitivity: dict[str, Any]) -> dict[str, Any]:
    """The sensitivity of a tie: no weight robustness (the share of weight vectors "won", the flip points
    and nearest ties all measure a lead that does not exist), only why."""
    return {
        **sensitivity,
        "leader": None,
        "per_criterion": [],
        "nearest_ties": [],
        "acceptability": {},
        "sentences": [
            Message(
                _(
                    "Weight robustness is not reported for a tie: nothing separates the tied candidates, so no "
                    "candidate is first to be robust."
                )
            )
        ],
    }
