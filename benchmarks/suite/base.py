"""What a validation test is to the rest of kvselect (the type of each `benchmarks.suite` module's `TEST`).

No Django here, and nothing of the load generator: pages, scoring and the API read these rows
without loading the harness.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class ValidationTest:
    id: str
    number: int | None  # position in the articles' order; None for uploads that fit no test
    title: str
    description: str  # what the test does and when it passes (the validation page)
    measures: str  # one line: what the evidence shows (the record)
    charts: tuple[str, ...]  # chart kinds of `benchmarks.run_charts`, the test's own view first
    runnable: bool = True  # kvselect's harness runs it; False: uploads only
    # the evaluation dimensions (selection.domain.criteria) whose criteria its evidence feeds
    # (selection.scoring.evidence, selection.domain.scoring's MAPPINGS): the plan puts the tests of
    # the selection's priority dimensions first and marks the others optional
    feeds: tuple[str, ...] = ()
    # `make demo`'s settings over the plan: short enough that every test on three simulated
    # candidates takes minutes (a runnable test must state them; tests/benchmarks/test_suite.py)
    demo: Mapping[str, Any] | None = field(default=None)
