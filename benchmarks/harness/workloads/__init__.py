"""kvselect's validation tests (docs/domain.md), run against any OpenAI-compatible endpoint: one
module per test, this package's registry on top.

Each test's module holds its run and exports `SPEC` (`spec.TestSpec.of(row, run)`): its parameters
(default, label, unit), its `plan(constraints, facts) -> params` (a plain, JSON-serialisable dict the
user may edit) and its `estimate(params)` (duration and load before Run) are its row's in
`benchmarks.suite` (`benchmarks/suite/<test>.py`); its `run(target, params, cancel=None,
progress=None) -> NormalizedResult` is the module's own, whose `verdicts` say what was observed
(`benchmarks.verdicts`: status, sample size, interval) and whose `metadata["observed"]["line"]`
says it in one sentence. The registry (`SPECS`, `plan`, `run_test`, `estimate`) is built from `MODULES`;
the validation form, the run page and the estimate read the specs. Constraints use the field names
of selection's Constraints (peak_concurrency, avg_input_tokens, max_input_tokens, ...); missing
ones get defaults. `cancel` and `progress` behave as in `benchmarks.harness.load.run_load`
(progress receives {phase, percent, requests_done, ttft_p50_ms, ...} with percent over the whole
test). A cancelled test returns the data gathered so far with `partial=True`.

Modules: `spec` (a row and its run), `common` (target, session, verdict helpers, result builder),
`stress` (1), `long_context` (2), `swap_recovery` (3), `prefix_reuse` (4), `stability` (5),
`overload_test` (6), `model_switch` (7), `isolation` (8), `replay` (a production trace on its own
clock).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from benchmarks.harness import estimates
from benchmarks.harness.load import run_async
from benchmarks.harness.workloads import (
    isolation,
    long_context,
    model_switch,
    overload_test,
    prefix_reuse,
    replay,
    stability,
    stress,
    swap_recovery,
)
from benchmarks.harness.workloads.common import (
    MAX_ERROR_RATE,
    PREFIX_REUSE_MIN_SHARE,
    PlanError,
    Target,
    budget_verdicts,
    format_ms,
)
from benchmarks.harness.workloads.model_switch import (
    SWITCH_PHASES,
    downtime_seconds,
    longest_stall_seconds,
    recovery_seconds,
    switch_mode,
    switch_phase_of,
)
from benchmarks.harness.workloads.prefix_reuse import (
    KV_RESIDENT_SHARE,
    MIN_KV_SAMPLES,
    prefix_off_target,
    run_prefix_reuse,
)
from benchmarks.harness.workloads.spec import ParamSpec, TestSpec
from benchmarks.harness.workloads.stability import short_soak_note
from benchmarks.harness.workloads.swap_recovery import run_swap_recovery
from benchmarks.result import NormalizedResult
from benchmarks.suite.base import CandidateFacts
from benchmarks.suite.long_context import LONG_OUTPUT_TOKENS, context_ladder

__all__ = [
    "LONG_OUTPUT_TOKENS",
    "MAX_ERROR_RATE",
    "KV_RESIDENT_SHARE",
    "MIN_KV_SAMPLES",
    "MODULES",
    "PLANNERS",
    "PREFIX_REUSE_MIN_SHARE",
    "RUNNERS",
    "SPECS",
    "SWITCH_PHASES",
    "NormalizedResult",
    "ParamSpec",
    "PlanError",
    "Target",
    "TestSpec",
    "budget_verdicts",
    "context_ladder",
    "downtime_seconds",
    "estimate",
    "format_ms",
    "longest_stall_seconds",
    "param_spec",
    "plan",
    "prefix_off_target",
    "recovery_seconds",
    "run_prefix_reuse",
    "run_swap_recovery",
    "run_test",
    "run_test_sync",
    "short_soak_note",
    "spec_of",
    "switch_mode",
    "switch_phase_of",
]


# the workload modules, one per test: each exports its `SPEC` (benchmarks.harness.workloads.spec);
# a new test is one more module here (and its row in benchmarks.suite)
MODULES = (stress, long_context, swap_recovery, prefix_reuse, stability, overload_test, replay, model_switch, isolation)
SPECS: dict[str, TestSpec] = {module.SPEC.test: module.SPEC for module in MODULES}
PLANNERS: dict[str, Callable[..., dict[str, Any]]] = {test: spec.plan for test, spec in SPECS.items()}
RUNNERS: dict[str, Callable[..., Any]] = {test: spec.run for test, spec in SPECS.items()}


def spec_of(test: str) -> TestSpec:
    """The spec of a test by its ingest-API name; PlanError naming the known ones otherwise."""
    if test not in SPECS:
        raise PlanError(f"test: must be one of {', '.join(SPECS)}, got {test!r}")
    return SPECS[test]


def plan(
    test: str, constraints: dict[str, Any] | None = None, facts: CandidateFacts | None = None, **kwargs: Any
) -> dict[str, Any]:
    """The test's parameters planned from the constraints and the candidate's facts (a plain dict the
    user may edit)."""
    return spec_of(test).plan(constraints, facts, **kwargs)


async def run_test(test: str, target: Target, params: dict[str, Any], **kwargs: Any) -> NormalizedResult:
    """Run one of the validation tests (the eight, and the trace replay) by its ingest-API name."""
    return await spec_of(test).run(target, params, **kwargs)


def run_test_sync(test: str, target: Target, params: dict[str, Any], **kwargs: Any) -> NormalizedResult:
    """Blocking wrapper for Celery tasks and the CLI (runs its own event loop)."""
    return run_async(run_test(test, target, params, **kwargs))


def estimate(test: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
    """{seconds, concurrency, requests, tokens, warnings} for `test` run with `params`
    (`benchmarks.harness.estimates`); None when nothing can be estimated."""
    spec = SPECS.get(test)
    load = spec.estimate(params) if spec else estimates.generic(params)
    return estimates.summary(load) if load else None


def param_spec(name: str) -> ParamSpec | None:
    """A parameter's spec by its key, from the first test that plans it (a key means the same in
    every test: one label for the form and the run page); None for a key no test plans."""
    return next((spec.param(name) for spec in SPECS.values() if spec.param(name)), None)
