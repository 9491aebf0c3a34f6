"""Scoring service: evidence + weights + gates -> a stored `Score` snapshot."""

from __future__ import annotations

from dataclasses import asdict

from django.db import transaction

from selection.domain import scoring
from selection.models import Score, Selection
from selection.scoring.evidence import evidence_for, scoring_constraints


def compute_scores(selection: Selection, include_simulated: bool = False) -> Score:
    """Score every candidate of the selection and store the snapshot (a new row each time inputs change)."""
    selection = Selection.objects.select_related("constraints").get(pk=selection.pk)
    weights = {w.criterion: w.weight for w in selection.weights.all()}
    gates = {g.dimension: g.threshold for g in selection.gates.all()}
    evidence = evidence_for(selection)
    result = scoring.score_candidates(
        selection.scenario or "A",
        evidence,
        scoring_constraints(selection),
        weights,
        gates=gates or None,
        options=scoring.ScoringOptions(include_simulated=include_simulated),
    )
    data = result.to_dict()
    latest = selection.scores.filter(include_simulated=include_simulated).first()
    # Same inputs and rules: reuse the row, unless its sentences are worded differently (a row stored
    # before the sentences became messages holds English text; a new row lets them translate).
    if (
        latest is not None
        and latest.inputs_hash == data["inputs_hash"]
        and latest.rules_version == data["rules_version"]
        and latest.result.get("sentences") == data["sentences"]
    ):
        return latest
    ranked = [c for c in data["candidates"] if c.get("rank") == 1]
    coverage = ranked[0]["coverage"] if ranked else None
    with transaction.atomic():
        return Score.objects.create(
            selection=selection,
            rules_version=data["rules_version"],
            inputs_hash=data["inputs_hash"],
            include_simulated=include_simulated,
            signable=bool(data.get("signable")),
            leader=str(data.get("winner") or ""),
            coverage=coverage,
            result=data,
            inputs={"weights": weights, "gates": gates, "evidence": [_evidence_dict(e) for e in evidence]},
        )


def _evidence_dict(evidence: scoring.CandidateEvidence) -> dict:

    return scoring.json_safe(asdict(evidence))


def latest_score(selection: Selection, include_simulated: bool | None = None) -> Score | None:
    scores = selection.scores.all()
    if include_simulated is not None:
        scores = scores.filter(include_simulated=include_simulated)
    return scores.first()
