"""A production trace replayed on its own clock (no number: run from `validate --trace`): its row of the suite."""

from __future__ import annotations

from benchmarks.suite.base import ValidationTest


def _(text: str) -> str:  # named `_` so `makemessages` collects the texts; translated where shown
    return text


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
)
