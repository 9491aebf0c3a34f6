"""The production trace, replayed open loop on its own clock, reported per traffic group."""

from __future__ import annotations

import math
from typing import Any, Callable

from benchmarks.harness.load_config import LoadConfig, LoadOutcome
from benchmarks.harness.load_judging import LATE_SEND_MS
from benchmarks.harness.load_summary import summarize
from benchmarks.harness.prompts import measure_template
from benchmarks.harness.request_record import RequestSpec
from benchmarks.harness.trace_replay import PromptBuilder, ReplayOutcome, load_plan, run_replay
from benchmarks.harness.workloads.common import (
    CANCELLED,
    PlanError,
    Reporter,
    Session,
    Target,
    budget_verdicts,
    build_result,
    errors_verdict,
    make_verdict,
)
from benchmarks.harness.workloads.spec import TestSpec
from benchmarks.harness.workloads.spec import gettext_noop as _
from benchmarks.harness.workloads.stress import attach_engine_stats, slo_of
from benchmarks.result import LoadPoint, NormalizedResult
from benchmarks.suite import trace_replay as suite_row
from benchmarks.traces.replay import GROUPS
from selection.domain.messages import Message

# the replay's clock verdict, as message templates (pages show them in their language)
NOTHING_SENT = _("no request was sent")
NEVER_SENT = _("%(n)s turns were never sent")  # a run note
SEND_LATENESS = _("send lateness p99 %(lateness)s ms against the trace's clock (limit %(limit)s ms)")


async def run_trace_replay(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    """The production trace, open loop on its own clock (benchmarks.harness.trace_replay), per traffic group."""
    if not params.get("trace"):
        raise PlanError("params.trace: the trace file to replay is required (validate --trace FILE)")
    try:
        plan = load_plan(params["trace"], params.get("format"), params.get("speedup") or 1.0, params.get("sample"))
    except ValueError as exc:
        raise PlanError(f"params.trace: {exc}") from exc
    if plan.requests == 0:
        raise PlanError("params.trace: the trace has no request to replay (every row failed)")
    reporter = Reporter(progress, cancel)
    notes: list[str | Message] = []
    async with Session(target, keep_text=plan.has_history) as session:
        prompts = session.prompts
        assert prompts is not None
        await measure_template(session.client, prompts, target.api)
        builder = PromptBuilder(prompts, target.api, plan.block_tokens)

        def make_spec(turn, prompt) -> RequestSpec:
            return session.spec(
                prompt.text, turn.output_tokens, messages=prompt.messages, request_id=turn.request_id, tag=turn.group
            )

        replayed = await run_replay(
            session.client, plan, make_spec, builder, cancel=cancel, progress=reporter.phase("replay", 0, 100)
        )
    points, outcomes = _replay_points(replayed, plan, params, session)
    lateness = replayed.lateness_p99_ms()
    verdicts = [errors_verdict(points[:1])]
    for point, outcome in zip(points[1:], outcomes[1:], strict=True):
        verdicts.extend(budget_verdicts(point, params, label=point.label, records=outcome.records))
    verdicts.append(
        make_verdict(
            "arrivals_on_time",
            None if lateness is None else lateness <= LATE_SEND_MS,
            Message(NOTHING_SENT)
            if lateness is None
            else Message(SEND_LATENESS, {"lateness": f"{lateness:.2f}", "limit": f"{LATE_SEND_MS:g}"}),
            lateness,
            LATE_SEND_MS,
        )
    )
    if replayed.cancelled:
        notes.append(Message(CANCELLED))
    if replayed.unsent:
        notes.append(Message(NEVER_SENT, {"n": replayed.unsent}))
    reporter.close()
    return build_result(
        "trace_replay",
        session,
        params,
        points,
        outcomes,
        verdicts,
        notes,
        replayed.cancelled,
        {
            "replay": plan.describe(),
            "send_lateness_ms_p99": lateness,
            "send_lateness_ms": {f"p{q}": _percentile_of(replayed.lateness_ms, q) for q in (50, 90, 99, 99.9)}
            | {"max": max(replayed.lateness_ms, default=None), "sends": len(replayed.lateness_ms)},
        },
    )


def _replay_points(
    replayed: ReplayOutcome, plan, params: dict[str, Any], session: Session
) -> tuple[list[LoadPoint], list[LoadOutcome]]:
    """One point for the whole replay, then one per traffic group present; request rows under their group."""
    duration = replayed.duration_s
    config = LoadConfig(mode="open", rate=plan.requests / duration if duration > 0 else None, duration_s=duration)
    everything = LoadOutcome(
        config=config,
        records=[record for _turn, record in replayed.records],
        run_start=replayed.start,
        measure_start=replayed.start,
        measure_end=replayed.end,
        achieved_concurrency=replayed.in_flight_area / duration if duration > 0 else None,
        peak_concurrency=replayed.peak_in_flight,
        cancelled=replayed.cancelled,
    )
    everything.achieved_rate = len(everything.records) / duration if duration > 0 else None
    everything.send_lateness_ms_p99 = replayed.lateness_p99_ms()
    if replayed.lateness_ms:
        everything.late_sends_fraction = sum(1 for x in replayed.lateness_ms if x > LATE_SEND_MS) / len(
            replayed.lateness_ms
        )
    everything.loop_lag_ms_p99 = _percentile_of(replayed.loop_lag_ms, 99)
    slo = slo_of(params)
    points = [summarize(everything, label="all", slo=slo)]
    outcomes = [LoadOutcome(config=config, run_start=replayed.start)]  # the request rows sit under their group
    window = (replayed.start - session.time_zero, replayed.end - session.time_zero)
    attach_engine_stats(points[0], session.metrics.recording, *window)
    for group in GROUPS:
        records = [record for turn, record in replayed.records if turn.group == group]
        if not records:
            continue
        part = LoadOutcome(
            config=config,
            records=records,
            run_start=replayed.start,
            measure_start=replayed.start,
            measure_end=replayed.end,
            cancelled=replayed.cancelled,
        )
        point = summarize(part, label=group, slo=slo)
        point.extra["requests_planned"] = plan.group_counts()[group]
        points.append(point)
        outcomes.append(part)
    return points, outcomes


def _percentile_of(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(max(math.ceil(q / 100.0 * len(ordered)) - 1, 0), len(ordered) - 1)]


SPEC = TestSpec.of(suite_row.TEST, run_trace_replay)
