"""The scoring's results: per criterion, dimension, gate and candidate, and the whole `ScoringResult`
(stored JSON-safe through `to_dict`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from selection.domain.messages import Message
from selection.domain.scoring.base import json_safe
from selection.domain.scoring.indicators import IndicatorScore
from selection.domain.scoring.inputs import ScoringOptions


@dataclass
class CriterionScore:
    criterion: str
    dimension: str
    weight: float  # normalised over all weighted criteria
    score: float | None  # lower bound; None = no evidence at all
    score_upper: float | None
    coverage: float  # share of the indicator weight that has evidence
    status: Literal["complete", "partial", "missing"]
    uses_simulated: bool
    indicators: list[IndicatorScore]
    explanation: str
    score_interval: tuple[float, float] | None = None  # the lower-bound score at its inputs' interval ends


@dataclass
class DimensionScore:
    dimension: str
    score: float | None  # lower bound, weighted mean of its criteria (None: no evidence)
    score_upper: float | None
    coverage: float


@dataclass
class GateOutcome:
    dimension: str
    threshold: float
    score: float | None
    passed: bool
    reason: Message


@dataclass
class CandidateScore:
    candidate: str
    label: str
    criteria: dict[str, CriterionScore]
    dimensions: dict[str, DimensionScore]
    total: float  # weighted sum of lower bounds (missing contributes nothing)
    total_upper: float
    coverage: float  # weight share with evidence
    gates: list[GateOutcome]
    screened_out: bool
    screen_reasons: list[Message]
    topsis: float | None = None
    rank: int | None = None
    uses_simulated: bool = False
    operating_complexity: str | None = None
    # the total with every measured input at the ends of its 95 % interval (None: no interval)
    total_interval: tuple[float, float] | None = None


@dataclass
class ScoringResult:
    rules_version: str
    inputs_hash: str
    scenario: str
    final: bool  # True: SIMULATED evidence excluded
    signable: bool  # final, and no SIMULATED evidence used
    weights: dict[str, float]
    gates: dict[str, float]
    options: ScoringOptions
    candidates: list[CandidateScore]
    ranking: list[str]  # passing candidates by recommendation order, then screened ones by total
    winner: str | None
    weighted_sum_leader: str | None
    tie_break: dict[str, Any]
    sensitivity: dict[str, Any]
    sentences: list[Message]
    mappings: list[dict[str, Any]]
    notes: list[Message]
    # which ranking decides and what the other says: {decides, second_opinion, topsis_leader,
    # agrees (None with fewer than two passing candidates), sentence}
    method: dict[str, Any] = field(default_factory=dict)
    # candidate -> its fit to each constraint the sheet states (`procurement.constraint_fit`, then the GPU
    # budget): the headline names every failed one, the record's page 1 prints the winner's
    fit: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    rests_on: Message | None = None  # what the choice rests on (`tiebreak`), page 1's line
    # a tie (`tiebreak`: winner None): {candidates, separate: what would separate them}; empty otherwise
    tie: dict[str, Any] = field(default_factory=dict)
    core_dimensions: list[str] = field(default_factory=list)  # the dimensions closeness is judged on

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (no NaN/inf, tuples become lists, messages become their stored dicts)."""
        return json_safe(asdict(self))

    def candidate(self, candidate_id: str) -> CandidateScore:
        for cand in self.candidates:
            if cand.candidate == candidate_id:
                return cand
        raise KeyError(candidate_id)
