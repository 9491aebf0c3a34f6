"""From stored runs and the catalog to scoring inputs (`domain.scoring.inputs.CandidateEvidence`).

Measured metrics come from the latest succeeded run of each test per candidate. Standard ones are
computed from the load points (TTFT/TPOT p95, error rate, achieved concurrency, goodput); test-
specific ones (prefix saving, swap-resume ratio against a recompute, continuation correctness,
soak drift, largest context rung, KV headroom, overload handling, isolation) are each test's
`indicators` (its module under `benchmarks.suite`, reading the run as plain `RunFacts`), or read by
their scoring names from the run's `metadata["derived"]` or its points' `extra`, where the harness
and the simulator write them (a stated figure wins, unless the test's rules do not credit it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterable

from benchmarks import presentation, suite
from benchmarks.harness.client_timing import client_slack_ms, load_held, rate_held
from benchmarks.models import BenchmarkRun
from benchmarks.result import SIMULATED
from benchmarks.selectors import run_history
from benchmarks.suite.base import PointFacts, RunFacts, ScoringContext, ValidationTest
from benchmarks.verdicts import status_of
from selection.capacity.measured import measured_capacity
from selection.domain import catalog as catalog_domain
from selection.domain import launch_flags
from selection.domain.messages import CLAUSE_SEPARATOR, NAME_SEPARATOR, Message, load
from selection.domain.messages import marked as _
from selection.domain.scoring.inputs import (
    CandidateEvidence,
    DocumentedFeatures,
    Metric,
    ScoringConstraints,
)
from selection.models import Candidate, Selection
from selection.selectors import compared_candidates

DERIVED_METRICS = (
    "kv_headroom_at_target",
    "soak_drift_p99_ratio",
    "prefix_saving_ratio",
    "max_context_rung_reached",
    "swap_resume_ttft_ratio",
    "continuation_correct",
    "idle_release_share",
    "overload_handling",  # the overload test's level past the sustainable load (rejection 1.0 ... OOM 0.0)
    "isolation_ttft_p95_ms",  # the interactive client's TTFT p95 under the other's flood (isolation test)
)
# catalog capability -> scoring's scheduling feature (domain.scoring.base.SCHEDULING_FEATURES)
SCHEDULING = {"priority_scheduling": "priority", "fair_scheduling": "fair", "admission_limit": "admission_limit"}

ALLOCATION = {"paged": "paged", "radix": "paged", "static": "static", "contiguous": "preallocated"}
PREFIX_CACHE = {
    "hash_block": "hash",
    "radix_tree": "radix",
    "block_trie": "radix",
    "slot_prompt_cache": "manual",
    "none": "none",
}
PREEMPTION = {"swap": "swap", "recompute": "recompute", "none_by_default": "none", "none": "none"}
METRIC_CATEGORIES = {
    "kv_usage": ("kv_cache_usage", "gpu_cache_usage", "token_usage", "kv_cache_utilization", "num_used_tokens"),
    "prefix_hit_rate": ("prefix_cache", "cache_hit", "hit_rate", "cached_tokens"),
    "preemptions": ("preempt", "retracted"),
    "queue_depth": ("waiting", "queue", "deferred"),
}


# launch_flags feature -> scoring's DocumentedFeatures field it removes when off
FLAG_FEATURES = {
    launch_flags.PREFIX_CACHING: "prefix_cache",
    launch_flags.OFFLOAD: "offload_tiers",
    launch_flags.METRICS: "metrics_exported",
}


def deployed_capabilities(candidate: Candidate) -> dict[str, Any]:
    """The catalog's capabilities of the candidate's engine version as its launch flags deploy them:
    a documented feature the flags leave off is absent (`launch_flags.apply_to_capabilities`).
    Raises the catalog's errors for an engine it does not know."""
    version = candidate.engine_version if candidate.engine_version in candidate.engine.versions else None
    caps = catalog_domain.capabilities(candidate.engine.slug, version)
    return launch_flags.apply_to_capabilities(caps, candidate.engine.slug, candidate_flags(candidate))


def candidate_flags(candidate: Candidate) -> str:
    """The candidate's launch flags and recipe: what its engine is started with."""
    return f"{candidate.launch_flags or ''} {candidate.launch_recipe or ''}".strip()


def off_reason(state: dict[str, Any]) -> str:
    """Why a feature is off in the launch flags, in words (scoring's inputs, the record)."""
    if state.get("reason") == launch_flags.FLAG_OFF:
        return f"turned off by {state['flag']} in the launch flags"
    if state.get("flag"):
        return f"off by default and {state['flag']} is not in the launch flags"
    return "off by default in the launch flags"


def documented_features(candidate: Candidate) -> DocumentedFeatures:
    """The catalog's facts for the candidate's engine, in scoring's vocabulary (None = unknown), as
    deployed: a feature its launch flags leave off counts as absent, with the reason."""
    try:
        caps = deployed_capabilities(candidate)
    except (catalog_domain.CatalogLookupError, catalog_domain.CatalogError):
        return DocumentedFeatures()
    metrics = caps.get("metrics")
    exported = None
    if metrics is not None:
        exported = tuple(
            cat for cat, needles in METRIC_CATEGORIES.items() if any(n in name for name in metrics for n in needles)
        )
    scheduling = {feature: caps.get(capability) for capability, feature in SCHEDULING.items()}
    return DocumentedFeatures(
        allocation_strategy=ALLOCATION.get(caps.get("allocation_strategy") or "", None),
        prefix_cache=PREFIX_CACHE.get(caps.get("prefix_cache_kind") or "", None),
        kv_cache_dtypes=tuple(caps["kv_quant_dtypes"]) if caps.get("kv_quant_dtypes") is not None else None,
        offload_tiers=tuple(caps["offload_tiers"]) if caps.get("offload_tiers") is not None else None,
        # documented as present; one the catalog leaves unknown counts as absent, all unknown is missing
        scheduling_features=None
        if all(v is None for v in scheduling.values())
        else tuple(feature for feature, present in scheduling.items() if present),
        preemption_mode=PREEMPTION.get(caps.get("preemption_mode") or "", None),
        metrics_exported=exported,
        operating_complexity=caps.get("ops_complexity"),
        sources={k: v for k, v in (caps.get("sources") or {}).items() if v} | _scheduling_source(caps),
        off_in_launch_flags={
            FLAG_FEATURES[feature]: off_reason(state) for feature, state in caps["off_in_launch_flags"].items()
        },
    )


def _scheduling_source(caps: dict[str, Any]) -> dict[str, str]:
    """The catalog pages the scheduling features were read from, as one source."""
    urls = dict.fromkeys(url for cap in SCHEDULING if (url := (caps.get("sources") or {}).get(cap)))
    return {"scheduling_features": " ".join(urls)} if urls else {}


def _verdict(run: BenchmarkRun, name: str) -> dict[str, Any] | None:
    return next((v for v in run.verdicts or [] if v.get("name") == name), None)


def derived_from_run(run: BenchmarkRun) -> dict[str, float]:
    """Scoring metrics a run's test-specific output implies: its test's `indicators` (each test's
    module under `benchmarks.suite` says how its verdicts and figures become scoring's metrics)."""
    test = suite.BY_ID.get(run.test)
    return test.indicators(run_facts(run)) if test is not None and test.indicators is not None else {}


def uncredited(run: BenchmarkRun) -> tuple[str, ...]:
    """The figures a run states that its test's rules do not credit (a swap test that swapped no
    session in recovered nothing, whatever its stated continuation figure says)."""
    test = suite.BY_ID.get(run.test)
    return test.uncredited(run_facts(run)) if test is not None and test.uncredited is not None else ()


def run_facts(run: BenchmarkRun) -> RunFacts:
    """The stored run as plain data, what a test's indicators and readings read."""
    points = tuple(
        PointFacts(
            p.label,
            p.extra or {},
            p.ttft_ms or {},
            p.tpot_ms or {},
            p.concurrency,
            p.achieved_concurrency,
            p.error_rate,
            p.output_token_throughput,
            p.slo_attainment,
            p.client_bound,
        )
        for p in run.points.all()
    )
    return RunFacts(
        id=str(run.pk),
        test=run.test,
        params=run.params or {},
        metadata=run.metadata or {},
        verdicts=tuple(run.verdicts or ()),
        points={point.label: point for point in points},
        load_points=points,
    )


def _pair(interval: Any) -> tuple[float, float] | None:
    """A stored [low, high] as a tuple of floats, or None when it is not one."""
    if not isinstance(interval, (list, tuple)) or len(interval) != 2:
        return None
    try:
        low, high = float(interval[0]), float(interval[1])
    except (TypeError, ValueError):
        return None
    return (min(low, high), max(low, high))


def _interval_of(run: BenchmarkRun, verdict_name: str) -> tuple[float, float] | None:
    """The interval a harness verdict measured (its value's 95 % bootstrap interval)."""
    verdict = next((v for v in run.verdicts or [] if v.get("name") == verdict_name), None)
    return _pair((verdict or {}).get("interval"))


CLIENT_BOUND_RUN = _("client-bound (%(test)s run %(run)s, %(points)s)")
CLIENT_BOUND_RUN_BECAUSE = _("client-bound (%(test)s run %(run)s, %(points)s: %(reasons)s)")
POINT = _("point %(index)s")


def _point_reasons(point: Any) -> list[Any]:
    """Why the load client set a point's pace: the messages it stored, else its English text."""
    extra = point.extra or {}
    stored = extra.get("client_bound_reason_messages")
    return [load(m) for m in stored] if stored else list(extra.get("client_bound_reasons") or [])


def _point_name(point: Any) -> Message | str:
    """A load point as people read it: a phase the harness names in words ("tenant A under the
    flood"), any other label as it is ("c=32"), an unlabelled one by its index."""
    if not point.label:
        return Message(POINT, {"index": point.index})
    phase = presentation.POINT_LABELS.get(point.label)
    return Message(phase) if phase else presentation.point_label(point.label)


def client_bound_reason(run: BenchmarkRun, points: Iterable[Any] | None = None) -> Message | None:
    """Why the run's figures (or those of `points`) are the client's and not the engine's: the
    test by its title, the client-bound points and their reasons, as a message (pages show it in
    their language), or None when no point was client-bound (an unjudged point, None, is not)."""
    bound = [p for p in (run.points.all() if points is None else points) if p.client_bound]
    if not bound:
        return None
    reasons = dict.fromkeys(r for p in bound for r in _point_reasons(p))
    figures = {
        "test": Message(suite.title_of(run.test)),
        "run": str(run.pk),
        "points": NAME_SEPARATOR.join(_point_name(p) for p in bound),
    }
    if reasons:
        return Message(CLIENT_BOUND_RUN_BECAUSE, {**figures, "reasons": CLAUSE_SEPARATOR.join(reasons)})
    return Message(CLIENT_BOUND_RUN, figures)


# figures that do not depend on the client's pace: whether a session continued identically, whether
# a rung was served at its full length, whether idle sessions were evicted, and the error rate (the
# share of requests the engine failed: a late client changes when it reads an answer, never whether
# the engine failed it), so a client-bound run's count for the scoring
PACE_INDEPENDENT = frozenset({"continuation_correct", "max_context_rung_reached", "idle_release_share", "error_rate"})
# latencies a client-bound client that still applied the load can only have lengthened: scored with
# [value - the client's lateness, value] as their interval
LATENCIES = frozenset({"ttft_p95_ms", "tpot_p95_ms", "isolation_ttft_p95_ms"})
# figures read from latencies on both sides of a ratio or against a budget step by step (the soak's
# drift, the swap ratio, the overload test's level and sustainable step): no bound follows from the
# lateness, so a client-bound run's are held out
LATENCY_DERIVED = frozenset({"soak_drift_p99_ratio", "swap_resume_ttft_ratio", "overload_handling"})


@dataclass(frozen=True)
class ClientJudgement:
    """What a run's client-bound points leave of its figures: `reason` (None: no point was
    client-bound), whether every client-bound load point still applied the load asked for
    (`load_held`, the harness's rule), and the most latency the client could have added
    (`slack_ms`: its send lateness, loop lag and late reads; None when not measured)."""

    reason: Message | None = None
    load_held: bool = True
    slack_ms: float | None = None


def judge_client(run: BenchmarkRun, labels: Iterable[str] | None = None) -> ClientJudgement:
    """The client judgement of a run from its points, or of the points with `labels` when the run has
    them (a traffic group's point is part of a load and is not judged for the load on its own)."""
    points = list(run.points.all())
    named = [p for p in points if labels is not None and p.label in set(labels)]
    bound = [p for p in (named or points) if p.client_bound]
    if not bound:
        return ClientJudgement()
    loads = [p for p in bound if not (p.extra or {}).get("traffic_group")]
    slacks = [slack for p in bound if (slack := client_slack_ms(p)) is not None]
    return ClientJudgement(
        reason=client_bound_reason(run, bound),
        load_held=all(_held(p) for p in loads),
        slack_ms=max(slacks) if slacks else None,
    )


def _held(point: Any) -> bool:
    """The harness's `load_held`; an open-loop point (a request rate) asked for its rate, not for its
    concurrency cap, so only its late sends count."""
    return rate_held(point) if point.request_rate is not None else load_held(point)


def late_interval(value: float, interval: tuple[float, float] | None, slack_ms: float) -> tuple[float, float]:
    """A latency's interval with the client's lateness: the engine's own is at most `slack_ms` shorter."""
    ends = [float(value) - slack_ms, float(value), *(interval or ())]
    return (max(0.0, min(ends)), max(ends))


RERUNS_READ = 4  # earlier runs of a test with the same parameters whose values widen the interval


def measured_metrics(candidate: Candidate, constraints: dict[str, Any]) -> dict[str, Metric]:
    """The candidate's measured metrics (see `measured_evidence`)."""
    return measured_evidence(candidate, constraints)[0]


def measured_evidence(
    candidate: Candidate, constraints: dict[str, Any]
) -> tuple[dict[str, Metric], dict[str, str | Message]]:
    """The candidate's measured metrics from the latest run of each test, and the figures held out.

    A run with a client-bound load point (the load client, not the engine, set the pace or stamped
    the times) gives the scoring only its figures that do not depend on the pace
    (`PACE_INDEPENDENT`); the others come from the newest run of that test without a client-bound
    point, or are held out, with the reason, when there is none: a client-bound run can neither lift
    nor sink a candidate. Earlier runs of a test with the same parameters (re-runs) widen each
    metric's interval to span their values."""
    history = run_history(candidate)
    latest = {test: runs[0] for test, runs in history.items()}
    metrics, held_out = metrics_from_runs(latest, candidate, constraints)
    clean = {test: run for test, runs in history.items() if (run := _first_clean(runs)) is not None}
    if clean != latest:  # what the newest runs without a client-bound point measured stands instead
        fallback, _held = metrics_from_runs(clean, candidate, constraints)
        for name in [name for name in fallback if name not in metrics]:
            metrics[name] = fallback[name]
            held_out.pop(name, None)
    for test, runs in sorted(history.items()):
        own = {str(run.pk) for run in runs}
        reruns = [run for run in runs if (run.params or {}) == (runs[0].params or {})][: RERUNS_READ + 1]
        for rerun in reruns if len(reruns) > 1 else ():
            again, _held = metrics_from_runs({**latest, test: rerun}, candidate, constraints)
            for name, metric in again.items():
                current = metrics.get(name)
                if (
                    current is not None
                    and metric.run_ids == (str(rerun.pk),)
                    and len(current.run_ids) == 1
                    and current.run_ids[0] in own
                    and current.run_ids != metric.run_ids
                ):
                    metrics[name] = with_rerun(current, metric, str(rerun.pk))
    stated = measured_capacity(candidate)  # engine-stated: its log, else its metrics in a run
    measured, predicted = stated.get("token_capacity"), stated.get("predicted_token_capacity")
    if measured and predicted:
        metrics["capacity_prediction_error"] = Metric(
            value=abs(predicted - measured) / measured,
            run_ids=tuple(map(str, stated.get("run_ids", []))),
            evidence=stated.get("evidence", "MEASURED"),
        )
    return metrics, held_out


def _first_clean(runs: list[BenchmarkRun]) -> BenchmarkRun | None:
    return next((run for run in runs if client_bound_reason(run) is None), None)


def with_rerun(metric: Metric, rerun: Metric, run_id: str) -> Metric:
    """`metric` with its interval widened to span a re-run's value (and the re-run's interval)."""
    values = [float(metric.value), float(rerun.value)]
    for interval in (metric.interval, rerun.interval):
        values.extend(interval or ())
    return replace(metric, interval=(min(values), max(values)), reruns=(*metric.reruns, run_id))


def metrics_from_runs(
    runs: dict[str, BenchmarkRun], candidate: Candidate, constraints: dict[str, Any]
) -> tuple[dict[str, Metric], dict[str, str | Message]]:
    """Measured metrics from one run per test, and the figures held out (by name, with the reason):
    every figure a client-bound run measured, except those that do not depend on the pace."""
    metrics: dict[str, Metric] = {}
    held_out: dict[str, str | Message] = {}
    judged: dict[Any, ClientJudgement] = {run.pk: judge_client(run) for run in runs.values()}
    for run in runs.values():  # a figure read from named points is judged on those points only
        figure_points = test.figure_points if (test := suite.BY_ID.get(run.test)) is not None else {}
        judged.update({(run.pk, name): judge_client(run, labels) for name, labels in figure_points.items()})

    def put(
        name: str,
        value: Any,
        run: BenchmarkRun,
        interval: Any = None,
        late: Any = None,
        timing: bool = False,
        pace_free: bool = False,
    ) -> None:
        """Store a figure; a client-bound run's as the rules of `measured_evidence` say (`late`: its
        interval with the client's lateness, when the caller derived one; `timing`: judged on the
        client's timings, so held out when the client was bound; `pace_free`: the harness states the
        figure does not depend on the client's pace, as token counts and KV against the requests
        actually in flight do not)."""
        if value is None:
            return
        judgement, interval, client_bound = judged.get((run.pk, name)) or judged[run.pk], _pair(interval), ""
        if judgement.reason and name not in PACE_INDEPENDENT and not pace_free:
            if name in LATENCIES and judgement.load_held and judgement.slack_ms is not None:
                interval, client_bound = late_interval(value, interval, judgement.slack_ms), judgement.reason
            elif late is not None and judgement.load_held:
                interval, client_bound = _pair(late), judgement.reason
            elif not judgement.load_held or name in LATENCIES or name in LATENCY_DERIVED or timing:
                metrics.pop(name, None)  # the client's figure: neither scored nor left in another's place
                held_out[name] = judgement.reason
                return
        held_out.pop(name, None)
        metrics[name] = Metric(
            value=value, run_ids=(str(run.pk),), evidence=run.evidence, interval=interval, client_bound=client_bound
        )

    gpus = max(candidate.gpu_count, 1)
    for test, run in reading_runs(runs):  # in the suite's order: a later test's figure wins
        context = ScoringContext(gpus, constraints, judged[run.pk].slack_ms)
        for reading in test.readings(run_facts(run), context):
            put(reading.name, reading.value, run, reading.interval, late=reading.late, timing=reading.timing)
    for run in runs.values():
        derived = derived_from_run(run)
        derived.update((run.metadata or {}).get("derived") or {})
        for point in run.points.all():
            derived.update({k: v for k, v in (point.extra or {}).items() if k in DERIVED_METRICS})
        for name in uncredited(run):  # a stated figure too (a swap test with no swap-in recovered nothing)
            derived.pop(name, None)
        intervals = derived_intervals(run, derived) | ((run.metadata or {}).get("derived_intervals") or {})
        pace_free = set((run.metadata or {}).get("pace_independent") or ())
        for name in DERIVED_METRICS:
            if name in derived and name not in metrics and name not in held_out:
                put(name, derived[name], run, intervals.get(name), pace_free=name in pace_free)
    return metrics, held_out


def reading_runs(runs: dict[str, BenchmarkRun]) -> list[tuple[ValidationTest, BenchmarkRun]]:
    """Each test that reads scoring figures from its load points (`readings`) with its run, in the
    suite's order; a test without a run is read from a run of a test that stands in for it (an
    upload that fits no test, for the concurrency stress)."""
    found = []
    for test in suite.TESTS:
        if test.readings is None:
            continue
        stand_ins = (runs.get(other.id) for other in suite.TESTS if other.stands_in_for == test.id)
        run = runs.get(test.id) or next((run for run in stand_ins if run is not None), None)
        if run is not None:
            found.append((test, run))
    return found


def derived_intervals(run: BenchmarkRun, derived: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """The 95 % intervals of a run's derived figures that its verdicts measured, when the figure is the
    verdict's own value (its test's `figure_intervals`: the soak's p99 drift as the late / early ratio,
    the swap test's resume / recompute ratio)."""
    intervals: dict[str, tuple[float, float]] = {}
    test = suite.BY_ID.get(run.test)
    for name, (verdict_name, as_figure) in (test.figure_intervals if test is not None else {}).items():
        verdict = _verdict(run, verdict_name) or {}
        interval = _pair(verdict.get("interval"))
        value = derived.get(name)
        if interval is None or value is None or verdict.get("value") is None:
            continue
        try:
            same = math.isclose(as_figure(float(verdict["value"])), float(value), rel_tol=1e-9, abs_tol=1e-12)
        except (TypeError, ValueError):
            continue
        if same:
            intervals[name] = (as_figure(interval[0]), as_figure(interval[1]))
    return intervals


def scoring_constraints(selection: Selection) -> ScoringConstraints:
    c = selection.constraints.as_domain() if hasattr(selection, "constraints") else {}
    return ScoringConstraints(
        target_concurrency=c.get("peak_concurrency"),
        ttft_p95_ms=c.get("ttft_p95_ms"),
        tpot_p95_ms=c.get("tpot_p95_ms"),
        gpu_count_budget=c.get("gpu_count_budget"),
        cost_per_gpu_hour=c.get("cost_per_gpu_hour"),
        team_size=c.get("ops_team_size"),
        # the context ladder's rungs are input lengths and it climbs to the longest input the
        # constraints name: a ladder that reached it meets the requirement (docs/domain.md, test 2)
        max_context_tokens=c.get("max_input_tokens") or None,
        throughput_target_tok_s=c.get("throughput_target_tokens_s"),
    )


def evidence_for(selection: Selection, candidates: Iterable[Candidate] | None = None) -> list[CandidateEvidence]:
    constraints = selection.constraints.as_domain() if hasattr(selection, "constraints") else {}
    result = []
    for candidate in candidates if candidates is not None else compared_candidates(selection):
        metrics, held_out = measured_evidence(candidate, constraints)
        result.append(
            CandidateEvidence(
                candidate=str(candidate.pk),
                label=candidate.display_name,
                metrics=metrics,
                documented=documented_features(candidate),
                held_out=held_out,
                verdicts=run_verdicts(metrics),
                gpu_count=candidate.gpu_count,
            )
        )
    return result


def run_verdicts(metrics: dict[str, Metric]) -> dict[str, dict[str, str]]:
    """Run id -> verdict name -> status, of every run a metric comes from: what settles each figure's
    fit to its constraint (`procurement.constraint_fit`)."""
    ids = sorted({int(run) for metric in metrics.values() for run in metric.run_ids if str(run).isdigit()})
    return {
        str(run.pk): {str(v.get("name") or ""): status_of(v) for v in run.verdicts or []}
        for run in BenchmarkRun.objects.filter(pk__in=ids).only("pk", "verdicts")
    }


def uses_simulated(evidence: list[CandidateEvidence]) -> bool:
    return any(m.evidence == SIMULATED for e in evidence for m in e.metrics.values())
