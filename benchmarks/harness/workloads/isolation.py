"""Test 8, tenant isolation: one tenant's interactive traffic alone and under another tenant's long-context flood."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import numpy as np

from benchmarks.harness.load import run_load
from benchmarks.harness.load_config import LoadConfig, LoadOutcome
from benchmarks.harness.load_summary import summarize
from benchmarks.harness.request_record import RequestSpec
from benchmarks.harness.workloads.common import (
    CANCELLED,
    Reporter,
    Session,
    Target,
    budget_verdicts,
    build_result,
    detail_message_of,
    errors_verdict,
    make_verdict,
    ms_or_na,
)
from benchmarks.harness.workloads.spec import TestSpec
from benchmarks.harness.workloads.spec import gettext_noop as _
from benchmarks.harness.workloads.stress import attach_engine_stats, slo_of
from benchmarks.result import LoadPoint, NormalizedResult
from benchmarks.suite import isolation as suite_row
from benchmarks.verdicts import (
    INCONCLUSIVE,
    INSUFFICIENT_DATA,
    MIN_SAMPLES,
    NOT_EXERCISED,
    NOT_JUDGED,
    PASS,
    compare,
    percentile_interval,
    ratio_interval,
    verdict,
)
from selection.domain.messages import Code, Message, pgettext, to_json


async def run_isolation(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    """Tenant A's short interactive traffic alone, then under tenant B's flood of long requests."""
    p = SPEC.parse(params)
    rate, a_input, a_output = p.tenant_a_rate, p.tenant_a_input_tokens, p.tenant_a_output_tokens
    b_concurrency, b_input, b_output = p.tenant_b_concurrency, p.tenant_b_input_tokens, p.tenant_b_output_tokens
    alone_s, lead_s, flood_s = p.alone_s, p.flood_lead_s, p.flood_s
    use_priority = bool(p.use_priority)
    reporter = Reporter(progress, cancel)
    notes: list[str | Message] = []
    total = alone_s + lead_s + flood_s
    async with Session(target) as session:
        prompts = session.prompts
        assert prompts is not None

        def tenant_body(tenant: str) -> dict[str, Any]:
            body: dict[str, Any] = {"user": f"kvselect-tenant-{tenant}"}
            if use_priority:
                body["priority"] = int(getattr(p, f"tenant_{tenant}_priority") or 0)
            return body

        def make_a(index: int, phase: str) -> RequestSpec:
            return session.spec(
                prompts.text(a_input, seed=index),
                a_output,
                request_id=f"tenant-a-{phase}-{index}",
                tag=f"tenant_a_{phase}",
                extra_body=tenant_body("a"),
            )

        head = min(32, b_input)
        body = prompts.text(b_input - head, seed=10_000_000) if b_input > head else ""

        def make_b(index: int) -> RequestSpec:
            # a different head makes every request miss the prefix cache, and the body built once keeps
            # the client's loop free for tenant A's sends (a 32K-token prompt takes a while to build)
            return session.spec(
                prompts.text(head, seed=10_000_001 + index) + body,
                b_output,
                request_id=f"tenant-b-{index}",
                tag="tenant_b",
                extra_body=tenant_body("b"),
            )

        def a_config(duration: float) -> LoadConfig:
            return LoadConfig(mode="open", rate=rate, duration_s=duration, drain_timeout_s=120.0, seed=7)

        alone = await run_load(
            session.client,
            lambda i: make_a(i, "alone"),
            a_config(alone_s),
            cancel=cancel,
            progress=reporter.phase("tenant A alone", 0, 100 * alone_s / total),
        )
        flood = b_outcome = None
        if not alone.cancelled:
            client_b = target.client()
            await client_b.open()
            b_stop = asyncio.Event()
            b_task = asyncio.ensure_future(
                run_load(
                    client_b,
                    make_b,
                    LoadConfig(
                        mode="closed",
                        concurrency=b_concurrency,
                        duration_s=lead_s + flood_s + 3600.0,
                        drain_timeout_s=0.5,
                        stop_after_s_without_success=None,
                    ),
                    cancel=lambda: b_stop.is_set() or reporter.cancelled(),
                )
            )
            try:
                waited = time.perf_counter()
                while time.perf_counter() - waited < lead_s and not reporter.cancelled():
                    await asyncio.sleep(0.1)
                flood = await run_load(
                    session.client,
                    lambda i: make_a(i, "flood"),
                    a_config(flood_s),
                    cancel=cancel,
                    progress=reporter.phase("tenant A under flood", 100 * (alone_s + lead_s) / total, 100),
                )
            finally:
                b_stop.set()
                b_outcome = await b_task
                await client_b.close()
    cancelled = alone.cancelled or bool(flood and flood.cancelled) or reporter.cancelled()
    points, outcomes = [], []
    for label, outcome in (("tenant_a_alone", alone), ("tenant_a_flood", flood), ("tenant_b_flood", b_outcome)):
        if outcome is None:
            continue
        point = summarize(outcome, label=label, slo=slo_of(params) if label.startswith("tenant_a") else None)
        attach_engine_stats(
            point,
            session.metrics.recording,
            outcome.measure_start - session.time_zero,
            outcome.measure_end - session.time_zero,
        )
        points.append(point)
        outcomes.append(outcome)
    figures = _isolation_figures(alone, flood, b_outcome, b_concurrency)
    verdicts = _isolation_verdicts(points, alone, flood, b_outcome, figures, params, b_concurrency)
    if cancelled:
        notes.append(Message(CANCELLED))
    reporter.close()
    scheduling = "priority" if use_priority else "fcfs"
    return build_result(
        "isolation",
        session,
        params,
        points,
        outcomes,
        verdicts,
        notes,
        cancelled,
        {
            "isolation": {"scheduling": scheduling, **figures},
            # scoring's concurrency-control criterion reads A's p95 under the flood with its interval
            "derived_intervals": {"isolation_ttft_p95_ms": figures["a_ttft_p95_flood_interval"]},
            "observed": _isolation_observed(figures, scheduling, b_input, b_concurrency),
        },
    )


def _ok_values(outcome: LoadOutcome | None, attr: str) -> list[float]:
    if outcome is None:
        return []
    return [getattr(r, attr) for r in outcome.records if r.ok and not r.aborted and getattr(r, attr) is not None]


def _isolation_figures(
    alone: LoadOutcome, flood: LoadOutcome | None, b_outcome: LoadOutcome | None, b_concurrency: int
) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for phase, outcome in (("alone", alone), ("flood", flood)):
        for metric in ("ttft_ms", "tpot_ms"):
            values = _ok_values(outcome, metric)
            figures[f"a_{metric.replace('_ms', '')}_p95_{phase}_ms"] = (
                float(np.percentile(values, 95)) if values else None
            )
            figures[f"a_{metric.replace('_ms', '')}_n_{phase}"] = len(values)
        ttft = _ok_values(outcome, "ttft_ms")
        interval = percentile_interval(ttft, 95) if len(ttft) >= MIN_SAMPLES else None
        figures[f"a_ttft_p95_{phase}_interval"] = None if interval is None else list(interval)
        figures[f"a_errors_{phase}"] = sum(1 for r in (outcome.records if outcome else []) if not r.ok)
    alone_ttft, flood_ttft = _ok_values(alone, "ttft_ms"), _ok_values(flood, "ttft_ms")
    slowdown = None
    interval = None
    if alone_ttft and flood_ttft:
        base = float(np.percentile(alone_ttft, 95))
        slowdown = float(np.percentile(flood_ttft, 95)) / base if base > 0 else None
        interval = ratio_interval(flood_ttft, alone_ttft, q=95.0)
    figures["a_ttft_p95_slowdown"] = slowdown
    figures["a_ttft_p95_slowdown_interval"] = None if interval is None else list(interval)
    held = b_outcome.achieved_concurrency if b_outcome is not None else None
    figures["b_held_concurrency"] = held
    figures["b_requests_completed"] = sum(1 for r in (b_outcome.records if b_outcome else []) if r.ok)
    figures["b_requests_failed"] = sum(
        1 for r in (b_outcome.records if b_outcome else []) if not r.ok and r.error_class != "cancelled"
    )
    ended = figures["b_requests_completed"] + figures["b_requests_failed"]
    # B's requests held the engine: in flight most of the time, and not refused at once (a request
    # answered 400 or 429 is "in flight" for a moment only, yet loads nothing)
    figures["flood_exercised"] = (
        held is not None and held >= 0.5 * b_concurrency and (not ended or figures["b_requests_failed"] <= ended / 2)
    )
    return figures


# The isolation test's verdict details, as message templates (pages show them in their language).
FLOOD_HELD = _(
    "tenant B held %(held)s of %(concurrency)s long requests in flight on average (%(completed)s completed, "
    "%(failed)s failed)"
)
NEVER_FLOODED = _("tenant A never ran under the flood")
NO_LIMIT = _("no slowdown limit (params.max_ttft_slowdown): the TTFT budget decides")
NO_LIMIT_SLOWDOWN = _(
    "tenant A TTFT p95 under the flood is %(slowdown)sx alone; no limit set (params.max_ttft_slowdown): the TTFT "
    "budget decides"
)
FEW_REQUESTS = _("TTFT p95 ratio from %(flood)s and %(alone)s requests: at least %(min)s each are needed")
SLOWDOWN_WITH_INTERVAL = _(
    "tenant A TTFT p95 under the flood is %(slowdown)sx alone (95%% CI %(low)s–%(high)s), n=%(flood)s/%(alone)s, "
    "vs <= %(limit)sx"
)
SLOWDOWN = _("tenant A TTFT p95 under the flood is %(slowdown)sx alone, n=%(flood)s/%(alone)s, vs <= %(limit)sx")
STRADDLES_LIMIT = _("%(detail)s: the interval straddles the limit")
FLOOD_DID_NOT_LOAD = _("%(detail)s; tenant B's flood did not load the engine")

# what the test observed (metadata.observed's line)
OBSERVED_LINE = _(
    "tenant A TTFT p95 %(ttft_alone)s alone (n=%(n_alone)s) vs %(ttft_flood)s under tenant B's flood "
    "(n=%(n_flood)s)%(slowdown)s%(interval)s; TPOT p95 %(tpot_alone)s vs %(tpot_flood)s; B held %(held)s of "
    "%(concurrency)s requests of %(input)s tokens; scheduling %(scheduling)s"
)
OBSERVED_SLOWDOWN = _(", x%(factor)s")
OBSERVED_INTERVAL = _(" (95%% CI %(low)s–%(high)s)")
# the engine's scheduling policy inside the sentence (vLLM's --scheduling-policy values)
SCHEDULING_NAMES = {
    "priority": pgettext("scheduling policy", "priority"),
    "fcfs": pgettext("scheduling policy", "fcfs"),
}


def _isolation_verdicts(
    points: list[LoadPoint],
    alone: LoadOutcome,
    flood: LoadOutcome | None,
    b_outcome: LoadOutcome | None,
    figures: dict[str, Any],
    params: dict[str, Any],
    b_concurrency: int,
) -> list[dict[str, Any]]:
    held = figures["b_held_concurrency"]
    exercised = figures["flood_exercised"]
    verdicts = [
        make_verdict(
            "flood_held",
            None,
            Message(
                FLOOD_HELD,
                {
                    "held": f"{held or 0:.1f}",
                    "concurrency": b_concurrency,
                    "completed": figures["b_requests_completed"],
                    "failed": figures["b_requests_failed"],
                },
            ),
            held,
            b_concurrency,
            (figures["b_requests_completed"] + figures["b_requests_failed"]),
            PASS if exercised else NOT_EXERCISED,
        )
    ]
    flood_point = next((p for p in points if p.label == "tenant_a_flood"), None)
    if flood_point is None or flood is None:
        verdicts.append(make_verdict("tenant_a_protected", None, Message(NEVER_FLOODED), status=NOT_EXERCISED))
        return verdicts
    judged = [errors_verdict([flood_point], name="zero_errors[tenant_a_flood]")]
    judged += budget_verdicts(flood_point, params, label="tenant_a_flood", records=flood.records)
    limit = params.get("max_ttft_slowdown")
    alone_ttft, flood_ttft = _ok_values(alone, "ttft_ms"), _ok_values(flood, "ttft_ms")
    n = min(len(alone_ttft), len(flood_ttft))
    slowdown, interval = figures["a_ttft_p95_slowdown"], figures["a_ttft_p95_slowdown_interval"]
    if limit is None:
        detail = Message(NO_LIMIT) if slowdown is None else Message(NO_LIMIT_SLOWDOWN, {"slowdown": f"{slowdown:.2f}"})
        judged.append(verdict("tenant_a_ttft_slowdown", NOT_JUDGED, detail, slowdown, None, n, interval))
    else:
        limit = float(limit)
        if n < MIN_SAMPLES or slowdown is None:
            status = INSUFFICIENT_DATA
            detail = Message(FEW_REQUESTS, {"flood": len(flood_ttft), "alone": len(alone_ttft), "min": MIN_SAMPLES})
        else:
            status = compare(slowdown, interval, limit)
            figures_shown = {
                "slowdown": f"{slowdown:.2f}",
                "flood": len(flood_ttft),
                "alone": len(alone_ttft),
                "limit": f"{limit:g}",
            }
            detail = (
                Message(
                    SLOWDOWN_WITH_INTERVAL, {**figures_shown, "low": f"{interval[0]:.2f}", "high": f"{interval[1]:.2f}"}
                )
                if interval
                else Message(SLOWDOWN, figures_shown)
            )
            if status == INCONCLUSIVE:
                detail = Message(STRADDLES_LIMIT, {"detail": detail})
        judged.append(verdict("tenant_a_ttft_slowdown", status, detail, slowdown, limit, n, interval))
    if not exercised:  # an unloaded engine protects nobody: these observed no isolation
        judged = [
            verdict(
                v["name"],
                NOT_EXERCISED,
                Message(FLOOD_DID_NOT_LOAD, {"detail": detail_message_of(v)}),
                v["value"],
                v["threshold"],
                v["n"],
                v["interval"],
            )
            if v["status"] == PASS
            else v
            for v in judged
        ]
    return verdicts + judged


def _isolation_observed(figures: dict[str, Any], scheduling: str, b_input: int, b_concurrency: int) -> dict[str, Any]:
    """What the test observed in one sentence with its figures (metadata.observed: the English `line` and the
    `line_message` pages render in their language)."""
    slowdown = figures["a_ttft_p95_slowdown"]
    interval = figures["a_ttft_p95_slowdown_interval"]
    line = Message(
        OBSERVED_LINE,
        {
            "ttft_alone": ms_or_na(figures["a_ttft_p95_alone_ms"]),
            "n_alone": figures["a_ttft_n_alone"],
            "ttft_flood": ms_or_na(figures["a_ttft_p95_flood_ms"]),
            "n_flood": figures["a_ttft_n_flood"],
            "slowdown": "" if slowdown is None else Message(OBSERVED_SLOWDOWN, {"factor": f"{slowdown:.1f}"}),
            "interval": ""
            if not interval
            else Message(OBSERVED_INTERVAL, {"low": f"{interval[0]:.1f}", "high": f"{interval[1]:.1f}"}),
            "tpot_alone": ms_or_na(figures["a_tpot_p95_alone_ms"]),
            "tpot_flood": ms_or_na(figures["a_tpot_p95_flood_ms"]),
            "held": f"{figures['b_held_concurrency'] or 0:.1f}",
            "concurrency": b_concurrency,
            "input": b_input,
            "scheduling": SCHEDULING_NAMES.get(scheduling, Code(scheduling)),
        },
    )
    return {"line": str(line), "line_message": to_json(line), "scheduling": scheduling, **dict(figures.items())}


SPEC = TestSpec.of(suite_row.TEST, run_isolation)
