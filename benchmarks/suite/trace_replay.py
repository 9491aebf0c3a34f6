"""A production trace replayed on its own clock (no number: run from `validate --trace`): its row of the
suite (its run: `benchmarks.harness.workloads.replay`)."""

from __future__ import annotations

from typing import Any, Mapping

from benchmarks.harness.estimates import Load, generic
from benchmarks.suite.base import CandidateFacts, ValidationTest
from benchmarks.suite.params import BUDGET_PARAMS, ParamSpec, budget_params
from selection.domain.messages import marked as _

PARAMS = (
    ParamSpec("trace", None, _("Trace file"), ""),
    ParamSpec("format", None, _("Trace format"), ""),
    ParamSpec("speedup", 1.0, _("Clock speed-up (x)"), "x"),
    ParamSpec("sample", None, _("Requests replayed (empty: all)"), "requests"),
    *BUDGET_PARAMS,
)


def estimate_trace_replay(params: Mapping[str, Any]) -> Load | None:
    """Unknown before the trace is read: its usual phase names, if any (`estimates.generic`)."""
    return generic(params)


def plan_trace_replay(constraints: dict[str, Any] | None = None, facts: CandidateFacts | None = None) -> dict[str, Any]:
    return {
        "trace": None,  # the trace file (validate --trace FILE); its format is detected unless given
        "format": None,
        "speedup": 1.0,  # 2: the same traffic in half the time (twice the rate)
        "sample": None,  # replay the first N requests only
        **budget_params(constraints),
    }


TEST = ValidationTest(
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
    runnable=False,  # from `validate --trace FILE`; the worker takes no file paths,
    params=PARAMS,
    plan=plan_trace_replay,
    estimate=estimate_trace_replay,
)
