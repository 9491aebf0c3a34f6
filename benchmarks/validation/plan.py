"""A candidate's validation plan: each test's default parameters, derived from the selection's
constraints and the candidate's KV capacity (the architect may edit them before a run)."""

from __future__ import annotations

import logging
import re
from typing import Any

from benchmarks.suite import by_priority
from benchmarks.suite.base import CandidateFacts
from benchmarks.validation import specs
from selection.candidates.screening import selection_priorities
from selection.capacity.measured import measured_capacity
from selection.capacity.plans import plan_for_candidate
from selection.domain.capacity.base import CapacityError
from selection.models import Candidate
from selection.scoring.evidence import documented_features

logger = logging.getLogger(__name__)
# launch flags that turn priority scheduling on: vLLM's (and the simulator's) --scheduling-policy
# priority, SGLang's --enable-priority-scheduling
PRIORITY_FLAGS = re.compile(r"--scheduling-policy(?:=|\s+)priority\b|--enable-priority-scheduling\b")


def plan_for(candidate: Candidate, test: str, facts: CandidateFacts | None = None) -> dict[str, Any]:
    """The test's default parameters derived from the selection's constraints and the candidate's
    facts (editable); `facts` as `candidate_facts` gives them, when the caller has them already."""
    constraints = candidate.selection.constraints.as_domain() if hasattr(candidate.selection, "constraints") else {}
    if candidate.selection.scenario:  # the soak's length and sessions follow the scenario
        constraints["scenario"] = candidate.selection.scenario
    return specs.plan(test, constraints, facts if facts is not None else candidate_facts(candidate))


def candidate_facts(candidate: Candidate) -> CandidateFacts:
    """What the tests' plans read of the candidate: the longest sequence its engine stated, its KV
    capacity in tokens (a KV usage ratio in tokens: the prefix test's peak KV, the long-context
    ladder's KV per request, the pressure that evicts the swap test's idle sessions) and whether its
    launch flags turn priority scheduling on (the isolation test then sends each tenant's priority)."""
    return CandidateFacts(
        max_model_len=(candidate.measured_capacity or {}).get("max_model_len"),
        kv_capacity_tokens=kv_capacity_tokens(candidate),
        priority_scheduling=priority_scheduling_on(candidate),
    )


def priority_scheduling_on(candidate: Candidate) -> bool:
    """True when the candidate's launch flags turn priority scheduling on and the catalog does not
    say its engine lacks it: the isolation test then sends each tenant's `priority` field (an
    engine without it refuses the field, as vLLM does without --scheduling-policy priority)."""
    if not PRIORITY_FLAGS.search(candidate.launch_flags or ""):
        return False
    features = documented_features(candidate).scheduling_features
    return features is None or "priority" in features


def kv_capacity_tokens(candidate: Candidate) -> int | None:
    """The candidate's KV-cache capacity in tokens: engine-stated (its log, or its metrics in an earlier
    run: `capacity.measured`) when known, else the capacity model's prediction; it turns an engine's KV
    usage ratio into tokens (prefix test, the long-context ladder's KV per request) and sizes the
    pressure that evicts the idle sessions (swap test)."""
    measured = measured_capacity(candidate).get("token_capacity")
    if measured:
        return int(measured)
    try:
        return int(plan_for_candidate(candidate)["token_capacity"])
    except (CapacityError, KeyError, TypeError) as exc:
        logger.info("no KV capacity for candidate %s: %s", candidate.pk, exc)
        return None


def validation_plan(candidate: Candidate) -> dict[str, dict[str, Any]]:
    """Every runnable test's parameters, the priority dimensions' tests first (`priority_order`)."""
    facts = candidate_facts(candidate)
    return {test: plan_for(candidate, test, facts) for test, _priority in priority_order(candidate)}


def priority_order(candidate: Candidate) -> list[tuple[str, bool]]:
    """(test, priority) in the order the plan proposes them (decision step 4: tests for the priority
    dimensions): the tests feeding the selection's gates (else its scenario's priorities) first,
    the others optional."""
    return by_priority(selection_priorities(candidate.selection))
