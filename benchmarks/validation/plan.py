"""A candidate's validation plan: each test's default parameters, derived from the selection's
constraints and the candidate's KV capacity (the architect may edit them before a run)."""

from __future__ import annotations

import logging
from typing import Any

from benchmarks.harness import workloads
from benchmarks.suite import RUNNABLE_TEST_IDS
from selection.capacity.plans import plan_for_candidate
from selection.domain.capacity import CapacityError
from selection.models import Candidate

logger = logging.getLogger(__name__)
# tests that turn the engine's KV usage ratio into tokens (prefix: peak KV; long context: KV per request)
TESTS_TAKING_KV_CAPACITY = ("prefix_reuse", "long_context", "swap_recovery")


def plan_for(candidate: Candidate, test: str) -> dict[str, Any]:
    """The test's default parameters derived from the selection's constraints (editable)."""
    constraints = candidate.selection.constraints.as_domain() if hasattr(candidate.selection, "constraints") else {}
    kwargs = {}
    if test == "long_context":
        kwargs["max_model_len"] = (candidate.measured_capacity or {}).get("max_model_len")
    plan = workloads.plan(test, constraints, **kwargs)
    if test in TESTS_TAKING_KV_CAPACITY and plan.get("kv_capacity_tokens") is None:
        plan["kv_capacity_tokens"] = kv_capacity_tokens(candidate)
    return plan


def kv_capacity_tokens(candidate: Candidate) -> int | None:
    """The candidate's KV-cache capacity in tokens: measured (engine log) when known, else the
    capacity model's prediction; it turns an engine's KV usage ratio into tokens (prefix test, the
    long-context ladder's KV per request) and sizes the pressure that evicts the idle sessions (swap test)."""
    measured = (candidate.measured_capacity or {}).get("token_capacity")
    if measured:
        return int(measured)
    try:
        return int(plan_for_candidate(candidate)["token_capacity"])
    except (CapacityError, KeyError, TypeError) as exc:
        logger.info("no KV capacity for candidate %s: %s", candidate.pk, exc)
        return None


def validation_plan(candidate: Candidate) -> dict[str, dict[str, Any]]:
    return {test: plan_for(candidate, test) for test in RUNNABLE_TEST_IDS}
