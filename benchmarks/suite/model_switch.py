"""Test 7, model switch and rollback: its row of the suite."""

from __future__ import annotations

from benchmarks.suite.base import ValidationTest


def _(text: str) -> str:  # named `_` so `makemessages` collects the texts; translated where shown
    return text


# feeds no criterion: an operability check (can a switch be rolled back?), always optional
TEST = ValidationTest(
    "model_switch",
    7,
    _("Model switch and rollback"),
    _(
        "Steady load while the candidate switches to a second launch recipe (a new model or engine version: a "
        "second endpoint traffic moves to, or the simulator's restart) and back: errors and downtime, the time "
        "until the latency budget holds again after the switch and after the rollback, the KV-memory spike and "
        "the cache-hit drop. Passes when no request fails across the switch and the budget holds again within "
        "the allowed time both ways."
    ),
    _("errors, downtime and time back within the budget across a version switch and its rollback"),
    ("switch_timeline", "kv_usage"),
    # about 20 s on the simulator: a restart with twice the KV bytes per token, and back
    demo={
        "concurrency": 8,
        "before_s": 6.0,
        "switched_s": 6.0,
        "after_s": 6.0,
        "output_tokens": 32,
        "restart_config": {"kv_bytes_per_token": 262144},
    },
    cli={"concurrency": "concurrency", "switch_endpoint": "switch_endpoint", "switch_model": "switch_model"},
)
