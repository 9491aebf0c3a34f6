"""kvselect's validation tests (docs/domain.md), run against any OpenAI-compatible endpoint: one
module per test, this package's registry on top.

Each test has `plan_<test>(constraints) -> params` (a plain, JSON-serialisable dict the user may
edit) and `run_<test>(target, params, cancel=None, progress=None) -> NormalizedResult` whose
`verdicts` say what was observed (`benchmarks.verdicts`: status, sample size, interval)
and whose `metadata["observed"]["line"]` says it in one sentence. Constraints use the field names
of selection's Constraints (peak_concurrency, avg_input_tokens, max_input_tokens, ...); missing
ones get defaults. `cancel` and `progress` behave as in `benchmarks.harness.load.run_load`
(progress receives {phase, percent, requests_done, ttft_p50_ms, ...} with percent over the whole
test). A cancelled test returns the data gathered so far with `partial=True`.

Modules: `common` (target, session, verdict helpers, result builder), `stress` (1), `long_context`
(2), `swap_recovery` (3), `prefix_reuse` (4), `stability` (5), `overload_test` (6),
`model_switch` (7), `isolation` (8), `replay` (a production trace on its own clock).
"""

from __future__ import annotations

from typing import Any, Callable

from benchmarks.harness.load import run_async
from benchmarks.harness.workloads.common import (
    LONG_OUTPUT_TOKENS,
    MAX_ERROR_RATE,
    PREFIX_REUSE_MIN_SHARE,
    PlanError,
    Target,
    budget_verdicts,
    context_ladder,
    format_ms,
)
from benchmarks.harness.workloads.isolation import plan_isolation, run_isolation
from benchmarks.harness.workloads.long_context import plan_long_context, run_long_context
from benchmarks.harness.workloads.model_switch import (
    SWITCH_PHASES,
    downtime_seconds,
    longest_stall_seconds,
    plan_model_switch,
    recovery_seconds,
    run_model_switch,
    switch_mode,
    switch_phase_of,
)
from benchmarks.harness.workloads.overload_test import plan_overload, run_overload
from benchmarks.harness.workloads.prefix_reuse import (
    KV_RESIDENT_SHARE,
    MIN_KV_SAMPLES,
    plan_prefix_reuse,
    prefix_off_target,
    run_prefix_reuse,
)
from benchmarks.harness.workloads.replay import plan_trace_replay, run_trace_replay
from benchmarks.harness.workloads.stability import plan_stability, run_stability, short_soak_note
from benchmarks.harness.workloads.stress import plan_concurrency_stress, run_concurrency_stress
from benchmarks.harness.workloads.swap_recovery import plan_swap_recovery, run_swap_recovery
from benchmarks.result import NormalizedResult

__all__ = [
    "LONG_OUTPUT_TOKENS",
    "MAX_ERROR_RATE",
    "KV_RESIDENT_SHARE",
    "MIN_KV_SAMPLES",
    "PLANNERS",
    "PREFIX_REUSE_MIN_SHARE",
    "RUNNERS",
    "SWITCH_PHASES",
    "NormalizedResult",
    "PlanError",
    "Target",
    "budget_verdicts",
    "context_ladder",
    "downtime_seconds",
    "format_ms",
    "longest_stall_seconds",
    "plan",
    "prefix_off_target",
    "recovery_seconds",
    "run_prefix_reuse",
    "run_swap_recovery",
    "run_test",
    "run_test_sync",
    "short_soak_note",
    "switch_mode",
    "switch_phase_of",
]


PLANNERS: dict[str, Callable[..., dict[str, Any]]] = {
    "concurrency_stress": plan_concurrency_stress,
    "long_context": plan_long_context,
    "swap_recovery": plan_swap_recovery,
    "prefix_reuse": plan_prefix_reuse,
    "stability": plan_stability,
    "overload": plan_overload,
    "trace_replay": plan_trace_replay,
    "model_switch": plan_model_switch,
    "isolation": plan_isolation,
}


RUNNERS: dict[str, Callable[..., Any]] = {
    "concurrency_stress": run_concurrency_stress,
    "long_context": run_long_context,
    "swap_recovery": run_swap_recovery,
    "prefix_reuse": run_prefix_reuse,
    "stability": run_stability,
    "overload": run_overload,
    "trace_replay": run_trace_replay,
    "model_switch": run_model_switch,
    "isolation": run_isolation,
}


def plan(test: str, constraints: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    if test not in PLANNERS:
        raise PlanError(f"test: must be one of {', '.join(PLANNERS)}, got {test!r}")
    return PLANNERS[test](constraints, **kwargs)


async def run_test(test: str, target: Target, params: dict[str, Any], **kwargs: Any) -> NormalizedResult:
    """Run one of the validation tests (the eight, and the trace replay) by its ingest-API name."""
    if test not in RUNNERS:
        raise PlanError(f"test: must be one of {', '.join(RUNNERS)}, got {test!r}")
    return await RUNNERS[test](target, params, **kwargs)


def run_test_sync(test: str, target: Target, params: dict[str, Any], **kwargs: Any) -> NormalizedResult:
    """Blocking wrapper for Celery tasks and the CLI (runs its own event loop)."""
    return run_async(run_test(test, target, params, **kwargs))
