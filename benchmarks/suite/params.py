"""A test's parameters as its suite module states them (`ParamSpec`: default, label, unit, bounds),
the checks a value passes before a run is queued, and the plan helpers several tests share.

A test's module (`benchmarks/suite/<test>.py`) lists its `ParamSpec`s and plans them from the
constraints and the candidate's facts; the form, the run page, the estimate, the dispatch and the
run itself read them from there (`Parameters`: parsed once, as the run reads them). The harness's
`TestSpec` adds only the run. Labels are English, marked with `_` (`gettext_noop`, a no-op) so that
`makemessages` collects them; the pages translate them where they show them. No Django here, and
nothing of the load generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Mapping

from benchmarks.harness.estimates import number


def gettext_noop(text: str) -> str:
    """Marks a text for `makemessages` (import it as `_`); the page translates it when shown."""
    return text


_ = gettext_noop

# the units a parameter is counted in; "" for a switch or a free text (a URL, a JSON setting)
UNITS = ("s", "ms", "tokens", "requests", "requests/s", "sessions", "share", "x", "%", "MiB", "count", "")


MAX_ERROR_RATE = 0.01  # above it a latency verdict fails (selection.domain.scoring.inputs's max_error_rate too)


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


class Parameters:
    """What a test's parameter list answers (mixed into a row of the suite and the harness's spec,
    which both hold `params`): a parameter by its key, the defaults, every parameter parsed once as
    the run reads it, as an estimate reads it, and the values it cannot run with."""

    params: tuple[ParamSpec, ...]

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
BUDGET_PARAMS = (  # planned only when the constraints set the budget (`budget_params`)
    ParamSpec("ttft_p95_ms", None, _("TTFT p95 budget (ms)"), "ms"),
    ParamSpec("tpot_p95_ms", None, _("TPOT p95 budget (ms)"), "ms"),
    ParamSpec("e2e_p95_ms", None, _("End-to-end p95 budget (ms)"), "ms"),
)
DISTRIBUTION_PARAMS = (
    ParamSpec("input_distribution", None, _("Input lengths (JSON: mean, p95, max tokens)"), "tokens"),
    ParamSpec("output_distribution", None, _("Output lengths (JSON: mean, p95, max tokens)"), "tokens"),
)


# the plan helpers several tests share (a plan reads the constraints as selection's Constraints
# name them; a missing one gets the default)
def constraint_value(constraints: dict[str, Any] | None, key: str, default: Any) -> Any:
    value = (constraints or {}).get(key)
    return default if value is None else value


def budget_params(constraints: dict[str, Any] | None) -> dict[str, float]:
    budgets = {}
    for key in ("ttft_p95_ms", "tpot_p95_ms", "e2e_p95_ms"):
        if (constraints or {}).get(key) is not None:
            budgets[key] = float(constraints[key])  # type: ignore[index]
    return budgets


def distribution(mean: float | None, p95: float | None = None, maximum: float | None = None) -> dict[str, Any] | None:
    """A length distribution as a plan states it (mean, p95, max tokens; `harness.lengths` draws
    from it); None without a mean."""
    if not mean:
        return None
    return {
        "mean": float(mean),
        "p95": None if p95 is None else float(p95),
        "max": None if maximum is None else float(maximum),
    }


def length_distributions(constraints: dict[str, Any] | None) -> dict[str, Any]:
    """Input and output length distributions from the constraints (average, p95, max)."""
    c = constraints or {}
    return {
        "input_distribution": distribution(
            c.get("avg_input_tokens"), c.get("p95_input_tokens"), c.get("max_input_tokens")
        ),
        "output_distribution": distribution(
            c.get("avg_output_tokens"), c.get("p95_output_tokens"), c.get("max_output_tokens")
        ),
    }
