"""Test 8, tenant isolation: its row of the suite (its run: `benchmarks.harness.workloads.isolation`)."""

from __future__ import annotations

from typing import Any, Mapping

from benchmarks.harness.estimates import Load, closed_loop, request_seconds
from benchmarks.suite.base import CandidateFacts, RunFacts, ValidationTest
from benchmarks.suite.params import BUDGET_PARAMS, ParamSpec, budget_params, constraint_value
from selection.domain.messages import marked as _

# each parameter once, with the bounds the form, the dispatch and the run all check (`TEST.parse`)
PARAMS = (
    ParamSpec("tenant_a_rate", 2.0, _("Tenant A requests per second"), "requests/s", minimum=0.01),
    ParamSpec("tenant_a_input_tokens", 512, _("Tenant A input tokens per request"), "tokens", minimum=1),
    ParamSpec("tenant_a_output_tokens", 128, _("Tenant A output tokens per request"), "tokens", minimum=1),
    ParamSpec("tenant_b_concurrency", 4, _("Tenant B concurrent long requests"), "requests", minimum=1),
    ParamSpec("tenant_b_input_tokens", 32768, _("Tenant B input tokens per request"), "tokens", minimum=1),
    ParamSpec("tenant_b_output_tokens", 64, _("Tenant B output tokens per request"), "tokens", minimum=1),
    ParamSpec("alone_s", 30.0, _("Tenant A alone (s)"), "s", minimum=0.1),
    ParamSpec("flood_lead_s", 5.0, _("Tenant B's flood before tenant A is measured (s)"), "s"),
    ParamSpec("flood_s", 30.0, _("Tenant A under the flood (s)"), "s", minimum=0.1),
    ParamSpec("use_priority", False, _("Send the priority field (priority scheduling)"), ""),
    ParamSpec("tenant_a_priority", 0, _("Tenant A priority (lower first)"), ""),
    ParamSpec("tenant_b_priority", 10, _("Tenant B priority (lower first)"), ""),
    # none (empty) when the TTFT budget decides: the plan leaves it out of the judgement then
    ParamSpec("max_ttft_slowdown", 10.0, _("Largest allowed TTFT slowdown of tenant A (x)"), "x", optional=True),
    *BUDGET_PARAMS,
)


def estimate_isolation(params: Mapping[str, Any]) -> Load:
    """Tenant A alone at its rate, then tenant B's flood (its lead, then beside A)."""
    p = TEST.estimated(params)
    flood = p.flood_lead_s + p.flood_s
    a_seconds = request_seconds(params, output_key="tenant_a_output_tokens")
    concurrency = p.tenant_b_concurrency + max(p.tenant_a_rate * a_seconds, 1.0)
    a_requests = p.tenant_a_rate * (p.alone_s + p.flood_s)
    b_seconds = request_seconds(params, p.tenant_b_input_tokens, "tenant_b_output_tokens")
    b_requests = closed_loop(p.tenant_b_concurrency, flood, b_seconds)
    tokens = a_requests * (p.tenant_a_input_tokens + p.tenant_a_output_tokens)
    tokens += b_requests * (p.tenant_b_input_tokens + p.tenant_b_output_tokens)
    return Load(p.alone_s + flood, concurrency, a_requests + b_requests, tokens)


def plan_isolation(constraints: dict[str, Any] | None = None, facts: CandidateFacts | None = None) -> dict[str, Any]:
    tenants = max(int(constraint_value(constraints, "tenants", 2)), 2)
    rate = float(constraint_value(constraints, "request_rate", 4.0)) / tenants
    return {
        "tenant_a_rate": round(min(max(rate, 0.5), 50.0), 2),  # A's interactive requests per second (open loop)
        "tenant_a_input_tokens": min(int(constraint_value(constraints, "avg_input_tokens", 512)), 4096),
        "tenant_a_output_tokens": min(int(constraint_value(constraints, "avg_output_tokens", 128)), 256),
        "tenant_b_concurrency": min(max(int(constraint_value(constraints, "peak_concurrency", 16)) // 4, 2), 16),
        "tenant_b_input_tokens": min(int(constraint_value(constraints, "max_input_tokens", 32768)), 32768),
        "tenant_b_output_tokens": 64,
        "alone_s": 30.0,  # A alone: its baseline
        "flood_lead_s": 5.0,  # B floods this long before A's measured window
        "flood_s": 30.0,  # A under B's flood
        # send the `priority` field (vLLM --scheduling-policy priority: lower first) when the candidate's
        # launch flags enable priority scheduling (validate --priority from the command line)
        "use_priority": bool(facts and facts.priority_scheduling),
        "tenant_a_priority": 0,
        "tenant_b_priority": 10,
        # A's TTFT p95 under the flood over alone; by default judged only without a TTFT budget (even a
        # priority scheduler slows A down while B's long prefills share each step: the budget decides)
        "max_ttft_slowdown": None if constraint_value(constraints, "ttft_p95_ms", None) is not None else 10.0,
        **budget_params(constraints),
    }


def indicators(run: RunFacts) -> dict[str, float]:
    """isolation_ttft_p95_ms = tenant A's TTFT p95 under tenant B's flood, only when the flood loaded
    the engine and the p95 came from enough requests to judge (its budget verdict was neither
    insufficient data nor not exercised)."""
    figures = run.metadata.get("isolation") or {}
    judged = run.verdict("ttft_p95_within_budget[tenant_a_flood]")
    seen = judged is None or judged.get("status") not in ("insufficient_data", "not_exercised")
    if figures.get("flood_exercised") and figures.get("a_ttft_p95_flood_ms") is not None and seen:
        return {"isolation_ttft_p95_ms": float(figures["a_ttft_p95_flood_ms"])}
    return {}


TEST = ValidationTest(
    "isolation",
    8,
    _("Tenant isolation"),
    _(
        "Tenant A sends short interactive requests at its rate, alone and then while tenant B floods the engine "
        "with long-context requests (each tenant with its own `user`, and the `priority` field where the "
        "launch flags enable priority scheduling): A's TTFT and TPOT p95 alone and under the flood, with "
        "sample sizes and bootstrap intervals. Passes when A stays within the budget under the flood."
    ),
    _("tenant A's latency alone and under another tenant's long-context flood"),
    ("tenant_isolation", "kv_usage"),
    feeds=("scheduling",),
    # about 20 s on the simulator: tenant A at 4 req/s alone, then beside eight 32K-token requests
    demo={"alone_s": 6.0, "flood_lead_s": 1.0, "flood_s": 6.0, "tenant_a_output_tokens": 32},
    indicators=indicators,
    figure_points={"isolation_ttft_p95_ms": ("tenant_a_flood", "tenant_b_flood")},
    cli={"priority": "use_priority"},
    params=PARAMS,
    plan=plan_isolation,
    estimate=estimate_isolation,
)
