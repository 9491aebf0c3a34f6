"""Test 3, swap-out and recovery: its row of the suite (its run: `benchmarks.harness.workloads.swap_recovery`)."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from benchmarks.harness.estimates import Load, closed_loop, number, request_seconds
from benchmarks.suite.base import CandidateFacts, Figure, PointFacts, PointRow, RunFacts, ValidationTest
from benchmarks.suite.params import BUDGET_PARAMS, ParamSpec, budget_params, constraint_value
from benchmarks.verdicts import MIN_SAMPLES, NOT_APPLICABLE, status_of
from selection.domain import claims
from selection.domain.claims import Claim
from selection.domain.messages import marked as _

PARAMS = (
    ParamSpec("sessions", 32, _("Sessions"), "sessions"),
    ParamSpec("warm_sessions", 32, _("Sessions resumed at once (warm reference)"), "sessions"),
    ParamSpec("never_swap_sessions", 0, _("Never-swap sessions (kept active, resumed last)"), "sessions"),
    ParamSpec("history_tokens", 1536, _("Conversation history per session (tokens)"), "tokens"),
    ParamSpec("turn_input_tokens", 512, _("Input tokens per turn"), "tokens"),
    ParamSpec("output_tokens", 32, _("Output tokens per request"), "tokens"),
    ParamSpec("idle_s", 60.0, _("Idle time between turns (s)"), "s"),
    ParamSpec("kv_capacity_tokens", None, _("KV-cache capacity (tokens)"), "tokens"),
    ParamSpec("pressure_factor", 1.5, _("Pressure: new tokens while idle, x KV capacity"), "x"),
    ParamSpec("pressure_concurrency", 32, _("Concurrent requests while sessions are idle"), "requests"),
    ParamSpec("pressure_input_tokens", None, _("Input tokens of that traffic"), "tokens"),
    ParamSpec("max_pressure_requests", 5000, _("Most pressure requests"), "requests"),
    ParamSpec("active_turn_gap_s", 0.2, _("Pause between the never-swap sessions' turns (s)"), "s"),
    ParamSpec("parallel", 16, _("Sessions sent at once"), "sessions"),
    ParamSpec("resume_parallel", 1, _("Timed turns sent at once"), "requests"),
    ParamSpec("seed", 1234, _("Random seed"), ""),
    ParamSpec("divergence_tolerance_token", 16, _("Continuation may diverge from token"), "tokens"),
    ParamSpec("max_resume_over_recompute", 0.8, _("Largest resume / recompute TTFT ratio"), "x"),
    ParamSpec("allow_cache_reset", True, _("Clear the engine's prefix cache for the recompute"), ""),
    ParamSpec("settle_s", 15.0, _("Settling time after the load (s)"), "s"),
    ParamSpec(
        "swap_in_delay_budget_ms", None, _("Swap-in delay the other sessions accept (ms; empty: no budget)"), "ms"
    ),
    *BUDGET_PARAMS,
)


def estimate_swap_recovery(params: Mapping[str, Any]) -> Load:
    """The first turns of every session, then the warm, resumed, never-swap and recomputed turns;
    the pressure pushes pressure_factor x the KV capacity through (else runs for idle_s)."""
    p = params
    idle = max(number(p, "sessions", 1), 1)
    warm = number(p, "warm_sessions", idle)
    never = number(p, "never_swap_sessions")
    parallel = max(number(p, "parallel", 16), 1)
    timed = max(number(p, "resume_parallel", 1), 1)
    history = number(p, "history_tokens", 512)
    resumed = history + number(p, "output_tokens", 32) + number(p, "turn_input_tokens", 256)
    first = math.ceil((idle + warm + never) / parallel) * request_seconds(p, history)
    seconds = first + math.ceil((warm + 2 * idle + never) / timed) * request_seconds(p, resumed)
    pressure = number(p, "pressure_concurrency")
    capacity = number(p, "kv_capacity_tokens")
    p_in = number(p, "pressure_input_tokens") or min(max(capacity // max(2 * pressure, 1), 256), 8192)
    per_pressure = p_in + number(p, "output_tokens", 32)
    if capacity and pressure:
        pressure_requests = math.ceil(capacity * number(p, "pressure_factor", 1.5) / per_pressure)
        seconds += max(math.ceil(pressure_requests / pressure) * request_seconds(p, p_in), number(p, "idle_s"))
    else:
        pressure_requests = closed_loop(pressure, number(p, "idle_s"), request_seconds(p, p_in))
        seconds += number(p, "idle_s")
    requests = idle + warm + never + warm + 2 * idle + never + pressure_requests
    tokens = (idle + warm + never) * history + (warm + 2 * idle + never) * resumed + pressure_requests * per_pressure
    return Load(seconds, max(parallel, pressure + never), requests, tokens)


def plan_swap_recovery(
    constraints: dict[str, Any] | None = None, facts: CandidateFacts | None = None
) -> dict[str, Any]:
    """Sessions resumed after the idle period, each with a history of `history_tokens` (the
    conversation's earlier turns); the pressure's size comes from the KV capacity at run time
    (params.kv_capacity_tokens, else the engine's own statement in its metrics)."""
    avg_input = int(constraint_value(constraints, "avg_input_tokens", 512))
    turns = max(int(constraint_value(constraints, "average_turns", 4)), 2)
    sessions = max(int(constraint_value(constraints, "concurrent_sessions", 32)), MIN_SAMPLES)
    return {
        "sessions": sessions,  # idle, then resumed after the pressure (percentiles need >= 20)
        "warm_sessions": sessions,  # resumed right after turn 1: the still-resident reference
        "never_swap_sessions": int(
            constraint_value(constraints, "never_swap_sessions", 0)
        ),  # kept active, resumed last
        "history_tokens": min(
            avg_input * (turns - 1), int(constraint_value(constraints, "max_input_tokens", 32768)) // 2
        ),
        "turn_input_tokens": avg_input,
        "output_tokens": 32,
        "idle_s": float(constraint_value(constraints, "idle_seconds_between_turns", 60.0)),
        # the candidate's KV capacity sizes the pressure; None: the engine's metrics state it
        "kv_capacity_tokens": facts.kv_capacity_tokens if facts else None,
        "pressure_factor": 1.5,  # unique tokens pushed through the pool while the sessions idle, x capacity
        "pressure_concurrency": int(constraint_value(constraints, "peak_concurrency", 32)),
        "pressure_input_tokens": None,  # None: from the capacity (larger requests, fewer of them)
        "max_pressure_requests": 5000,
        "active_turn_gap_s": 0.2,  # the never-swap sessions' pause between their turns
        "parallel": 16,  # first turns in flight at once
        "resume_parallel": 1,  # timed turns (warm, resume, recompute) in flight: 1 = each TTFT its own cost
        "seed": 1234,
        "divergence_tolerance_token": 16,
        "max_resume_over_recompute": 0.8,  # resume TTFT p50 / recompute TTFT p50 above it: no benefit
        "allow_cache_reset": True,  # False: never clear the engine's prefix cache (recompute: unique prompts)
        "settle_s": 15.0,
        # the session classes (constraints): the never-swap sessions come back warm; the others accept
        # a swap-in delay up to this budget (None: the constraints name no such class)
        "swap_in_delay_budget_ms": constraint_value(constraints, "swap_in_delay_budget_ms", None),
        **budget_params(constraints),
    }


def indicators(run: RunFacts) -> dict[str, float]:
    """swap_resume_ttft_ratio = resume TTFT p50 / recompute TTFT p50 of the same histories, as the
    swap test measures both (its `resume` figures, else its "resume" and "recompute" points), and
    only when the test observed the eviction; without a recompute measurement it is missing (a first
    turn is a different, shorter prompt: no stand-in), and where the engine's cache model has no
    offload tier (the verdict is not applicable: a resume is a recompute by design, and persistence
    is scored from the documented tiers).

    continuation_correct = 1 when every resumed session continued identically, else 0, only when a
    session was swapped in (`swapped_in`): sessions that were dropped and recomputed say nothing of
    recovering a swapped-out cache.

    idle_release_share = the idle sessions whose KV was released (their cached tokens fell on
    resume) or offloaded (stored to the offload tier while idle, loaded back on resume, resumed with
    their cache) / the idle sessions resumed, only when the test observed the eviction
    (`idle_release_share`); missing when an older run offloaded without counting its sessions."""
    derived: dict[str, float] = {}
    ratio = swap_resume_over_recompute(run.metadata, run.points, run.verdicts)
    if ratio is not None:
        derived["swap_resume_ttft_ratio"] = ratio
    same = run.verdict("continuation_identical")
    if same and same.get("passed") is not None and swapped_in(run):
        derived["continuation_correct"] = 1.0 if same["passed"] else 0.0
    share = idle_release_share(run.metadata.get("eviction"))
    if share is not None:
        derived["idle_release_share"] = share
    return derived


def uncredited(run: RunFacts) -> tuple[str, ...]:
    """A run that swapped no session in recovered nothing: a stated continuation figure is not credited."""
    return () if swapped_in(run) else ("continuation_correct",)


def swapped_in(run: RunFacts) -> bool:
    """Whether the swap test resumed sessions from a swapped-out cache: it saw the idle sessions'
    KV evicted or offloaded and resuming cost less than recomputing (`SWAP_IN`). A resume
    that cost a recompute was one: recovery consistency is then not observed."""
    return claims.judge_verdicts(SWAP_IN, run.id, list(run.verdicts), status_of).claimed


def idle_release_share(eviction: Any) -> float | None:
    """The idle sessions whose KV was released or offloaded, as the printed rule says, over the idle
    sessions resumed (the swap test's eviction figures): released = dropped from the GPU (their cached
    tokens fell on resume); offloaded = moved to the offload tier and loaded back (the offload
    counters moved out during the idle time and back in during the resume, and they resumed with
    their cache). None when the test saw no eviction, or counted neither per session; an offload the
    test could not count per session is no count of zero (it would read as nothing released)."""
    if not isinstance(eviction, dict) or not eviction.get("observed") or not eviction.get("sessions"):
        return None
    released, offloaded = eviction.get("evicted_sessions"), eviction.get("offloaded_sessions")
    if offloaded is None and eviction.get("offloaded") and not released:
        return None  # offloaded, not counted per session (an older run): unknown, not zero
    if released is None and offloaded is None:
        return None
    return min(float((released or 0) + (offloaded or 0)) / float(eviction["sessions"]), 1.0)


def swap_resume_over_recompute(
    metadata: Mapping[str, Any], points: Mapping[str, PointFacts], verdicts: Sequence[Mapping[str, Any]]
) -> float | None:
    """Resume TTFT p50 / recompute TTFT p50 of the same histories (the swap test's forced eviction),
    or None when the test did not measure a recompute or did not observe the eviction."""
    eviction = metadata.get("eviction")
    if isinstance(eviction, dict) and not eviction.get("observed"):
        return None  # nothing was evicted: a resume cost says nothing about swapping
    exercised = next((v for v in verdicts if v.get("name") == "eviction_exercised"), None)
    if exercised is not None and not (exercised.get("status") == "pass" or exercised.get("passed") is True):
        return None
    resumed_verdict = next((v for v in verdicts if v.get("name") == "resume_cheaper_than_recompute"), None)
    if resumed_verdict is not None and status_of(resumed_verdict) == NOT_APPLICABLE:
        return None  # no offload tier: a recompute by design; persistence is scored from the documented tiers
    figures = metadata.get("resume") if isinstance(metadata.get("resume"), dict) else {}
    resumed = (figures.get("resume_ttft_ms") or {}).get("p50")
    recomputed = (figures.get("recompute_ttft_ms") or {}).get("p50")
    if resumed is None or not recomputed:
        resume, recompute = points.get("resume"), points.get("recompute")
        resumed = resume.ttft_ms.get("p50") if resume is not None else None
        recomputed = recompute.ttft_ms.get("p50") if recompute is not None else None
    if resumed is None or not recomputed:
        return None
    return float(resumed) / float(recomputed)


PHASE_FIGURES = {
    "warm": _("TTFT p50, warm (history still resident)"),
    "resume": _("TTFT p50, resumed after the pause"),
    "recompute": _("TTFT p50, recomputed (cache cleared)"),
}
RATIO_FIGURES = {
    "resume_over_recompute": _("resume / recompute (TTFT p50)"),
    "resume_over_warm": _("resume / warm (TTFT p50)"),
}


def figures(points: Sequence[PointRow], metadata: Mapping[str, Any]) -> list[Figure]:
    """Warm, resumed and recomputed TTFT of the same histories, and the ratios the test judged
    (resume / recompute decides whether a swap-in saved anything); never a swap phase as a load."""
    by_label = {str(p.get("label") or ""): p for p in points}
    resume = metadata.get("resume") if isinstance(metadata.get("resume"), Mapping) else {}
    rows = []
    for phase, name in PHASE_FIGURES.items():
        stated = resume.get(f"{phase}_ttft_ms") or {}
        point = by_label.get(phase) or {}
        value = stated.get("p50", (point.get("ttft_ms") or {}).get("p50"))
        n = stated.get("n", point.get("requests_completed"))
        rows.append(Figure(name, value, "ms", n, stated.get("p50_interval")))
    for ratio, name in RATIO_FIGURES.items():
        stated = resume.get(ratio) or {}
        if stated.get("value") is not None:
            rows.append(Figure(name, stated["value"], "x", stated.get("n"), stated.get("interval")))
    return rows


# the record's behaviour claims this test's verdicts support (`selection.domain.claims` judges them)
SWAP_IN = Claim(
    "swap_in",
    "swap_recovery",
    ("eviction_exercised", "resume_cheaper_than_recompute"),
    _(
        "Idle sessions may be swapped out of GPU memory: the swap test saw their KV evicted or offloaded, and "
        "resuming one cost less than recomputing it (%(evidence)s)."
    ),
    _(
        "Swapping idle sessions out and resuming them is not validated (%(evidence)s): plan for an idle "
        "session's history to be recomputed when it resumes."
    ),
)
CONTINUATION = Claim(
    "continuation",
    "swap_recovery",
    ("eviction_exercised", "resume_cheaper_than_recompute", "continuation_identical"),
    _("Sessions resumed after a swap-in continued as they did without it (%(evidence)s)."),
    _("That a session continues correctly after a swap-in is not validated (%(evidence)s)."),
)
NEVER_SWAP = Claim(
    "never_swap",
    "swap_recovery",
    # "while the idle ones were evicted": the eviction must have been seen too (issue 33's audit)
    ("eviction_exercised", "never_swap_sessions_warm"),
    _("%(n)s designated sessions: they stayed warm while the idle ones were evicted (%(evidence)s)"),
    _("%(n)s designated sessions: that they stay warm is not validated (%(evidence)s)"),
)
SWAP_DELAY = Claim(
    "swap_delay",
    "swap_recovery",
    ("eviction_exercised", "swap_in_delay_within_budget"),
    _(
        "The other sessions may be swapped out while idle: they resumed within the %(ms)s ms swap-in delay they "
        "accept (%(evidence)s)."
    ),
    _("That the other sessions resume within the %(ms)s ms swap-in delay they accept is not validated (%(evidence)s)."),
)


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
    indicators=indicators,
    uncredited=uncredited,
    figure_points={"swap_resume_ttft_ratio": ("resume", "recompute")},
    figure_intervals={"swap_resume_ttft_ratio": ("resume_cheaper_than_recompute", float)},
    figures=figures,
    cli={"kv_capacity_tokens": "kv_capacity_tokens"},
    params=PARAMS,
    plan=plan_swap_recovery,
    estimate=estimate_swap_recovery,
    claims=(SWAP_IN, CONTINUATION, NEVER_SWAP, SWAP_DELAY),
)
