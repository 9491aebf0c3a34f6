"""The tie rule's inputs (`domain.tiebreak`): the core dimensions closeness is judged on, each passing
candidate as a contender, the stored `tie_break`, a winner the measurement noise does not hold turned
into a tie, and what would separate tied candidates."""

from __future__ import annotations

from typing import Any
from typing import Mapping as TMapping

import numpy as np

from selection.domain import noise as noise_domain
from selection.domain import tiebreak
from selection.domain.criteria import SCENARIO_PRIORITIES
from selection.domain.messages import NAME_SEPARATOR, Message
from selection.domain.messages import marked as _
from selection.domain.scoring.base import COMPLEXITY_RANK, CRITERION_LABELS, DIMENSION_OF, DIMENSIONS
from selection.domain.scoring.results import CandidateScore, CriterionScore


def observability_score(c: CandidateScore) -> float:
    dim = c.dimensions.get("observability")
    return dim.score if dim is not None and dim.score is not None else -1.0


def complexity_rank(c: CandidateScore) -> int:
    return COMPLEXITY_RANK.get(c.operating_complexity or "", len(COMPLEXITY_RANK))


def core_dimensions(gates: TMapping[str, float], scenario: str) -> list[str]:
    """The core (priority) dimensions closeness is judged on (the article's step 5): the gates, or the
    scenario's priorities when no gate is set (as the documentation screen reads them)."""
    if gates:
        return [d for d in DIMENSIONS if d in gates]
    return [d for d in SCENARIO_PRIORITIES.get(scenario, ()) if d in DIMENSIONS]


def core_label(core: list[str]) -> Message:
    """The core dimensions inside a sentence: "the core dimensions (Memory ..., Cross-turn ...)"."""
    if not core:
        return Message(_("the weighted total"))
    return Message(
        _("the core dimensions (%(names)s)"), {"names": NAME_SEPARATOR.join(Message(DIMENSIONS[d]) for d in core)}
    )


def _core_members(candidate: CandidateScore, core: list[str]) -> list[CriterionScore]:
    return [cs for cs in candidate.criteria.values() if cs.dimension in core and cs.weight > 0]


def core_score(candidate: CandidateScore, core: list[str]) -> tuple[float, tuple[float, float] | None]:
    """The weighted mean of the candidate's core criteria (lower bounds; missing counts 0, as in the total)
    and its value with every measurement at the ends of its interval; the total when no core criterion
    is weighted."""
    members = _core_members(candidate, core)
    weight = sum(cs.weight for cs in members)
    if not members or weight <= 0:
        return candidate.total, candidate.total_interval
    value = sum(cs.weight * (cs.score or 0.0) for cs in members) / weight
    interval = None
    if any(cs.score_interval for cs in members):
        ends = [
            sum(cs.weight * (cs.score_interval[end] if cs.score_interval else (cs.score or 0.0)) for cs in members)
            / weight
            for end in (0, 1)
        ]
        interval = (min(ends), max(ends))
    return value, interval


def contender(candidate: CandidateScore, core: list[str]) -> tiebreak.Contender:
    """A passing candidate as the tie rule reads it."""
    value, interval = core_score(candidate, core)
    return tiebreak.Contender(
        id=candidate.candidate,
        label=candidate.label,
        total=candidate.total,
        core=value,
        observability=observability_score(candidate),
        complexity_rank=complexity_rank(candidate),
        complexity=candidate.operating_complexity,
        total_interval=candidate.total_interval,
        core_interval=interval,
    )


def core_weights(
    passing: list[CandidateScore], criteria_ids: list[str], weights: np.ndarray, core: list[str]
) -> np.ndarray | None:
    """The weights of the core criteria (summing to 1, the others 0) for the noise draws; None: the total."""
    mask = np.array([DIMENSION_OF[k] in core for k in criteria_ids], dtype=float)
    core_w = weights * mask
    return core_w / core_w.sum() if passing and core_w.sum() > 0 else None


def tie_break_dict(decision: tiebreak.Decision, margin: float) -> dict[str, Any]:
    """The stored `tie_break`: whether the tie rule ran, who was close, what decided, and why."""
    return {
        "applied": decision.applied,
        "margin": margin,
        "group": decision.group,
        "noise": decision.noise,
        "decided_by": decision.decided_by,
        "tied": decision.tied,
        "explanation": decision.explanation,
    }


def noise_tie(
    decision: tiebreak.Decision, passing: list[CandidateScore], noise: dict[str, Any], core: list[str]
) -> tiebreak.Decision:
    """A winner the draws of the measurements do not hold (and no documented property chose) is a tie
    with every candidate that wins a share of the draws the winner's lead cannot dismiss."""
    if decision.winner is None or noise.get("stable") is not False:
        return decision
    shares = noise.get("first_share") or {}
    tied = [cid for cid, share in shares.items() if share >= 1.0 - noise_domain.STABLE_SHARE]
    tied = list(dict.fromkeys([decision.winner, *tied]))
    return tiebreak.within_noise(decision, [contender(c, core) for c in passing], tied, core_label(core))


def tie_section(
    decision: tiebreak.Decision, by_id: dict[str, CandidateScore], criteria_ids: list[str]
) -> dict[str, Any]:
    """A tie's candidates and what would separate them: the evidence still missing for them, narrower
    intervals when they overlap, and the criteria they differ on (a justified, audited weight change or
    gate on those). Empty when there is a winner."""
    if decision.winner is not None or len(decision.tied) < 2:
        return {}
    tied = [by_id[cid] for cid in decision.tied]
    separate: list[Message] = []
    missing = [
        k for k in criteria_ids if any(c.criteria[k].weight > 0 and c.criteria[k].status != "complete" for c in tied)
    ]
    if missing:
        separate.append(
            Message(
                _("the evidence still missing on %(criteria)s"),
                {"criteria": NAME_SEPARATOR.join(Message(CRITERION_LABELS[k]) for k in missing[:4])},
            )
        )
    if any(c.total_interval is not None for c in tied):
        separate.append(Message(_("more requests per run, to narrow the overlapping 95%% intervals")))
    differ = [k for k in criteria_ids if len({round(c.criteria[k].score or 0.0, 6) for c in tied}) > 1]
    if differ:
        separate.append(
            Message(
                _("a justified weight change or gate on the criteria where they differ: %(criteria)s"),
                {"criteria": NAME_SEPARATOR.join(Message(CRITERION_LABELS[k]) for k in differ[:4])},
            )
        )
    else:
        separate.append(
            Message(_("they score the same on every weighted criterion: only new evidence can separate them"))
        )
    return {"candidates": [c.candidate for c in tied], "separate": separate}
