"""Test 8, tenant isolation: its row of the suite."""

from __future__ import annotations

from benchmarks.suite.base import ValidationTest


def _(text: str) -> str:  # named `_` so `makemessages` collects the texts; translated where shown
    return text


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
)
