"""Test 7, model switch and rollback: its row of the suite (its run: `benchmarks.harness.workloads.model_switch`)."""

from __future__ import annotations

from typing import Any, Mapping

from benchmarks.harness.estimates import Load, number, steady_load
from benchmarks.suite.base import CandidateFacts, ValidationTest
from benchmarks.suite.params import BUDGET_PARAMS, ParamSpec, budget_params, constraint_value
from selection.domain.messages import marked as _

PARAMS = (
    ParamSpec("concurrency", 8, _("Concurrent requests"), "requests"),
    ParamSpec("input_tokens", 512, _("Input tokens per request"), "tokens"),
    ParamSpec("prefix_tokens", 256, _("Shared prefix (tokens)"), "tokens"),
    ParamSpec("output_tokens", 128, _("Output tokens per request"), "tokens"),
    ParamSpec("before_s", 60.0, _("Steady load before the switch (s)"), "s"),
    ParamSpec("switched_s", 60.0, _("Load on the new version (s)"), "s"),
    ParamSpec("after_s", 60.0, _("Load after the rollback (s)"), "s"),
    ParamSpec("switch_mode", "", _("How to switch (endpoint, or restart on the simulator)"), ""),
    ParamSpec("switch_endpoint", "", _("Endpoint of the new version (URL)"), ""),
    ParamSpec("switch_model", "", _("Served model name on the new endpoint"), ""),
    ParamSpec("switch_metrics_url", "", _("Metrics URL of the new endpoint"), ""),
    ParamSpec("restart_config", {}, _("Simulator settings of the new version (JSON)"), ""),
    ParamSpec("restart_downtime_s", None, _("Simulator restart downtime (s)"), "s"),
    ParamSpec("restart_graceful", None, _("Simulator restart is graceful (true/false)"), ""),
    ParamSpec("recovery_requests", 10, _("Good requests in a row that mean recovered"), "requests"),
    ParamSpec("max_switch_errors", 0, _("Failed requests allowed across the switch"), "requests"),
    ParamSpec("max_recovery_s", 30.0, _("Longest allowed time back within the budget (s)"), "s"),
    *BUDGET_PARAMS,
)


def estimate_model_switch(params: Mapping[str, Any]) -> Load:
    """Steady load before the switch, on the new version and after the rollback."""
    return steady_load(params, sum(number(params, key) for key in ("before_s", "switched_s", "after_s")))


def plan_model_switch(constraints: dict[str, Any] | None = None, facts: CandidateFacts | None = None) -> dict[str, Any]:
    avg_input = int(constraint_value(constraints, "avg_input_tokens", 512))
    sharing = float(constraint_value(constraints, "prefix_sharing_ratio", 0.5))
    return {
        "concurrency": min(
            max(int(constraint_value(constraints, "peak_concurrency", 16)) // 2, 1), 64
        ),  # steady, not peak
        "input_tokens": avg_input,
        # a shared system prompt, so the cache-hit drop at the switch shows (a new KV format starts cold)
        "prefix_tokens": max(min(int(avg_input * sharing), avg_input - 1), 0),
        "output_tokens": min(int(constraint_value(constraints, "avg_output_tokens", 128)), 256),
        "before_s": 60.0,  # steady load on the current recipe
        "switched_s": 60.0,  # on the new recipe (endpoint B, or after the restart)
        "after_s": 60.0,  # after the rollback
        # endpoint: traffic moves to params.switch_endpoint and back (two deployments behind your
        # gateway); restart: the simulator's POST /admin/restart. None: endpoint when one is given,
        # else restart on the simulator
        "switch_mode": "",
        "switch_endpoint": "",
        "switch_model": "",  # the served model name on switch_endpoint (default: the candidate's)
        "switch_metrics_url": "",  # default: <switch_endpoint>/metrics
        "restart_config": {},  # simulator settings of the new version, e.g. {"kv_bytes_per_token": 262144}
        "restart_downtime_s": None,  # None: the simulator's own setting
        "restart_graceful": None,
        "recovery_requests": 10,  # the budget holds again at the first run of this many good requests
        "max_switch_errors": 0,
        "max_recovery_s": 30.0,
        **budget_params(constraints),
    }


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
    params=PARAMS,
    plan=plan_model_switch,
    estimate=estimate_model_switch,
)
