"""Test 2, long context: its row of the suite."""

from __future__ import annotations

from benchmarks.suite.base import RunFacts, ValidationTest


def _(text: str) -> str:  # named `_` so `makemessages` collects the texts; translated where shown
    return text


def indicators(run: RunFacts) -> dict[str, float]:
    """max_context_rung_reached = the largest rung served at its full length (the ladder ends at the
    required input itself)."""
    rung = run.metadata.get("largest_successful_rung")
    return {"max_context_rung_reached": float(rung)} if rung else {}


TEST = ValidationTest(
    "long_context",
    2,
    _("Long context"),
    _(
        "A ladder of long inputs (16K to 128K tokens, capped at the model's maximum), alone and beside short "
        "traffic: TTFT and KV usage per rung and the largest rung that succeeds."
    ),
    _("TTFT and KV per rung of the context ladder, the largest rung served"),
    ("context_ladder", "kv_usage"),
    feeds=("context",),
    # the ladder is planned from the constraints: it ends at their max input (32768), which the
    # llama-cpp candidate (--max-model-len 40960) must serve too; short traffic runs beside each rung
    demo={
        "repeats": 1,
        "background_lead_s": 2.0,
        "background_concurrency": 16,
        "background_timeout_s": 30.0,
    },
    indicators=indicators,
    cli={"kv_capacity_tokens": "kv_capacity_tokens"},
)
