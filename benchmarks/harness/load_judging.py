"""Whether the client kept the load it was asked for and timed it truly, and why not: held
concurrency (time-weighted requests in flight, from each request's send to its last byte on the one
perf_counter clock, so it can never exceed what was requested), the peak, the sending rate, reads
that held tokens more than one inter-token gap apart, and the client-bound reasons (in English and
as messages pages render in their language)."""

from __future__ import annotations

import math
from typing import Any

from benchmarks.harness.load_config import LoadConfig, LoadOutcome
from benchmarks.harness.request_record import RequestRecord
from selection.domain.messages import Message
from selection.domain.messages import marked as _

CLIENT_PROCESS = _("client process")
CLIENT_WORKER = _("client worker %(index)s of %(count)s")
CPU_BOUND = _(
    "%(who)s needed %(busy)s of a core (ran %(cpu)s, waited for one %(waited)s): the client, not the engine, set "
    "the pace"
)
CONCURRENCY_NOT_HELD = _("held %(held)s requests in flight on average, %(expected)s requested")
SENDS_BEHIND = _("%(late)s of sends were more than %(ms)s ms behind schedule")
SENDS_AFTER = _("%(late)s of sends were more than %(ms)s ms after the previous response ended")
LATE_READS = _(
    "%(late)s of tokens were read together with tokens sent one or more inter-token gaps (%(gap)s ms) earlier "
    "while the event loop lagged (p99 %(lag)s ms): their TTFT/ITL are stamped late, by up to %(max)s ms"
)
RATE_NOT_HELD = _("sent %(rate)s requests/s, %(requested)s requested")
LOOP_LAG = _("event-loop lag p99 %(lag)s ms: client timings are unreliable")


def client_bound(outcome: LoadOutcome, template: str, params: dict[str, Any] | None = None) -> None:
    """Record why the client, not the engine, may have set the pace: in English and as a message."""
    message = Message(template, params)
    outcome.client_bound_reasons.append(str(message))
    outcome.client_bound_messages.append(message)


# Thresholds for the client-bound flag.
CONCURRENCY_KEPT_FRACTION = 0.95
RATE_KEPT_FRACTION = 0.95
LATE_SEND_MS = 10.0
LATE_FRACTION = 0.05
LOOP_LAG_P99_MS = 20.0
CPU_BUSY_FRACTION = 0.90  # of one core, per client process (running or waiting to run)
LATE_READ_FRACTION = 0.01  # of token events that shared a read with tokens more than one gap apart
PACED_GAP_MS = 1.0  # a stream whose median gap between reads is at least this streams token by token


def kernel_clock(clock: dict[str, Any] | None) -> bool:
    """Response times from kernel stamps: a few unstamped reads (stamping switching on just after
    the first packets) do not make the run's times loop-dependent; many do."""
    if not clock or not str(clock.get("receive_clock", "")).startswith("kernel"):
        return False
    return (clock.get("unstamped_reads") or 0) <= max(5, 0.01 * (clock.get("reads") or 0))


def held_window_end(outcome: "LoadOutcome") -> float:
    """The end of the window held concurrency is averaged over: while the load still issued
    requests. The drain after the deadline (and, for a fixed request count, the tail after the last
    send) has workers that may not send again, so counting it would flag a client that kept the
    load as one that did not."""
    end = outcome.load_end or outcome.measure_end
    if outcome.config.max_requests is not None and outcome.config.duration_s is None:
        sends = [r.send_time for r in outcome.records if r.send_time > 0]
        if sends:
            end = min(end, max(sends))
    return min(end, outcome.measure_end) if outcome.measure_end else end


def sending_rate(sends: int, outcome: "LoadOutcome") -> float | None:
    """Sends per second while the load issued requests: the drain after the deadline sends nothing,
    so counting it would make a slow engine look like a client that fell behind."""
    window = held_window_end(outcome) - outcome.measure_start
    return sends / window if window > 0 else None


def held_concurrency(records: list[RequestRecord], start: float, end: float) -> float | None:
    """Requests in flight, time-weighted over [start, end]: each from its send to its last byte.

    Both ends are perf_counter times of the same clock (the send just before the socket write, the
    end the kernel's receive stamp of the last byte), and a closed-loop worker sends its next
    request only after its previous one ended, so this never exceeds the concurrency asked for.
    """
    if end <= start:
        return None
    area = 0.0
    for record in records:
        if record.send_time <= 0:
            continue  # never sent (no connection): nothing was in flight
        stop = record.end_time if record.end_time is not None else end
        if stop > start and record.send_time < end:
            area += min(stop, end) - max(record.send_time, start)
    return area / (end - start)


def peak_concurrency(records: list[RequestRecord]) -> int:
    """The most requests in flight at once, from the same send and end times."""
    edges = sorted(
        [(r.send_time, 1) for r in records if r.send_time > 0]
        + [(r.end_time, -1) for r in records if r.send_time > 0 and r.end_time is not None],
        key=lambda edge: (edge[0], edge[1]),
    )
    peak = current = 0
    for _at, step in edges:
        current += step
        peak = max(peak, current)
    return peak


def late_reads(records: list[RequestRecord]) -> tuple[float | None, float | None, float | None]:
    """(fraction of token events that shared a read with earlier tokens of a paced stream, the most
    such a read may have stamped its earliest token late, ms, the streams' median gap between tokens, ms).

    A read is stamped with its newest packet's arrival. A stream the engine writes token by token
    (its tokens at least PACED_GAP_MS apart on average) puts one token in each read while the
    client keeps up; a read holding k of its tokens means the tokens queued, and its first token
    arrived about (k - 1) gaps before the stamp. O(1) Python work per record (set and len in C).
    """
    shared = total = 0
    worst = 0.0
    paced_gaps: list[float] = []
    for record in records:
        times = record.chunk_times
        count = len(times)
        if count < 3:
            continue
        reads = len(set(times))
        if reads < 3:
            continue  # the whole stream in one or two reads: written at once, not paced
        gap_ms = (times[-1] - times[0]) * 1000.0 / (count - 1)
        if gap_ms < PACED_GAP_MS:
            continue
        paced_gaps.append(gap_ms)
        total += count
        if reads < count:
            shared += count - reads
            run = longest = 1
            for previous, current in zip(times, times[1:], strict=False):
                run = run + 1 if current == previous else 1
                longest = max(longest, run)
            worst = max(worst, (longest - 1) * gap_ms)
    if not total:
        return None, None, None
    paced_gaps.sort()
    return shared / total, worst, paced_gaps[len(paced_gaps) // 2]


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(int(math.ceil(q / 100.0 * len(ordered))) - 1, len(ordered) - 1)] if ordered else None


def judge(outcome: LoadOutcome, kernel_clock: bool = False) -> None:
    """Decide whether the client kept the requested load and timed it truly; say why not.

    `kernel_clock`: response times came from the kernel's receive stamps, so a lagging loop did
    not skew them by itself; what it did to the load (late sends, concurrency not refilled, reads
    of several tokens stamped with the last one's arrival, a saturated core) is judged by the
    other checks.
    """
    config = outcome.config
    reasons = outcome.client_bound_reasons
    lateness, lags = outcome.send_lateness_ms, outcome.loop_lags_ms
    outcome.loop_lag_ms_p99 = _percentile(lags, 99)
    outcome.late_read_fraction, outcome.late_read_max_ms, gap_ms = late_reads(outcome.records)
    if lateness:
        outcome.late_sends_fraction = sum(1 for x in lateness if x > LATE_SEND_MS) / len(lateness)
        outcome.send_lateness_ms_p99 = _percentile(lateness, 99)
    if outcome.cancelled:
        return
    for index, busy in enumerate(outcome.busy_fractions):
        if busy > CPU_BUSY_FRACTION:
            count = len(outcome.busy_fractions)
            who = (
                Message(CLIENT_PROCESS) if count == 1 else Message(CLIENT_WORKER, {"index": index + 1, "count": count})
            )
            cpu = outcome.cpu_fractions[index] if index < len(outcome.cpu_fractions) else busy
            figures = {"busy": f"{busy:.0%}", "cpu": f"{cpu:.0%}", "waited": f"{max(busy - cpu, 0):.0%}"}
            client_bound(outcome, CPU_BOUND, {"who": who, **figures})
    if config.mode == "closed" and outcome.achieved_concurrency is not None and config.concurrency:
        expected = config.concurrency
        if config.max_requests is not None:  # a short request-count run cannot hold more than it sends
            expected = min(expected, config.max_requests)
        if outcome.achieved_concurrency < CONCURRENCY_KEPT_FRACTION * expected and config.ramp_up_s == 0:
            held = f"{outcome.achieved_concurrency:.1f}"
            client_bound(outcome, CONCURRENCY_NOT_HELD, {"held": held, "expected": expected})
    late = outcome.late_sends_fraction
    if late is not None and late > LATE_FRACTION and not (config.mode == "open" and config.max_concurrency):
        template = SENDS_BEHIND if config.mode == "open" else SENDS_AFTER
        client_bound(outcome, template, {"late": f"{late:.0%}", "ms": f"{LATE_SEND_MS:.0f}"})
    # A read of several paced tokens is the client's doing only when its loop fell more than a gap
    # behind; a server (or a shared host) that sent them in a burst is not.
    loop_late = outcome.loop_lag_ms_p99 is not None and gap_ms is not None and outcome.loop_lag_ms_p99 >= gap_ms
    if outcome.late_read_fraction is not None and outcome.late_read_fraction > LATE_READ_FRACTION and loop_late:
        figures = {"late": f"{outcome.late_read_fraction:.0%}", "gap": f"{gap_ms:.0f}"}
        figures.update(lag=f"{outcome.loop_lag_ms_p99:.0f}", max=f"{outcome.late_read_max_ms:.0f}")
        client_bound(outcome, LATE_READS, figures)
    if config.mode == "open":
        sends = len(outcome.records)
        if (
            outcome.achieved_rate is not None
            and config.rate
            and config.duration_s
            and config.max_requests is None
            and sends >= 20
            and outcome.achieved_rate < RATE_KEPT_FRACTION * config.rate * _expected_rate_fraction(config, sends)
        ):
            client_bound(
                outcome, RATE_NOT_HELD, {"rate": f"{outcome.achieved_rate:.1f}", "requested": f"{config.rate:g}"}
            )
    if outcome.loop_lag_ms_p99 is not None and outcome.loop_lag_ms_p99 > LOOP_LAG_P99_MS and not kernel_clock:
        client_bound(outcome, LOOP_LAG, {"lag": f"{outcome.loop_lag_ms_p99:.1f}"})
    outcome.client_bound = bool(reasons)


def _expected_rate_fraction(config: LoadConfig, count: int) -> float:
    """Poisson counts vary: allow 3 standard deviations below the requested count."""
    return max(1.0 - 3.0 / math.sqrt(max(count, 1)), 0.5)
