"""The validation tests: one module per test, this package's registry on top.

Each module's `TEST` (`base.ValidationTest`) says what the test is (id, its number in the
articles' order, title), what it does and what it measures (the validation page and the record
print these), which charts its evidence is drawn as (`benchmarks.run_charts` draws them, for the
record and the comparison), the evaluation dimensions its evidence feeds, how its run becomes
scoring's indicators (`readings` of its load points, `indicators`, `uncredited`), the figures its
result table shows on the run page and in the record (`figures`), the record's claims its verdicts
support (`claims`) and the monitoring thresholds they validate (`thresholds`), its note in the
record (`record_note`), the
titles of the verdicts only it writes, `make demo`'s short settings and the `validate` command's
flags it takes, and (`params`, `plan`, `estimate`; `benchmarks.suite.params`) its parameters, its
plan from the constraints and the candidate's facts and its estimate. Every title, form choice, API
enum, chart mapping, scoring indicator, result figure and claim reads this registry; its workload
module (`benchmarks.harness.workloads`) adds only the run (`TestSpec.of(TEST, run)`, its `SPEC`).
Adding a test is a module here (added to `MODULES`), its workload module, a migration for the
model's new choice, the catalog's translations and a test of its run (docs/architecture.md, "Where
to change X").

The texts are English and marked with `_`, a no-op named so that `makemessages` collects them;
pages and the record translate them when they show them. No Django here.
"""

from __future__ import annotations

from typing import Any

from benchmarks.suite import (
    concurrency_stress,
    custom,
    isolation,
    long_context,
    model_switch,
    overload,
    prefix_reuse,
    stability,
    swap_recovery,
    trace_replay,
)
from benchmarks.suite.base import ValidationTest
from selection.domain.claims import Claim

# the tests in the articles' order, then the two that are not numbered
MODULES = (
    concurrency_stress,
    long_context,
    swap_recovery,
    prefix_reuse,
    stability,
    overload,
    model_switch,
    isolation,
    trace_replay,
    custom,
)
TESTS: tuple[ValidationTest, ...] = tuple(module.TEST for module in MODULES)
BY_ID: dict[str, ValidationTest] = {test.id: test for test in TESTS}
TEST_IDS: tuple[str, ...] = tuple(test.id for test in TESTS)
RUNNABLE_TEST_IDS: tuple[str, ...] = tuple(test.id for test in TESTS if test.runnable)
# the record's behaviour claims, each stated by the module of the test that observes it
CLAIMS: tuple[Claim, ...] = tuple(claim for test in TESTS for claim in test.claims)


def title_of(test_id: str) -> str:
    """The English title of a test id (unknown ids are shown as they are)."""
    test = BY_ID.get(test_id)
    return test.title if test else test_id


def by_priority(dimensions: tuple[str, ...] | list[str]) -> list[tuple[str, bool]]:
    """The runnable tests as (id, priority): those feeding any of the priority `dimensions` first,
    then the others (optional: run on request), each group in the articles' order. The model
    switch feeds no criterion (an operability check) and is always optional. Without any priority
    dimension nothing is put first: every test is proposed."""
    wanted = set(dimensions)
    runnable = [test for test in TESTS if test.runnable]
    if not wanted:
        return [(test.id, True) for test in runnable]
    first = [test.id for test in runnable if wanted & set(test.feeds)]
    return [(test_id, True) for test_id in first] + [(test.id, False) for test in runnable if test.id not in first]


def demo_params(test_id: str) -> dict[str, Any]:
    """`make demo`'s settings of a test over its plan (its module's `TEST.demo`; {} for none)."""
    return dict(BY_ID[test_id].demo or {})
