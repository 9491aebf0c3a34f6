"""Aggregation: weights normalised over the weighted criteria; indicators into criterion scores (the
conservative lower bound, the upper bound if missing evidence came in at full marks, the coverage),
criteria into dimension scores and a candidate's totals; never renormalised over what is present."""

from __future__ import annotations

import math
from typing import Mapping as TMapping

import numpy as np

from selection.domain.scoring.base import CRITERION_LABELS, DIMENSION_OF, DIMENSIONS, SIMULATED, ScoringInputError
from selection.domain.scoring.gates import gate_outcomes
from selection.domain.scoring.indicators import score_indicator
from selection.domain.scoring.inputs import CandidateEvidence, ScoringConstraints
from selection.domain.scoring.mappings import Mapping
from selection.domain.scoring.results import CandidateScore, CriterionScore, DimensionScore


def normalise_weights(weights: TMapping[str, float]) -> dict[str, float]:
    """Validate and scale criterion weights to sum to 1 (order kept)."""
    if not weights:
        raise ScoringInputError("weights: at least one criterion needs a weight")
    for criterion, weight in weights.items():
        if criterion not in DIMENSION_OF:
            raise ScoringInputError(f"weights.{criterion}: unknown criterion (known: {', '.join(DIMENSION_OF)})")
        if weight is None or not math.isfinite(float(weight)) or float(weight) < 0:
            raise ScoringInputError(f"weights.{criterion}: must be a non-negative number, got {weight!r}")
    total = float(sum(float(w) for w in weights.values()))
    if total <= 0:
        raise ScoringInputError("weights: must not all be zero")
    return {criterion: float(weight) / total for criterion, weight in weights.items()}


def _score_criterion(
    criterion: str,
    weight: float,
    rows: list[Mapping],
    ev: CandidateEvidence,
    cons: ScoringConstraints,
    scenario: str,
    include_simulated: bool,
) -> CriterionScore:
    indicators = [
        score_indicator(row, ev, cons, scenario, include_simulated) for row in rows if row.criterion == criterion
    ]
    total_weight = sum(ind.weight for ind in indicators)
    present = [ind for ind in indicators if ind.status == "ok"]
    covered = sum(ind.weight for ind in present)
    coverage = covered / total_weight if total_weight else 0.0
    interval = None
    if not present:
        score = upper = None
        status = "missing"
    else:
        score = sum(ind.weight * ind.score for ind in present) / total_weight
        if any(ind.score_interval for ind in present):
            interval = tuple(
                sum(ind.weight * (ind.score_interval[end] if ind.score_interval else ind.score) for ind in present)
                / total_weight
                for end in (0, 1)
            )
        upper = score + (total_weight - covered) / total_weight
        status = "complete" if covered == total_weight else "partial"
    parts = []
    for ind in indicators:
        if ind.status == "ok":
            shown = f"{ind.input_value:.3g}" if isinstance(ind.input_value, float) else str(ind.input_value)
            runs = f" [runs {', '.join(ind.run_ids)}]" if ind.run_ids else ""
            tag = f" {ind.evidence}" if ind.evidence == SIMULATED else ""
            parts.append(f"{ind.indicator} = {shown} -> {ind.score:.2f}{tag}{runs}")
        else:
            parts.append(f"{ind.indicator}: missing ({ind.reason})")
    head = (
        "no evidence" if score is None else f"{score:.3f}" + ("" if status == "complete" else f" (up to {upper:.3f})")
    )
    explanation = f"{CRITERION_LABELS[criterion]}: {head}; " + "; ".join(parts)
    return CriterionScore(
        criterion=criterion,
        dimension=DIMENSION_OF[criterion],
        weight=weight,
        score=score,
        score_upper=upper,
        coverage=coverage,
        status=status,
        uses_simulated=any(ind.status == "ok" and ind.evidence == SIMULATED for ind in present),
        indicators=indicators,
        explanation=explanation,
        score_interval=interval,
    )


def _dimension_scores(criteria: dict[str, CriterionScore]) -> dict[str, DimensionScore]:
    result = {}
    for dimension in DIMENSIONS:
        members = [c for c in criteria.values() if c.dimension == dimension]
        if not members:
            continue
        total_w = sum(c.weight for c in members)
        shares = [(c.weight / total_w if total_w > 0 else 1 / len(members)) for c in members]
        if all(c.score is None for c in members):
            result[dimension] = DimensionScore(dimension, None, None, 0.0)
            continue
        lower = sum(s * (c.score or 0.0) for s, c in zip(shares, members, strict=True))
        upper = sum(
            s * (c.score_upper if c.score_upper is not None else 1.0) for s, c in zip(shares, members, strict=True)
        )
        coverage = sum(s * c.coverage for s, c in zip(shares, members, strict=True))
        result[dimension] = DimensionScore(dimension, lower, upper, coverage)
    return result


def candidate_score(
    ev: CandidateEvidence,
    norm_w: dict[str, float],
    rows: list[Mapping],
    constraints: ScoringConstraints,
    scenario: str,
    gates: dict[str, float],
    include_simulated: bool,
) -> CandidateScore:
    """One candidate's criteria, dimensions, totals (with the upper bound and the interval) and gate outcomes."""
    criteria = {c: _score_criterion(c, norm_w[c], rows, ev, constraints, scenario, include_simulated) for c in norm_w}
    dims = _dimension_scores(criteria)
    total = sum(cs.weight * (cs.score or 0.0) for cs in criteria.values())
    total_upper = sum(cs.weight * (cs.score_upper if cs.score_upper is not None else 1.0) for cs in criteria.values())
    coverage = sum(cs.weight * cs.coverage for cs in criteria.values())
    total_interval = None
    if any(cs.score_interval for cs in criteria.values()):
        total_interval = tuple(
            sum(
                cs.weight * (cs.score_interval[end] if cs.score_interval else (cs.score or 0.0))
                for cs in criteria.values()
            )
            for end in (0, 1)
        )
    outcomes = gate_outcomes(gates, dims, criteria)
    reasons = [g.reason for g in outcomes if not g.passed]
    return CandidateScore(
        candidate=ev.candidate,
        label=ev.label or ev.candidate,
        criteria=criteria,
        dimensions=dims,
        total=total,
        total_upper=total_upper,
        coverage=coverage,
        gates=outcomes,
        screened_out=bool(reasons),
        screen_reasons=reasons,
        uses_simulated=any(cs.uses_simulated for cs in criteria.values()),
        operating_complexity=ev.documented.operating_complexity,
        total_interval=total_interval,
    )


def score_matrix(candidates: list[CandidateScore], criteria_ids: list[str]) -> np.ndarray:
    """Candidates x criteria matrix of lower-bound scores (missing = 0, as in the total)."""
    return np.array([[c.criteria[k].score or 0.0 for k in criteria_ids] for c in candidates], dtype=float).reshape(
        len(candidates), len(criteria_ids)
    )
