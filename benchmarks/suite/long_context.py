"""Test 2, long context: its row of the suite (its run: `benchmarks.harness.workloads.long_context`)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from benchmarks.charts.style import token_label
from benchmarks.harness.estimates import Load, closed_loop, number, numbers, request_seconds
from benchmarks.suite.base import CandidateFacts, Figure, PointRow, RunFacts, ValidationTest
from benchmarks.suite.params import BUDGET_PARAMS, ParamSpec, PlanError, budget_params, constraint_value
from selection.domain.claims import Claim
from selection.domain.messages import marked as _

# the context ladder's rungs double from its first
LADDER = (16384, 32768, 65536, 131072)
LONG_OUTPUT_TOKENS = 32  # each long request's output: the ladder measures the prefill
DEFAULT_MAX_MODEL_LEN = 131072  # Llama-3.1's context: the ladder's top when nothing else says


def context_ladder(top: int, engine_limit: int | None = None, start: int = LADDER[0]) -> list[int]:
    """Rungs doubling from 16K below `top`, the engine's own limit where it is below `top`, then
    `top` itself: the requirement is always sent exactly, even past the engine's limit (that rung
    then fails with the engine's error, which is the finding). A top at or below 16K climbs a
    quarter and a half of it first."""
    if top < 1:
        raise PlanError(f"params.rungs: the ladder's top must be a positive token count, got {top!r}")
    rungs = set()
    if top <= start:
        rungs.update(r for r in (top // 4, top // 2) if r >= 1)
    rung = start
    while rung < top:
        if engine_limit is None or rung <= engine_limit:
            rungs.add(rung)
        rung *= 2
    if engine_limit is not None and 0 < engine_limit < top:
        rungs.add(engine_limit)
    rungs.add(top)
    return sorted(rungs)


PARAMS = (
    ParamSpec("rungs", [16384, 32768, 65536, 131040], _("Context lengths to try (tokens)"), "tokens"),
    ParamSpec("required_tokens", 131040, _("Required context (tokens)"), "tokens"),
    ParamSpec("max_model_len", None, _("Engine context limit (tokens)"), "tokens"),
    ParamSpec("output_tokens", 32, _("Output tokens per request"), "tokens"),
    ParamSpec("repeats", 1, _("Repeats per context length"), "count"),
    ParamSpec("kv_capacity_tokens", None, _("KV-cache capacity (tokens)"), "tokens"),
    ParamSpec("background_concurrency", 16, _("Background concurrent requests"), "requests"),
    ParamSpec("background_input_tokens", 256, _("Background input tokens per request"), "tokens"),
    ParamSpec("background_output_tokens", 32, _("Background output tokens per request"), "tokens"),
    ParamSpec("background_lead_s", 5.0, _("Background traffic before the long request (s)"), "s"),
    ParamSpec("background_timeout_s", 60.0, _("Background request timeout (s)"), "s"),
    ParamSpec("with_background", True, _("Run background traffic"), ""),
    *BUDGET_PARAMS,
)


def estimate_long_context(params: Mapping[str, Any]) -> Load:
    """Each rung's long request `repeats` times, each after the background's lead when it runs."""
    rungs = numbers(params, "rungs")
    repeats = max(number(params, "repeats", 1), 1)
    with_background = bool(params.get("with_background"))
    lead = number(params, "background_lead_s") if with_background else 0.0
    seconds = repeats * sum(lead + request_seconds(params, rung) for rung in rungs)
    background = number(params, "background_concurrency") if with_background else 0.0
    per_background = number(params, "background_input_tokens", 256) + number(params, "background_output_tokens", 64)
    long_requests = repeats * len(rungs)
    requests = long_requests + closed_loop(background, seconds, request_seconds(params))
    tokens = repeats * sum(rungs) + (requests - long_requests) * per_background
    return Load(seconds, background + 1, requests, tokens)


def plan_long_context(
    constraints: dict[str, Any] | None = None, facts: CandidateFacts | None = None, max_context: int | None = None
) -> dict[str, Any]:
    """The ladder climbs to the constraints' max input (its exact value is the last rung), with the
    engine's max_model_len (minus the output; one of the candidate's facts) as a rung where it is
    lower; `max_context` (validate --max-context) replaces the requirement. Without either: up to the
    engine's limit. The candidate's KV capacity turns its KV usage ratio into tokens per request."""
    facts = facts or CandidateFacts()
    max_model_len = facts.max_model_len
    output = LONG_OUTPUT_TOKENS
    required = (constraints or {}).get("max_input_tokens")
    engine_limit = int(max_model_len) - output if max_model_len else None
    if max_context is not None and int(max_context) < 1:
        raise PlanError(f"params.max_context: must be a positive token count, got {max_context!r}")
    top = int(max_context or required or engine_limit or DEFAULT_MAX_MODEL_LEN - output)
    rungs = context_ladder(top, engine_limit)
    return {
        "rungs": rungs,
        "required_tokens": top,
        "max_model_len": max_model_len,
        "output_tokens": output,
        "repeats": 1,
        "kv_capacity_tokens": facts.kv_capacity_tokens,  # KV usage ratio -> tokens per request
        # enough short streams that >= MIN_SAMPLES of them overlap each long request (when the peak allows)
        "background_concurrency": max(min(int(constraint_value(constraints, "peak_concurrency", 16)), 16), 1),
        "background_input_tokens": min(int(constraint_value(constraints, "avg_input_tokens", 256)), 2048),
        "background_output_tokens": 32,
        "background_lead_s": 5.0,  # short traffic alone before the long request (its baseline)
        "background_timeout_s": 60.0,  # a short request stalled longer than this is a failure
        "with_background": True,
        **budget_params(constraints),
    }


def indicators(run: RunFacts) -> dict[str, float]:
    """max_context_rung_reached = the largest rung served at its full length (the ladder ends at the
    required input itself)."""
    rung = run.metadata.get("largest_successful_rung")
    return {"max_context_rung_reached": float(rung)} if rung else {}


def thresholds(points: Sequence[PointRow], metadata: Mapping[str, Any], planned: Mapping[str, Any]) -> dict[str, Any]:
    """The record's validated input length: the longest rung served in full (no request failed)."""
    rungs = [
        int(extra["input_tokens_requested"])
        for point in points
        if isinstance(extra := point.get("extra") or {}, dict)
        and extra.get("input_tokens_requested")
        and not (point.get("requests_failed") or 0)
        and (point.get("requests_completed") or 0) > 0
    ]
    return {"max_input_tokens": max(rungs)} if rungs else {}


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
    plan_flags={"max_context": "max_context"},
    params=PARAMS,
    plan=plan_long_context,
    estimate=estimate_long_context,
    claims=(INPUT_LENGTH,),
    thresholds=thresholds,
)
