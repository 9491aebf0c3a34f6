"""What a validation test is to the rest of kvselect (the type of each `benchmarks.suite` module's `TEST`).

No Django here, and nothing of the load generator: pages, scoring and the API read these rows
without loading the harness.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from benchmarks.harness.estimates import Load
from benchmarks.suite.params import Parameters, ParamSpec
from selection.domain.claims import Claim
from selection.domain.messages import Message


@dataclass(frozen=True)
class PointFacts:
    """One load point of a stored run, as a test's indicators and readings read it."""

    label: str
    extra: Mapping[str, Any]
    ttft_ms: Mapping[str, Any]
    tpot_ms: Mapping[str, Any] = field(default_factory=dict)
    concurrency: float | None = None
    achieved_concurrency: float | None = None
    error_rate: float | None = None
    output_token_throughput: float | None = None
    slo_attainment: float | None = None
    client_bound: bool | None = None  # None: not judged


@dataclass(frozen=True)
class RunFacts:
    """A stored run as plain data (scoring builds it from the model): what a test's `indicators` read."""

    id: str
    test: str
    params: Mapping[str, Any]
    metadata: Mapping[str, Any]
    verdicts: tuple[Mapping[str, Any], ...]
    points: Mapping[str, PointFacts]  # by label, in the run's order (a repeated label: the last one)
    load_points: tuple[PointFacts, ...] = ()  # every point, in the run's order

    def verdict(self, name: str) -> Mapping[str, Any] | None:
        """The run's verdict called `name` (the first one), or None."""
        return next((v for v in self.verdicts if v.get("name") == name), None)


@dataclass(frozen=True)
class Reading:
    """A scoring figure a test reads straight from its run's load points (before any figure a run
    states): its value (None: not measured), the interval stored with the verdict that judged it,
    and, for a run whose client was bound, `late` (its interval with the client's lateness taken off
    the latencies) or `timing` (judged on the client's timings: held out without `late`)."""

    name: str
    value: Any
    interval: Any = None
    late: Any = None
    timing: bool = False


@dataclass(frozen=True)
class ScoringContext:
    """What a test's `readings` read beside its run: the candidate's GPUs, the constraints (by their
    field names: peak_concurrency, ttft_p95_ms, tpot_p95_ms, cost_per_gpu_hour, ...) and the most
    latency the run's client added at its client-bound points (None: none bound, or not measured)."""

    gpus: int
    constraints: Mapping[str, Any]
    client_slack_ms: float | None = None


@dataclass(frozen=True)
class Figure:
    """One figure a test's result table shows (the run page and the record): its name (English,
    marked with `_`, a template over `params`), its value and unit, the sample size and interval
    it was judged with. `benchmarks.presentation` formats and translates it."""

    name: str
    value: Any
    unit: str
    n: Any = None
    interval: Any = None
    params: Mapping[str, Any] = field(default_factory=dict)


# A stored load point as the pages pass it to a test's `figures`: the model's fields as a dict
# (label, extra, ttft_ms, tpot_ms, requests_completed, requests_failed, error_rate, ...).
PointRow = Mapping[str, Any]


@dataclass(frozen=True)
class ValidationTest(Parameters):
    id: str
    number: int | None  # position in the articles' order; None for uploads that fit no test
    title: str
    description: str  # what the test does and when it passes (the validation page)
    measures: str  # one line: what the evidence shows (the record)
    charts: tuple[str, ...]  # chart kinds of `benchmarks.run_charts`, the test's own view first
    runnable: bool = True  # kvselect's harness runs it; False: uploads only
    # the evaluation dimensions (selection.domain.criteria) whose criteria its evidence feeds
    # (selection.scoring.evidence, selection.domain.scoring.mappings' MAPPINGS): the plan puts the tests of
    # the selection's priority dimensions first and marks the others optional
    feeds: tuple[str, ...] = ()
    # `make demo`'s settings over the plan: short enough that every test on three simulated
    # candidates takes minutes (a runnable test must state them; tests/benchmarks/test_suite.py)
    demo: Mapping[str, Any] | None = field(default=None)
    # scoring's indicators (selection.domain.scoring's metric names) its run's own figures imply, and
    # the stated figures its rules do not credit for this run (a run's `metadata["derived"]` or its
    # points' `extra` may state any indicator; selection.scoring.evidence merges them)
    indicators: Callable[[RunFacts], dict[str, float]] | None = None
    uncredited: Callable[[RunFacts], tuple[str, ...]] | None = None
    # the scoring figures it reads straight from its run's load points (latency, errors, throughput and
    # cost at the target load, the sustainable load), before any test's indicators or stated figures;
    # the tests are read in the suite's order, so a later test's reading of a figure wins over an
    # earlier one's (the overload test's sustainable load over the stress sweep's)
    readings: Callable[[RunFacts, ScoringContext], list[Reading]] | None = None
    # the load points each of its scoring figures is read from (the other points prepare it: a swap
    # test's pressure, the isolation test's tenant A alone): only their client judgement counts for it
    figure_points: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # the scoring figures whose 95 % interval is one of its verdicts' own: figure -> (the verdict's
    # name, the verdict's value as the figure), used when the figure is the verdict's value
    figure_intervals: Mapping[str, tuple[str, Callable[[float], float]]] = field(default_factory=dict)
    # the test whose readings a run of this one stands in for when the candidate has no run of that
    # test (an upload that fits no test is read as a concurrency stress)
    stands_in_for: str | None = None
    # the `validate` command's shared flags it takes, each with the parameter it sets (--concurrency,
    # --rate, --duration, --priority, --switch-endpoint, --switch-model, --kv-capacity-tokens, and
    # --trace for a test that draws its requests' lengths from a trace); any other is refused
    cli: Mapping[str, str] = field(default_factory=dict)
    # the `validate` command's flags it passes to its plan, each with the plan's keyword (--max-context);
    # a test without the flag refuses it
    plan_flags: Mapping[str, str] = field(default_factory=dict)
    # its run compares with the engine with prefix caching off (`off_target`: a second endpoint when the
    # candidate or `validate --prefix-off-endpoint` names one, else the same one, the cache reset); the
    # validation page shows that variant and the worker checks its endpoint before the run
    off_variant: bool = False
    # the figures its result table shows on the run page and in the record, from the run's points
    # (in order) and metadata; None (or a function returning None): its heaviest load level
    # (`benchmarks.presentation.result_figures`)
    figures: Callable[[Sequence[PointRow], Mapping[str, Any]], list[Figure] | None] | None = None
    # the decision record's behaviour claims its verdicts support (`selection.domain.claims` judges
    # them on the chosen engine's run of this test; each claim's `test` is this test's id)
    claims: tuple[Claim, ...] = ()
    # the titles of verdicts only this test writes, by name (English, marked with `_`); the pages and
    # the record read them beside `benchmarks.presentation.CRITERION_TITLES` (the tests' shared ones,
    # and those of the tests written before this field)
    verdict_titles: Mapping[str, str] = field(default_factory=dict)
    # how it runs, short of the run itself (its workload module's, `harness.workloads.spec.TestSpec.of`):
    # its parameters (`benchmarks.suite.params.ParamSpec`: default, label, unit, bounds; the form,
    # the run page and the dispatch read them, the run parses them once), its plan
    # `plan(constraints, facts, **kwargs) -> params` from the constraints and the candidate's facts
    # (`CandidateFacts`; a plain, JSON-serialisable dict the user may edit) and its estimate
    # `estimate(params) -> Load | None` (`benchmarks.harness.estimates`: duration and load before Run)
    # the record's monitoring thresholds its run validates (`thresholds(points, metadata, planned)`: its
    # points as `figures` reads them, its metadata, and the constraints' planned figures by their
    # field names), which the record calls validated only while each of its `claims` holds on the
    # chosen engine's run (`selection.records.context`); None: it validates none
    thresholds: Callable[[Sequence[PointRow], Mapping[str, Any], Mapping[str, Any]], dict[str, Any]] | None = None
    # what the record adds under its result (a Message from its metadata: a soak shorter than planned);
    # None, or a function returning None: nothing
    record_note: Callable[[Mapping[str, Any]], Message | None] | None = None
    params: tuple[ParamSpec, ...] = ()
    plan: Callable[..., dict[str, Any]] | None = None
    estimate: Callable[[Mapping[str, Any]], Load | None] | None = None


@dataclass(frozen=True)
class CandidateFacts:
    """What a test's plan may read of the candidate beyond the constraints; the validation plan
    gathers them once per candidate (`benchmarks.validation.plan.candidate_facts`)."""

    max_model_len: int | None = None  # the engine's longest sequence, as it stated it
    kv_capacity_tokens: int | None = None  # engine-stated, else the capacity model's prediction
    priority_scheduling: bool = False  # its launch flags turn priority scheduling on (and the catalog allows it)
