"""Scoring service: evidence + weights + gates -> a stored `Score` snapshot.

Snapshots are written when evidence changes (the `recompute_scores` task, through `refresh_scores`)
or when someone asks for them with a POST; pages only read them (`scores_state`), so a GET never
writes. A snapshot is current when its inputs hash is the hash of today's inputs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from django.db import transaction

from selection.domain import scoring
from selection.models import Score, Selection
from selection.scoring.evidence import evidence_for, scoring_constraints

BOTH_VIEWS = (True, False)  # with SIMULATED evidence, then the final (signable) scoring


@dataclass(frozen=True)
class ScoringInputs:
    """Everything a scoring reads, gathered once: hashed to tell whether a snapshot is current."""

    scenario: str
    evidence: list[scoring.CandidateEvidence]
    constraints: scoring.ScoringConstraints
    weights: dict[str, float]
    gates: dict[str, float]
    options: scoring.ScoringOptions

    @property
    def inputs_hash(self) -> str:
        return scoring.inputs_hash(
            self.scenario, self.evidence, self.constraints, self.weights, self.gates, self.options
        )


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
        options=scoring.ScoringOptions(include_simulated=include_simulated),
    )


def compute_scores(selection: Selection, include_simulated: bool = False) -> Score:
    """Score every candidate of the selection and store the snapshot (a new row each time inputs change)."""
    inputs = scoring_inputs(selection, include_simulated)
    result = scoring.score_candidates(
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
        return latest
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
    latest = latest_score(selection, include_simulated)
    if latest is not None and latest.inputs_hash == scoring_inputs(selection, include_simulated).inputs_hash:
        return latest
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
    """The latest snapshot and how it stands against today's inputs (reads only)."""
    fresh = Selection.objects.filter(pk=selection.pk).values("scores_requested_at", "scoring_error").get()
    score = latest_score(selection, include_simulated)
    current = False
    if score is not None:
        try:
            current = score.inputs_hash == scoring_inputs(selection, include_simulated).inputs_hash
        except ValueError:  # inputs that cannot be scored: no snapshot matches them
            current = False
    return ScoresState(
        score=score,
        current=current,
        pending=fresh["scores_requested_at"] is not None,
        error=fresh["scoring_error"],
    )


def _evidence_dict(evidence: scoring.CandidateEvidence) -> dict:

    return scoring.json_safe(asdict(evidence))


def latest_score(selection: Selection, include_simulated: bool | None = None) -> Score | None:
    scores = Score.objects.filter(selection_id=selection.pk)
    if include_simulated is not None:
        scores = scores.filter(include_simulated=include_simulated)
    return scores.first()
