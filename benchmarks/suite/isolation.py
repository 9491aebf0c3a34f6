"""Test 8, tenant isolation: its row of the suite."""

from __future__ import annotations

from benchmarks.suite.base import RunFacts, ValidationTest


def _(text: str) -> str:  # named `_` so `makemessages` collects the texts; translated where shown
    return text


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
    cli={"priority": "use_priority"},
)
