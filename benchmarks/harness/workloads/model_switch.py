"""Test 7, model switch and rollback: move steady load to a new version and back; errors,
downtime and time back within the budget.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable

from benchmarks.harness.client import OpenAIClient
from benchmarks.harness.load_config import LoadConfig, LoadOutcome
from benchmarks.harness.load_summary import summarize
from benchmarks.harness.metrics import MetricsSampler
from benchmarks.harness.request_record import RequestRecord, RequestSpec
from benchmarks.harness.safety import check_target
from benchmarks.harness.workloads.common import (
    CANCELLED,
    PlanError,
    Reporter,
    Session,
    Target,
    budget_verdicts,
    build_result,
    detail_message_of,
    figure_or_na,
    make_verdict,
    require_param,
    series_in,
)
from benchmarks.harness.workloads.spec import TestSpec
from benchmarks.harness.workloads.spec import gettext_noop as _
from benchmarks.harness.workloads.stress import attach_engine_stats, slo_of
from benchmarks.result import LoadPoint, NormalizedResult
from benchmarks.suite import model_switch as suite_row
from benchmarks.verdicts import (
    FAIL,
    INCONCLUSIVE,
    INSUFFICIENT_DATA,
    NOT_EXERCISED,
    PASS,
    verdict,
)
from selection.domain.messages import NAME_SEPARATOR, Message, pgettext, to_json

SWITCH_MODES = ("endpoint", "restart")
# the run's note when the simulator's restart hook refused (its answer quoted as it wrote it)
HOOK_REFUSED = _("%(event)s: the simulator refused the restart (%(status)s): %(answer)s")
EVENT_NAMES = {
    "switch": pgettext("model switch event", "switch"),
    "rollback": pgettext("model switch event", "rollback"),
}

# The switch test's verdict details, as message templates (pages show them in their language).
RESTART_REFUSED = _("%(detail)s; the restart was refused (%(status)s), so no switch happened")
SWITCH_ERRORS = _(
    "%(errors)s of %(n)s requests failed across the switch and the rollback (at most %(allowed)s allowed); "
    "requests failed for %(down)s s in all"
)
NOTHING_AFTER_SWITCH = _("no request was sent after the switch")
THE_SWITCH = _("the switch")
THE_ROLLBACK = _("the rollback")
NEVER_HAPPENED = _("%(what)s never happened (cancelled first)")
NO_LATENCY_BUDGET = _("no latency budget: errors only")
TOO_FEW_AFTER = _("%(n)s requests after %(what)s: at least %(window)s are needed")
NEVER_RECOVERED = _("no run of %(window)s good requests (%(budget)s) in the %(span)s s after %(what)s (n=%(n)s)")
RECOVERED = _("the budget (%(budget)s) held again %(recovery)s s after %(what)s (limit %(limit)s s, n=%(n)s)")
FAILED_BEFORE_TOO = _("%(detail)s; the budget did not hold before the switch either")

# what the test observed (metadata.observed's line)
OBSERVED_LINE = _(
    "switch by %(how)s: %(errors)s errors, requests failing %(down)s s, longest stall %(stall)s; budget held again "
    "%(switch_recovery)s after the switch and %(rollback_recovery)s after the rollback; KV usage %(kv_before)s "
    "before, peak %(kv_peak)s after; cache hit %(hit_before)s before vs %(hit_after)s right after "
    "(n=%(n_before)s/%(n_switched)s/%(n_rolled_back)s)"
)
OBSERVED_BY_ENDPOINT = _("endpoint pair")
OBSERVED_BY_RESTART = _("restart")
OBSERVED_NEVER = pgettext("a time that never came", "never")


SWITCH_PHASES = ("before", "switched", "rolled_back")


SWITCH_ERROR_BACKOFF_S = 0.05  # a worker whose request failed waits this long: a down engine answers at once


def switch_mode(target: Target, params: dict[str, Any]) -> str:
    mode = params.get("switch_mode") or ("endpoint" if params.get("switch_endpoint") else None)
    if mode is None:
        if target.engine != "simulator":
            raise PlanError(
                "params.switch_endpoint: give the second deployment's endpoint (the new model or engine "
                "version) to move traffic to and back; kvselect runs no switch command against a real engine"
            )
        mode = "restart"
    if mode not in SWITCH_MODES:
        raise PlanError(f"params.switch_mode: must be one of {', '.join(SWITCH_MODES)}, got {mode!r}")
    if mode == "endpoint" and not params.get("switch_endpoint"):
        raise PlanError("params.switch_endpoint: required when params.switch_mode is 'endpoint'")
    if mode == "restart" and target.engine != "simulator":
        raise PlanError(
            "params.switch_mode: 'restart' uses the simulator's POST /admin/restart; for a real engine give "
            "params.switch_endpoint (the new version deployed beside the current one)"
        )
    if not isinstance(params.get("restart_config") or {}, dict):
        raise PlanError(
            f"params.restart_config: must be an object of simulator settings, got {params['restart_config']!r}"
        )
    return mode


def switch_phase_of(record: RequestRecord, events: dict[str, float], zero: float, restart: bool) -> str:
    """The phase a request counts in: the one it was sent in, except that on a restart a request still
    in flight at the next event (cut, or held while the engine restarted) counts in that event's phase,
    not before it. Between two endpoints nothing goes down: a request stays where it was sent."""
    name = record.tag
    if not restart:
        return name
    ended = (record.end_time or record.send_time) - zero
    if name == "before" and "switch" in events and ended >= events["switch"]:
        name = "switched"
    if name == "switched" and "rollback" in events and ended >= events["rollback"]:
        name = "rolled_back"
    return name


def _good_for_budget(record: RequestRecord, params: dict[str, Any]) -> bool:
    """A request that succeeded within the per-request latency budgets (TTFT, TPOT)."""
    if not record.ok or record.aborted:
        return False
    ttft, tpot = params.get("ttft_p95_ms"), params.get("tpot_p95_ms")
    if ttft is not None and (record.ttft_ms is None or record.ttft_ms > float(ttft)):
        return False
    return tpot is None or record.tpot_ms is None or record.tpot_ms <= float(tpot)


def recovery_seconds(records: list[RequestRecord], event: float, params: dict[str, Any], window: int) -> float | None:
    """Seconds from `event` to the first request of the first run of `window` consecutive requests that
    succeeded within the per-request budgets (TTFT, TPOT); None when no such run came."""
    ordered = sorted(records, key=lambda r: r.send_time)
    run = 0
    for index, record in enumerate(ordered):
        run = run + 1 if _good_for_budget(record, params) else 0
        if run == window:
            return max(ordered[index - window + 1].send_time - event, 0.0)
    return None


def downtime_seconds(records: list[RequestRecord]) -> float:
    """Total time requests failed: each run of failures counts from its first send to the next success's send."""
    ordered = sorted(records, key=lambda r: r.send_time)
    total, since = 0.0, None
    for record in ordered:
        if not record.ok:
            since = record.send_time if since is None else since
        elif since is not None:
            total += record.send_time - since
            since = None
    if since is not None:
        total += max((r.end_time or r.send_time) for r in ordered) - since
    return total


def longest_stall_seconds(records: list[RequestRecord], event: float) -> float:
    """The longest wait without a successful completion, from `event` on (a held switch shows here)."""
    ends = sorted(r.end_time for r in records if r.ok and r.end_time is not None and r.end_time >= event)
    if not ends:
        return 0.0
    gaps = [ends[0] - event] + [b - a for a, b in zip(ends, ends[1:], strict=False)]
    return max(gaps)


def _hit_ratio(records: list[RequestRecord]) -> float | None:
    """Mean share of the prompt the engine served from its cache (usage.cached_tokens), or None."""
    shares = [
        r.cached_tokens / r.prompt_tokens for r in records if r.ok and r.cached_tokens is not None and r.prompt_tokens
    ]
    return sum(shares) / len(shares) if shares else None


async def run_model_switch(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    """Steady load on the candidate, a switch to the new version (endpoint B, or the simulator's
    restart) and back: errors, downtime, time until the budget holds again, KV spike, cache-hit drop."""
    config = _switch_config(target, params)
    reporter = Reporter(progress, cancel)
    async with Session(target) as session:
        run = _SwitchRun(target, session, params, config, reporter)
        await run.open_endpoint_b()
        await run.steady_load_with_switch()
        await run.close_endpoint_b()
    return _switch_result(run)


@dataclass(frozen=True)
class _SwitchConfig:
    """run_model_switch's checked params."""

    concurrency: int
    input_tokens: int
    output_tokens: int
    prefix_tokens: int
    durations: dict[str, float]  # phase -> seconds
    window: int  # recovery_requests
    mode: str  # switch_mode: "endpoint" or "restart"

    @property
    def total_s(self) -> float:
        return sum(self.durations.values())


def _switch_config(target: Target, params: dict[str, Any]) -> _SwitchConfig:
    """The params checked before any request (PlanError names the faulty one)."""
    concurrency = require_param(params, "concurrency", int, 1)
    input_tokens = require_param(params, "input_tokens", int, 1)
    output_tokens = require_param(params, "output_tokens", int, 1)
    prefix_tokens = int(params.get("prefix_tokens") or 0)
    if not 0 <= prefix_tokens < input_tokens:
        raise PlanError(f"params.prefix_tokens: must be in [0, input_tokens), got {prefix_tokens!r}")
    durations = {
        "before": require_param(params, "before_s", float, 0.1),
        "switched": require_param(params, "switched_s", float, 0.1),
        "rolled_back": require_param(params, "after_s", float, 0.1),
    }
    window = require_param(params, "recovery_requests", int, 1)
    mode = switch_mode(target, params)
    if mode == "endpoint" and target.allowed_hosts is not None:
        for key in ("switch_endpoint", "switch_metrics_url"):
            if params.get(key):
                try:
                    check_target(params[key], target.allowed_hosts)
                except ValueError as exc:
                    raise PlanError(f"params.{key}: {exc}") from exc
    return _SwitchConfig(concurrency, input_tokens, output_tokens, prefix_tokens, durations, window, mode)


class _SwitchRun:
    """One model-switch run's shared state: the current phase, the events' times, every request
    sent, the restart hook's answers and endpoint B (client and metrics) when there is one."""

    def __init__(
        self, target: Target, session: Session, params: dict[str, Any], config: _SwitchConfig, reporter: Reporter
    ) -> None:
        self.target, self.session, self.params, self.config, self.reporter = target, session, params, config, reporter
        assert session.prompts is not None
        self.prompts = session.prompts
        self.notes: list[str | Message] = []
        self.phase = "before"
        self.events: dict[str, float] = {}
        self.sent: list[RequestRecord] = []
        self.triggers: list[dict[str, Any]] = []
        self.second: MetricsSampler | None = None
        self.client_b: OpenAIClient | None = None
        self.stop = asyncio.Event()
        self.cancelled = False

    async def open_endpoint_b(self) -> None:
        """Endpoint B's client and metrics sampler (mode "endpoint" only)."""
        if self.config.mode != "endpoint":
            return
        target, params = self.target, self.params
        self.client_b = target.client(params["switch_endpoint"], params.get("switch_model"))
        await self.client_b.open()
        headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else None
        metrics_b = params.get("switch_metrics_url") or params["switch_endpoint"].rstrip("/") + "/metrics"
        engine = target.engine if target.engine != "simulator" else "auto"
        self.second = MetricsSampler(
            metrics_b, engine, time_zero=self.session.time_zero, headers=headers, allowed_hosts=target.allowed_hosts
        )
        await self.second.start()

    async def close_endpoint_b(self) -> None:
        if self.second is not None:
            await self.second.stop()
        if self.client_b is not None:
            await self.client_b.close()

    async def trigger(self, event: str) -> None:
        """Mark the switch (or rollback); in mode "restart", ask the simulator to restart."""
        params = self.params
        self.events[event] = self.session.now()
        self.phase = "switched" if event == "switch" else "rolled_back"
        if self.config.mode != "restart":
            return
        body: dict[str, Any] = {"config": dict(params.get("restart_config") or {}) if event == "switch" else {}}
        if params.get("restart_downtime_s") is not None:
            body["downtime_s"] = float(params["restart_downtime_s"])
        if params.get("restart_graceful") is not None:
            body["graceful"] = bool(params["restart_graceful"])
        try:
            status, answer = await self.session.client.post_json("/admin/restart", body)
        except Exception as exc:  # the hook's failure is reported, never the test's crash
            status, answer = None, {"error": f"{type(exc).__name__}: {exc}"}
        self.triggers.append({"event": event, "status": status, "answer": answer})
        if status != 202:
            self.notes.append(
                Message(
                    HOOK_REFUSED,
                    {"event": EVENT_NAMES.get(event, event), "status": str(status), "answer": str(answer)},
                )
            )

    def make(self, index: int, name: str) -> RequestSpec:
        config = self.config
        text = (
            self.prompts.shared_prefix(config.prefix_tokens, config.input_tokens - config.prefix_tokens, seed=index)
            if config.prefix_tokens
            else self.prompts.text(config.input_tokens, seed=index)
        )
        return self.session.spec(text, config.output_tokens, request_id=f"switch-{index}", tag=name)

    async def worker(self, first: int) -> None:
        index = first
        while not self.stop.is_set():
            name = self.phase
            client = self.client_b if (name == "switched" and self.client_b is not None) else self.session.client
            record = RequestRecord()
            self.sent.append(record)
            await client.send(self.make(index, name), record)
            index += self.config.concurrency
            if not record.ok:
                await asyncio.sleep(SWITCH_ERROR_BACKOFF_S)

    async def controller(self) -> None:
        """Trigger the switch and the rollback on time (to 50 ms), report progress twice a second."""
        durations, total_s, reporter = self.config.durations, self.config.total_s, self.reporter
        begin = time.perf_counter()
        pending = [("switch", durations["before"]), ("rollback", durations["before"] + durations["switched"])]
        reported = -1.0
        try:
            while time.perf_counter() - begin < total_s and not reporter.cancelled():
                elapsed = time.perf_counter() - begin
                if pending and elapsed >= pending[0][1]:
                    await self.trigger(pending.pop(0)[0])
                if elapsed - reported >= 0.5:
                    reporter.done = len(self.sent)
                    await reporter.emit(self.phase, min(elapsed / total_s * 100.0, 99.0))
                    reported = elapsed
                await asyncio.sleep(0.05)
        finally:
            if "switch" in self.events and "rollback" not in self.events and self.config.mode == "restart":
                await self.trigger("rollback")  # never leave the engine on the new version
            self.stop.set()

    async def steady_load_with_switch(self) -> None:
        """Closed-loop workers for the whole test while the controller switches and rolls back."""
        workers = [asyncio.ensure_future(self.worker(i)) for i in range(self.config.concurrency)]
        await self.controller()
        self.cancelled = self.reporter.cancelled()
        if self.cancelled:
            for task in workers:
                task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


def _switch_points(
    run: _SwitchRun, by_phase: dict[str, list[RequestRecord]], bounds: dict[str, tuple[float, float]]
) -> tuple[list[LoadPoint], list[LoadOutcome]]:
    """One point per phase; the switched phase's engine stats from endpoint B's metrics when it has them."""
    session, second = run.session, run.second
    config = LoadConfig(mode="closed", concurrency=run.config.concurrency, duration_s=run.config.total_s)
    points: list[LoadPoint] = []
    outcomes: list[LoadOutcome] = []
    for name in SWITCH_PHASES:
        t0, t1 = bounds[name]
        part = LoadOutcome(
            config=config,
            records=by_phase[name],
            run_start=session.time_zero,
            measure_start=session.time_zero + t0,
            measure_end=session.time_zero + t1,
            cancelled=run.cancelled,
        )
        point = summarize(part, label=name, slo=slo_of(run.params))
        recording = second.recording if (name == "switched" and second is not None) else session.metrics.recording
        attach_engine_stats(point, recording, t0, t1)
        point.extra["hit_ratio_usage"] = _hit_ratio(by_phase[name])
        points.append(point)
        outcomes.append(part)
    return points, outcomes


def _switch_verdicts(
    run: _SwitchRun,
    points: list[LoadPoint],
    by_phase: dict[str, list[RequestRecord]],
    figures: dict[str, Any],
    bounds: dict[str, tuple[float, float]],
) -> list[dict[str, Any]]:
    """The budget before the switch, the errors, the recoveries; not exercised when the restart was refused."""
    params, events, window = run.params, run.events, run.config.window
    verdicts = budget_verdicts(points[0], params, label="before", records=by_phase["before"])
    baseline_failed = any(v["status"] == FAIL for v in verdicts)
    verdicts.append(_switch_errors_verdict(by_phase, figures, params))
    for name, event, label in (
        ("switched", "switch", "budget_recovered_after_switch"),
        ("rolled_back", "rollback", "budget_recovered_after_rollback"),
    ):
        verdicts.append(
            _recovery_verdict(
                label,
                by_phase[name],
                figures[f"{event}_recovery_s"],
                params,
                window,
                baseline_failed,
                event in events,
                bounds[name][1] - bounds[name][0],
            )
        )
    refused = [t for t in run.triggers if t["status"] != 202]
    if refused:  # the engine never switched: nothing about a switch was observed
        verdicts = [
            verdict(
                v["name"],
                NOT_EXERCISED,
                Message(RESTART_REFUSED, {"detail": detail_message_of(v), "status": f"{refused[0]['status']}"}),
                v["value"],
                v["threshold"],
                v["n"],
                v["interval"],
            )
            if v["status"] == PASS and not v["name"].endswith("[before]")
            else v
            for v in verdicts
        ]
    return verdicts


def _switch_result(run: _SwitchRun) -> NormalizedResult:
    """The requests split by phase, the figures, verdicts and result of a finished (or cancelled) run."""
    session, params, events, second, mode = run.session, run.params, run.events, run.second, run.config.mode
    end = session.now()
    records = [r for r in run.sent if r.send_time > 0 and r.error_class != "cancelled"]
    by_phase: dict[str, list[RequestRecord]] = {name: [] for name in SWITCH_PHASES}
    for record in records:
        by_phase[switch_phase_of(record, events, session.time_zero, mode == "restart")].append(record)
    bounds = {
        "before": (0.0, events.get("switch", end)),
        "switched": (events.get("switch", end), events.get("rollback", end)),
        "rolled_back": (events.get("rollback", end), end),
    }
    points, outcomes = _switch_points(run, by_phase, bounds)
    figures = _switch_figures(by_phase, events, session, second, params, run.config.window, bounds)
    verdicts = _switch_verdicts(run, points, by_phase, figures, bounds)
    if run.cancelled:
        run.notes.append(Message(CANCELLED))
    run.reporter.close()
    result = build_result(
        "model_switch",
        session,
        params,
        points,
        outcomes,
        verdicts,
        run.notes,
        run.cancelled,
        {
            "switch": {
                "mode": mode,
                "switch_at_s": events.get("switch"),
                "rollback_at_s": events.get("rollback"),
                "switch_endpoint": params.get("switch_endpoint"),
                "triggers": run.triggers,
                "timeline": _switch_timeline(records, session.time_zero),
                **figures,
            },
            "observed": _switch_observed(mode, params, figures, by_phase),
        },
    )
    if second is not None:
        for name, values in second.recording.series.items():
            result.timeseries[f"switched.{name}"] = values
    return result


def _switch_figures(
    by_phase: dict[str, list[RequestRecord]],
    events: dict[str, float],
    session: Session,
    second: MetricsSampler | None,
    params: dict[str, Any],
    window: int,
    bounds: dict[str, tuple[float, float]],
) -> dict[str, Any]:
    zero = session.time_zero
    figures: dict[str, Any] = {}
    for name, event in (("switched", "switch"), ("rolled_back", "rollback")):
        at = events.get(event)
        records = by_phase[name]
        figures[f"{event}_errors"] = sum(1 for r in records if not r.ok)
        figures[f"{event}_requests"] = len(records)
        figures[f"{event}_downtime_s"] = downtime_seconds(records) if records else None
        figures[f"{event}_stall_s"] = longest_stall_seconds(records, zero + at) if at is not None and records else None
        figures[f"{event}_recovery_s"] = (
            recovery_seconds(records, zero + at, params, window) if at is not None and records else None
        )
    figures["rollback_s"] = figures["rollback_recovery_s"]  # the rollback's time until the budget holds again
    recording = session.metrics.recording
    before = series_in(recording, "kv_usage_ratio", *bounds["before"])
    switched_recording = second.recording if second is not None else recording
    after = series_in(switched_recording, "kv_usage_ratio", *bounds["switched"])
    figures["kv_usage_before_mean"] = sum(before) / len(before) if before else None
    figures["kv_usage_switched_peak"] = max(after) if after else None
    figures["kv_spike"] = (
        figures["kv_usage_switched_peak"] - figures["kv_usage_before_mean"] if before and after else None
    )
    figures["hit_ratio_before"] = _hit_ratio(by_phase["before"])
    first_after = sorted((r for r in by_phase["switched"] if r.ok), key=lambda r: r.send_time)[:window]
    figures["hit_ratio_after_switch"] = _hit_ratio(first_after)
    figures["hit_drop"] = (
        figures["hit_ratio_before"] - figures["hit_ratio_after_switch"]
        if figures["hit_ratio_before"] is not None and figures["hit_ratio_after_switch"] is not None
        else None
    )
    return figures


SWITCH_TIMELINE_POINTS = 1500  # the chart's requests at most (every nth kept, the failed ones always)


def _switch_timeline(records: list[RequestRecord], zero: float) -> list[list[Any]]:
    """[send time s, TTFT ms or None, ok] per request in send order, thinned for the chart."""
    ordered = sorted(records, key=lambda r: r.send_time)
    every = max(len(ordered) // SWITCH_TIMELINE_POINTS, 1)
    return [
        [round(r.send_time - zero, 4), None if r.ttft_ms is None else round(r.ttft_ms, 2), bool(r.ok)]
        for index, r in enumerate(ordered)
        if not r.ok or index % every == 0
    ]


def _switch_errors_verdict(
    by_phase: dict[str, list[RequestRecord]], figures: dict[str, Any], params: dict[str, Any]
) -> dict[str, Any]:
    allowed = int(params.get("max_switch_errors") or 0)
    errors = figures["switch_errors"] + figures["rollback_errors"]
    n = figures["switch_requests"] + figures["rollback_requests"]
    down = (figures["switch_downtime_s"] or 0.0) + (figures["rollback_downtime_s"] or 0.0)
    detail = Message(SWITCH_ERRORS, {"errors": errors, "n": n, "allowed": allowed, "down": f"{down:.2f}"})
    if n == 0:
        return make_verdict("switch_errors", None, Message(NOTHING_AFTER_SWITCH), None, allowed, 0, INSUFFICIENT_DATA)
    return make_verdict("switch_errors", errors <= allowed, detail, errors, allowed, n)


def _recovery_verdict(
    name: str,
    records: list[RequestRecord],
    recovery: float | None,
    params: dict[str, Any],
    window: int,
    baseline_failed: bool,
    happened: bool,
    span_s: float,
) -> dict[str, Any]:
    limit = float(params.get("max_recovery_s") or 30.0)
    n = len(records)
    what = Message(THE_SWITCH if name.endswith("switch") else THE_ROLLBACK)
    if not happened:
        return make_verdict(name, None, Message(NEVER_HAPPENED, {"what": what}), None, limit, n, NOT_EXERCISED)
    parts = [
        f"{k.replace('_p95_ms', '').upper()} <= {params[k]:g} ms"  # figures and units: the same in every language
        for k in ("ttft_p95_ms", "tpot_p95_ms")
        if params.get(k) is not None
    ]
    budget = NAME_SEPARATOR.join(parts) if parts else Message(NO_LATENCY_BUDGET)
    if recovery is None and n < window and (any(_good_for_budget(r, params) for r in records) or span_s <= limit):
        return make_verdict(
            name,
            None,
            Message(TOO_FEW_AFTER, {"n": n, "what": what, "window": window}),
            None,
            limit,
            n,
            INSUFFICIENT_DATA,
        )
    if recovery is None:  # no run of good requests: none within budget for longer than allowed
        status = FAIL
        detail = Message(
            NEVER_RECOVERED, {"window": window, "budget": budget, "span": f"{span_s:.1f}", "what": what, "n": n}
        )
    else:
        status = PASS if recovery <= limit else FAIL
        detail = Message(
            RECOVERED,
            {"budget": budget, "recovery": f"{recovery:.2f}", "what": what, "limit": f"{limit:g}", "n": n},
        )
    if baseline_failed and status != PASS:
        status = INCONCLUSIVE
        detail = Message(FAILED_BEFORE_TOO, {"detail": detail})
    return make_verdict(name, None, detail, recovery, limit, n, status)


def _switch_observed(
    mode: str, params: dict[str, Any], figures: dict[str, Any], by_phase: dict[str, list[RequestRecord]]
) -> dict[str, Any]:
    """What the test observed in one sentence with its figures (metadata.observed: the English `line` and the
    `line_message` pages render in their language)."""

    def seconds(value: float | None) -> str | Message:
        return OBSERVED_NEVER if value is None else f"{value:.2f} s"

    def ratio(value: float | None) -> str | Message:
        return figure_or_na(value, "{:.1%}")

    errors = figures["switch_errors"] + figures["rollback_errors"]
    down = (figures["switch_downtime_s"] or 0.0) + (figures["rollback_downtime_s"] or 0.0)
    line = Message(
        OBSERVED_LINE,
        {
            "how": Message(OBSERVED_BY_ENDPOINT if mode == "endpoint" else OBSERVED_BY_RESTART),
            "errors": errors,
            "down": f"{down:.2f}",
            "stall": seconds(figures["switch_stall_s"]),
            "switch_recovery": seconds(figures["switch_recovery_s"]),
            "rollback_recovery": seconds(figures["rollback_recovery_s"]),
            "kv_before": ratio(figures["kv_usage_before_mean"]),
            "kv_peak": ratio(figures["kv_usage_switched_peak"]),
            "hit_before": ratio(figures["hit_ratio_before"]),
            "hit_after": ratio(figures["hit_ratio_after_switch"]),
            "n_before": len(by_phase["before"]),
            "n_switched": len(by_phase["switched"]),
            "n_rolled_back": len(by_phase["rolled_back"]),
        },
    )
    keys = (
        "switch_errors",
        "rollback_errors",
        "switch_downtime_s",
        "rollback_downtime_s",
        "switch_stall_s",
        "switch_recovery_s",
        "rollback_recovery_s",
        "kv_usage_before_mean",
        "kv_usage_switched_peak",
        "kv_spike",
        "hit_ratio_before",
        "hit_ratio_after_switch",
        "hit_drop",
    )
    return {"line": str(line), "line_message": to_json(line), "mode": mode, **{key: figures[key] for key in keys}} | {
        f"requests_{name}": len(records) for name, records in by_phase.items()
    }


SPEC = TestSpec.of(suite_row.TEST, run_model_switch)
