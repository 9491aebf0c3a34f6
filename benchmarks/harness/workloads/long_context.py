"""Test 2, long context: the ladder of long inputs up to the required length, with short traffic beside each rung."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any, Callable

from benchmarks.harness.load_config import LoadConfig, LoadOutcome
from benchmarks.harness.load_summary import summarize
from benchmarks.harness.prompts import PromptFactory
from benchmarks.harness.request_record import RequestRecord
from benchmarks.harness.workloads.common import (
    CANCELLED,
    TRUNCATION_TOLERANCE,
    Cancelled,
    PlanError,
    Reporter,
    Session,
    Target,
    build_result,
    detail_message_of,
    errors_verdict,
    ms_or_na,
    require_param,
)
from benchmarks.harness.workloads.spec import TestSpec
from benchmarks.harness.workloads.spec import gettext_noop as _
from benchmarks.harness.workloads.stress import attach_engine_stats
from benchmarks.result import LoadPoint, NormalizedResult, Stats
from benchmarks.suite import long_context as suite_row
from benchmarks.verdicts import (
    FAIL,
    INSUFFICIENT_DATA,
    NOT_EXERCISED,
    PASS,
    judge_percentile,
    verdict,
)
from selection.domain.messages import CLAUSE_SEPARATOR, Code, Join, Message, to_json

# the run's note when a rung fails (the engine's own error quoted as it wrote it)
RUNG_NOTE = _("rung %(rung)s failed; larger rungs not attempted")
RUNG_NOTE_WITH_ERROR = _("rung %(rung)s failed with the engine's error: %(error)s; larger rungs not attempted")

# what the ladder observed (metadata.observed's line): its clauses, joined by the clause separator
OBSERVED_LARGEST = _("largest rung served %(largest)s of %(required)s required tokens")
OBSERVED_RUNG_FAILED = _("rung %(rung)s failed")
OBSERVED_RUNG_FAILED_ERROR = _("rung %(rung)s failed (%(error)s)")
OBSERVED_RUNG = _("%(rung)s TTFT %(ttft)s%(short)s")
OBSERVED_RUNG_KV = _("%(rung)s TTFT %(ttft)s, KV %(kv)s tok%(short)s")
OBSERVED_SHORT = _(
    ", short requests before -> during: TTFT p95 %(ttft_before)s -> %(ttft_during)s, TPOT p95 %(tpot_before)s -> "
    "%(tpot_during)s, widest token gap p95 %(gap_before)s -> %(gap_during)s (n=%(n)s)"
)
OBSERVED_SHORT_FAILED = _(
    ", short requests before -> during: TTFT p95 %(ttft_before)s -> %(ttft_during)s, TPOT p95 %(tpot_before)s -> "
    "%(tpot_during)s, widest token gap p95 %(gap_before)s -> %(gap_during)s (n=%(n)s, %(failed)s stalled/failed)"
)

# The long-context test's verdict details, as message templates (pages show them in their language;
# an engine's own error is quoted as it wrote it).
REQUIRED_SERVED = _(
    "the required %(required)s tokens were sent and served (largest rung %(largest)s, %(served)s request(s) at or "
    "above the requirement)"
)
RUNG_FAILED_WITH_ERROR = _(
    "rung %(rung)s failed with the engine's error: %(error)s; largest successful input %(largest)s tokens, "
    "required %(required)s"
)
RUNG_FAILED = _("rung %(rung)s failed; largest successful input %(largest)s tokens, required %(required)s")
NEVER_SENT = _(
    "the required %(required)s tokens were never sent (rungs %(rungs)s): add the requirement as the last rung"
)
NEVER_SENT_LARGEST = _(
    "the required %(required)s tokens were never sent (rungs %(rungs)s, largest served %(largest)s): add the "
    "requirement as the last rung"
)
NOTHING_TO_COMPARE = _(
    "no short request streamed before the long one and no TTFT budget: nothing to compare (%(during)s during, "
    "%(failed)s failed)"
)
WIDEST_GAP = _("short requests' widest gap between tokens during the long request (before: p95 %(before)s ms, n=%(n)s)")
SHORT_FAILED = _(
    "%(failed)s short request(s) failed or stalled past %(timeout)s s while the long request ran (%(errors)s); "
    "%(detail)s"
)


async def run_long_context(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    """Climb the context ladder: per rung the long request alone (TTFT, its KV footprint, the
    engine's error when it fails), then again beside short traffic (the short requests' TTFT and
    TPOT before vs during; a short request stalled past its timeout is a failure, never dropped).
    The verdict on the requirement needs the required length itself to have been sent and served."""
    rungs = [int(r) for r in params.get("rungs") or []]
    if not rungs or any(r < 1 for r in rungs):
        raise PlanError(f"params.rungs: must be a non-empty list of positive token counts, got {params.get('rungs')!r}")
    rungs = sorted(set(rungs))
    output_tokens = require_param(params, "output_tokens", int, 1)
    repeats = max(int(params.get("repeats") or 1), 1)
    with_bg = bool(params.get("with_background"))
    if with_bg:
        require_param(params, "background_concurrency", int, 1)
        require_param(params, "background_timeout_s", float, 0.1)
    capacity = params.get("kv_capacity_tokens")
    if capacity is not None and (not isinstance(capacity, (int, float)) or capacity <= 0):
        raise PlanError(f"params.kv_capacity_tokens: must be a positive token count or null, got {capacity!r}")
    reporter = Reporter(progress, cancel)
    points: list[LoadPoint] = []
    outcomes: list[LoadOutcome] = []
    notes: list[str | Message] = []
    largest_ok: int | None = None
    failed_rung: int | None = None
    failure_error: str | None = None
    partial = False
    modes = ["alone"] + (["with_background"] if with_bg else [])
    steps = len(rungs) * len(modes)
    async with Session(target) as session:
        prompts = session.prompts
        assert prompts is not None
        step = 0
        try:
            for rung in rungs:
                rung_ok = True
                for mode in modes:
                    if reporter.cancelled():
                        raise Cancelled()
                    pct0, pct1 = 100 * step / steps, 100 * (step + 1) / steps
                    step += 1
                    label = f"{rung_label(rung)} {mode}"
                    point, outcome = await _long_rung(
                        session, prompts, rung, output_tokens, repeats, mode, params, reporter, label, pct0, pct1
                    )
                    points.append(point)
                    outcomes.append(outcome)
                    served, error = _rung_served(point, outcome, rung)
                    failure_error = failure_error or error
                    rung_ok = rung_ok and served
                    if not rung_ok:
                        break  # a rung the engine refused alone is not retried beside short traffic
                if rung_ok:
                    largest_ok = rung
                else:
                    failed_rung = rung
                    notes.append(
                        Message(RUNG_NOTE_WITH_ERROR, {"rung": rung, "error": failure_error})
                        if failure_error
                        else Message(RUNG_NOTE, {"rung": rung})
                    )
                    break
        except Cancelled:
            partial = True
            notes.append(Message(CANCELLED))
    required = int(params.get("required_tokens") or rungs[-1])
    verdicts = [_largest_rung_verdict(required, rungs, largest_ok, failed_rung, failure_error, points)]
    verdicts.append(errors_verdict(points))
    verdicts.extend(
        _isolation_verdict(point, params)
        for point in points
        if point.label.endswith("with_background") and "background" in point.extra
    )
    observed = _long_context_observed(points, largest_ok, required, failed_rung, failure_error)
    reporter.close()
    return build_result(
        "long_context",
        session,
        params,
        points,
        outcomes,
        verdicts,
        notes,
        partial,
        {"largest_successful_rung": largest_ok, "required_tokens": required, "observed": observed},
    )


def _rung_served(point: LoadPoint, outcome: LoadOutcome, rung: int) -> tuple[bool, str | None]:
    """Whether the rung was served at its length, and why not: the truncation (marked on the point),
    else the engine's first error."""
    truncated = _truncated(outcome.records, rung)
    if truncated:
        point.extra["truncated"] = truncated
        return False, truncated
    served = (point.requests_failed or 0) == 0 and (point.requests_completed or 0) > 0
    return served, None if served else next((r.error for r in outcome.records if r.error), None)


def _truncated(records: list[RequestRecord], rung: int) -> str | None:
    """The engine served a shorter prompt than sent (llama.cpp's context shift truncates silently):
    the rung was not served at its length."""
    reported = [r.prompt_tokens for r in records if r.ok and r.prompt_tokens is not None]
    if reported and min(reported) < TRUNCATION_TOLERANCE * rung:
        return f"the engine reported {min(reported)} prompt tokens for a {rung}-token prompt: it truncated the input"
    return None


def rung_label(tokens: int) -> str:
    """16384 -> "16K"; a length that is not a whole number of K keeps its exact count."""
    return f"{tokens // 1024}K" if tokens >= 1024 and tokens % 1024 == 0 else str(tokens)


def _largest_rung_verdict(
    required: int,
    rungs: list[int],
    largest_ok: int | None,
    failed_rung: int | None,
    failure_error: str | None,
    points: list[LoadPoint],
) -> dict[str, Any]:
    """Pass only when a rung of at least the required length was sent and served: a ladder that
    stopped short of the requirement proves nothing about it (not exercised); one that failed on
    the way is a failure, with the engine's error."""
    served = sum(
        p.requests_completed or 0
        for p in points
        if p.label.endswith("alone") and (p.extra.get("input_tokens_requested") or 0) >= required
    )
    if largest_ok is not None and largest_ok >= required:
        return verdict(
            "largest_rung_succeeds",
            PASS,
            Message(REQUIRED_SERVED, {"required": required, "largest": largest_ok, "served": served}),
            largest_ok,
            required,
            served,
        )
    if failed_rung is not None:
        return verdict(
            "largest_rung_succeeds",
            FAIL,
            Message(
                RUNG_FAILED_WITH_ERROR if failure_error else RUNG_FAILED,
                {"rung": failed_rung, "largest": largest_ok or 0, "required": required}
                | ({"error": failure_error} if failure_error else {}),
            ),
            largest_ok,
            required,
            served,
        )
    return verdict(
        "largest_rung_succeeds",
        NOT_EXERCISED,
        Message(
            NEVER_SENT_LARGEST if largest_ok else NEVER_SENT,
            {"required": required, "rungs": f"{rungs}"} | ({"largest": largest_ok} if largest_ok else {}),
        ),
        largest_ok,
        required,
        served,
    )


def _isolation_verdict(point: LoadPoint, params: dict[str, Any]) -> dict[str, Any]:
    """The short requests' widest gap between tokens (`_stall_ms`) while the long request ran, p95
    against max(2 x before, the TTFT budget: a frozen stream waits for a token like a first one);
    a short request that failed or stalled past its timeout during it fails the rung."""
    bg = point.extra["background"]
    name = f"short_traffic_isolated[{point.label}]"
    during = bg["during_stall_ms_values"]
    before_p95 = bg["before"]["stall_ms"].get("p95")
    budget = float(params.get("ttft_p95_ms") or 0)  # a frozen stream is a wait for a token like a first one
    limit = max(2.0 * before_p95 if before_p95 else 0.0, budget)
    failed = bg["during"]["failed"]
    if not limit:
        return verdict(
            name,
            FAIL if failed else INSUFFICIENT_DATA,
            Message(NOTHING_TO_COMPARE, {"during": len(during), "failed": failed}),
            None,
            None,
            len(during) + failed,
        )
    what = Message(WIDEST_GAP, {"before": f"{before_p95 or 0:.1f}", "n": bg["before"]["n"]})
    judged = judge_percentile(name, during, 95, limit, what)
    if failed:
        return verdict(
            name,
            FAIL,
            Message(
                SHORT_FAILED,
                {
                    "failed": failed,
                    "timeout": f"{bg['timeout_s']:g}",
                    "errors": "; ".join(bg["during"]["errors"][:3]),
                    "detail": detail_message_of(judged),
                },
            ),
            judged["value"],
            limit,
            len(during) + failed,
            judged["interval"],
        )
    return judged


def _long_context_observed(
    points: list[LoadPoint],
    largest_ok: int | None,
    required: int,
    failed_rung: int | None,
    failure_error: str | None,
) -> dict[str, Any]:
    """The one-sentence summary of what the ladder saw, with its figures."""
    rungs: list[dict[str, Any]] = []
    for point in points:
        if not point.label.endswith("alone"):
            continue
        rung = int(point.extra.get("input_tokens_requested") or 0)
        bg = next((p.extra.get("background") for p in points if p.label == f"{rung_label(rung)} with_background"), None)
        rungs.append(
            {
                "rung": rung,
                "ttft_ms": point.ttft_ms.p50,
                "kv_tokens_per_request": point.extra.get("kv_tokens_per_request"),
                "served": (point.requests_failed or 0) == 0
                and (point.requests_completed or 0) > 0
                and not point.extra.get("truncated"),
                "short_ttft_p95_before_ms": bg["before"]["ttft_ms"].get("p95") if bg else None,
                "short_ttft_p95_during_ms": bg["during"]["ttft_ms"].get("p95") if bg else None,
                "short_tpot_p95_before_ms": bg["before"]["tpot_ms"].get("p95") if bg else None,
                "short_tpot_p95_during_ms": bg["during"]["tpot_ms"].get("p95") if bg else None,
                "short_stall_p95_before_ms": bg["before"]["stall_ms"].get("p95") if bg else None,
                "short_stall_p95_during_ms": bg["during"]["stall_ms"].get("p95") if bg else None,
                "short_during_n": bg["during"]["n"] if bg else None,
                "short_failed_during": bg["during"]["failed"] if bg else None,
            }
        )
    parts: list[Message] = []
    for item in rungs:
        if not item["served"]:
            continue
        short: str | Message = ""
        if item["short_during_n"] is not None:
            failed = item["short_failed_during"]
            short = Message(
                OBSERVED_SHORT_FAILED if failed else OBSERVED_SHORT,
                {
                    "ttft_before": ms_or_na(item["short_ttft_p95_before_ms"]),
                    "ttft_during": ms_or_na(item["short_ttft_p95_during_ms"]),
                    "tpot_before": ms_or_na(item["short_tpot_p95_before_ms"]),
                    "tpot_during": ms_or_na(item["short_tpot_p95_during_ms"]),
                    "gap_before": ms_or_na(item["short_stall_p95_before_ms"]),
                    "gap_during": ms_or_na(item["short_stall_p95_during_ms"]),
                    "n": item["short_during_n"],
                    **({"failed": failed} if failed else {}),
                },
            )
        kv = item["kv_tokens_per_request"]
        parts.append(
            Message(
                OBSERVED_RUNG_KV if kv is not None else OBSERVED_RUNG,
                {
                    "rung": rung_label(item["rung"]),
                    "ttft": ms_or_na(item["ttft_ms"]),
                    "short": short,
                    **({"kv": f"{kv:.0f}"} if kv is not None else {}),
                },
            )
        )
    clauses: list[Message] = [Message(OBSERVED_LARGEST, {"largest": largest_ok or 0, "required": required})]
    if failed_rung is not None:
        clauses.append(
            Message(OBSERVED_RUNG_FAILED_ERROR, {"rung": failed_rung, "error": Code(failure_error[:120])})
            if failure_error
            else Message(OBSERVED_RUNG_FAILED, {"rung": failed_rung})
        )
    line = Join(clauses + parts, CLAUSE_SEPARATOR)
    return {
        "line": str(line),
        "line_message": to_json(line),
        "largest_successful_rung": largest_ok,
        "required_tokens": required,
        "failed_rung": failed_rung,
        "failure_error": failure_error,
        "rungs": rungs,
    }


async def _short_traffic(
    session: Session,
    prompts: PromptFactory,
    params: dict[str, Any],
    stop: asyncio.Event,
    records: list[RequestRecord],
) -> None:
    """Closed-loop short requests until `stop`; each is bounded by the timeout, and one that stalls
    past it is recorded as a timeout failure (never cancelled away and dropped)."""
    concurrency = int(params.get("background_concurrency") or 4)
    bg_in = int(params.get("background_input_tokens") or 256)
    bg_out = int(params.get("background_output_tokens") or 32)
    timeout = float(params.get("background_timeout_s") or 60.0)
    counter = iter(range(10**9))

    async def worker() -> None:
        while not stop.is_set():
            index = next(counter)
            spec = session.spec(
                prompts.text(bg_in, seed=10_000 + index), bg_out, request_id=f"bg-{index}", tag="background"
            )
            record = RequestRecord()
            records.append(record)
            try:
                await asyncio.wait_for(session.client.send(spec, record), timeout)
            except asyncio.TimeoutError:
                record.error_class = "timeout"
                record.error = f"short request stalled past its {timeout:g} s timeout"
                record.end_time = time.perf_counter()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def _stall_ms(record: RequestRecord) -> float | None:
    """A decoding request's widest gap between two streamed chunks: a long prefill that is not
    chunked freezes every decode for its whole length, which shows here (TPOT averages the freeze
    away). New arrivals' TTFT during the long prefill is reported beside it, not judged: engines
    schedule running prefills first, chunked or not. None before two chunks arrived."""
    times = [t for t in ([record.first_token_time] if record.first_token_time else []) + record.chunk_times]
    gaps = [(b - a) * 1000.0 for a, b in zip(times, times[1:], strict=False) if b >= a]
    return max(gaps) if gaps else None


def _short_stats(records: list[RequestRecord]) -> dict[str, Any]:
    ok = [r for r in records if r.ok]
    return {
        "n": len(ok),
        "failed": len(records) - len(ok),
        "errors": sorted({(r.error or r.error_class or "")[:160] for r in records if not r.ok}),
        "ttft_ms": Stats.from_values([r.ttft_ms for r in ok]).__dict__,
        "tpot_ms": Stats.from_values([r.tpot_ms for r in ok]).__dict__,
        "stall_ms": Stats.from_values([_stall_ms(r) for r in ok]).__dict__,
    }


async def _kv_peak_once(session: Session, into: dict[str, float]) -> None:
    sample = await session.kv_now()
    for key in ("kv_usage_ratio", "kv_used_tokens"):
        if sample and sample.get(key) is not None:
            into[key] = max(into.get(key, 0.0), float(sample[key]))


async def _kv_peak(session: Session, done: asyncio.Event, into: dict[str, float]) -> None:
    """Poll the engine's KV gauges while the long request runs (the sampler's 1 s may miss it)."""
    while not done.is_set():
        sample = await session.kv_now()
        if sample is None:
            return
        for key in ("kv_usage_ratio", "kv_used_tokens"):
            if sample.get(key) is not None:
                into[key] = max(into.get(key, 0.0), float(sample[key]))
        try:
            await asyncio.wait_for(done.wait(), 0.1)
        except asyncio.TimeoutError:
            pass


async def _long_rung(
    session: Session,
    prompts: PromptFactory,
    rung: int,
    output_tokens: int,
    repeats: int,
    mode: str,
    params: dict[str, Any],
    reporter: Reporter,
    label: str,
    pct0: float,
    pct1: float,
) -> tuple[LoadPoint, LoadOutcome]:
    outcome = LoadOutcome(config=LoadConfig(mode="closed", concurrency=1, max_requests=repeats))
    outcome.run_start = session.time_zero
    stop_bg = asyncio.Event()
    bg_task = None
    short: list[RequestRecord] = []
    lead = float(params.get("background_lead_s") or 5.0)
    if mode == "with_background":
        bg_task = asyncio.ensure_future(_short_traffic(session, prompts, params, stop_bg, short))
        await reporter.ticking(label, pct0, pct0 + (pct1 - pct0) * 0.2, asyncio.sleep(lead), lead)
    before_kv = await session.kv_now() if mode == "alone" else None
    peak: dict[str, float] = {}
    done = asyncio.Event()
    peak_task = asyncio.ensure_future(_kv_peak(session, done, peak)) if before_kv is not None else None
    outcome.measure_start = time.perf_counter()
    try:
        for repeat in range(repeats):
            spec = session.spec(
                prompts.text(rung, seed=rung * 100 + repeat + (1 if mode != "alone" else 0)),
                output_tokens,
                request_id=f"long-{rung}-{mode}-{repeat}",
                tag=label,
            )
            record = RequestRecord()
            try:
                await reporter.ticking(
                    label, pct0, pct1, session.client.send(spec, record), expected_s=max(rung / 2000.0, 2.0)
                )
            finally:
                outcome.records.append(record)
    finally:
        outcome.measure_end = time.perf_counter()
        done.set()
        stop_bg.set()
        if peak_task is not None:
            await peak_task
            # one more look: a request shorter than the 0.1 s polling, on an engine that keeps its
            # cache after it (llama.cpp slots), still shows; an engine that frees it shows its baseline
            await _kv_peak_once(session, peak)
        if bg_task is not None:
            if reporter.cancelled():
                bg_task.cancel()
            # in-flight short requests finish or time out (counted as failures), never cancelled away
            await asyncio.gather(bg_task, return_exceptions=True)
    point = summarize(outcome, label=label)
    point.concurrency = 1
    point.extra["input_tokens_requested"] = rung
    point.extra["prompt_tokens_reported"] = [r.prompt_tokens for r in outcome.records]
    point.extra["errors"] = [r.error for r in outcome.records if r.error][:5]
    attach_engine_stats(
        point,
        session.metrics.recording,
        outcome.measure_start - session.time_zero,
        outcome.measure_end - session.time_zero + 1.0,
    )
    if before_kv is not None:
        point.extra["kv_tokens_per_request"] = _kv_delta_tokens(before_kv, peak, params.get("kv_capacity_tokens"))
        point.extra["kv_usage_ratio_before"] = before_kv.get("kv_usage_ratio")
        point.extra["kv_usage_ratio_peak"] = peak.get("kv_usage_ratio")
    if bg_task is not None:
        long_start, long_end = outcome.measure_start, outcome.measure_end
        concurrency = int(params.get("background_concurrency") or 4)
        # before: finished before the long request began, past the first round (sent all at once)
        before = [r for r in short[concurrency:] if (r.end_time or math.inf) <= long_start] or [
            r for r in short if (r.end_time or math.inf) <= long_start
        ]
        # during: in flight at some moment of the long request (waiting for a token or decoding)
        during = [r for r in short if r.send_time < long_end and (r.end_time or math.inf) > long_start]
        stats = {
            "requests": len(short),
            "timeout_s": float(params.get("background_timeout_s") or 60.0),
            "before": _short_stats(before),
            "during": _short_stats(during),
        }
        stats["during_stall_ms_values"] = [_stall_ms(r) for r in during if r.ok and _stall_ms(r) is not None]
        point.extra["background"] = stats
        point.extra["background_requests"] = len(short)
        point.extra["background_ttft_p95_before_ms"] = stats["before"]["ttft_ms"]["p95"]
        point.extra["background_ttft_p95_during_ms"] = stats["during"]["ttft_ms"]["p95"]
        point.extra["background_failed"] = sum(1 for r in short if not r.ok)
    return point, outcome


def _kv_delta_tokens(before: dict[str, float], peak: dict[str, float], capacity: Any) -> float | None:
    """KV tokens the long request took: the rise of the engine's token gauge, else of its usage
    ratio times the capacity (params.kv_capacity_tokens); None when neither is known."""
    if peak.get("kv_used_tokens") is not None and before.get("kv_used_tokens") is not None:
        return max(peak["kv_used_tokens"] - before["kv_used_tokens"], 0.0)
    if capacity and peak.get("kv_usage_ratio") is not None and before.get("kv_usage_ratio") is not None:
        return max(peak["kv_usage_ratio"] - before["kv_usage_ratio"], 0.0) * float(capacity)
    return None


SPEC = TestSpec.of(suite_row.TEST, run_long_context)
