"""Test 3, swap-out and recovery: its row of the suite."""

from __future__ import annotations

from benchmarks.suite.base import ValidationTest


def _(text: str) -> str:  # named `_` so `makemessages` collects the texts; translated where shown
    return text


TEST = ValidationTest(
    "swap_recovery",
    3,
    _("Swap-out and recovery"),
    _(
        "Multi-turn sessions, some idle between turns while other traffic fills the cache: resume TTFT "
        "against warm TTFT, and with greedy decoding the continuation must be identical."
    ),
    _("resume cost of idle sessions and the correctness of their continuation"),
    ("swap_phases", "kv_usage"),  # phases, not load levels: never drawn against concurrency
    feeds=("persistence",),
    # 20 idle sessions (percentiles need 20) with 4K-token histories; the pressure pushes 1.5x the
    # engine's KV pool through (its own cache_config_info), so the idle sessions are evicted
    demo={"sessions": 20, "warm_sessions": 20, "idle_s": 6.0, "parallel": 16, "pressure_concurrency": 16},
)
