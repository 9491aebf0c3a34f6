"""A throwaway validation test, "probe", written as a new test's modules are: its row of the suite
(`TEST`, as a `benchmarks/suite/<test>.py` states it: what it is, its parameters, its plan from the
constraints and the candidate's facts, its estimate, its indicators, the figures its result table
shows, the claim it supports, `make demo`'s and the `validate` command's settings) and its run
(`SPEC`, as a `benchmarks/harness/workloads/<test>.py` states it: `TestSpec.of(TEST, run)`). Here
both live in one file so that tests/benchmarks/test_specs.py can register it with one module and
follow it everywhere."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from benchmarks.harness import estimates
from benchmarks.harness.workloads.spec import TestSpec
from benchmarks.suite.base import CandidateFacts, Figure, PointRow, Reading, RunFacts, ScoringContext, ValidationTest
from benchmarks.suite.params import BUDGET_PARAMS, ParamSpec
from selection.domain.claims import Claim
from selection.domain.messages import Message

PARAMS = (
    ParamSpec("probe_depth", 4, "Probe depth (requests)", "requests", minimum=1),
    ParamSpec("probe_s", 20.0, "Probe time (s)", "s"),
    ParamSpec("probe_shapes", [128, 256], "Probe shapes (tokens)", "tokens", help="two or more lengths"),
    ParamSpec("probe_kv_tokens", None, "Probe KV capacity (tokens)", "tokens", optional=True),
    *BUDGET_PARAMS,
)


def plan_probe(constraints: dict[str, Any] | None = None, facts: CandidateFacts | None = None) -> dict[str, Any]:
    planned = {param.name: param.default for param in PARAMS if param.default is not None}
    if constraints and constraints.get("peak_concurrency"):
        planned["probe_depth"] = int(constraints["peak_concurrency"])
    planned["probe_kv_tokens"] = facts.kv_capacity_tokens if facts is not None else None
    return planned


async def run_probe(target, params, cancel=None, progress=None):  # never run by the tests
    raise AssertionError("not run")


def estimate_probe(params: Mapping[str, Any]) -> estimates.Load:
    seconds = estimates.number(params, "probe_s")
    return estimates.Load(seconds, estimates.number(params, "probe_depth"), 7, 7 * 384)


def indicators(run: RunFacts) -> dict[str, float]:
    """isolation_ttft_p95_ms = the probe's TTFT p95, only when its verdict judged it."""
    figures = run.metadata.get("probe") or {}
    judged = run.verdict("probe_answered")
    if judged is None or figures.get("ttft_p95_ms") is None:
        return {}
    return {"isolation_ttft_p95_ms": float(figures["ttft_p95_ms"])}


def readings(run: RunFacts, context: ScoringContext) -> list[Reading]:
    """The concurrency its first point held, per GPU of the candidate."""
    first = next(iter(run.load_points), None)
    return [] if first is None else [Reading("achieved_concurrency", (first.concurrency or 0) / context.gpus)]


def figures(points: Sequence[PointRow], metadata: Mapping[str, Any]) -> list[Figure]:
    stated = metadata.get("probe") or {}
    return [
        Figure(
            "probe TTFT p95 at %(depth)s deep", stated.get("ttft_p95_ms"), "ms", stated.get("n"), params={"depth": 4}
        )
    ]


def thresholds(points: Sequence[PointRow], metadata: Mapping[str, Any], planned: Mapping[str, Any]) -> dict[str, Any]:
    return {"validated_concurrency": planned.get("peak_concurrency")}


def record_note(metadata: Mapping[str, Any]) -> Message | None:
    stated = metadata.get("probe") or {}
    return Message("The probe ran %(s)s s only.", {"s": stated["ran_s"]}) if stated.get("ran_s") else None


PROBED = Claim(
    "probed",
    "probe",
    ("probe_answered",),
    "the probe answered (%(evidence)s)",
    "that the probe answers is not validated (%(evidence)s)",
)

TEST = ValidationTest(
    "probe",
    9,
    "Probe",
    "Probes the endpoint.",
    "the probe's figures",
    ("kv_usage",),
    feeds=("scheduling",),
    demo={"probe_s": 2.0, "probe_depth": 2},
    indicators=indicators,
    readings=readings,
    figures=figures,
    claims=(PROBED,),
    thresholds=thresholds,
    record_note=record_note,
    verdict_titles={"probe_answered": "The probe answered"},
    cli={"concurrency": "probe_depth"},
    params=PARAMS,
    plan=plan_probe,
    estimate=estimate_probe,
)
SPEC = TestSpec.of(TEST, run_probe)
