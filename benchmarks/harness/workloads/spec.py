"""What a validation test is to the rest of kvselect: its parameters (default, label, unit), its plan,
its run and its estimate, in one `TestSpec` that each workload module exports as `SPEC`.

The package's registry is built from the modules' specs; the validation form, the run page, the
estimate and the API read them, so a new test is its module (with `SPEC`), its row in
`benchmarks.suite`, a migration for the new choice and the catalog.

Labels are English, marked with `_` (`gettext_noop`, imported as `_`, a no-op) so that
`makemessages` collects them; the pages translate them where they show them. No Django here.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, Mapping

from benchmarks.harness.estimates import Load, number


def gettext_noop(text: str) -> str:
    """Marks a text for `makemessages` (import it as `_`); the page translates it when shown."""
    return text


_ = gettext_noop

# the units a parameter is counted in; "" for a switch or a free text (a URL, a JSON setting)
UNITS = ("s", "ms", "tokens", "requests", "requests/s", "sessions", "share", "x", "%", "MiB", "count", "")


class PlanError(ValueError):
    """Parameters that cannot run; the message names the field."""


@dataclass(frozen=True)
class ParamSpec:
    """One planned parameter: its key, the value planned without constraints, the form's label (with
    its unit in words), its unit, and the form's help and lower bound for numbers."""

    name: str
    default: Any
    label: str
    unit: str
    help: str = ""
    minimum: float = 0
    positive: bool = False  # a number strictly above zero when given (a rate of 0 would send nothing)
    optional: bool = False  # may be left empty whatever the plan gives (the stress's rate: closed loop)

    def problem(self, value: Any) -> tuple[str, dict[str, Any]] | None:
        """Why `value` cannot be run for this number parameter, as (message template, parameters), or
        None. Checked before a run is queued, so a run never fails on what the form could have said."""
        numeric = isinstance(self.default, (int, float)) and not isinstance(self.default, bool)
        if not (numeric or self.positive) or (value is None and self.optional):
            return None
        if value is None:
            return _("a number is required"), {}
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            return _("must be a number, got %(value)s"), {"value": repr(value)}
        if self.positive and not value > 0:
            if self.optional:
                return _("must be above 0; leave it empty to run without it"), {}
            return _("must be above 0"), {}
        if value < self.minimum:
            return _("must be at least %(minimum)s"), {"minimum": f"{self.minimum:g}"}
        return None

    def read(self, params: Mapping[str, Any]) -> Any:
        """This parameter as a run reads it from `params`: its default when absent, checked as the form
        and the dispatch check it (`problem`; PlanError names it), a number as its default's type."""
        value = params.get(self.name, self.default)
        problem = self.problem(value)
        if problem is not None:
            template, values = problem
            raise PlanError(f"params.{self.name}: {template % values}")
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return value
        return int(value) if type(self.default) is int else float(value)

    def estimated(self, params: Mapping[str, Any]) -> Any:
        """This parameter as an estimate reads it: a finite, non-negative number as given, else its
        default (0 for none); anything else as given (`harness.estimates.number`'s rule)."""
        numeric = isinstance(self.default, (int, float)) and not isinstance(self.default, bool)
        if not (numeric or self.positive):
            return params.get(self.name, self.default)
        return number(params, self.name, float(self.default or 0))


@dataclass(frozen=True)
class TestSpec:
    """A validation test as the harness runs it: `plan(constraints, facts, **kwargs) -> params` (facts:
    `benchmarks.suite.base.CandidateFacts`, what the plan may read of the candidate),
    `run(target, params, cancel=None, progress=None) -> NormalizedResult` (a coroutine) and
    `estimate(params) -> Load | None` (benchmarks.harness.estimates)."""

    __test__ = False  # not a pytest class, despite its name

    test: str  # the id of its row in benchmarks.suite
    params: tuple[ParamSpec, ...]
    plan: Callable[..., dict[str, Any]]
    run: Callable[..., Awaitable[Any]]
    estimate: Callable[[Mapping[str, Any]], Load | None]

    def param(self, name: str) -> ParamSpec | None:
        return next((param for param in self.params if param.name == name), None)

    def defaults(self) -> dict[str, Any]:
        return {param.name: param.default for param in self.params}

    def parse(self, params: Mapping[str, Any]) -> SimpleNamespace:
        """Every parameter as the run reads it (`ParamSpec.read`), once: `SPEC.parse(params).flood_s`."""
        return SimpleNamespace(**{param.name: param.read(params) for param in self.params})

    def estimated(self, params: Mapping[str, Any]) -> SimpleNamespace:
        """Every parameter as an estimate reads it (`ParamSpec.estimated`): never refused."""
        return SimpleNamespace(**{param.name: param.estimated(params) for param in self.params})

    def problems(self, params: Mapping[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
        """name -> (message template, parameters) for each planned number `params` gives a value the
        test cannot run with (see `ParamSpec.problem`); empty when they can all run."""
        found = {}
        for param in self.params:
            if param.name in params and (problem := param.problem(params[param.name])) is not None:
                found[param.name] = problem
        return found


# parameters several tests plan
BUDGET_PARAMS = (  # planned only when the constraints set the budget (workloads.common.budget_params)
    ParamSpec("ttft_p95_ms", None, _("TTFT p95 budget (ms)"), "ms"),
    ParamSpec("tpot_p95_ms", None, _("TPOT p95 budget (ms)"), "ms"),
    ParamSpec("e2e_p95_ms", None, _("End-to-end p95 budget (ms)"), "ms"),
)
DISTRIBUTION_PARAMS = (
    ParamSpec("input_distribution", None, _("Input lengths (JSON: mean, p95, max tokens)"), "tokens"),
    ParamSpec("output_distribution", None, _("Output lengths (JSON: mean, p95, max tokens)"), "tokens"),
)
