"""Judging the overload test (test 6): which step is still sustainable, what the engine did past
it, and how long it took to come back (docs/domain.md, "Overload and rejection").

The articles call the concurrency limit and the rejection policy "the key to preventing OOM":
past its capacity an engine should refuse work (429/503) or queue it with a bounded wait, never
run out of memory, crash, or let latency grow without bound. These functions read the requests of
each load step and the engine's waiting/KV series; they are pure (no I/O, no Django) so the
workload and its tests share one definition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from benchmarks.harness.request_record import RequestRecord
from benchmarks.suite.overload import BEHAVIOUR_NAMES, COLLAPSE, CRASH, OOM, QUEUEING, REJECTION
from benchmarks.verdicts import FAIL, INCONCLUSIVE, INSUFFICIENT_DATA, NOT_EXERCISED, PASS, reasons_of
from selection.domain.messages import NAME_SEPARATOR, Message, pgettext
from selection.domain.messages import marked as _

# What the engine did past the sustainable load, best first, with scoring's `overload_handling`
# level (selection.domain.scoring: rejection 1.0, queueing 0.7, latency collapse 0.3, OOM or crash 0.0).
HANDLING_LEVEL = {REJECTION: 1.0, QUEUEING: 0.7, COLLAPSE: 0.3, OOM: 0.0, CRASH: 0.0}
GRACEFUL = (REJECTION, QUEUEING)
REJECT_STATUSES = (429, 503)  # "too many requests" / "overloaded": the engine refused the work
# a 503 saying so is the engine gone, not a refusal (vLLM: EngineDeadError, "EngineCore encountered an issue")
CRASH_WORDS = ("crash", "died", "dead", "enginecore", "engine core")
# Latency collapse: a step's TTFT p95 above this multiple of the budget (or, without one, of the
# first step's TTFT p95), or, open loop, completions below COMPLETION_KEPT of the offered rate
# with nothing rejected (the queue grows without bound), or throughput below THROUGHPUT_KEPT of
# the best step's (the engine does less work under more load).
COLLAPSE_FACTOR = 5.0
COMPLETION_KEPT = 0.8
THROUGHPUT_KEPT = 0.5
RECOVERY_WINDOW = 5  # consecutive requests whose median TTFT must be back at the baseline
# Latency is back within this fraction above the first step's TTFT p95: that baseline is one short
# step's, and a steady engine's TTFT moves by a few percent with the host (seen: p50 23.5 ms against a
# first-step p95 of 25.1 ms on the simulator); what an overload leaves behind, a queue, is multiples.
RECOVERY_LATENCY_TOLERANCE = 0.2
# A series (waiting, KV) is still raised only when this many consecutive samples stand above its
# baseline: at the target load a full batch puts each wave of arrivals in the queue until the next
# scheduler step, which a sample catches now and then on its own (simulator at c=8 with 8 slots:
# 5 of 42 samples at 1 or 7 waiting, never two in a row); what an overload leaves, a queue that
# drains, stands in sample after sample.
RECOVERY_SERIES_RUN = 2
STATUS_ORDER = (FAIL, INCONCLUSIVE, INSUFFICIENT_DATA, PASS)  # worst first

# what `classify` found, one message a reason
NEVER_PASSED = _("every step up to the top met the budget: the load never passed the sustainable level")
DEAD_ENGINE = _("%(n)s requests met a dead engine (connection refused or dropped, or 503 saying it died)")
DEAD_ENGINE_STOPPED = _(
    "%(n)s requests met a dead engine (connection refused or dropped, or 503 saying it died); the load stopped "
    "early: %(why)s"
)
OOM_FAILURES = _("%(n)s requests failed with out-of-memory errors")
TTFT_COLLAPSED = _("at %(level)s: TTFT p95 %(ttft)s ms, over %(factor)sx the reference %(reference)s ms")
QUEUE_GREW = _(
    "at %(level)s: completed %(share)s of the offered requests and rejected none: the queue grew without bound"
)
THROUGHPUT_FELL = _("at %(level)s: throughput %(throughput)s req/s, under half the best step's")
REFUSED = _("%(n)s requests refused with HTTP 429/503, the others served in bounded time")
BOUNDED = _("no request failed; latency rose past the budget but stayed bounded")
BOUNDED_WAITING = _(
    "no request failed; latency rose past the budget but stayed bounded (up to %(waiting)s requests waiting)"
)
# what `judge_recovery` says
NOTHING_TO_RECOVER = _("no overload happened: nothing to recover from")
CRASHED = _("the engine crashed: it did not come back")
NO_STEP_DOWN = _("no step back down ran after the overload")
FEW_RECOVERY_REQUESTS = _("%(n)s requests in the recovery step")
RECOVERED = _("back to the first step's level %(seconds)s s after the overload ended (%(parts)s)")
PART_SECONDS = _("%(part)s %(seconds)s s")
NOT_BACK = _("not back to the first step's level (%(lagging)s) by the end of the recovery step")
LOWEST_MEDIAN = _(
    "%(detail)s; lowest %(window)s-request median TTFT %(median)s ms vs the first step's p95 %(baseline)s ms "
    "(+%(tolerance)s allowed)"
)
RECOVERY_CLIENT_BOUND = _("%(detail)s; client-bound, so the latency is not the engine's alone: %(reasons)s")
# what came back to its level (`recovery_time`'s parts), by name; the English is the part's key
PART_NAMES = {
    "latency": pgettext("overload recovery part", "latency"),
    "waiting": pgettext("overload recovery part", "waiting"),
    "kv_usage_ratio": pgettext("overload recovery part", "kv_usage_ratio"),
}


def behaviour_name(behaviour: str) -> Message | str:
    """A behaviour by name in a sentence (its English name is its id)."""
    return BEHAVIOUR_NAMES.get(behaviour, behaviour)


def part_name(part: str) -> Message | str:
    return PART_NAMES.get(part, part)


def failure_kinds(records: Iterable[RequestRecord]) -> dict[str, int]:
    """Failed requests by what they say about the engine: rejected (HTTP 429/503), oom, crash
    (connection refused or dropped, or a 503 saying the engine died), other."""
    kinds = {"rejected": 0, "oom": 0, "crash": 0, "other": 0}
    for record in records:
        if record.ok or record.aborted or record.error_class == "cancelled":
            continue
        text = (record.error or "").lower()
        if record.error_class == "oom":
            kinds["oom"] += 1
        elif record.error_class in ("connect", "disconnect") or (
            record.http_status == 503 and any(word in text for word in CRASH_WORDS)
        ):
            kinds["crash"] += 1
        elif record.http_status in REJECT_STATUSES:
            kinds["rejected"] += 1
        else:
            kinds["other"] += 1
    return kinds


def worst_status(statuses: Iterable[str]) -> str:
    """The worst of several statuses (fail, then inconclusive, then insufficient data, then pass)."""
    present = set(statuses)
    return next((status for status in STATUS_ORDER if status in present), INSUFFICIENT_DATA)


@dataclass
class Step:
    """One load step's figures, as the judging needs them."""

    level: float  # concurrency (closed loop) or requests/s (open loop)
    direction: str  # "up" or "down"
    status: str  # the step's budget status: pass / fail / inconclusive / insufficient_data
    requests: int  # finished requests (ok + failed)
    failures: dict[str, int] = field(default_factory=dict)
    ttft_p95_ms: float | None = None
    throughput: float | None = None  # completed requests per second
    completion_ratio: float | None = None  # open loop: completions / offered requests
    waiting_max: float | None = None
    stopped_early: str | Message | None = None  # why the load stopped early (a message where the runner wrote one)


def sustainable_level(steps: Sequence[Step]) -> float | None:
    """The highest up-step level that met the budget, every lower step meeting it too (a pass
    above a failed step is noise, not capacity). None when the first step failed to."""
    best = None
    for step in steps:
        if step.direction != "up":
            continue
        if step.status != PASS:
            break
        best = step.level
    return best


def classify(steps: Sequence[Step], latency_reference_ms: float | None) -> tuple[str | None, list[Message]]:
    """What the engine did on the up-steps past the sustainable one: (behaviour, reasons as messages), the
    worst of crash > oom > collapse > rejection > queueing. (None, [...]) when no step was past it."""
    sustainable = sustainable_level(steps)
    up = [step for step in steps if step.direction == "up"]
    past = [step for step in up if sustainable is None or step.level > sustainable]
    if not past:
        return None, [Message(NEVER_PASSED)]
    reasons: list[Message] = []
    totals = {kind: sum(step.failures.get(kind, 0) for step in past) for kind in ("rejected", "oom", "crash")}
    gone = [step for step in past if step.stopped_early]
    if totals["crash"] or gone:
        reasons.append(
            Message(DEAD_ENGINE_STOPPED, {"n": totals["crash"], "why": gone[0].stopped_early})
            if gone
            else Message(DEAD_ENGINE, {"n": totals["crash"]})
        )
        return CRASH, reasons
    if totals["oom"]:
        reasons.append(Message(OOM_FAILURES, {"n": totals["oom"]}))
        return OOM, reasons
    best_throughput = max((step.throughput or 0.0) for step in up) if up else 0.0
    for step in past:
        where = f"{step.level:g}"
        if (
            latency_reference_ms
            and step.ttft_p95_ms is not None
            and step.ttft_p95_ms > COLLAPSE_FACTOR * latency_reference_ms
        ):
            figures = {"ttft": f"{step.ttft_p95_ms:.0f}", "factor": f"{COLLAPSE_FACTOR:g}"}
            reasons.append(
                Message(TTFT_COLLAPSED, {"level": where, **figures, "reference": f"{latency_reference_ms:.0f}"})
            )
        if (
            step.completion_ratio is not None
            and step.completion_ratio < COMPLETION_KEPT
            and not step.failures.get("rejected")
        ):
            reasons.append(Message(QUEUE_GREW, {"level": where, "share": f"{step.completion_ratio:.0%}"}))
        if best_throughput and step.throughput is not None and step.throughput < THROUGHPUT_KEPT * best_throughput:
            reasons.append(Message(THROUGHPUT_FELL, {"level": where, "throughput": f"{step.throughput:.1f}"}))
    if reasons:
        return COLLAPSE, reasons
    if totals["rejected"]:
        return REJECTION, [Message(REFUSED, {"n": totals["rejected"]})]
    waiting = max((step.waiting_max or 0.0) for step in past)
    return QUEUEING, [Message(BOUNDED_WAITING, {"waiting": f"{waiting:g}"}) if waiting else Message(BOUNDED)]


def recovery_time(
    load_end: float,
    records: Sequence[RequestRecord],
    baseline_ttft_ms: float | None,
    series: dict[str, list[list[float]]],
    baselines: dict[str, float],
    tolerances: dict[str, float],
    until: float,
    time_zero: float = 0.0,
) -> dict[str, Any]:
    """Seconds from the end of the overload (`load_end`) until latency, and each engine series in
    `baselines` (waiting, KV usage), were back at the first step's level, on the session's clock.

    Latency is back when the median TTFT of RECOVERY_WINDOW consecutive requests of the recovery
    step is at most the baseline TTFT p95 plus RECOVERY_LATENCY_TOLERANCE (at the first token of the
    window's first such request; `latency_median_ms` is the lowest such median seen; record
    times are perf_counter times, `time_zero` maps them onto the series' clock); a
    series is back at its first sample within baseline + tolerance from which no later
    RECOVERY_SERIES_RUN samples in a row, up to `until`, stand above it. `recovered_s` is the latest
    of these, None when one never came back."""
    parts: dict[str, float | None] = {}
    lowest_median = None
    ok = sorted((r for r in records if r.ok and r.ttft_ms is not None), key=lambda r: r.send_time)
    if baseline_ttft_ms is not None:
        parts["latency"] = None
        limit_ms = baseline_ttft_ms * (1.0 + RECOVERY_LATENCY_TOLERANCE)
        for index in range(0, max(len(ok) - RECOVERY_WINDOW + 1, 0)):
            window = ok[index : index + RECOVERY_WINDOW]
            median = sorted(r.ttft_ms for r in window)[RECOVERY_WINDOW // 2]
            lowest_median = median if lowest_median is None else min(lowest_median, median)
            if median <= limit_ms:
                first = next(r for r in window if r.ttft_ms <= limit_ms)
                parts["latency"] = max(first.send_time - time_zero + first.ttft_ms / 1000.0 - load_end, 0.0)
                break
    for name, base in baselines.items():
        samples = [(t, v) for t, v in series.get(name, []) if load_end <= t <= until]
        if not samples:
            continue
        limit = base + tolerances.get(name, 0.0)
        back, above = None, 0
        for t, value in reversed(samples):
            above = above + 1 if value > limit else 0
            if above >= RECOVERY_SERIES_RUN:
                break
            if not above:
                back = t
        parts[name] = None if back is None else max(back - load_end, 0.0)
    values = list(parts.values())
    recovered = None if not values or any(v is None for v in values) else max(values)  # type: ignore[type-var]
    return {"recovered_s": recovered, "parts_s": parts, "latency_median_ms": lowest_median}


def judge_recovery(
    behaviour: str | None,
    recovery: dict[str, Any] | None,
    n_recovery: int,
    bound_s: float,
    client_bound_reasons: Sequence[Any] = (),
) -> tuple[str, Message]:
    """The recovery verdict's status and detail (a message) from `recovery_time`'s answer (with its
    `baseline`). A latency that never came back while the client was bound (in the first step, which
    set the baseline, or in the recovery step) is the client's lag as much as the engine's:
    inconclusive, with the reasons; the engine's own series (waiting, KV) decide regardless."""
    if behaviour is None:
        return NOT_EXERCISED, Message(NOTHING_TO_RECOVER)
    if behaviour == CRASH:
        return FAIL, Message(CRASHED)
    if recovery is None:
        return INSUFFICIENT_DATA, Message(NO_STEP_DOWN)
    if n_recovery < RECOVERY_WINDOW:
        return INSUFFICIENT_DATA, Message(FEW_RECOVERY_REQUESTS, {"n": n_recovery})
    recovered = recovery["recovered_s"]
    if recovered is not None:
        parts = NAME_SEPARATOR.join(
            Message(PART_SECONDS, {"part": part_name(k), "seconds": f"{v:.1f}"})
            for k, v in recovery["parts_s"].items()
            if v is not None
        )
        detail = Message(RECOVERED, {"seconds": f"{recovered:.1f}", "parts": parts})
        return (PASS if recovered <= bound_s else FAIL), detail
    lagging = [k for k, v in recovery["parts_s"].items() if v is None]
    detail = Message(NOT_BACK, {"lagging": NAME_SEPARATOR.join(part_name(k) for k in lagging)})
    baseline_ms = (recovery.get("baseline") or {}).get("ttft_p95_ms")
    if "latency" in lagging and recovery.get("latency_median_ms") is not None and baseline_ms is not None:
        figures = {"window": RECOVERY_WINDOW, "median": f"{recovery['latency_median_ms']:.1f}"}
        figures |= {"baseline": f"{baseline_ms:.1f}", "tolerance": f"{RECOVERY_LATENCY_TOLERANCE:.0%}"}
        detail = Message(LOWEST_MEDIAN, {"detail": detail, **figures})
    if lagging == ["latency"] and client_bound_reasons:
        return INCONCLUSIVE, Message(
            RECOVERY_CLIENT_BOUND, {"detail": detail, "reasons": reasons_of(list(client_bound_reasons))}
        )
    return FAIL, detail
