"""A validation run's load: the harness `Target` built from the candidate, and the test run against it.

The one module of the validation app that imports the load generator (`benchmarks.harness.workloads`,
with its HTTP stack, the trace reader and pandas). The worker imports it when a claimed run starts its
load, so a process that only enqueues, claims, reaps or cancels runs (the web, scoring, beat, every
`manage.py` command) never loads it (tests/architecture/test_lean_imports.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.conf import settings

from benchmarks.harness import workloads
from benchmarks.harness.workloads import PlanError, Target
from benchmarks.result import NormalizedResult
from benchmarks.validation.target import ENGINE_SLUGS, cache_model_for, is_simulator
from selection.models import Candidate
from selection.secretbox import decrypt

__all__ = ["PlanError", "Target", "prefix_off_target_for", "run_test", "target_for"]


def target_for(candidate: Candidate) -> Target:
    simulated = is_simulator(candidate.metrics_url or candidate.endpoint_url)
    engine = "simulator" if simulated else ENGINE_SLUGS.get(candidate.engine.slug, "auto")
    base = candidate.endpoint_url.rstrip("/")
    return Target(
        endpoint_url=base,
        model=candidate.model_name or "default",
        api_key=decrypt(candidate.api_key_encrypted) or None,
        metrics_url=candidate.metrics_url or f"{base}/metrics",
        engine=engine,
        evidence="SIMULATED" if simulated else "MEASURED",
        allowed_hosts=list(settings.KVSELECT_ALLOWED_TARGETS),
        receive_clock=settings.KVSELECT_RECEIVE_CLOCK,
        cache_model=cache_model_for(candidate),
    )


def prefix_off_target_for(candidate: Candidate, target: Target) -> Target | None:
    """The prefix-reuse test's caching-off target: the candidate's prefix-off endpoint, or for
    llama.cpp the same endpoint with cache_prompt: false; None when the candidate has neither."""
    if not candidate.prefix_off_endpoint_url and candidate.engine.slug == "llama-cpp":
        # a simulated llama.cpp honours cache_prompt per request as the real one does
        return replace(target, cache_prompt=False)
    return workloads.prefix_off_target(
        target, candidate.prefix_off_endpoint_url or None, candidate.prefix_off_metrics_url or None
    )


def run_test(test: str, target: Target, params: dict[str, Any], **kwargs: Any) -> NormalizedResult:
    """Run the test against `target` to its end (its own event loop; `cancel`, `progress` and
    `off_target` as `benchmarks.harness.workloads.run_test` takes them); PlanError for bad parameters."""
    return workloads.run_test_sync(test, target, params, **kwargs)
