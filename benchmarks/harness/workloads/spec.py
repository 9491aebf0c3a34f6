"""A validation test as the harness runs it: its row of the suite (`benchmarks/suite/<test>.py`:
parameters, plan, estimate) and its run, in one `TestSpec` that each workload module exports as `SPEC`.

The package's registry is built from the modules' specs; a workload module holds only the run and
what the run needs. The parameter types live with the rows (`benchmarks.suite.params`) and are
named here too for the harness's readers. No Django here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping

from benchmarks.harness.estimates import Load
from benchmarks.suite.params import (
    BUDGET_PARAMS,
    DISTRIBUTION_PARAMS,
    UNITS,
    Parameters,
    ParamSpec,
    PlanError,
    gettext_noop,
)

if TYPE_CHECKING:
    from benchmarks.suite.base import ValidationTest

__all__ = [
    "BUDGET_PARAMS",
    "DISTRIBUTION_PARAMS",
    "UNITS",
    "ParamSpec",
    "PlanError",
    "TestSpec",
    "gettext_noop",
]


@dataclass(frozen=True)
class TestSpec(Parameters):
    """A validation test as the harness runs it: `plan(constraints, facts, **kwargs) -> params` (facts:
    `benchmarks.suite.base.CandidateFacts`, what the plan may read of the candidate),
    `run(target, params, cancel=None, progress=None) -> NormalizedResult` (a coroutine) and
    `estimate(params) -> Load | None` (benchmarks.harness.estimates). All but the run are its suite
    row's (`TestSpec.of`)."""

    __test__ = False  # not a pytest class, despite its name

    test: str  # the id of its row in benchmarks.suite
    params: tuple[ParamSpec, ...]
    plan: Callable[..., dict[str, Any]]
    run: Callable[..., Awaitable[Any]]
    estimate: Callable[[Mapping[str, Any]], Load | None]

    @classmethod
    def of(cls, row: ValidationTest, run: Callable[..., Awaitable[Any]]) -> TestSpec:
        """The spec of a row of the suite that states its parameters, plan and estimate, with its run."""
        if row.plan is None or row.estimate is None:
            raise ValueError(f"{row.id}: its row of the suite states no plan or estimate")
        return cls(row.id, row.params, row.plan, run, row.estimate)
