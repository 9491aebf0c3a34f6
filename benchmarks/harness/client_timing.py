"""The load client's timing, as the rest of kvselect needs it: which receive clock it stamps responses
with, and whether a measured point's client kept the load it was asked for.

A leaf with no imports beyond the result type: the system checks validate the receive-clock setting
and scoring judges a run's client-bound points with the same rules the harness's verdicts use,
without loading the load generator (its HTTP stack, event loop and telemetry) into the web and
scoring processes (tests/architecture/test_lean_imports.py).
"""

from __future__ import annotations

from typing import Literal

from benchmarks.result import LoadPoint

# When a response's bytes count as received: the kernel's stamp of their arrival (recvmsg, Linux;
# exact however busy the loop; the compiled reader makes it the cheaper clock too) or the time the
# loop read them in uvloop's own transport (late by the loop's queue, which grows with concurrency).
ReceiveClock = Literal["kernel", "user"]
RECEIVE_CLOCKS: tuple[ReceiveClock, ...] = ("kernel", "user")

CONCURRENCY_HELD = 0.95  # a closed loop held its load when it kept at least this share of its concurrency
LATE_SENDS_HELD = 0.01  # an open loop held its rate with fewer late sends than this share


def client_slack_ms(point: LoadPoint) -> float | None:
    """The most latency a client-bound client could have added to a request: its send lateness,
    event-loop lag and late reads (p99 / max as measured); None when none was measured."""
    extra = point.extra or {}
    figures = [extra.get(k) for k in ("send_lateness_ms_p99", "loop_lag_ms_p99", "late_read_max_ms")]
    known = [float(f) for f in figures if f is not None]
    return max(known) if known else None


def load_held(point: LoadPoint) -> bool:
    """Whether the client applied the load it was asked for: closed loop, at least 95 % of the
    concurrency held; open loop, under 1 % of sends late (an unset load counts as held)."""
    if point.concurrency:
        return (point.achieved_concurrency or 0) >= CONCURRENCY_HELD * point.concurrency
    return rate_held(point)


def rate_held(point: LoadPoint) -> bool:
    """Whether an open loop kept its request rate: under 1 % of its sends late (unmeasured: held)."""
    late = (point.extra or {}).get("late_sends_fraction")
    return late is None or late < LATE_SENDS_HELD
