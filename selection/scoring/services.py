"""Scoring service: evidence + weights + gates -> a stored `Score` snapshot.

Snapshots are written when evidence changes (the `recompute_scores` task, through `refresh_scores`)
or when someone asks for them with a POST; pages only read them (`scores_state`), so a GET never
writes. Freshness is a stamp: every change of a scoring input sets the selection's
`inputs_changed_at` in its own transaction (`selection.tasks.schedule_rescoring`), and each snapshot
keeps the stamp of the inputs it was computed from; a page compares the two times and rebuilds
nothing. Writes compare the inputs hash (a snapshot is reused, and stamped, when today's inputs hash
to its own), so a record never freezes a snapshot of other inputs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Q

from selection.domain.scoring.base import RULES_VERSION, json_safe
from selection.domain.scoring.inputs import CandidateEvidence, ScoringConstraints, ScoringOptions
from selection.models import Score, Selection
from selection.scoring.evidence import evidence_for, scoring_constraints

BOTH_VIEWS = (True, False)  # with SIMULATED evidence, then the final (signable) scoring


def score_candidates(*args, **kwargs):
    """`domain.scoring.pipeline.score_candidates`, imported by the first scoring: the pipeline loads
    numpy, which the pages and commands that only import this module do not need (issue 39)."""
    from selection.domain.scoring import pipeline

    return pipeline.score_candidates(*args, **kwargs)


def inputs_hash(*args, **kwargs) -> str:
    """`domain.scoring.pipeline.inputs_hash`, imported on first use (see `score_candidates`)."""
    from selection.domain.scoring import pipeline

    return pipeline.inputs_hash(*args, **kwargs)


@dataclass(frozen=True)
class ScoringInputs:
    """Everything a scoring reads, gathered once: hashed to tell whether a snapshot is current."""

    scenario: str
    evidence: list[CandidateEvidence]
    constraints: ScoringConstraints
    weights: dict[str, float]
    gates: dict[str, float]
    options: ScoringOptions

    @property
    def inputs_hash(self) -> str:
        return inputs_hash(self.scenario, self.evidence, self.constraints, self.weights, self.gates, self.options)


@dataclass(frozen=True)
class ScoresState:
    """What a page shows about a selection's scores, read without writing: the latest snapshot, whether
    it matches today's inputs, whether a recompute was asked for, and why the last one failed."""

    score: Score | None
    current: bool
    pending: bool
    error: str

    @property
    def recomputing(self) -> bool:
        """A recompute is queued and the snapshot does not cover today's inputs yet."""
        return self.pending and not self.current


def scoring_inputs(selection: Selection, include_simulated: bool = False) -> ScoringInputs:
    """Read the selection's scoring inputs (ValueError names the missing or invalid field)."""
    selection = Selection.objects.select_related("constraints").get(pk=selection.pk)
    return ScoringInputs(
        scenario=selection.scenario or "A",
        evidence=evidence_for(selection),
        constraints=scoring_constraints(selection),
        weights={w.criterion: w.weight for w in selection.weights.all()},
        gates={g.dimension: g.threshold for g in selection.gates.all()},
        options=ScoringOptions(include_simulated=include_simulated),
    )


def inputs_stamp(selection_id: int) -> datetime | None:
    """When the selection's scoring inputs last changed. Read before the inputs themselves: a change
    made meanwhile leaves the snapshot stale (and rescored), never falsely current."""
    return Selection.objects.filter(pk=selection_id).values_list("inputs_changed_at", flat=True).first()


def stamped(score: Score, stamp: datetime | None) -> Score:
    """The snapshot, marked as covering the inputs of `stamp` (it was found to hash to them). A newer
    stamp another task wrote meanwhile is kept."""
    if score.inputs_changed_at != stamp:
        newer = Q(inputs_changed_at__gt=stamp) if stamp is not None else Q(inputs_changed_at__isnull=False)
        if Score.objects.filter(pk=score.pk).exclude(newer).update(inputs_changed_at=stamp):
            score.inputs_changed_at = stamp
    return score


def compute_scores(selection: Selection, include_simulated: bool = False) -> Score:
    """Score every candidate of the selection and store the snapshot (a new row each time inputs change)."""
    stamp = inputs_stamp(selection.pk)
    inputs = scoring_inputs(selection, include_simulated)
    result = score_candidates(
        inputs.scenario,
        inputs.evidence,
        inputs.constraints,
        inputs.weights,
        gates=inputs.gates or None,
        options=inputs.options,
    )
    data = result.to_dict()
    latest = latest_score(selection, include_simulated)
    # Same inputs and rules: reuse the row, unless its sentences are worded differently (a row stored
    # before the sentences became messages holds English text; a new row lets them translate).
    if (
        latest is not None
        and latest.inputs_hash == data["inputs_hash"]
        and latest.rules_version == data["rules_version"]
        and latest.result.get("sentences") == data["sentences"]
    ):
        return stamped(latest, stamp)
    ranked = [c for c in data["candidates"] if c.get("rank") == 1]
    coverage = ranked[0]["coverage"] if ranked else None
    with transaction.atomic():
        return Score.objects.create(
            selection_id=selection.pk,
            rules_version=data["rules_version"],
            inputs_hash=data["inputs_hash"],
            include_simulated=include_simulated,
            signable=bool(data.get("signable")),
            leader=str(data.get("winner") or ""),
            coverage=coverage,
            inputs_changed_at=stamp,
            result=data,
            inputs={
                "weights": inputs.weights,
                "gates": inputs.gates,
                "evidence": [_evidence_dict(e) for e in inputs.evidence],
            },
        )


def current_scores(selection: Selection, include_simulated: bool = False) -> Score:
    """The snapshot of today's inputs: the latest one when its hash matches, else computed now (for a
    POST, such as drafting a record, that must not build on a stale snapshot)."""
    stamp = inputs_stamp(selection.pk)
    latest = latest_score(selection, include_simulated)
    if latest is not None and latest.inputs_hash == scoring_inputs(selection, include_simulated).inputs_hash:
        return stamped(latest, stamp)
    return compute_scores(selection, include_simulated=include_simulated)


def refresh_scores(selection_id: int, *, force: bool = False) -> str:
    """Bring both snapshots (with and without SIMULATED evidence) up to today's inputs: the body of the
    `recompute_scores` task and of the page's "Recompute" button (`force`: score even when the inputs
    hash is unchanged; the row is still reused unless its sentences differ). Idempotent: without
    `force` a snapshot whose inputs hash is unchanged is kept without rescoring. Clears the rescoring
    request it covered and stores why scoring failed ("" when it did not), which it returns."""
    row = Selection.objects.filter(pk=selection_id).values("scores_requested_at").first()
    if row is None:  # deleted while its rescoring waited in the queue
        return ""
    requested_at = row["scores_requested_at"]
    selection = Selection(pk=selection_id)
    refresh = compute_scores if force else current_scores
    error = ""
    try:
        for include_simulated in BOTH_VIEWS:
            refresh(selection, include_simulated)
    except ValueError as exc:  # the scoring inputs name the field and the problem; retrying will not help
        error = str(exc)
    # a request made while this ran stays: its task (or the resend) covers it
    Selection.objects.filter(pk=selection_id, scores_requested_at=requested_at).update(scores_requested_at=None)
    Selection.objects.filter(pk=selection_id).exclude(scoring_error=error).update(scoring_error=error)
    return error


def scores_state(selection: Selection, include_simulated: bool = False) -> ScoresState:
    """The latest snapshot and how it stands against today's inputs: two reads, nothing rebuilt (the
    comparison page and its 2-second poll ask this). Current when the snapshot covers the selection's
    latest input change under today's scoring rules."""
    fresh = (
        Selection.objects.filter(pk=selection.pk)
        .values("scores_requested_at", "scoring_error", "inputs_changed_at")
        .get()
    )
    score = latest_score(selection, include_simulated)
    current = (
        score is not None
        and score.inputs_changed_at == fresh["inputs_changed_at"]
        and score.rules_version == RULES_VERSION
    )
    return ScoresState(
        score=score,
        current=current,
        pending=fresh["scores_requested_at"] is not None,
        error=fresh["scoring_error"],
    )


def _evidence_dict(evidence: CandidateEvidence) -> dict:

    return json_safe(asdict(evidence))


def latest_score(selection: Selection, include_simulated: bool | None = None) -> Score | None:
    scores = Score.objects.filter(selection_id=selection.pk)
    if include_simulated is not None:
        scores = scores.filter(include_simulated=include_simulated)
    return scores.first()
