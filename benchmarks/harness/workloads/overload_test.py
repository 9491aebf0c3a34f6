"""Test 6, overload and rejection: step the load up to 3x and back down; the sustainable load,
the behaviour past it and the recovery (the judging rules: benchmarks.harness.overload).
"""

from __future__ import annotations

from typing import Any, Callable

from benchmarks.harness import overload
from benchmarks.harness.load import run_load
from benchmarks.harness.load_config import LoadConfig, LoadOutcome
from benchmarks.harness.load_summary import summarize
from benchmarks.harness.request_record import RequestSpec
from benchmarks.harness.workloads.common import (
    CANCELLED,
    KV_BASELINE_TOLERANCE,
    MAX_ERROR_RATE,
    PlanError,
    Reporter,
    Session,
    Target,
    build_result,
    client_bound_reasons,
    detail_message_of,
    make_verdict,
    ms_or_na,
    require_param,
)
from benchmarks.harness.workloads.spec import TestSpec
from benchmarks.harness.workloads.stress import attach_engine_stats, lengths_meta, open_loop_rate, slo_of, trace_lengths
from benchmarks.result import LoadPoint, NormalizedResult
from benchmarks.suite import overload as suite_row
from benchmarks.verdicts import (
    FAIL,
    INSUFFICIENT_DATA,
    MIN_SAMPLES,
    NOT_EXERCISED,
    PASS,
    judge_percentile,
    reasons_of,
    status_word,
)
from selection.domain.messages import CLAUSE_SEPARATOR, Join, Message, pgettext, to_json
from selection.domain.messages import marked as _

# a level's unit in a sentence (the English is the stored figures' `unit`)
UNIT_NAMES = {
    "req/s": pgettext("overload level unit", "req/s"),
    "concurrent": pgettext("overload level unit", "concurrent"),
}
# the overload verdict's limit, in words (stored in English, shown in the reader's language)
GRACEFUL_LIMIT = _("rejection or bounded queueing")
# the run's notes
STOPPED_CLIMBING = _("stopped climbing at %(level)s %(unit)s: %(share)s of requests failed")
STOPPED_ANSWERING = _("the engine stopped answering at %(level)s %(unit)s: %(why)s")
# the verdicts' details
NO_STEP_RAN = _("no step ran")
SUSTAINABLE = _(
    "sustainable %(level)s %(unit)s (highest step within the latency budget with at most %(errors)s errors) vs "
    "target %(target)s"
)
FIRST_STEP_MISSED = _("the first step (%(level)s %(unit)s) did not meet the budget: %(status)s")
AT_THE_TARGET = _("%(detail)s; at the target: %(budget)s")
PAST_SUSTAINABLE = _("past the sustainable load: %(behaviour)s; %(reasons)s")
# the observed line
OBSERVED_LINE = _("%(parts)s (%(steps)s steps, n=%(n)s)")
NO_OVERLOAD_STEP = _("no overload step ran")
SUSTAINABLE_OF_TARGET = _("sustainable %(level)s %(unit)s of target %(target)s")
TARGET_NOT_SUSTAINED = _("target %(target)s %(unit)s not sustained")
TARGET_SUSTAINABILITY = _("target %(target)s %(unit)s sustainability %(status)s")
AT_THE_TOP = _("at %(level)s TTFT p95 %(ttft)s, %(errors)s of %(n)s failed")
PAST_IT = _("past it: %(behaviour)s")
NOT_REACHED = _("not reached")
RECOVERED_IN = _("recovered in %(seconds)s s")
DID_NOT_RECOVER = _("did not recover")


def unit_name(unit: str) -> Message | str:
    return UNIT_NAMES.get(unit, unit)


async def run_overload(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    """Step the load from the target up to 3x (or until errors), then back down; judge the
    sustainable level, what happened past it and the time to recover (benchmarks.harness.overload)."""
    target_concurrency = require_param(params, "target_concurrency", int, 1)
    rate = open_loop_rate(params)
    up_factors = _factors(params, "step_factors")
    down_factors = _factors(params, "down_factors")
    step_s = require_param(params, "step_duration_s", float, 0.1)
    recovery_s = require_param(params, "recovery_s", float, 0.1)
    bound_s = require_param(params, "recovery_bound_s", float, 0)
    input_tokens = require_param(params, "input_tokens", int, 1)
    output_tokens = require_param(params, "output_tokens", int, 1)
    max_errors = float(params.get("max_error_rate", MAX_ERROR_RATE))
    lengths = trace_lengths(params, input_tokens, output_tokens)
    base = float(rate) if rate else float(target_concurrency)
    unit = "req/s" if rate else "concurrent"

    def level_of(factor: float) -> float:
        return round(base * factor, 3) if rate else float(max(int(round(base * factor)), 1))

    plan_steps = [("up", level_of(f)) for f in up_factors] + [("down", level_of(f)) for f in down_factors]
    total_s = step_s * (len(plan_steps) - 1) + recovery_s
    reporter = Reporter(progress, cancel)
    notes: list[str | Message] = []
    points: list[LoadPoint] = []
    outcomes: list[LoadOutcome] = []
    steps: list[overload.Step] = []
    partial = False
    session = Session(target)
    session.metrics.interval_s = min(1.0, max(step_s / 10.0, 0.2))  # enough samples per short step
    index_base = 0
    async with session:
        climbing_done = False
        elapsed = 0.0
        for position, (direction, level) in enumerate(plan_steps):
            if direction == "up" and climbing_done:
                continue
            if reporter.cancelled():
                partial = True
                break
            recovery = direction == "down" and position == len(plan_steps) - 1
            duration = recovery_s if recovery else step_s
            pct0, pct1 = 100 * elapsed / total_s, 100 * min(elapsed + duration, total_s) / total_s
            elapsed += duration
            outcome = await _step_load(
                session,
                lengths,
                direction,
                level,
                duration,
                bool(rate),
                max(bound_s, step_s),
                index_base,
                cancel,
                reporter.phase(step_label(direction, level, bool(rate)), pct0, pct1),  # no words to translate
            )
            index_base += len(outcome.records) + len(outcome.warmup)
            point = _step_point(session, outcome, params, direction, level, bool(rate), unit, recovery)
            step = _overload_step(point, outcome, params, direction, level, max_errors)
            points.append(point)
            outcomes.append(outcome)
            steps.append(step)
            if outcome.cancelled:
                partial = True
                notes.append(Message(CANCELLED))
                break
            if direction == "up" and (
                (point.error_rate or 0.0) > max_errors or outcome.stopped_early or step.failures.get("crash")
            ):
                climbing_done = True  # up to 3x or until errors
                figures = {"level": f"{level:g}", "unit": unit_name(unit)}
                notes.append(Message(STOPPED_CLIMBING, {**figures, "share": f"{point.error_rate or 0:.1%}"}))
            if outcome.stopped_early:
                figures = {"level": f"{level:g}", "unit": unit_name(unit)}
                why = outcome.stopped_early_message or outcome.stopped_early
                notes.append(Message(STOPPED_ANSWERING, {**figures, "why": why}))
                break
    verdicts, figures = _overload_verdicts(steps, points, outcomes, params, session, base, unit, bound_s)
    reporter.close()
    return _overload_result(session, params, points, outcomes, verdicts, figures, notes, partial, lengths, unit)


async def _step_load(
    session: Session,
    lengths: Callable[[int], tuple[int, int]],
    direction: str,
    level: float,
    duration: float,
    open_loop: bool,
    drain_s: float,
    offset: int,
    cancel: Any,
    progress: Callable[[dict[str, Any]], Any],
) -> LoadOutcome:
    """One step of the staircase: `level` req/s (open loop) or concurrent requests for `duration`."""
    prompts = session.prompts
    assert prompts is not None

    def make(index: int, label: str = f"{direction}-{level:g}") -> RequestSpec:
        request_input, request_output = lengths(offset + index)
        return session.spec(
            prompts.text(request_input, seed=offset + index),
            request_output,
            request_id=f"overload-{label}-{index}",
        )

    config = (
        LoadConfig(mode="open", rate=level, duration_s=duration, drain_timeout_s=drain_s)
        if open_loop
        else LoadConfig(mode="closed", concurrency=int(level), duration_s=duration, drain_timeout_s=drain_s)
    )
    return await run_load(session.client, make, config, cancel=cancel, progress=progress)


def _step_point(
    session: Session,
    outcome: LoadOutcome,
    params: dict[str, Any],
    direction: str,
    level: float,
    open_loop: bool,
    unit: str,
    recovery: bool,
) -> LoadPoint:
    """The step's point, labelled with its direction and level, with the engine's stats over its window."""
    point = summarize(outcome, label=step_label(direction, level, open_loop), slo=slo_of(params))
    window = (outcome.measure_start - session.time_zero, outcome.measure_end - session.time_zero)
    attach_engine_stats(point, session.metrics.recording, *window)
    point.extra.update(
        direction=direction,
        level=level,
        level_unit=unit,
        recovery_step=recovery,
        load_end_s=(outcome.load_end or outcome.measure_end) - session.time_zero,
    )
    return point


def step_label(direction: str, level: float, open_loop: bool) -> str:
    """A step's label (its point's, and its progress phase): "↑ c=16", "↓ 2.5 req/s"."""
    arrow = "↑" if direction == "up" else "↓"
    return f"{arrow} {level:g} req/s" if open_loop else f"{arrow} c={level:g}"


def _overload_result(
    session: Session,
    params: dict[str, Any],
    points: list[LoadPoint],
    outcomes: list[LoadOutcome],
    verdicts: list[dict[str, Any]],
    figures: dict[str, Any],
    notes: list[str | Message],
    partial: bool,
    lengths: Callable[[int], tuple[int, int]],
    unit: str,
) -> NormalizedResult:
    """The result, with the observed line and the derived figures (overload handling, sustainable concurrency)."""
    result = build_result(
        "overload",
        session,
        params,
        points,
        outcomes,
        verdicts,
        notes,
        partial,
        {"overload": figures, **lengths_meta(lengths)},
    )
    line = _overload_line(figures, unit)
    result.metadata["observed"] = {
        "line": str(line),
        "line_message": to_json(line),
        **{k: v for k, v in figures.items() if k != "steps"},
    }
    derived = result.metadata.setdefault("derived", {})
    if figures.get("handling_level") is not None:
        derived["overload_handling"] = figures["handling_level"]
    if figures.get("sustainable") is not None and figures.get("mode") == "closed":
        derived["sustainable_concurrency"] = figures["sustainable"]
    return result


def _factors(params: dict[str, Any], key: str) -> list[float]:
    factors = params.get(key)
    if (
        not isinstance(factors, list)
        or not factors
        or any(not isinstance(f, (int, float)) or isinstance(f, bool) or not f > 0 for f in factors)
    ):
        raise PlanError(f"params.{key}: must be a non-empty list of positive multiples of the target, got {factors!r}")
    return [float(f) for f in factors]


def _overload_step(
    point: LoadPoint, outcome: LoadOutcome, params: dict[str, Any], direction: str, level: float, max_errors: float
) -> overload.Step:
    """The step's budget judgement (n and interval per budget, in point.extra["budget"]) and figures."""
    reasons = client_bound_reasons(point)
    ok = [r for r in outcome.records if r.ok and not r.aborted]
    judged = []
    for key, attr in (("ttft_p95_ms", "ttft_ms"), ("tpot_p95_ms", "tpot_ms"), ("e2e_p95_ms", "e2e_ms")):
        if params.get(key) is not None:
            judged.append(
                judge_percentile(
                    f"{key.replace('_p95_ms', '')}_p95_within_budget",
                    [getattr(r, attr) for r in ok],
                    95,
                    float(params[key]),
                    attr.replace("_ms", "").upper(),
                    client_bound_reasons=reasons,
                )
            )
    finished = (point.requests_completed or 0) + (point.requests_failed or 0)
    if (point.error_rate or 0.0) > max_errors and finished >= MIN_SAMPLES:
        status = FAIL
    elif judged:
        status = overload.worst_status(v["status"] for v in judged)
    else:  # no latency budget: the error rate alone decides, from enough requests
        status = PASS if finished >= MIN_SAMPLES else INSUFFICIENT_DATA
    failures = overload.failure_kinds(outcome.records)
    point.extra["budget"] = judged
    point.extra["budget_status"] = status
    point.extra["failures_by_kind"] = failures
    offered = len(outcome.records)
    completion = (point.requests_completed or 0) / offered if outcome.config.mode == "open" and offered else None
    point.extra["completion_ratio"] = completion
    return overload.Step(
        level=level,
        direction=direction,
        status=status,
        requests=finished,
        failures=failures,
        ttft_p95_ms=point.ttft_ms.p95,
        throughput=point.request_throughput,
        completion_ratio=completion,
        waiting_max=point.extra.get("waiting_max"),
        stopped_early=outcome.stopped_early_message or outcome.stopped_early,
    )


def _overload_verdicts(
    steps: list[overload.Step],
    points: list[LoadPoint],
    outcomes: list[LoadOutcome],
    params: dict[str, Any],
    session: Session,
    base: float,
    unit: str,
    bound_s: float,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    verdicts: list[dict[str, Any]] = []
    if not steps:
        return [make_verdict("sustainable_load_meets_target", None, Message(NO_STEP_RAN), status=INSUFFICIENT_DATA)], {}
    first, first_point = steps[0], points[0]
    sustainable = overload.sustainable_level(steps)
    ttft_first = next((v for v in first_point.extra.get("budget") or [] if v["name"].startswith("ttft")), None)
    errors = f"{float(params.get('max_error_rate', MAX_ERROR_RATE)):.0%}"
    detail = (
        Message(
            SUSTAINABLE, {"level": f"{sustainable:g}", "unit": unit_name(unit), "errors": errors, "target": f"{base:g}"}
        )
        if sustainable is not None
        else Message(
            FIRST_STEP_MISSED,
            {"level": f"{first.level:g}", "unit": unit_name(unit), "status": status_word(first.status)},
        )
    )
    if ttft_first:
        detail = Message(AT_THE_TARGET, {"detail": detail, "budget": detail_message_of(ttft_first)})
    verdicts.append(
        make_verdict(
            "sustainable_load_meets_target",
            None,
            detail,
            sustainable,
            base,
            first.requests,
            first.status,
        )
        | {"interval": (ttft_first or {}).get("interval")}
    )
    reference = float(params["ttft_p95_ms"]) if params.get("ttft_p95_ms") else first.ttft_p95_ms
    behaviour, reasons = overload.classify(steps, reference)
    past = [s for s in steps if s.direction == "up" and (sustainable is None or s.level > sustainable)]
    past_n = sum(s.requests for s in past)
    if behaviour is None:
        status = NOT_EXERCISED  # the engine was never pushed past what it sustains
    else:
        status = PASS if behaviour in overload.GRACEFUL else FAIL
    verdicts.append(
        make_verdict(
            "overload_handled_gracefully",
            None,
            Message(PAST_SUSTAINABLE, {"behaviour": overload.behaviour_name(behaviour), "reasons": reasons_of(reasons)})
            if behaviour
            else reasons_of(reasons),
            behaviour,
            GRACEFUL_LIMIT,
            past_n,
            status,
        )
    )
    # recovery: from the end of the top step's load, in the last (recovery) step
    recovery = None
    top_index = max((i for i, s in enumerate(steps) if s.direction == "up"), default=0)
    last = len(steps) - 1
    if steps[last].direction == "down" and last > top_index:
        load_end = points[top_index].extra["load_end_s"]
        until = outcomes[last].measure_end - session.time_zero
        baselines, tolerances = {}, {}
        for name, tolerance in (("waiting", 0.0), ("kv_usage_ratio", KV_BASELINE_TOLERANCE)):
            value = first_point.extra.get(f"{name}_max")
            if value is not None:
                baselines[name], tolerances[name] = float(value), tolerance
        recovery = overload.recovery_time(
            load_end,
            outcomes[last].records,
            first.ttft_p95_ms,
            session.metrics.recording.series,
            baselines,
            tolerances,
            until,
            time_zero=session.time_zero,
        )
        recovery["baseline"] = {"ttft_p95_ms": first.ttft_p95_ms, **baselines}
    recovered = None if recovery is None else recovery["recovered_s"]
    n_recovery = steps[last].requests if recovery is not None else 0
    bound_reasons = [reason for point in (first_point, points[last]) for reason in client_bound_reasons(point)]
    status, detail = overload.judge_recovery(behaviour, recovery, n_recovery, bound_s, bound_reasons)
    verdicts.append(make_verdict("recovered_within_bound", None, detail, recovered, bound_s, n_recovery, status))
    figures = {
        "mode": "open" if params.get("rate") else "closed",
        "unit": unit,
        "target": base,
        "sustainable": sustainable,
        "top": max((s.level for s in steps if s.direction == "up"), default=None),
        "behaviour": behaviour,
        "handling_level": None if behaviour is None else overload.HANDLING_LEVEL[behaviour],
        "reasons": [str(reason) for reason in reasons],
        "recovery_s": recovered,
        "recovery": recovery,
        "steps": [
            {
                "label": p.label,
                "direction": s.direction,
                "level": s.level,
                "status": s.status,
                "n": s.requests,
                "ttft_p95_ms": s.ttft_p95_ms,
                "error_rate": p.error_rate,
                "failures": s.failures,
                "waiting_max": s.waiting_max,
            }
            for s, p in zip(steps, points, strict=True)
        ],
    }
    return verdicts, figures


def _overload_line(figures: dict[str, Any], unit: str) -> Message:
    """One sentence of what the overload test observed (the record and the closing note), as a message."""
    if not figures:
        return Message(NO_OVERLOAD_STEP)
    steps = figures["steps"]
    sustainable = figures["sustainable"]
    first_status = steps[0]["status"] if steps else None
    target = {"target": f"{figures['target']:g}", "unit": unit_name(unit)}
    parts: list[Message] = []
    if sustainable is not None:
        parts.append(Message(SUSTAINABLE_OF_TARGET, {"level": f"{sustainable:g}", **target}))
    elif first_status == FAIL:
        parts.append(Message(TARGET_NOT_SUSTAINED, target))
    else:  # inconclusive (client-bound, or the interval straddles the budget) or too few requests
        parts.append(Message(TARGET_SUSTAINABILITY, {**target, "status": status_word(str(first_status))}))
    top = next((s for s in reversed(steps) if s["direction"] == "up"), None)
    if top is not None:
        figures_at_top = {"level": f"{top['level']:g}", "ttft": ms_or_na(top["ttft_p95_ms"])}
        parts.append(Message(AT_THE_TOP, {**figures_at_top, "errors": sum(top["failures"].values()), "n": top["n"]}))
    behaviour = figures["behaviour"]
    parts.append(
        Message(PAST_IT, {"behaviour": overload.behaviour_name(behaviour) if behaviour else Message(NOT_REACHED)})
    )
    if figures.get("recovery_s") is not None:
        parts.append(Message(RECOVERED_IN, {"seconds": f"{figures['recovery_s']:.1f}"}))
    elif behaviour:
        parts.append(Message(DID_NOT_RECOVER))
    n = sum(s["n"] for s in steps)
    return Message(OBSERVED_LINE, {"parts": Join(parts, CLAUSE_SEPARATOR), "steps": len(steps), "n": n})


SPEC = TestSpec.of(suite_row.TEST, run_overload)
