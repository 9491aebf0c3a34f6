"""Test 2, long context: its row of the suite."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from benchmarks.charts import token_label
from benchmarks.suite.base import Figure, PointRow, RunFacts, ValidationTest
from selection.domain.claims import Claim


def _(text: str) -> str:  # named `_` so `makemessages` collects the texts; translated where shown
    return text


def indicators(run: RunFacts) -> dict[str, float]:
    """max_context_rung_reached = the largest rung served at its full length (the ladder ends at the
    required input itself)."""
    rung = run.metadata.get("largest_successful_rung")
    return {"max_context_rung_reached": float(rung)} if rung else {}


def figures(points: Sequence[PointRow], metadata: Mapping[str, Any]) -> list[Figure]:
    """Each rung's request alone: its TTFT p50 and how many of its requests failed."""
    rows = []
    for point in points:
        tokens = (point.get("extra") or {}).get("input_tokens_requested")
        if not str(point.get("label") or "").endswith("alone") or not tokens:
            continue
        shown = {"tokens": token_label(float(tokens))}
        n = point.get("requests_completed")
        rows.append(
            Figure(
                _("TTFT p50, %(tokens)s-token input alone"),
                (point.get("ttft_ms") or {}).get("p50"),
                "ms",
                n,
                params=shown,
            )
        )
        if point.get("requests_failed"):
            rows.append(
                Figure(_("%(tokens)s-token input alone: failed requests"), point["requests_failed"], "", params=shown)
            )
    return rows


# the record's behaviour claims this test's verdicts support (`selection.domain.claims` judges them)
INPUT_LENGTH = Claim(
    "input_length",
    "long_context",
    ("largest_rung_succeeds",),
    _("inputs up to %(inp)s tokens, outputs up to %(out)s (the longest input served: %(evidence)s)"),
    _("inputs up to %(inp)s tokens, outputs up to %(out)s: the longest input is not validated (%(evidence)s)"),
)


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
    figures=figures,
    cli={"kv_capacity_tokens": "kv_capacity_tokens"},
    claims=(INPUT_LENGTH,),
)
