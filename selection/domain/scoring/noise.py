"""Robustness to measurement noise: the passing candidates' scored indicators as parts for
`domain.noise`'s draws (each measured score within its interval, weights fixed), and whether the
recommended candidate holds."""

from __future__ import annotations

from typing import Any

import numpy as np

from selection.domain import noise as noise_domain
from selection.domain.messages import CLAUSE_SEPARATOR, Message
from selection.domain.messages import marked as _
from selection.domain.scoring.base import ScoringInputError
from selection.domain.scoring.inputs import ScoringOptions
from selection.domain.scoring.mappings import M
from selection.domain.scoring.results import CandidateScore
from selection.domain.scoring.ties import complexity_rank, observability_score


def _noise_parts(candidate: CandidateScore, criteria_ids: list[str]) -> list[noise_domain.Part]:
    """The candidate's scored indicators as noise parts (their share of the criterion score)."""
    parts = []
    for column, criterion in enumerate(criteria_ids):
        indicators = candidate.criteria[criterion].indicators
        total_weight = sum(ind.weight for ind in indicators)
        for ind in indicators:
            if ind.status == "ok" and total_weight:
                parts.append(
                    noise_domain.Part(
                        column, ind.weight / total_weight, ind.score, ind.score_interval, f"{criterion}:{ind.indicator}"
                    )
                )
    return parts


def measurement_noise(
    passing: list[CandidateScore],
    order: list[CandidateScore],
    tie: dict[str, Any],
    criteria_ids: list[str],
    weights: np.ndarray,
    options: ScoringOptions,
    labels: dict[str, str],
    core: np.ndarray | None = None,
) -> dict[str, Any]:
    """Robustness to measurement noise (`domain.noise`): the share of draws of the measurements, each
    within its interval, in which each passing candidate wins under the decision rule (weights fixed),
    and whether the recommended candidate holds (`stable`: None when nothing has an interval). It
    holds when it wins at least `noise.STABLE_SHARE` of the draws, or when the tie-break chose it
    within the noise on a documented property (observability, operating complexity), which no draw
    of the measurements moves."""
    result: dict[str, Any] = {
        "draws": options.noise_draws,
        "seed": options.seed,
        "method": "each measured score drawn uniformly within its 95% interval; weights fixed; tie margin applied",
        "first_share": {},
        "with_interval": 0,
        "measured": 0,
        "stable": None,
    }
    if len(passing) < 2 or not order:
        result["sentence"] = Message(
            _("Robustness to measurement noise needs a second candidate that passes the gates.")
        )
        return result
    if options.noise_draws < 1:
        raise ScoringInputError(f"options.noise_draws: must be positive, got {options.noise_draws}")
    parts = [_noise_parts(c, criteria_ids) for c in passing]
    measured = [p for c, own in zip(passing, parts, strict=True) for p in own if _is_measured(c, p, criteria_ids)]
    result["measured"] = len(measured)
    result["with_interval"] = sum(1 for p in measured if p.interval is not None)
    keys = sorted({(-round(observability_score(c), 9), complexity_rank(c)) for c in passing})
    preference = [keys.index((-round(observability_score(c), 9), complexity_rank(c))) for c in passing]
    shares = noise_domain.first_shares(
        parts,
        [c.candidate for c in passing],
        weights,
        preference,
        options.tie_margin,
        options.noise_draws,
        options.seed,
        core_weights=core,
    )
    result["first_share"] = {c.candidate: float(share) for c, share in zip(passing, shares, strict=True)}
    ranked = sorted(range(len(passing)), key=lambda i: (-shares[i], passing[i].candidate))
    result["shares"] = CLAUSE_SEPARATOR.join(
        Message(_("%(name)s in %(share)s"), {"name": labels.get(passing[i].candidate), "share": f"{shares[i]:.1%}"})
        for i in ranked
        if shares[i] > 0
    )
    values = {
        "draws": f"{options.noise_draws:,}",
        "count": str(result["with_interval"]),
        "measured": str(result["measured"]),
        "shares": result["shares"],
    }
    if not result["with_interval"]:
        result["sentence"] = Message(
            _(
                "No measured figure has a 95%% interval yet (%(measured)s measured indicators): robustness to "
                "measurement noise is unknown."
            ),
            values,
        )
        return result
    share = float(shares[passing.index(order[0])])
    by_rule = bool(tie.get("applied")) and tie.get("decided_by") in ("observability", "operating_complexity")
    result["stable"] = share >= noise_domain.STABLE_SHARE or by_rule
    result["sentence"] = Message(
        _(
            "Across %(draws)s draws of the measurements, each of the %(count)s of %(measured)s measured indicators "
            "with a 95%% interval drawn within it (the others held), the first place goes to %(shares)s."
        ),
        values,
    )
    return result


def _is_measured(candidate: CandidateScore, part: noise_domain.Part, criteria_ids: list[str]) -> bool:
    criterion, indicator = part.name.split(":", 1)
    return any(i.indicator == indicator and i.source == M for i in candidate.criteria[criterion].indicators)
