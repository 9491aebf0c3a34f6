"""Test 1, concurrency stress: hold the target load (closed loop, or open loop at a rate), per
traffic group, with deliberate aborts and KV release.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from benchmarks.harness.lengths import length_sampler
from benchmarks.harness.load import run_load
from benchmarks.harness.load_config import LoadConfig, LoadOutcome
from benchmarks.harness.load_summary import summarize
from benchmarks.harness.metrics import MetricsRecording
from benchmarks.harness.queueing import queue_wait_figures, queue_wait_verdict
from benchmarks.harness.request_record import RequestRecord, RequestSpec
from benchmarks.harness.trace_replay import lengths_from_trace
from benchmarks.harness.workloads.common import (
    CANCELLED,
    PlanError,
    Reporter,
    Session,
    Target,
    budget_verdicts,
    build_result,
    errors_verdict,
    kv_verdicts,
    make_verdict,
    require_param,
    series_in,
    settle_after_load,
)
from benchmarks.harness.workloads.spec import TestSpec
from benchmarks.result import LoadPoint, NormalizedResult
from benchmarks.suite import concurrency_stress as suite_row
from benchmarks.traces.replay import GROUPS
from benchmarks.verdicts import (
    CLIENT_BOUND,
    FAIL,
    INCONCLUSIVE,
    PASS,
    reasons_of,
)
from selection.domain.messages import CLAUSE_SEPARATOR, Join, Message, to_json
from selection.domain.messages import marked as _

# the load the stress test held (its verdicts) and what it observed (metadata.observed's line)
RATE_SENT = _("sent %(sent)s of %(rate)s requests/s (Poisson), %(held)s in flight on average")
CONCURRENCY_HELD = _("held %(held)s of %(concurrency)s on average")
OBSERVED_RATE = _("sent %(sent)s of %(rate)s req/s open loop")
OBSERVED_HELD = _("held %(held)s of %(concurrency)s")
OBSERVED_TTFT = _("TTFT p95 %(value)s ms")
OBSERVED_NO_TTFT = _("TTFT p95 n/a")
OBSERVED_FAILED = _("%(failed)s of %(n)s failed")
OBSERVED_KV_PEAK = _("KV peak %(share)s")
OBSERVED_QUEUE_WAIT = _("queue wait p95 %(value)s ms (engine, n=%(n)s)")
OBSERVED_GROUP = _("%(group)s TTFT p95 %(value)s ms (n=%(n)s)")
OBSERVED_GROUP_NO_TTFT = _("%(group)s TTFT p95 n/a (n=%(n)s)")
OBSERVED_LINE = _("%(parts)s (n=%(n)s)")
# a traffic group's name inside a sentence (benchmarks.traces.replay.GROUPS)
GROUP_NAMES = {
    "short": Message("short", context="traffic group"),
    "long": Message("long", context="traffic group"),
    "multi_turn": Message("multi_turn", context="traffic group"),
}


async def run_concurrency_stress(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    concurrency = require_param(params, "concurrency", int, 1)
    duration = require_param(params, "duration_s", float, 0.1)
    input_tokens = require_param(params, "input_tokens", int, 1)
    output_tokens = require_param(params, "output_tokens", int, 1)
    abort_fraction = float(params.get("abort_fraction") or 0.0)
    lengths = trace_lengths(params, input_tokens, output_tokens)
    rate = open_loop_rate(params)
    reporter = Reporter(progress, cancel)
    notes: list[str | Message] = []
    async with Session(target) as session:
        baseline = await session.kv_now()
        prompts = session.prompts
        assert prompts is not None
        abort_every = int(round(1 / abort_fraction)) if abort_fraction > 0 else 0

        def make(index: int) -> RequestSpec:
            abort = abort_every and index % abort_every == abort_every - 1
            request_input, request_output = lengths(index)
            return session.spec(
                prompts.text(request_input, seed=index),
                request_output,
                request_id=f"stress-{index}",
                abort_after_tokens=max(request_output // 4, 1) if abort else None,
            )

        config = LoadConfig(
            mode="open" if rate else "closed",
            concurrency=None if rate else concurrency,
            rate=rate,
            duration_s=duration,
            warmup_s=float(params.get("warmup_s") or 0.0),
            ramp_up_s=float(params.get("ramp_up_s") or 0.0),
            drain_timeout_s=float(params.get("drain_timeout_s") or 120.0),
        )
        outcome = await run_load(session.client, make, config, cancel=cancel, progress=reporter.phase("load", 0, 90))
        point = summarize(outcome, label=f"{rate:g} req/s" if rate else f"c={concurrency}", slo=slo_of(params))
        window = (outcome.measure_start - session.time_zero, outcome.measure_end - session.time_zero)
        attach_engine_stats(point, session.metrics.recording, *window)
        settled = {"after": None, "waited_s": 0}
        if not outcome.cancelled:
            settled = await settle_after_load(
                session, baseline, float(params.get("settle_s") or 30.0), reporter, "settle", 95
            )
    verdicts = budget_verdicts(point, params, records=outcome.records) + [errors_verdict([point])]
    verdicts.append(queue_wait_verdict(point.extra.get("queue_wait"), params.get("ttft_p95_ms")))

    def bound(detail: Message) -> Message:
        if not outcome.client_bound:
            return detail
        reasons = outcome.client_bound_messages or outcome.client_bound_reasons
        return Message(CLIENT_BOUND, {"detail": detail, "reasons": reasons_of(reasons)})

    if rate:  # open loop: the engine cannot hold a rate, the client sends it; what it achieved is reported
        sent = point.extra.get("achieved_rate")
        status = INCONCLUSIVE if outcome.client_bound else PASS if (sent or 0) >= 0.9 * rate else FAIL
        detail = Message(RATE_SENT, {"sent": f"{sent or 0:.2f}", "rate": f"{rate:g}", "held": _held_text(point)})
        verdicts.append(make_verdict("rate_held", None, bound(detail), sent, rate, len(outcome.records), status))
    else:
        held = point.achieved_concurrency
        if outcome.client_bound:
            status = INCONCLUSIVE  # the client, not the engine, failed to keep the load
        else:
            status = PASS if (held or 0) >= 0.95 * concurrency else FAIL
        verdicts.append(
            make_verdict(
                "concurrency_held",
                None,
                bound(Message(CONCURRENCY_HELD, {"held": f"{held or 0:.1f}", "concurrency": concurrency})),
                held,
                concurrency,
                point.requests_completed,
                status,
            )
        )
    groups = _group_points(outcome, lengths, params, session) if _lengths_vary(params, lengths) else []
    for group_point, part in groups:
        verdicts.extend(budget_verdicts(group_point, params, label=group_point.label, records=part.records))
    if abort_every:
        verdicts.extend(kv_verdicts(baseline, settled, target.cache_model))
    if outcome.cancelled:
        notes.append(Message(CANCELLED))
    reporter.close()
    empty = [LoadOutcome(config=outcome.config, run_start=outcome.run_start) for _ in groups]  # rows sit at point 0
    result = build_result(
        "concurrency_stress",
        session,
        params,
        [point] + [group_point for group_point, _part in groups],
        [outcome] + empty,
        verdicts,
        notes,
        outcome.cancelled,
        {"kv_baseline": baseline, "kv_after": settled.get("after"), **lengths_meta(lengths)},
    )
    result.metadata["observed"] = _stress_observed(point, [g for g, _part in groups], rate, concurrency)
    if groups:
        result.metadata["traffic_groups"] = {
            "long_input_tokens": _long_threshold(params),
            "definition": "long: input tokens >= long_input_tokens; short: the rest (requests are single-turn)",
            "requests": {p.label: (p.requests_completed or 0) + (p.requests_failed or 0) for p, _part in groups},
        }
    return result


def _stress_observed(point: LoadPoint, groups: list[LoadPoint], rate: float | None, concurrency: int) -> dict[str, Any]:
    """The stress test's observed sentence and figures (metadata.observed)."""
    n = (point.requests_completed or 0) + (point.requests_failed or 0)
    load = (
        Message(OBSERVED_RATE, {"sent": f"{point.extra.get('achieved_rate') or 0:.1f}", "rate": f"{rate:g}"})
        if rate
        else Message(OBSERVED_HELD, {"held": f"{point.achieved_concurrency or 0:.1f}", "concurrency": concurrency})
    )
    ttft = point.ttft_ms.p95
    parts: list[Message] = [
        load,
        Message(OBSERVED_TTFT, {"value": f"{ttft:.0f}"}) if ttft is not None else Message(OBSERVED_NO_TTFT),
        Message(OBSERVED_FAILED, {"failed": point.requests_failed or 0, "n": n}),
    ]
    kv = point.extra.get("kv_usage_ratio_max")
    if kv is not None:
        parts.append(Message(OBSERVED_KV_PEAK, {"share": f"{kv:.0%}"}))
    queue_wait = point.extra.get("queue_wait") or {}
    if queue_wait.get("p95_ms") is not None:
        parts.append(Message(OBSERVED_QUEUE_WAIT, {"value": f"{queue_wait['p95_ms']:.0f}", "n": queue_wait["n"]}))
    for group in groups:
        gn = (group.requests_completed or 0) + (group.requests_failed or 0)
        value = group.ttft_ms.p95
        name = GROUP_NAMES.get(group.label, group.label)
        parts.append(
            Message(OBSERVED_GROUP, {"group": name, "value": f"{value:.0f}", "n": gn})
            if value is not None
            else Message(OBSERVED_GROUP_NO_TTFT, {"group": name, "n": gn})
        )
    line = Message(OBSERVED_LINE, {"parts": Join(parts, CLAUSE_SEPARATOR), "n": n})
    return {
        "line": str(line),
        "line_message": to_json(line),
        "requests": n,
        "ttft_p95_ms": ttft,
        "error_rate": point.error_rate,
        "achieved_concurrency": point.achieved_concurrency,
        "achieved_rate": point.extra.get("achieved_rate"),
        "kv_usage_ratio_max": kv,
        "queue_wait_p95_ms": queue_wait.get("p95_ms"),
        "groups": {
            g.label: {"n": (g.requests_completed or 0) + (g.requests_failed or 0), "ttft_p95_ms": g.ttft_ms.p95}
            for g in groups
        },
    }


def _held_text(point: LoadPoint) -> str:
    held = point.achieved_concurrency
    return "n/a" if held is None else f"{held:.1f}"


def open_loop_rate(params: dict[str, Any]) -> float | None:
    """params.rate: requests/s for an open loop (Poisson), None for a closed loop."""
    rate = params.get("rate")
    if rate is None:
        return None
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not rate > 0 or not math.isfinite(rate):
        raise PlanError(f"params.rate: must be a positive number of requests/s or null (closed loop), got {rate!r}")
    return float(rate)


def _long_threshold(params: dict[str, Any]) -> int:
    from benchmarks.traces.stats import LONG_INPUT_TOKENS

    value = params.get("long_input_tokens")
    if value is None:
        return int(LONG_INPUT_TOKENS)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 1:
        raise PlanError(f"params.long_input_tokens: must be a positive number of tokens or null, got {value!r}")
    return int(value)


def _lengths_vary(params: dict[str, Any], lengths: Callable[[int], tuple[int, int]]) -> bool:
    """Traffic groups mean something only when request lengths are drawn (a distribution or a trace)."""
    return bool(params.get("length_trace") or getattr(lengths, "source", None))


def _group_points(
    outcome: LoadOutcome, lengths: Callable[[int], tuple[int, int]], params: dict[str, Any], session: Session
) -> list[tuple[LoadPoint, LoadOutcome]]:
    """One point per traffic group present among the measured requests (short and long by their
    drawn input length; stress requests are single-turn, so no multi-turn group), as the trace
    replay reports them (`_replay_points`)."""
    threshold = _long_threshold(params)
    by_group: dict[str, list[RequestRecord]] = {group: [] for group in GROUPS}
    for record in outcome.records:
        try:
            index = int(str(record.request_id).rsplit("-", 1)[-1])
        except ValueError:
            continue
        by_group["long" if lengths(index)[0] >= threshold else "short"].append(record)
    out = []
    for group in GROUPS:
        records = by_group[group]
        if not records:
            continue
        part = LoadOutcome(
            config=outcome.config,
            records=records,
            run_start=outcome.run_start,
            measure_start=outcome.measure_start,
            measure_end=outcome.measure_end,
            client_bound=outcome.client_bound,
            client_bound_reasons=list(outcome.client_bound_reasons),
            client_bound_messages=list(outcome.client_bound_messages),
        )
        group_point = summarize(part, label=group, slo=slo_of(params))
        group_point.extra["traffic_group"] = group
        group_point.extra["long_input_tokens"] = threshold
        out.append((group_point, part))
    return out


def trace_lengths(params: dict[str, Any], input_tokens: int, output_tokens: int) -> Callable[[int], tuple[int, int]]:
    """(input, output) tokens of request `index`: the trace's (params.length_trace), else drawn from
    the constraints' distribution (params.input_distribution, benchmarks.harness.lengths), else fixed."""
    if not params.get("length_trace"):
        return length_sampler(params, input_tokens, output_tokens)
    try:
        return lengths_from_trace(
            params["length_trace"], params.get("length_trace_format"), int(params.get("length_trace_sample") or 10_000)
        )
    except ValueError as exc:
        raise PlanError(f"params.length_trace: {exc}") from exc


def lengths_meta(lengths: Callable[[int], tuple[int, int]]) -> dict[str, Any]:
    source = getattr(lengths, "source", None)
    return {"lengths": source} if source else {}


def slo_of(params: dict[str, Any]) -> dict[str, float] | None:
    slo = {}
    if params.get("ttft_p95_ms") is not None:
        slo["ttft_ms"] = float(params["ttft_p95_ms"])
    if params.get("tpot_p95_ms") is not None:
        slo["tpot_ms"] = float(params["tpot_p95_ms"])
    return slo or None


def attach_engine_stats(point: LoadPoint, recording: MetricsRecording, start: float, end: float) -> None:
    for name in ("kv_usage_ratio", "running", "waiting", "kv_used_tokens"):
        values = series_in(recording, name, start, end)
        if values:
            point.extra[f"{name}_max"] = max(values)
            point.extra[f"{name}_mean"] = sum(values) / len(values)
    pre = series_in(recording, "preemptions", start, end)
    if pre:
        point.extra["preemptions"] = pre[-1] - pre[0]
    hits = series_in(recording, "prefix_hits", start, end)
    queries = series_in(recording, "prefix_queries", start, end)
    if len(hits) >= 2 and len(queries) >= 2 and queries[-1] > queries[0]:
        point.extra["prefix_hit_ratio"] = (hits[-1] - hits[0]) / (queries[-1] - queries[0])
    queue_wait = queue_wait_figures(recording, start, end)  # per request, from the engine's histogram
    if queue_wait is not None:
        point.extra["queue_wait"] = queue_wait


SPEC = TestSpec.of(suite_row.TEST, run_concurrency_stress)
