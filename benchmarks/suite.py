"""The validation tests, in one table.

Each row says what a test is (id, its number in the articles' order, title), what it does and
what it measures (the validation page and the record print these), and which charts its
evidence is drawn as (`benchmarks.run_charts` draws them, for the record and the comparison).
Every title, form choice, API enum, chart mapping and translation reads this table; how a test runs
(its parameters, plan, run and estimate) is its workload module's `SPEC`
(`benchmarks.harness.workloads.spec`). Adding a test is a row here, its module (added to the
package's `MODULES`), a migration for the model's new choice and the catalog's translations.

The texts are English and marked with `_`, a no-op named so that `makemessages` collects them;
pages and the record translate them when they show them. No Django here.
"""

from __future__ import annotations

from dataclasses import dataclass


def _(text: str) -> str:  # named `_` so `makemessages` collects the texts; translated where shown
    return text


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


TESTS: tuple[ValidationTest, ...] = (
    ValidationTest(
        "concurrency_stress",
        1,
        _("Concurrency stress"),
        _(
            "Hold the target concurrency for the duration: KV usage, queueing, preemptions and latency "
            "percentiles over time. Passes when TTFT p95 is within the budget, no request fails, and KV usage "
            "returns to its baseline after the deliberate aborts."
        ),
        _("latency and errors at the target concurrency, KV usage over time, release after aborts"),
        ("latency_vs_load", "kv_usage"),
        feeds=("memory", "scheduling", "cost", "observability"),
    ),
    ValidationTest(
        "long_context",
        2,
        _("Long context"),
        _(
            "A ladder of long inputs (16K to 128K tokens, capped at the model's maximum), alone and beside short "
            "traffic: TTFT and KV usage per rung and the largest rung that succeeds."
        ),
        _("TTFT and KV per rung of the context ladder, the largest rung served"),
        ("context_ladder", "kv_usage"),
        feeds=("context",),
    ),
    ValidationTest(
        "swap_recovery",
        3,
        _("Swap-out and recovery"),
        _(
            "Multi-turn sessions, some idle between turns while other traffic fills the cache: resume TTFT "
            "against warm TTFT, and with greedy decoding the continuation must be identical."
        ),
        _("resume cost of idle sessions and the correctness of their continuation"),
        ("swap_phases", "kv_usage"),  # phases, not load levels: never drawn against concurrency
        feeds=("persistence",),
    ),
    ValidationTest(
        "prefix_reuse",
        4,
        _("Prefix reuse"),
        _(
            "The same load of requests sharing a long system prompt on the engine with prefix caching on and on "
            "the candidate's caching-off endpoint (llama.cpp: cache_prompt false): peak KV tokens, TTFT and "
            "throughput of both against the capacity model's “every request allocates its own” figure. Without "
            "a caching-off endpoint the on-vs-off verdict is not exercised."
        ),
        _("KV memory with a shared prefix against every request allocating its own"),
        ("prefix_on_off", "kv_usage"),
        feeds=("memory",),
    ),
    ValidationTest(
        "stability",
        5,
        _("Long-run stability"),
        _(
            "Medium concurrency for a long time: drift of TTFT/TPOT p50 and p99 between the first and last "
            "windows, the KV usage trend, preemptions and errors."
        ),
        _("latency drift between the first and the last window, the KV usage trend"),
        ("soak_drift", "kv_usage"),
        feeds=("memory",),
    ),
    ValidationTest(
        "overload",
        6,
        _("Overload and rejection"),
        _(
            "Step the load from the target concurrency (or, open loop, the request rate) up to 3x or until errors, "
            "then back down: the sustainable load (the highest step within the latency budget with under 1 % errors), "
            "what the engine does past it (rejection with 429/503, bounded queueing, latency collapse, OOM or a crash) "
            "and the time to recover to the first step's latency and KV level. Passes when the target is sustainable, "
            "the overload is handled by rejection or bounded queueing, and it recovers within the bound."
        ),
        _("the sustainable load, the engine's behaviour past it, and the time to recover"),
        ("overload_steps", "latency_vs_load", "kv_usage"),
        feeds=("scheduling", "cost"),
    ),
    ValidationTest(  # feeds no criterion: an operability check (can a switch be rolled back?), always optional
        "model_switch",
        7,
        _("Model switch and rollback"),
        _(
            "Steady load while the candidate switches to a second launch recipe (a new model or engine version: a "
            "second endpoint traffic moves to, or the simulator's restart) and back: errors and downtime, the time "
            "until the latency budget holds again after the switch and after the rollback, the KV-memory spike and "
            "the cache-hit drop. Passes when no request fails across the switch and the budget holds again within "
            "the allowed time both ways."
        ),
        _("errors, downtime and time back within the budget across a version switch and its rollback"),
        ("switch_timeline", "kv_usage"),
    ),
    ValidationTest(
        "isolation",
        8,
        _("Tenant isolation"),
        _(
            "Tenant A sends short interactive requests at its rate, alone and then while tenant B floods the engine "
            "with long-context requests (each tenant with its own `user`, and the `priority` field where the "
            "launch flags enable priority scheduling): A's TTFT and TPOT p95 alone and under the flood, with "
            "sample sizes and bootstrap intervals. Passes when A stays within the budget under the flood."
        ),
        _("tenant A's latency alone and under another tenant's long-context flood"),
        ("tenant_isolation", "kv_usage"),
        feeds=("scheduling",),
    ),
    ValidationTest(
        "trace_replay",
        None,
        _("Trace replay"),
        _(
            "A production trace replayed open loop on its own clock (scaled by the speed-up): a session's turn "
            "waits for the previous answer and the recorded idle gap, requests of one prefix group share their "
            "prefix. Latency and errors per traffic group (short, long, multi-turn) against the budget; the send "
            "lateness p99 says how faithful the arrival times were."
        ),
        _("latency and errors per traffic group under the production trace's own arrivals"),
        ("kv_usage",),
        runnable=False,  # from `validate --trace FILE`; the worker takes no file paths
    ),
    ValidationTest(
        "custom",
        None,
        _("Custom"),
        _("Any other benchmark result uploaded from CI."),
        _("what the uploaded benchmark measured"),
        ("latency_vs_load", "kv_usage"),
        runnable=False,
    ),
)

BY_ID: dict[str, ValidationTest] = {test.id: test for test in TESTS}
TEST_IDS: tuple[str, ...] = tuple(test.id for test in TESTS)
RUNNABLE_TEST_IDS: tuple[str, ...] = tuple(test.id for test in TESTS if test.runnable)


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
