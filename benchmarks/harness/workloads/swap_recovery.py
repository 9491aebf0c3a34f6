"""Test 3, swap-out and recovery: force the idle sessions' KV out, observe the eviction, and
compare warm, resumed and recomputed turns.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import aiohttp

from benchmarks.harness import swap
from benchmarks.harness.cache_model import SLOT_RESIDENT, CacheModel
from benchmarks.harness.client_timing import client_slack_ms, load_held
from benchmarks.harness.load import run_load
from benchmarks.harness.load_config import LoadConfig, LoadOutcome
from benchmarks.harness.load_summary import summarize
from benchmarks.harness.request_record import RequestRecord, RequestSpec
from benchmarks.harness.workloads.common import (
    CANCELLED,
    KV_BASELINE_TOLERANCE,
    NOT_HELD,
    RESET_BY_PATH,
    RESET_CONTEXT,
    Cancelled,
    PlanError,
    Reporter,
    Session,
    Target,
    budget_verdicts,
    build_result,
    detail_message_of,
    errors_verdict,
    ms_or_na,
    require_param,
    reset_method_message,
    settle_after_load,
)
from benchmarks.harness.workloads.spec import TestSpec
from benchmarks.harness.workloads.stress import attach_engine_stats
from benchmarks.result import LoadPoint, NormalizedResult, Stats
from benchmarks.suite import swap_recovery as suite_row
from benchmarks.verdicts import (
    FAIL,
    INCONCLUSIVE,
    INSUFFICIENT_DATA,
    MIN_SAMPLES,
    NOT_EXERCISED,
    NOT_JUDGED,
    PASS,
    STRADDLES,
    compare,
    judge_percentile,
    not_applicable,
    percentile_interval,
    ratio_interval,
    verdict,
)
from selection.domain.messages import CLAUSE_SEPARATOR, Join, Message, load, to_json
from selection.domain.messages import marked as _

# the run's notes (the parameters named as the plan's form shows them, their keys in the English text)
PRESSURE_CAPPED = _("pressure capped by params.max_pressure_requests: it may not cover the KV capacity")
NO_KV_CAPACITY = _(
    "no KV capacity (params.kv_capacity_tokens or the engine's metrics): the pressure ran for idle_s only; the "
    "eviction verdict says whether that was enough"
)
NO_WARM_REUSE = _("the warm sessions got 0 cached tokens: the engine keeps no KV between turns, no pressure")
PRESSURE_FAILED = _("%(n)s pressure requests failed (the pressure's own errors)")


async def run_swap_recovery(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    """Idle sessions under enough pressure that their KV cannot stay resident, then resumed.

    Phases: warm sessions (turn 1 then turn 2 at once: still resident), the idle sessions' turn 1,
    pressure (unique prompts, `pressure_factor` x the KV capacity) while the never-swap sessions
    keep talking, the idle sessions' resume, the never-swap sessions' resume (last), a recompute of
    the idle sessions' resume with the cache cleared (the eviction-free reference continuation),
    then the KV release. Eviction is observed, never assumed (benchmarks.harness.swap)."""
    config = _swap_config(params)
    reporter = Reporter(progress, cancel)
    async with Session(target, keep_text=True) as session:
        run = _SwapRun(target, session, params, config, reporter, cancel)
        baseline = await session.kv_now()
        try:
            await run.warm_sessions()
            await run.idle_first_turns()
            p_in, planned = run.size_pressure()
            await run.pressure(p_in, planned)
            await run.resume()
            await run.never_swap()
            await run.recompute()
            run.settled = await settle_after_load(
                session, baseline, float(params.get("settle_s") or 15.0), reporter, "settle", 97
            )
        except Cancelled:
            await run.cancelled()
    return _swap_result(run, baseline)


@dataclass(frozen=True)
class _SwapConfig:
    """run_swap_recovery's checked params."""

    sessions: int
    warm: int
    never: int
    history_tokens: int
    turn_tokens: int
    output_tokens: int
    idle_s: float
    factor: float
    tolerance: int
    max_ratio: float
    capacity_param: int | None
    seed: int
    parallel: int
    resume_parallel: int
    pressure_c: int
    gap_s: float


def _swap_config(params: dict[str, Any]) -> _SwapConfig:
    """The params checked before any request (PlanError names the faulty one)."""
    sessions_n = require_param(params, "sessions", int, 1)
    warm_n = require_param(params, "warm_sessions", int, 1) if params.get("warm_sessions") is not None else sessions_n
    never_n = require_param(params, "never_swap_sessions", int, 0) if params.get("never_swap_sessions") else 0
    history_tokens = (
        require_param(params, "history_tokens", int, 1) if params.get("history_tokens") is not None else 512
    )
    turn_tokens = require_param(params, "turn_input_tokens", int, 1)
    output_tokens = require_param(params, "output_tokens", int, 1)
    idle_s = require_param(params, "idle_s", float, 0)
    factor = require_param(params, "pressure_factor", float, 0) if params.get("pressure_factor") is not None else 1.5
    tolerance = int(params.get("divergence_tolerance_token", 16))
    if tolerance < 0:
        raise PlanError(f"params.divergence_tolerance_token: must be >= 0, got {tolerance!r}")
    max_ratio = float(params.get("max_resume_over_recompute") or 0.8)
    capacity_param = params.get("kv_capacity_tokens")
    if capacity_param is not None:
        capacity_param = require_param(params, "kv_capacity_tokens", int, 1)
    if params.get("swap_in_delay_budget_ms") is not None:
        require_param(params, "swap_in_delay_budget_ms", float, 0)
    return _SwapConfig(
        sessions=sessions_n,
        warm=warm_n,
        never=never_n,
        history_tokens=history_tokens,
        turn_tokens=turn_tokens,
        output_tokens=output_tokens,
        idle_s=idle_s,
        factor=factor,
        tolerance=tolerance,
        max_ratio=max_ratio,
        capacity_param=capacity_param,
        seed=int(params.get("seed") or 1234),
        parallel=max(int(params.get("parallel") or 16), 1),
        resume_parallel=max(int(params.get("resume_parallel") or 1), 1),
        pressure_c=int(params.get("pressure_concurrency") or 0),
        gap_s=float(params.get("active_turn_gap_s") or 0.2),
    )


_SWAP_LABELS = ("turn1", "warm", "resume", "never_swap", "recompute")


class _SwapRun:
    """One swap-recovery run's shared state (sessions' histories, records, outcomes, snapshots);
    each phase of the test is one coroutine."""

    def __init__(
        self,
        target: Target,
        session: Session,
        params: dict[str, Any],
        config: _SwapConfig,
        reporter: Reporter,
        cancel: Any,
    ) -> None:
        self.target, self.session, self.params, self.config = target, session, params, config
        self.reporter, self.cancel = reporter, cancel
        assert session.prompts is not None
        self.prompts = session.prompts
        warm_n, sessions_n, never_n = config.warm, config.sessions, config.never
        self.greedy = {"temperature": 0.0, "seed": config.seed}
        self.warm_ids = list(range(warm_n))
        self.idle_ids = list(range(warm_n, warm_n + sessions_n))
        self.never_ids = list(range(warm_n + sessions_n, warm_n + sessions_n + never_n))
        self.ok_idle: list[int] = []
        self.history: dict[int, list[tuple[str, str]]] = {}  # session -> [(user, reply)] completed turns
        planned_requests = {
            "turn1": warm_n + sessions_n + never_n,
            "warm": warm_n,
            "resume": sessions_n,
            "never_swap": max(never_n, 1),
            "recompute": sessions_n,
        }
        self.outcomes = {
            label: LoadOutcome(
                config=LoadConfig(
                    mode="closed",
                    concurrency=config.parallel if label == "turn1" else config.resume_parallel,
                    max_requests=planned_requests[label],
                )
            )
            for label in _SWAP_LABELS
        }
        for outcome in self.outcomes.values():
            outcome.run_start = session.time_zero
        self.records: dict[str, dict[int, RequestRecord]] = {label: {} for label in _SWAP_LABELS}
        self.snapshots: dict[str, dict[str, float] | None] = {}
        self.pressure_outcome: LoadOutcome | None = None
        self.sizing: dict[str, Any] = {}
        self.recompute_method: str | None = None
        self.settled: dict[str, Any] = {"after": None, "waited_s": 0}
        self.active_turns = 0
        self.notes: list[str | Message] = []
        self.partial = False
        self.semaphore = asyncio.Semaphore(config.parallel)
        self.measured = asyncio.Semaphore(config.resume_parallel)  # timed turns: each TTFT its own cost, not a queue's
        self.stop_active = asyncio.Event()
        self.active: list[asyncio.Future] = []

    def turn_spec(self, sid: int, user: str, label: str, extra_body: dict[str, Any] | None = None) -> RequestSpec:
        history = self.history
        request_id = f"s{sid}-t{len(history.get(sid, [])) + 1}-{label}"
        if self.target.api == "chat":
            messages: list[dict[str, str]] = []
            for said, reply in history.get(sid, []):
                messages += [{"role": "user", "content": said}, {"role": "assistant", "content": reply}]
            messages.append({"role": "user", "content": user})
            return self.session.spec(
                None,
                self.config.output_tokens,
                messages=messages,
                request_id=request_id,
                tag=label,
                extra_body=dict(extra_body or {}),
                **self.greedy,
            )
        text = "".join(f"{said} {reply}" for said, reply in history.get(sid, [])) + user
        return self.session.spec(
            text,
            self.config.output_tokens,
            request_id=request_id,
            tag=label,
            extra_body=dict(extra_body or {}),
            **self.greedy,
        )

    def next_user(self, sid: int, tokens: int | None = None) -> str:
        seed = self.config.seed + 100_000 * (len(self.history.get(sid, [])) + 1) + sid
        return self.prompts.text(self.config.turn_tokens if tokens is None else tokens, seed=seed)

    async def send(self, sid: int, spec: RequestSpec, label: str, remember: str | None = None) -> RequestRecord:
        async with self.semaphore if label == "turn1" else self.measured:
            record = RequestRecord()
            try:
                await self.session.client.send(spec, record)
            finally:
                self.records[label][sid] = record
                self.outcomes[label].records.append(record)
        if remember is not None and record.ok:
            self.history.setdefault(sid, []).append((remember, record.text))
        return record

    def next_turn(self, sid: int, label: str) -> Any:
        """The coroutine sending session `sid`'s next turn, recorded under `label`."""
        return self.send(sid, self.turn_spec(sid, self.next_user(sid), label), label)

    async def phase(self, label: str, jobs: list[Any], pct0: float, pct1: float) -> None:
        outcome = self.outcomes[label]
        outcome.measure_start = outcome.measure_start or time.perf_counter()
        expected_s = max(len(jobs) / self.config.parallel, 1.0)
        await self.reporter.ticking(label, pct0, pct1, asyncio.gather(*jobs), expected_s=expected_s)
        outcome.measure_end = time.perf_counter()

    async def first_turn(self, sid: int) -> None:
        user = self.prompts.text(self.config.history_tokens, seed=self.config.seed + sid)
        await self.send(sid, self.turn_spec(sid, user, "turn1"), "turn1", remember=user)

    async def keep_active(self, sid: int) -> None:
        """A never-swap session keeps talking (short turns) while the others idle."""
        while not self.stop_active.is_set() and not self.reporter.cancelled():
            user = self.next_user(sid, min(self.config.turn_tokens, 32))
            record = RequestRecord()
            await self.session.client.send(self.turn_spec(sid, user, "active"), record)
            if record.ok:
                self.history.setdefault(sid, []).append((user, record.text))
                self.active_turns += 1
            try:
                await asyncio.wait_for(self.stop_active.wait(), timeout=self.config.gap_s)
            except asyncio.TimeoutError:
                pass

    async def warm_sessions(self) -> None:
        """The warm (and never-swap) sessions' turn 1, then the warm sessions' turn 2 at once. On an
        engine with a fixed number of slots (llama.cpp) each warm session's turn 2 follows its own turn 1,
        one session at a time: more sessions than slots would otherwise overwrite each other's slot
        before their turn 2, and the reference would be no warm reference."""
        model = self.target.cache_model
        if model is not None and model.kind == SLOT_RESIDENT:
            await self.phase("turn1", [self.first_turn(i) for i in self.never_ids], 0, 5)
            self.snapshots["warm_start"] = await self.session.kv_now()
            one = asyncio.Semaphore(1)

            async def chain(sid: int) -> None:
                async with one:
                    await self.first_turn(sid)
                    if sid in self.history:
                        await self.next_turn(sid, "warm")

            await self.phase("warm", [chain(i) for i in self.warm_ids], 5, 15)
            self.snapshots["warm_end"] = await self.session.kv_now()
            return
        await self.phase("turn1", [self.first_turn(i) for i in self.warm_ids + self.never_ids], 0, 10)
        self.snapshots["warm_start"] = await self.session.kv_now()
        await self.phase("warm", [self.next_turn(i, "warm") for i in self.warm_ids if i in self.history], 10, 15)
        self.snapshots["warm_end"] = await self.session.kv_now()

    async def idle_first_turns(self) -> None:
        await self.phase("turn1", [self.first_turn(i) for i in self.idle_ids], 15, 25)
        self.ok_idle = [i for i in self.idle_ids if i in self.history]

    def size_pressure(self) -> tuple[int, dict[str, Any]]:
        """The pressure's request size and plan from the KV the idle sessions hold against the pool:
        the larger of the planned capacity and the engine's own statement (the pressure must
        exceed the real pool, and a capacity model may under-estimate it)."""
        config, params = self.config, self.params
        capacity_param = config.capacity_param
        recording = self.session.metrics.recording
        stated = (recording.kv_capacity or {}).get("tokens")
        stated_source = (recording.kv_capacity or {}).get("source")
        if not stated:  # neither stated nor planned: the engine's used tokens over its usage ratio
            stated = swap.capacity_from_usage(
                recording.series.get("kv_used_tokens", []), recording.series.get("kv_usage_ratio", [])
            )
            stated_source = "kv_used_tokens / kv_usage_ratio during the first turns" if stated else None
        capacity = max(int(stated or 0), int(capacity_param or 0)) or None
        source = (
            stated_source
            if stated and stated >= (capacity_param or 0)
            else ("params.kv_capacity_tokens" if capacity_param else None)
        )
        idle_kv = len(self.ok_idle) * (config.history_tokens + config.output_tokens)
        p_in = params.get("pressure_input_tokens")
        if p_in is None:
            share = (capacity or 0) // max(2 * max(config.pressure_c, 1), 1)
            p_in = int(min(max(share, config.turn_tokens), 8192))
            if self.target.max_model_len:
                p_in = max(min(p_in, self.target.max_model_len - config.output_tokens - 16), 1)
        else:
            p_in = require_param(params, "pressure_input_tokens", int, 1)
        planned = swap.pressure_plan(
            capacity,
            idle_kv,
            config.factor,
            p_in + config.output_tokens,
            int(params.get("max_pressure_requests") or 5000),
        )
        self.sizing = {
            "kv_capacity_tokens": capacity,
            "kv_capacity_source": source,
            "kv_capacity_planned": capacity_param,
            "kv_capacity_stated": stated,
            "idle_sessions": len(self.ok_idle),
            "idle_kv_tokens": idle_kv,
            "idle_kv_share_of_capacity": planned["idle_kv_share_of_capacity"],
            "history_tokens": config.history_tokens,
            "pressure_factor": config.factor,
            "pressure_input_tokens": p_in,
            "pressure_requests_planned": planned["requests"],
            "pressure_tokens_planned": planned["tokens"],
        }
        if planned.get("capped"):
            self.notes.append(Message(PRESSURE_CAPPED))
        if capacity is None:
            self.notes.append(Message(NO_KV_CAPACITY))
        return p_in, planned

    async def pressure(self, p_in: int, planned: dict[str, Any]) -> None:
        """Unique prompts through the pool while the idle sessions idle and the never-swap sessions
        keep talking; then the rest of idle_s."""
        session, config, prompts = self.session, self.config, self.prompts
        self.snapshots["pressure_start"] = await session.kv_now()
        self.active.extend(asyncio.ensure_future(self.keep_active(i)) for i in self.never_ids if i in self.history)
        idle_start = time.perf_counter()
        warm_cached = [r.cached_tokens for r in self.records["warm"].values() if r.ok]
        no_reuse = bool(warm_cached) and all(c == 0 for c in warm_cached)  # reported, and always 0
        if no_reuse:
            self.notes.append(Message(NO_WARM_REUSE))
        elif config.pressure_c > 0 and (planned["requests"] or config.idle_s > 0):
            self.pressure_outcome = await run_load(
                session.client,
                lambda i: session.spec(
                    prompts.text(p_in, seed=900_000 + i),
                    config.output_tokens,
                    request_id=f"pressure-{i}",
                    tag="pressure",
                ),
                LoadConfig(
                    mode="closed",
                    concurrency=config.pressure_c,
                    max_requests=planned["requests"],
                    duration_s=None if planned["requests"] else config.idle_s,
                    drain_timeout_s=120.0,
                ),
                cancel=self.cancel,
                progress=self.reporter.phase("pressure", 25, 65),
            )
            if self.pressure_outcome.cancelled:
                raise Cancelled()
        left = config.idle_s - (time.perf_counter() - idle_start)
        if left > 0:
            await self.reporter.ticking("idle", 65, 70, asyncio.sleep(left), left)

    async def resume(self) -> None:
        self.snapshots["resume_start"] = await self.session.kv_now()
        await self.phase("resume", [self.next_turn(i, "resume") for i in self.ok_idle], 70, 80)
        self.snapshots["resume_end"] = await self.session.kv_now()

    async def never_swap(self) -> None:
        """The never-swap sessions stop talking, then resume last."""
        self.stop_active.set()
        await asyncio.gather(*self.active)
        jobs = [self.next_turn(i, "never_swap") for i in self.never_ids if i in self.history]
        await self.phase("never_swap", jobs, 80, 85)

    async def recompute(self) -> None:
        """The idle sessions' resume again with the cache cleared: the eviction-free reference."""
        session = self.session
        method = await _clear_cache(session) if self.params.get("allow_cache_reset", True) else None
        extra_body = None
        model = self.target.cache_model
        if method is None and (self.target.engine == "llamacpp" or (model is not None and model.kind == SLOT_RESIDENT)):
            method, extra_body = CACHE_PROMPT_OFF, {"cache_prompt": False}
        if method is not None:
            jobs = [
                self.send(i, self.turn_spec(i, self.next_user(i), "recompute", extra_body), "recompute")
                for i in self.ok_idle
            ]
        else:
            method = UNIQUE_PROMPT
            same = self.config.history_tokens + self.config.output_tokens + self.config.turn_tokens
            jobs = [
                self.send(
                    i, session.spec(self.prompts.text(same, seed=700_000 + i), self.config.output_tokens), "recompute"
                )
                for i in self.ok_idle
            ]
        self.recompute_method = method
        await self.phase("recompute", jobs, 85, 95)

    async def cancelled(self) -> None:
        self.partial = True
        self.notes.append(Message(CANCELLED))
        self.stop_active.set()
        for task in self.active:
            task.cancel()
        await asyncio.gather(*self.active, return_exceptions=True)


def _swap_points(run: _SwapRun) -> tuple[list[LoadPoint], LoadPoint | None]:
    """One point per phase (engine stats over its measured window), and the pressure's."""
    session = run.session
    points = []
    for label in _SWAP_LABELS:
        outcome = run.outcomes[label]
        point = summarize(outcome, label=label)
        if outcome.measure_start:
            attach_engine_stats(
                point,
                session.metrics.recording,
                outcome.measure_start - session.time_zero,
                outcome.measure_end - session.time_zero,
            )
        points.append(point)
    pressure_point = None
    pressure_outcome = run.pressure_outcome
    if pressure_outcome is not None:
        pressure_point = summarize(pressure_outcome, label="pressure")
        attach_engine_stats(
            pressure_point,
            session.metrics.recording,
            pressure_outcome.measure_start - session.time_zero,
            pressure_outcome.measure_end - session.time_zero,
        )
        points.append(pressure_point)
    return points, pressure_point


def _swap_eviction(run: _SwapRun) -> dict[str, Any]:
    """Whether the idle sessions' KV was evicted, as observed (benchmarks.harness.swap)."""
    records = run.records
    cpu = [v for _, v in run.session.metrics.recording.series.get("cpu_kv_usage_ratio", [])]
    resumed = [record for record in records["resume"].values() if record.ok]
    sources = {r.cached_source for r in [*records["warm"].values(), *resumed] if r.cached_source}
    eviction = swap.observe_eviction(
        [records["warm"][i].cached_tokens for i in records["warm"] if records["warm"][i].ok],
        [record.cached_tokens for record in resumed],
        run.snapshots,
        max(cpu) if cpu else None,
        {label: _ttfts(records[label]) for label in ("warm", "resume", "recompute")},
        cached_source=", ".join(sorted(sources)) or None,
        resumed_prompts=[record.prompt_tokens for record in resumed],
    )
    eviction["idle_kv_tokens"] = run.sizing.get("idle_kv_tokens")
    eviction["kv_capacity_tokens"] = run.sizing.get("kv_capacity_tokens")
    eviction["pressure_requests"] = len(run.pressure_outcome.records) if run.pressure_outcome else 0
    return eviction


def _swap_result(run: _SwapRun, baseline: dict[str, float] | None) -> NormalizedResult:
    """The figures, verdicts and result of a finished (or cancelled) run."""
    session, params, records, outcomes, notes = run.session, run.params, run.records, run.outcomes, run.notes
    points, pressure_point = _swap_points(run)
    eviction = _swap_eviction(run)
    resume = _resume_figures(records, run.recompute_method)
    continuation = _continuation(records, run.recompute_method, run.config.tolerance)
    never = _never_swap(records, run.never_ids)
    verdicts = _swap_verdicts(
        eviction, resume, continuation, never, run.config.max_ratio, baseline, run.settled, session
    )
    verdicts.append(errors_verdict([p for p in points if p.label != "pressure"]))
    budget = budget_verdicts(points[2], params, label="resume", records=outcomes["resume"].records)
    if not eviction["observed"]:
        budget = [
            verdict(
                v["name"],
                NOT_EXERCISED,
                Message(NO_EVICTION_BUDGET, {"detail": detail_message_of(v)}),
                v["value"],
                v["threshold"],
                v["n"],
            )
            for v in budget
        ]
    verdicts.extend(budget)
    if params.get("swap_in_delay_budget_ms") is not None:
        verdicts.append(_delay_class_verdict(run, points[2], eviction))
    if pressure_point is not None and (pressure_point.requests_failed or 0):
        notes.append(Message(PRESSURE_FAILED, {"n": pressure_point.requests_failed}))
    observed = _swap_observed_line(eviction, resume, continuation, never, run.sizing)
    run.reporter.close()
    return build_result(
        "swap_recovery",
        session,
        params,
        points,
        [outcomes[label] for label in _SWAP_LABELS] + ([run.pressure_outcome] if run.pressure_outcome else []),
        verdicts,
        notes,
        run.partial,
        {
            "sizing": run.sizing,
            "eviction": eviction,
            "resume": resume,
            "continuation": continuation,
            "never_swap": never,
            "kv_baseline": baseline,
            "kv_after": run.settled.get("after"),
            "active_turns": run.active_turns,
            "observed": observed,
        },
    )


def _delay_class_verdict(run: _SwapRun, resume_point: LoadPoint, eviction: dict[str, Any]) -> dict[str, Any]:
    """The session class that accepts a swap-in delay, judged against its own budget: each resumed
    session's TTFT over the warm sessions' p50 (the same history still in GPU memory), p95 against
    `swap_in_delay_budget_ms`, with its interval and sample size; not exercised when no eviction was
    observed (nothing was swapped in). The never-swap class is judged by `never_swap_sessions_warm`."""
    name = "swap_in_delay_within_budget"
    budget = float(require_param(run.params, "swap_in_delay_budget_ms", float, 0))
    warm = _ttfts(run.records["warm"])
    warm_p50 = statistics.median(warm) if warm else None
    if warm_p50 is None:
        return verdict(name, NOT_JUDGED, Message(NO_WARM_TURN), None, budget, 0)
    delays = [ttft - warm_p50 for ttft in _ttfts(run.records["resume"])]
    what = Message(SWAP_IN_DELAY, {"warm": f"{warm_p50:.0f}"})
    if not eviction["observed"]:
        return verdict(
            name,
            NOT_EXERCISED,
            Message(NO_SWAP_IN, {"what": what, "n": len(delays)}),
            None,
            budget,
            len(delays),
        )
    extra = resume_point.extra or {}
    reasons = (
        [load(m) for m in extra.get("client_bound_reason_messages") or []]
        or extra.get("client_bound_reasons")
        or ([Message(NOT_HELD)] if resume_point.client_bound else [])
    )
    judged = judge_percentile(
        name,
        delays,
        95,
        budget,
        what,
        client_bound_reasons=reasons,
        client_slack_ms=client_slack_ms(resume_point),
        load_held=load_held(resume_point),
    )
    detail = Message(DELAY_CLASS, {"detail": detail_message_of(judged)})
    return judged | {"detail": str(detail), "detail_message": to_json(detail)}


async def _clear_cache(session: Session) -> str | None:
    """Clear the engine's prefix cache (vLLM `POST /reset_prefix_cache`, behind
    VLLM_SERVER_DEV_MODE in some versions; SGLang `POST /flush_cache`); the path that worked, or None."""
    for path in ("/reset_prefix_cache", "/flush_cache"):
        try:
            status, _ = await session.client.post_json(path, {}, timeout_s=30.0)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            continue
        if 200 <= status < 300:
            return f"POST {path}"
    return None


def _ttfts(records: dict[int, RequestRecord]) -> list[float]:
    return [r.ttft_ms for r in records.values() if r.ok and r.ttft_ms is not None]


def _phase_figures(values: list[float]) -> dict[str, Any]:
    interval = percentile_interval(values, 50) if len(values) >= 2 else None
    return Stats.from_values(values).__dict__ | {"n": len(values), "p50_interval": interval and list(interval)}


def _resume_figures(records: dict[str, dict[int, RequestRecord]], recompute_method: str | None) -> dict[str, Any]:
    """Warm, resumed and recomputed TTFT of the same history length; swap-in cost = resumed - warm,
    benefit = recompute - resumed, each with a bootstrap interval of the p50 difference."""
    warm, resumed, recomputed = _ttfts(records["warm"]), _ttfts(records["resume"]), _ttfts(records["recompute"])
    figures: dict[str, Any] = {
        "warm_ttft_ms": _phase_figures(warm),
        "resume_ttft_ms": _phase_figures(resumed),
        "recompute_ttft_ms": _phase_figures(recomputed),
        "recompute_method": recompute_method,
    }
    for name, top, bottom in (("swap_in_cost_ms", resumed, warm), ("recompute_benefit_ms", recomputed, resumed)):
        value = swap.median_difference(top, bottom)
        figures[name] = {
            "p50": value,
            "interval": swap.difference_interval(top, bottom),
            "n": min(len(top), len(bottom)),
        }
    for name, top, bottom in (("resume_over_recompute", resumed, recomputed), ("resume_over_warm", resumed, warm)):
        ratio = swap.median_ratio(top, bottom)
        interval = ratio_interval(top, bottom) if ratio is not None else None
        figures[name] = {"value": ratio, "interval": interval and list(interval), "n": min(len(top), len(bottom))}
    return figures


def _continuation(
    records: dict[str, dict[int, RequestRecord]], recompute_method: str | None, tolerance: int
) -> dict[str, Any]:
    """Each resumed session's output against the same history's output with the cache cleared."""
    same_history = recompute_method is not None and not recompute_method.startswith("unique")
    summary: dict[str, Any] = {"reference": recompute_method if same_history else None, "tolerance_token": tolerance}
    if not same_history:
        return summary | {"compared": 0}
    reference, resumed = records["recompute"], records["resume"]
    compared = {
        sid: swap.compare_continuation(reference[sid].text, resumed[sid].text, tolerance)
        for sid in resumed
        if resumed[sid].ok and sid in reference and reference[sid].ok
    }
    divergences = [c["first_divergence"] for c in compared.values() if c["first_divergence"] is not None]
    return summary | {
        "compared": len(compared),
        "identical": sum(1 for c in compared.values() if c["identical"]),
        "late_divergence": sum(1 for c in compared.values() if c["ok"] and not c["identical"]),
        "failed_sessions": sorted(sid for sid, c in compared.items() if not c["ok"])[:20],
        "failed": sum(1 for c in compared.values() if not c["ok"]),
        "garbage": sum(1 for c in compared.values() if c["garbage"]),
        "first_divergence_min": min(divergences) if divergences else None,
        "matching_fraction_mean": (sum(c["matching_fraction"] for c in compared.values()) / len(compared))
        if compared
        else None,
    }


def _never_swap(records: dict[str, dict[int, RequestRecord]], never_ids: list[int]) -> dict[str, Any]:
    """The never-swap sessions' last resume against the warm sessions: cached share of the prompt
    (when the engine reports cached tokens), else TTFT within 1.5x the warm p50 (+20 ms)."""
    warm = [r for r in records["warm"].values() if r.ok]
    warm_ttft = Stats.from_values([r.ttft_ms for r in warm]).p50
    shares = [r.cached_tokens / r.prompt_tokens for r in warm if r.cached_tokens is not None and r.prompt_tokens]
    warm_share = statistics.median(shares) if shares else None
    sessions = []
    for sid in never_ids:
        record = records["never_swap"].get(sid)
        if record is None or not record.ok:
            sessions.append({"session": sid, "ok": False, "warm": False})
            continue
        share = (
            record.cached_tokens / record.prompt_tokens
            if record.cached_tokens is not None and record.prompt_tokens
            else None
        )
        if share is not None and warm_share:
            came_back_warm = share >= 0.8 * warm_share
        elif warm_ttft is not None and record.ttft_ms is not None:
            came_back_warm = record.ttft_ms <= max(1.5 * warm_ttft, warm_ttft + 20.0)
        else:
            came_back_warm = None
        sessions.append(
            {"session": sid, "ok": True, "ttft_ms": record.ttft_ms, "cached_share": share, "warm": came_back_warm}
        )
    return {
        "sessions": len(never_ids),
        "warm_count": sum(1 for s in sessions if s.get("warm")),
        "warm_ttft_p50_ms": warm_ttft,
        "warm_cached_share": warm_share,
        "ttft_ms": Stats.from_values([s.get("ttft_ms") for s in sessions]).__dict__,
        "per_session": sessions,
    }


# What the swap test's verdicts say and what it observed, as message templates (pages show them in
# their language; the English text is the API's and the CLI's).
NO_EVICTION_BUDGET = _("no eviction observed: %(detail)s")
NO_WARM_TURN = _("no warm turn to measure the swap-in delay against")
SWAP_IN_DELAY = _("swap-in delay (resume TTFT over the warm p50 %(warm)s ms)")
NO_SWAP_IN = _("no eviction observed, so no session was swapped in: %(what)s of %(n)s sessions")
DELAY_CLASS = _("sessions that accept a swap-in delay: %(detail)s")
SIZED = _(
    "the idle sessions' histories needed %(need)s KV tokens of a %(pool)s-token pool; %(pressure)s pressure requests"
)
UNSIZED = _("KV capacity unknown; %(pressure)s pressure requests")
EVIDENCE_SIZED = _("%(evidence)s (%(sized)s)")
NO_REUSE_BETWEEN_TURNS = _(
    "the engine reused no KV between turns (the warm sessions got 0 cached tokens): every resume recomputes, there "
    "is nothing to evict (%(sized)s)"
)
NO_EVICTION_SEEN = _(
    "no eviction or offload observed: cached tokens on resume p50 %(resume)s vs warm %(warm)s, no offload series "
    "moved (%(sized)s); raise params.pressure_factor or give params.kv_capacity_tokens"
)
RESUME_FIGURES = _("resume TTFT p50 %(resume)s vs recompute %(recompute)s vs warm %(warm)s (recompute: %(method)s)")
NO_EVICTION_RESUME = _("no eviction observed, so the resume cost says nothing about swapping: %(figures)s")
NO_RESUME_TTFT = _("no resume or recompute TTFT: %(figures)s")
FEW_RESUMES = _("%(figures)s from %(n)s sessions: at least %(min)s are needed to judge it")
RESUME_RATIO = _("%(figures)s: ratio %(ratio)s (95%% CI %(low)s–%(high)s, n=%(n)s) vs <= %(limit)s")
NO_OFFLOAD_BENEFIT = _("%(detail)s: resuming an evicted session costs as much as recomputing it (no offload benefit)")
GREEDY_CAVEAT = _(
    "greedy decoding (temperature 0, fixed seed); real GPUs are not bit-deterministic, so a divergence at or after "
    "token %(tolerance)s is reported, not failed"
)
NO_REFERENCE = _("no eviction-free reference: the engine offers no cache reset")
NOTHING_TO_COMPARE = _("no resumed session to compare with its reference")
CONTINUATION = _(
    "%(identical)s of %(compared)s resumed sessions identical to the reference (%(reference)s), %(late)s diverged "
    "late, %(failed)s failed%(sessions)s%(divergence)s, matching %(matching)s on average; %(caveat)s"
)
FAILED_SESSIONS = _(" (sessions %(sessions)s)")
FIRST_DIVERGENCE = _("; first divergence at token %(token)s")
NO_DIVERGENCE = _("; no divergence")
NO_EVICTION_CONTINUATION = _("no eviction observed, so no session came back from one: %(detail)s")
NEVER_SWAP = _(
    "%(warm_count)s of %(total)s never-swap sessions (kept active, resumed last) came back warm: TTFT p50 %(ttft)s "
    "vs warm %(warm)s"
)
NEVER_SWAP_SHARE = _("%(detail)s, cached share %(share)s+ vs warm %(warm_share)s")
NO_EVICTION_NEVER_SWAP = _("no eviction observed, so staying warm proves nothing: %(detail)s")
RELEASED = _(
    "KV usage %(kv)s vs baseline %(base)s (tolerance %(tolerance)s) %(waited)s s after every session closed; "
    "%(busy)s requests still running or waiting"
)
NO_KV_METRIC = _("the engine exports no KV usage metric")
# how the recompute reference was made (`_SwapRun.recompute`), as a page shows it
CACHE_PROMPT_OFF = "cache_prompt=false"
UNIQUE_PROMPT = _("unique prompt of the same length (no cache reset on this engine)")
# the observed line
OBSERVED_EVICTED = _("evicted %(evicted)s of %(sessions)s idle sessions")
OBSERVED_OFFLOADED = _("offloaded the %(sessions)s idle sessions' KV")
OBSERVED_UNCOUNTED = _("evictions seen (not counted per session) for %(sessions)s idle sessions")
OBSERVED_NO_REUSE = _("no KV kept between turns for %(sessions)s idle sessions (every resume recomputes)")
OBSERVED_NO_EVICTION = _("no eviction of %(sessions)s idle sessions")
OBSERVED_SIZED = _(
    " (their histories needed %(need)s of %(pool)s KV tokens; %(pressure)s pressure requests; preemptions "
    "+%(preemptions)s)"
)
OBSERVED_UNSIZED = _(" (%(pressure)s pressure requests; KV capacity unknown)")
OBSERVED_RECOMPUTING = _("%(what)s, the resume recomputing %(recomputed)s of %(prompt)s prompt tokens (%(via)s)")
VIA_LLAMACPP_TIMINGS = _("llama.cpp timings")
VIA_RESPONSES_USAGE = _("the responses' usage")
OBSERVED_LINE = _(
    "%(what)s%(held)s; resume TTFT p50 %(resume)s vs warm %(warm)s vs recompute %(recompute)s "
    "(n=%(n)s)%(continuation)s%(never_swap)s"
)
OBSERVED_CONTINUATION = _("; continuation identical in %(identical)s of %(compared)s")
OBSERVED_NEVER_SWAP = _("; never-swap %(warm)s of %(sessions)s warm")


def method_message(method: str | None) -> Any:
    """How the recompute reference was made (`_SwapRun.recompute`'s method) as a message where
    kvselect wrote it, else the text as stored."""
    if method is None:
        return ""
    if method.startswith("POST ") and method[5:] in RESET_BY_PATH:
        return reset_method_message(method)
    if method == CACHE_PROMPT_OFF:
        return Message(CACHE_PROMPT_OFF, context=RESET_CONTEXT)
    if method == UNIQUE_PROMPT:
        return Message(UNIQUE_PROMPT)
    return method


def _swap_verdicts(
    eviction: dict[str, Any],
    resume: dict[str, Any],
    continuation: dict[str, Any],
    never: dict[str, Any],
    max_ratio: float,
    baseline: dict[str, float] | None,
    settled: dict[str, Any],
    session: Session,
) -> list[dict[str, Any]]:
    observed = eviction["observed"]
    resumed_n = eviction["sessions"]
    sized = (
        Message(
            SIZED,
            {
                "need": f"{eviction['idle_kv_tokens']}",
                "pool": f"{eviction['kv_capacity_tokens']}",
                "pressure": eviction["pressure_requests"],
            },
        )
        if eviction.get("kv_capacity_tokens")
        else Message(UNSIZED, {"pressure": eviction["pressure_requests"]})
    )
    if observed:
        how = [load(m) for m in eviction.get("how_messages") or []] or eviction["how"]
        exercised = verdict(
            "eviction_exercised",
            PASS,
            Message(EVIDENCE_SIZED, {"evidence": Join(how, CLAUSE_SEPARATOR), "sized": sized}),
            eviction.get("evicted_sessions"),
            None,
            resumed_n,
            source=", ".join(eviction.get("judged_by") or ()) or None,
        )
    elif eviction.get("cache_reuse_seen") is False:
        exercised = verdict(
            "eviction_exercised",
            NOT_EXERCISED,
            Message(NO_REUSE_BETWEEN_TURNS, {"sized": sized}),
            0,
            None,
            resumed_n,
        )
    else:
        exercised = verdict(
            "eviction_exercised",
            NOT_EXERCISED,
            Message(
                NO_EVICTION_SEEN,
                {
                    "resume": f"{eviction['cached_tokens_resume_p50']}",
                    "warm": f"{eviction['cached_tokens_warm_p50']}",
                    "sized": sized,
                },
            ),
            0,
            None,
            resumed_n,
        )
    verdicts = [exercised]
    ratio = resume["resume_over_recompute"]
    figures = Message(
        RESUME_FIGURES,
        {
            "resume": ms_or_na(resume["resume_ttft_ms"]["p50"]),
            "recompute": ms_or_na(resume["recompute_ttft_ms"]["p50"]),
            "warm": ms_or_na(resume["warm_ttft_ms"]["p50"]),
            "method": method_message(resume["recompute_method"]) or "None",
        },
    )
    cache_model = session.target.cache_model
    if cache_model is not None and not cache_model.offload:
        verdicts.append(
            not_applicable(
                "resume_cheaper_than_recompute", cache_model.no_offload_reason(), cache_model.source, figures, max_ratio
            )
        )
    else:
        verdicts.append(_resume_verdict(observed, ratio, figures, max_ratio))
    verdicts.append(_continuation_verdict(continuation, observed))
    if never["sessions"]:
        verdicts.append(_never_swap_verdict(never, observed))
    verdicts.append(_released_verdict(baseline, settled, cache_model))
    return verdicts


def _resume_verdict(observed: bool, ratio: dict[str, Any], figures: Message, max_ratio: float) -> dict[str, Any]:
    """Resuming an evicted session against recomputing it (the offload's benefit)."""
    if not observed:
        status = NOT_EXERCISED
        detail = Message(NO_EVICTION_RESUME, {"figures": figures})
    elif ratio["value"] is None:
        status, detail = NOT_JUDGED, Message(NO_RESUME_TTFT, {"figures": figures})
    elif ratio["n"] < MIN_SAMPLES:
        status = INSUFFICIENT_DATA
        detail = Message(FEW_RESUMES, {"figures": figures, "n": ratio["n"], "min": MIN_SAMPLES})
    else:
        status = compare(ratio["value"], ratio["interval"], max_ratio)
        low, high = ratio["interval"] or (ratio["value"], ratio["value"])
        detail = Message(
            RESUME_RATIO,
            {
                "figures": figures,
                "ratio": f"{ratio['value']:.2f}",
                "low": f"{low:.2f}",
                "high": f"{high:.2f}",
                "n": ratio["n"],
                "limit": f"{max_ratio:g}",
            },
        )
        if status == INCONCLUSIVE:
            detail = Message(STRADDLES, {"detail": detail})
        elif status == FAIL:
            detail = Message(NO_OFFLOAD_BENEFIT, {"detail": detail})
    return verdict(
        "resume_cheaper_than_recompute", status, detail, ratio["value"], max_ratio, ratio["n"], ratio["interval"]
    )


def _continuation_verdict(continuation: dict[str, Any], observed: bool) -> dict[str, Any]:
    """Each resumed session's output against the eviction-free reference."""
    tolerance = continuation["tolerance_token"]
    caveat = Message(GREEDY_CAVEAT, {"tolerance": tolerance})
    compared = continuation.get("compared") or 0
    if continuation.get("reference") is None:
        status, detail = NOT_JUDGED, Message(NO_REFERENCE)
    elif not compared:
        status, detail = NOT_JUDGED, Message(NOTHING_TO_COMPARE)
    else:
        first = continuation["first_divergence_min"]
        detail = Message(
            CONTINUATION,
            {
                "identical": continuation["identical"],
                "compared": compared,
                "reference": method_message(continuation["reference"]),
                "late": continuation["late_divergence"],
                "failed": continuation["failed"],
                "sessions": Message(FAILED_SESSIONS, {"sessions": f"{continuation['failed_sessions']}"})
                if continuation["failed"]
                else "",
                "divergence": Message(FIRST_DIVERGENCE, {"token": first})
                if first is not None
                else Message(NO_DIVERGENCE),
                "matching": f"{continuation['matching_fraction_mean']:.0%}",
                "caveat": caveat,
            },
        )
        status = PASS if not continuation["failed"] else FAIL
        if not observed:
            status, detail = NOT_EXERCISED, Message(NO_EVICTION_CONTINUATION, {"detail": detail})
    return verdict("continuation_identical", status, detail, continuation.get("failed"), 0, compared)


def _never_swap_verdict(never: dict[str, Any], observed: bool) -> dict[str, Any]:
    """The never-swap sessions came back warm while the idle ones were evicted."""
    warm_count, total = never["warm_count"], never["sessions"]
    detail = Message(
        NEVER_SWAP,
        {
            "warm_count": warm_count,
            "total": total,
            "ttft": ms_or_na(never["ttft_ms"]["p50"]),
            "warm": ms_or_na(never["warm_ttft_p50_ms"]),
        },
    )
    if never["warm_cached_share"] is not None:
        shares = [s.get("cached_share") for s in never["per_session"] if s.get("cached_share") is not None]
        detail = Message(
            NEVER_SWAP_SHARE,
            {
                "detail": detail,
                "share": f"{min(shares, default=0):.2f}",
                "warm_share": f"{never['warm_cached_share']:.2f}",
            },
        )
    status = PASS if warm_count == total else FAIL
    if not observed:
        status, detail = NOT_EXERCISED, Message(NO_EVICTION_NEVER_SWAP, {"detail": detail})
    return verdict("never_swap_sessions_warm", status, detail, warm_count, total, total)


def _released_verdict(
    baseline: dict[str, float] | None, settled: dict[str, Any], cache_model: CacheModel | None
) -> dict[str, Any]:
    """The KV back to its baseline once every session closed; not applicable where the engine's
    documented cache model keeps finished requests' KV resident (llama.cpp's slots)."""
    after = settled.get("after")
    kv, base = (after or {}).get("kv_usage_ratio"), (baseline or {}).get("kv_usage_ratio")
    busy = ((after or {}).get("running") or 0) + ((after or {}).get("waiting") or 0)
    figures = (
        None
        if kv is None or base is None
        else Message(
            RELEASED,
            {
                "kv": f"{kv:.3f}",
                "base": f"{base:.3f}",
                "tolerance": f"{KV_BASELINE_TOLERANCE}",
                "waited": f"{settled['waited_s']}",
                "busy": f"{busy:g}",
            },
        )
    )
    if cache_model is not None and cache_model.keeps_finished_kv:
        return not_applicable("idle_kv_released", cache_model.resident_kv_reason(), cache_model.source, figures or "")
    if figures is None:
        return verdict("idle_kv_released", NOT_JUDGED, Message(NO_KV_METRIC))
    released = kv <= base + KV_BASELINE_TOLERANCE and busy == 0
    return verdict("idle_kv_released", PASS if released else FAIL, figures, kv, base + KV_BASELINE_TOLERANCE)


def _swap_observed_line(
    eviction: dict[str, Any],
    resume: dict[str, Any],
    continuation: dict[str, Any],
    never: dict[str, Any],
    sizing: dict[str, Any],
) -> dict[str, Any]:
    """metadata["observed"]: one sentence with the key figures and sample sizes, and the figures."""
    n = resume["resume_ttft_ms"]["n"]
    sessions = {"sessions": eviction["sessions"]}
    if eviction["observed"]:
        evicted = eviction.get("evicted_sessions")
        what = (
            Message(OBSERVED_EVICTED, {**sessions, "evicted": evicted})
            if evicted
            else Message(OBSERVED_OFFLOADED, sessions)
            if eviction["offloaded"]
            else Message(OBSERVED_UNCOUNTED, sessions)
        )
    elif eviction.get("cache_reuse_seen") is False:
        what = Message(OBSERVED_NO_REUSE, sessions)
    else:
        what = Message(OBSERVED_NO_EVICTION, sessions)
    capacity = sizing.get("kv_capacity_tokens")
    held = (
        Message(
            OBSERVED_SIZED,
            {
                "need": f"{sizing.get('idle_kv_tokens')}",
                "pool": f"{capacity}",
                "pressure": eviction["pressure_requests"],
                "preemptions": f"{eviction.get('preemptions') or 0:g}",
            },
        )
        if capacity
        else Message(OBSERVED_UNSIZED, {"pressure": eviction["pressure_requests"]})
    )
    if eviction.get("resume_recomputed_tokens") is not None:
        via = VIA_LLAMACPP_TIMINGS if eviction.get("cached_tokens_source") == "timings" else VIA_RESPONSES_USAGE
        recomputed, prompt = eviction["resume_recomputed_tokens"], eviction["resume_prompt_tokens"]
        what = Message(
            OBSERVED_RECOMPUTING,
            {"what": what, "recomputed": f"{recomputed:,}", "prompt": f"{prompt:,}", "via": Message(via)},
        )
    identical = (
        Message(OBSERVED_CONTINUATION, {"identical": continuation["identical"], "compared": continuation["compared"]})
        if continuation.get("compared")
        else ""
    )
    never_swap = (
        Message(OBSERVED_NEVER_SWAP, {"warm": never["warm_count"], "sessions": never["sessions"]})
        if never["sessions"]
        else ""
    )
    line = Message(
        OBSERVED_LINE,
        {
            "what": what,
            "held": held,
            "resume": ms_or_na(resume["resume_ttft_ms"]["p50"]),
            "warm": ms_or_na(resume["warm_ttft_ms"]["p50"]),
            "recompute": ms_or_na(resume["recompute_ttft_ms"]["p50"]),
            "n": n,
            "continuation": identical,
            "never_swap": never_swap,
        },
    )
    return {
        "line": str(line),
        "line_message": to_json(line),
        "eviction_observed": eviction["observed"],
        "evicted_sessions": eviction.get("evicted_sessions"),
        "idle_sessions": eviction["sessions"],
        "idle_kv_tokens": sizing.get("idle_kv_tokens"),
        "kv_capacity_tokens": capacity,
        "resume_ttft_p50_ms": resume["resume_ttft_ms"]["p50"],
        "warm_ttft_p50_ms": resume["warm_ttft_ms"]["p50"],
        "recompute_ttft_p50_ms": resume["recompute_ttft_ms"]["p50"],
        "resume_over_recompute": resume["resume_over_recompute"]["value"],
        "continuation_identical": continuation.get("identical"),
        "continuation_compared": continuation.get("compared"),
        "never_swap_warm": never["warm_count"],
        "n": n,
    }


SPEC = TestSpec.of(suite_row.TEST, run_swap_recovery)
