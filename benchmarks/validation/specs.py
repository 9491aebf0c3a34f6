"""The validation tests' specs as the pages and services read them: a test's parameters and their
labels, its plan from the constraints and the candidate's facts, its estimate and its parameter checks.

They come from the harness's registry (`benchmarks.harness.workloads`), which lives with the tests'
run code and so brings the load generator, its HTTP stack, the trace reader and pandas (over a second
on two cores). The registry is loaded by the first call here, from a request or a task that shows,
plans or starts a test, never at start-up: the URL conf, the models and the services import this
module, not the registry (tests/architecture/test_lean_imports.py).
"""

from __future__ import annotations

from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from benchmarks.harness.workloads.spec import ParamSpec, TestSpec
    from benchmarks.suite.base import CandidateFacts


@cache
def registry() -> ModuleType:
    """The harness's test registry, imported once, on first use (the module docstring says why)."""
    from benchmarks.harness import workloads

    return workloads


def spec(test: str) -> TestSpec | None:
    """The spec of a test by its ingest-API name; None for a test the harness does not run."""
    return registry().SPECS.get(test)


def param_spec(key: str) -> ParamSpec | None:
    """A parameter's spec by its key, from the first test that plans it; None for a key no test plans."""
    return registry().param_spec(key)


def plan(test: str, constraints: dict[str, Any], facts: CandidateFacts) -> dict[str, Any]:
    """The test's parameters planned from the constraints and the candidate's facts (editable)."""
    return registry().plan(test, constraints, facts)


def estimate(test: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
    """{seconds, concurrency, requests, tokens, warnings} of `test` run with `params`; None when
    nothing can be estimated."""
    return registry().estimate(test, params)
