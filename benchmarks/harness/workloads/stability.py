"""Test 5, long-run stability: a soak after the warm-up, judged on drift, KV and GPU memory
slopes, preemption trend and fragmentation.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from benchmarks.harness.load import run_load
from benchmarks.harness.load_config import LoadConfig, LoadOutcome
from benchmarks.harness.load_summary import summarize
from benchmarks.harness.metrics import MetricsRecording
from benchmarks.harness.queueing import queue_growth_verdict, queue_wait_verdict
from benchmarks.harness.request_record import RequestRecord
from benchmarks.harness.workloads.common import (
    CANCELLED,
    PlanError,
    Reporter,
    Session,
    Target,
    budget_verdicts,
    build_result,
    errors_verdict,
    format_ms,
    require_param,
    series_in,
)
from benchmarks.harness.workloads.spec import TestSpec
from benchmarks.harness.workloads.spec import gettext_noop as _
from benchmarks.harness.workloads.stress import attach_engine_stats, lengths_meta, slo_of, trace_lengths
from benchmarks.result import LoadPoint, NormalizedResult
from benchmarks.suite import stability as suite_row
from benchmarks.suite.stability import ARTICLES_SOAK_S, SOAK_S
from benchmarks.verdicts import (
    FAIL,
    INCONCLUSIVE,
    INSUFFICIENT_DATA,
    MIN_SAMPLES,
    NOT_JUDGED,
    PASS,
    compare,
    ratio_interval,
    two_sample_interval,
    verdict,
)
from selection.domain.messages import CLAUSE_SEPARATOR, Join, Message


async def run_stability(
    target: Target, params: dict[str, Any], cancel: Any = None, progress: Callable[[dict[str, Any]], Any] | None = None
) -> NormalizedResult:
    """Steady closed-loop load after an excluded warm-up, lengths from the constraints'
    distribution. Judged: drift of TTFT/TPOT p50 and p99 (last window vs first, bootstrap
    intervals), KV usage slope at steady load, GPU memory slope (NVML), preemption-rate trend and
    the engine's fragmentation signal where it exports one."""
    concurrency = require_param(params, "concurrency", int, 1)
    duration = require_param(params, "duration_s", float, 0.1)
    window = require_param(params, "window_s", float, 0.01)
    if window * 2 > duration:
        raise PlanError(f"params.window_s: must be at most half of duration_s ({duration:g}), got {window:g}")
    warmup = float(params.get("warmup_s") or 0.0)
    if warmup < 0:
        raise PlanError(f"params.warmup_s: must be a number >= 0, got {warmup!r}")
    input_tokens = require_param(params, "input_tokens", int, 1)
    output_tokens = require_param(params, "output_tokens", int, 1)
    max_drift = float(params.get("max_drift_pct") or 25.0)
    interval = float(params.get("metrics_interval_s") or 1.0)
    lengths = trace_lengths(params, input_tokens, output_tokens)
    turns = int(params.get("session_turns") or 1)
    if turns < 1:
        raise PlanError(f"params.session_turns: must be an integer >= 1, got {params.get('session_turns')!r}")
    reporter = Reporter(progress, cancel)
    notes: list[str | Message] = []
    async with Session(target, metrics_interval_s=interval) as session:
        prompts = session.prompts
        assert prompts is not None
        sessions = SoakSessions(lambda tokens, seed: prompts.text(tokens, seed=seed), lengths, turns, concurrency)
        outcome = await run_load(
            session.client,
            lambda i: session.spec(*sessions.request(i), request_id=f"stab-{i}", tag=sessions.tag(i)),
            LoadConfig(
                mode="closed", concurrency=concurrency, duration_s=duration, warmup_s=warmup, drain_timeout_s=60.0
            ),
            cancel=cancel,
            progress=reporter.phase("load", 0, 100),
        )
    overall = summarize(outcome, label="all", slo=slo_of(params))
    start = outcome.measure_start
    steady_end = outcome.load_end or outcome.measure_end  # the load stopped issuing here (then the drain)
    if outcome.cancelled:
        steady_end = min(steady_end, outcome.measure_end)
    last_start = max(steady_end - window, start + window)
    windows = {
        "first_window": (start, start + window),
        "last_window": (last_start, max(steady_end, last_start)),
    }
    window_records = {
        label: [r for r in outcome.records if t0 <= r.send_time < t1] for label, (t0, t1) in windows.items()
    }
    points = [overall] + _window_points(session, outcome, windows, window_records)
    attach_engine_stats(overall, session.metrics.recording, start - session.time_zero, steady_end - session.time_zero)
    verdicts = [errors_verdict([overall])]
    early_ok = [r for r in window_records["first_window"] if r.ok]
    late_ok = [r for r in window_records["last_window"] if r.ok]
    drift: dict[str, Any] = {}
    for metric, q in (("ttft_ms", 50), ("ttft_ms", 99), ("tpot_ms", 50), ("tpot_ms", 99)):
        judged = _drift_verdict(
            f"{metric.replace('_ms', '')}_p{q}_drift",
            [getattr(r, metric) for r in early_ok],
            [getattr(r, metric) for r in late_ok],
            q,
            max_drift,
            metric.replace("_ms", "").upper(),
        )
        drift[f"{metric}_p{q}_drift_pct"] = judged["value"]
        drift[f"{metric}_p{q}_drift_interval"] = judged["interval"]
        verdicts.append(judged)
    steady = (start - session.time_zero, steady_end - session.time_zero)
    verdicts.extend(_engine_drift_verdicts(session, steady, windows, params, drift))
    verdicts.extend(budget_verdicts(overall, params, records=outcome.records))
    verdicts.append(queue_wait_verdict(overall.extra.get("queue_wait"), params.get("ttft_p95_ms")))
    overall.extra.update({k: v for k, v in drift.items() if not k.endswith("_interval")})
    soak_note = short_soak_message(params, duration)
    if soak_note:
        notes.append(soak_note)
    if outcome.cancelled:
        notes.append(Message(CANCELLED))
    observed = _stability_observed(
        params, concurrency, duration, warmup, outcome, early_ok, late_ok, drift, soak_note, session.gpu.recording
    )
    reporter.close()
    return build_result(
        "stability",
        session,
        params,
        points,
        [outcome],
        verdicts,
        notes,
        outcome.cancelled,
        {
            "drift": drift,
            "warmup_excluded": {"seconds": warmup, "requests": len(outcome.warmup)},
            "sessions": {"turns": turns, "rotation_slots": sessions.slots if turns > 1 else None},
            "observed": observed,
            **lengths_meta(lengths),
        },
    )


class SoakSessions:
    """The soak's requests as sessions (`turns` > 1) or single requests (`turns` = 1).

    Request i belongs to rotation slot i % S (S = SESSIONS_PER_SLOT x the concurrency), which runs
    sessions of `turns` turns one after another: turn k of a session is request slot + (k + turns x
    j) x S, sent S requests after its previous turn, so with S well above the requests in flight the
    previous answer has normally ended. Each turn sends the session's history (its earlier user texts
    and replies of the drawn output length: synthetic, deterministic text) then its new user text: the
    history is the prefix the engine may keep across turns, and a finished session's cache is left
    behind, as in real multi-turn traffic. A session's request lengths are those drawn for its turns;
    the new text per turn is that input split over the turns."""

    SESSIONS_PER_SLOT = 4

    def __init__(
        self,
        text: Callable[[int, int], str],
        lengths: Callable[[int], tuple[int, int]],
        turns: int,
        concurrency: int,
    ) -> None:
        self.text, self.lengths, self.turns = text, lengths, max(int(turns), 1)
        self.slots = max(self.SESSIONS_PER_SLOT * concurrency, 1)

    def position(self, index: int) -> tuple[int, int]:
        """(session, turn) of request `index`."""
        if self.turns == 1:
            return index, 0
        slot, rotation = index % self.slots, index // self.slots
        return slot + self.slots * (rotation // self.turns), rotation % self.turns

    def tag(self, index: int) -> str:
        session, turn = self.position(index)
        return f"session-{session}-turn-{turn + 1}" if self.turns > 1 else ""

    def request(self, index: int) -> tuple[str, int]:
        """(prompt, max tokens) of request `index`."""
        if self.turns == 1:
            tokens, output = self.lengths(index)
            return self.text(tokens, index), output
        session, turn = self.position(index)
        parts = []
        for k in range(turn + 1):
            tokens, output = self.lengths(session * self.turns + k)
            parts.append(self.text(max(tokens // self.turns, 8), 2 * (session * self.turns + k)))
            if k < turn:
                parts.append(self.text(max(output, 1), 2 * (session * self.turns + k) + 1))
        return " ".join(parts), self.lengths(session * self.turns + turn)[1]


def _window_points(
    session: Session,
    outcome: LoadOutcome,
    windows: dict[str, tuple[float, float]],
    window_records: dict[str, list[RequestRecord]],
) -> list[LoadPoint]:
    """The first and last window's points, each with the engine's stats over its window."""
    points = []
    for label, (t0, t1) in windows.items():
        part = LoadOutcome(
            config=outcome.config,
            records=window_records[label],
            run_start=outcome.run_start,
            measure_start=t0,
            measure_end=t1,
            achieved_concurrency=None,
            client_bound=outcome.client_bound,
        )
        point = summarize(part, label=label)
        attach_engine_stats(point, session.metrics.recording, t0 - session.time_zero, t1 - session.time_zero)
        points.append(point)
    return points


def _engine_drift_verdicts(
    session: Session,
    steady: tuple[float, float],
    windows: dict[str, tuple[float, float]],
    params: dict[str, Any],
    drift: dict[str, Any],
) -> list[dict[str, Any]]:
    """The verdicts on the engine's and GPU's series (KV slope, GPU memory slope, preemption trend,
    fragmentation); their figures go into `drift`."""
    recording = session.metrics.recording
    shifted = {k: (a - session.time_zero, b - session.time_zero) for k, (a, b) in windows.items()}
    verdicts = []
    concurrency = int(params.get("concurrency") or 1)
    for judged, figures in (
        kv_slope_verdict(recording, steady, params),
        _gpu_memory_verdict(session.gpu.recording, steady, params),
        _preemption_trend_verdict(recording, shifted, params),
        _fragmentation_verdict(recording, shifted, params),
        queue_growth_verdict(recording, shifted, concurrency, params.get("max_queue_growth")),
    ):
        verdicts.append(judged)
        drift.update(figures)
    return verdicts


SHORT_DEMO_SOAK = _("short demo soak")
SHORT_SOAK = _("short soak")
SOAK_NOTE = _("%(kind)s of %(length)s: not the %(planned)s h the plan asks for")
SOAK_NOTE_MULTI_TURN = _("%(note)s; multi-turn sessions")
SOAK_NOTE_HOURS = _("%(note)s (the articles soak for hours)")


def short_soak_message(params: dict[str, Any], duration: float) -> Message | None:
    """The label of a soak shorter than the articles' hours (`ARTICLES_SOAK_S`) or than the length the
    plan takes from the scenario (`recommended_duration_s`): never silent."""
    recommended = max(float(params.get("recommended_duration_s") or SOAK_S), ARTICLES_SOAK_S)
    if duration >= recommended:
        return None
    kind = Message(SHORT_DEMO_SOAK if params.get("soak_label") == "demo" else SHORT_SOAK)
    length = f"{duration:g} s" if duration < 3600 else f"{duration / 3600:.2g} h"
    note = Message(SOAK_NOTE, {"kind": kind, "length": length, "planned": f"{recommended / 3600:g}"})
    if int(params.get("session_turns") or 1) > 1:
        note = Message(SOAK_NOTE_MULTI_TURN, {"note": note})
    if duration < ARTICLES_SOAK_S:
        note = Message(SOAK_NOTE_HOURS, {"note": note})
    return note


def short_soak_note(params: dict[str, Any], duration: float) -> str | None:
    """`short_soak_message` as English text (the run's notes, the CLI)."""
    note = short_soak_message(params, duration)
    return None if note is None else str(note)


def soak_length(params: dict[str, Any], duration: float) -> dict[str, Any]:
    """The soak's length against the plan's and the articles' (the record says when it is shorter)."""
    planned = max(float(params.get("recommended_duration_s") or SOAK_S), ARTICLES_SOAK_S)
    return {
        "duration_s": duration,
        "planned_s": planned,
        "articles_s": ARTICLES_SOAK_S,
        "shorter_than_planned": duration < planned,
        "shorter_than_articles": duration < ARTICLES_SOAK_S,
        "session_turns": int(params.get("session_turns") or 1),
    }


# The soak's verdict details, as message templates (pages show them in their language; `detail` keeps
# the English text).
DRIFT_FEW = _(
    "%(what)s p%(q)s drift: %(first)s requests in the first window and %(last)s in the last; "
    "at least %(min)s in each are needed to judge it (limit %(limit)s %%)"
)
DRIFT_BASE_ZERO = _("%(what)s p%(q)s of the first window is 0")
DRIFT_WITH_INTERVAL = _(
    "%(what)s p%(q)s %(base)s -> %(now)s ms (%(value)s %%, 95%% CI %(low)s–%(high)s %%; n=%(first)s first, "
    "%(last)s last window) vs <= %(limit)s %%"
)
DRIFT = _(
    "%(what)s p%(q)s %(base)s -> %(now)s ms (%(value)s %%; n=%(first)s first, %(last)s last window) vs <= %(limit)s %%"
)
STRADDLES_LIMIT = _("%(detail)s: the interval straddles the limit")
NO_KV_METRIC = _("the engine exports no KV usage metric")
KV_FEW = _("%(n)s KV usage samples at steady load after the warm-up fill: at least %(min)s are needed")
KV_SLOPE = _(
    "KV usage %(value)s of the pool per hour at steady load (95%% CI %(low)s–%(high)s, %(n)s samples over "
    "%(seconds)s s) vs <= %(limit)s"
)
KV_AFTER_FILL = _(
    "warm-up fill %(start)s -> %(end)s of the pool in the first %(seconds)s s (slots or blocks filling with cache: "
    "not drift), then %(detail)s"
)
KV_STILL_SLOWING = _(
    "%(detail)s: still rising, but slower and slower: a fill that has not levelled off yet, or a leak; "
    "a longer soak tells them apart"
)
KV_LEAK = _(
    "%(detail)s: it keeps rising at a steady rate after the warm-up fill (a leak, or fragmentation holding blocks)"
)
KV_STEADY_RISE = _("%(detail)s: a steady rise, not a warm-up fill that levels off")
KV_STRADDLES = _("%(detail)s: the interval straddles the limit (a longer soak narrows it)")
NO_NVML = _("no NVML on the client machine: GPU memory not measured (%(reason)s)")
NO_GPU = _("no GPU")
# why NVML could not be read (`benchmarks.harness.nvml` writes "unavailable: <why>"): the usual causes in
# words; any other error is shown as NVML wrote it
NVML_REASONS = {
    "unavailable: nvidia-ml-py is not installed": _("unavailable: nvidia-ml-py is not installed"),
    "unavailable: no GPU found": _("unavailable: no GPU found"),
    "unavailable: NVML Shared Library Not Found": _("unavailable: the NVML library was not found"),
    "unavailable: Driver Not Loaded": _("unavailable: the NVIDIA driver is not loaded"),
}
FEW_GPU_SAMPLES = _("too few GPU memory samples at steady load")
GPU_SLOPE = _(
    "%(device)s memory %(value)s MiB per hour at steady load (95%% CI %(low)s–%(high)s) vs <= %(limit)s MiB/h"
)
NO_PREEMPTION_COUNTER = _("the engine exports no preemption counter")
FEW_PREEMPTION_SAMPLES = _("fewer than two preemption-counter samples in a window")
PREEMPTION_TREND = _(
    "preemptions %(first)s in the first window (%(first_rate)s/min) -> %(last)s in the last (%(last_rate)s/min) "
    "vs <= %(ratio)s x the first rate + 1 per window"
)
NO_FRAGMENTATION_METRIC = _(
    "the engine exports no fragmentation metric (vLLM, SGLang and llama.cpp have none); "
    "the KV usage slope at steady load stands in for it"
)
FEW_FRAGMENTATION_SAMPLES = _("%(first)s and %(last)s fragmentation samples in the windows")
FRAGMENTATION = _(
    "fragmentation %(first)s -> %(last)s (%(value)s, 95%% CI %(low)s–%(high)s; %(first_n)s and %(last_n)s samples) "
    "vs a rise <= %(limit)s"
)


def nvml_reason(reason: str | None) -> Message | str:
    """Why NVML gave no figures, in words where the cause is a known one."""
    if not reason:
        return Message(NO_GPU)
    known = NVML_REASONS.get(reason)
    return Message(known) if known else reason


def _drift_verdict(
    name: str, early: list[float | None], late: list[float | None], q: float, max_drift: float, what: str
) -> dict[str, Any]:
    """p`q` late / early as a drift in %, with a bootstrap interval over both windows' requests."""
    a = [float(v) for v in early if v is not None and math.isfinite(v)]
    b = [float(v) for v in late if v is not None and math.isfinite(v)]
    n = len(a) + len(b)
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES:
        return verdict(
            name,
            INSUFFICIENT_DATA,
            Message(
                DRIFT_FEW,
                {
                    "what": what,
                    "q": f"{q:g}",
                    "first": len(a),
                    "last": len(b),
                    "min": MIN_SAMPLES,
                    "limit": f"{max_drift:g}",
                },
            ),
            None,
            max_drift,
            n,
        )
    base, now = float(np.percentile(a, q)), float(np.percentile(b, q))
    if base <= 0:
        return verdict(
            name, INSUFFICIENT_DATA, Message(DRIFT_BASE_ZERO, {"what": what, "q": f"{q:g}"}), None, max_drift, n
        )
    value = (now / base - 1.0) * 100.0
    ratio = ratio_interval(b, a, q)
    interval = None if ratio is None else ((ratio[0] - 1.0) * 100.0, (ratio[1] - 1.0) * 100.0)
    status = compare(value, interval, max_drift)
    figures = {
        "what": what,
        "q": f"{q:g}",
        "base": f"{base:.1f}",
        "now": f"{now:.1f}",
        "value": f"{value:+.1f}",
        "first": len(a),
        "last": len(b),
        "limit": f"{max_drift:g}",
    }
    detail = (
        Message(DRIFT_WITH_INTERVAL, {**figures, "low": f"{interval[0]:+.1f}", "high": f"{interval[1]:+.1f}"})
        if interval
        else Message(DRIFT, figures)
    )
    if status == INCONCLUSIVE:
        detail = Message(STRADDLES_LIMIT, {"detail": detail})
    return verdict(name, status, detail, value, max_drift, n, interval)


def _slope_interval(series: list[list[float]]) -> tuple[float, tuple[float, float]] | None:
    """Least-squares slope (per second) with its 95 % interval (slope +- 1.96 standard errors)."""
    if len(series) < 3:
        return None
    t = np.asarray([p[0] for p in series], dtype=float)
    v = np.asarray([p[1] for p in series], dtype=float)
    if np.ptp(t) == 0:
        return None
    slope, intercept = np.polyfit(t, v, 1)
    residuals = v - (slope * t + intercept)
    se = math.sqrt(float(np.sum(residuals**2)) / (len(t) - 2) / float(np.sum((t - t.mean()) ** 2)))
    return float(slope), (float(slope - 1.96 * se), float(slope + 1.96 * se))


MIN_SLOPE_SAMPLES = 10


FILL_TOLERANCE = 0.02  # KV usage (share of the pool) within this of its late level counts as filled
DECELERATING = 0.5  # a late slope below this share of the early one: still filling, slowing down


def split_fill(series: list[list[float]]) -> tuple[float, float | None]:
    """Where warm-up fill ends in a steady-load KV usage series: (the time the drift is judged from,
    the time the series first came within FILL_TOLERANCE of its late level, None when it never rose).

    At steady load, slots or blocks fill up with cache (resident slots, prefix blocks kept for reuse)
    until usage levels off: that rise is warm-up, not drift. The late level is the median of the last
    quarter; the fill ends when usage first reaches it. Drift is judged from the fill's end, and at the
    latest from the middle of the soak, so that a rise that never levels off (a leak) is judged over
    the second half, where a fill has none."""
    start, end = series[0][0], series[-1][0]
    tail = [v for t, v in series if t >= start + 0.75 * (end - start)] or [series[-1][1]]
    late = float(np.median(tail))
    if late - series[0][1] <= FILL_TOLERANCE:
        return start, None
    filled = next(t for t, v in series if v >= late - FILL_TOLERANCE)
    return min(filled, start + 0.5 * (end - start)), filled


def kv_slope_verdict(
    recording: MetricsRecording, steady: tuple[float, float], params: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """KV usage slope at steady load after the warm-up fill (`split_fill`): a leak, or fragmentation
    that holds blocks, shows as KV usage climbing while the load stays the same; slots or blocks
    filling with cache up to a plateau is warm-up, reported apart. A rise still slowing down at the
    end is inconclusive (a longer soak tells a fill from a leak), a steady one fails."""
    limit = float(params.get("max_kv_slope_per_hour") or 0.05)
    series = [p for p in recording.series.get("kv_usage_ratio", []) if steady[0] <= p[0] <= steady[1]]
    name = "kv_usage_slope"
    if not recording.series.get("kv_usage_ratio"):
        return verdict(name, NOT_JUDGED, Message(NO_KV_METRIC)), {"kv_usage_slope_per_hour": None}
    judged_from, filled_at = split_fill(series) if len(series) >= MIN_SLOPE_SAMPLES else (steady[0], None)
    fill = _fill_figures(series, judged_from, filled_at)
    after = [p for p in series if p[0] >= judged_from]
    after_fit = _slope_interval(after) if filled_at is not None and len(after) >= MIN_SLOPE_SAMPLES else None
    early = fill["kv_fill_slope_per_hour"]
    # a fill levels off: the slope after it is well below the slope during it; otherwise the rise is
    # one trend and the whole steady load is judged
    is_fill = after_fit is not None and (early is None or after_fit[0] * 3600.0 < DECELERATING * early)
    settled = after if is_fill else series
    fit = _slope_interval(settled) if len(settled) >= MIN_SLOPE_SAMPLES else None
    if fit is None:
        return (
            verdict(
                name,
                INSUFFICIENT_DATA,
                Message(KV_FEW, {"n": len(settled), "min": MIN_SLOPE_SAMPLES}),
                None,
                limit,
                len(settled),
            ),
            {"kv_usage_slope_per_hour": None},
        )
    slope, (low, high) = fit
    value, interval = slope * 3600.0, (low * 3600.0, high * 3600.0)
    status = compare(value, interval, limit)
    detail = Message(
        KV_SLOPE,
        {
            "value": f"{value:+.3f}",
            "low": f"{interval[0]:+.3f}",
            "high": f"{interval[1]:+.3f}",
            "n": len(settled),
            "seconds": f"{settled[-1][0] - settled[0][0]:.0f}",
            "limit": f"{limit:g}",
        },
    )
    if is_fill:
        detail = Message(
            KV_AFTER_FILL,
            {
                "start": f"{fill['kv_fill_from']:.3f}",
                "end": f"{fill['kv_fill_to']:.3f}",
                "seconds": f"{fill['kv_fill_s']:.0f}",
                "detail": detail,
            },
        )
    else:
        fill = _fill_figures(series, series[0][0], None)
    if status == FAIL and is_fill and _still_slowing(settled):
        status = INCONCLUSIVE
        detail = Message(KV_STILL_SLOWING, {"detail": detail})
    elif status == FAIL and is_fill:
        detail = Message(KV_LEAK, {"detail": detail})
    elif status == FAIL and filled_at is not None:
        detail = Message(KV_STEADY_RISE, {"detail": detail})
    elif status == INCONCLUSIVE:
        detail = Message(KV_STRADDLES, {"detail": detail})
    fill["kv_fill_levelled"] = bool(is_fill and status == PASS)
    return verdict(name, status, detail, value, limit, len(settled), interval), {
        "kv_usage_slope_per_hour": value,
        "kv_usage_slope_interval": list(interval),
        "kv_usage_first": series[0][1],
        "kv_usage_last": series[-1][1],
        **fill,
    }


STILL_SLOWING = 0.8  # the second half of the judged part rises at most this share as fast as the first


def _still_slowing(series: list[list[float]]) -> bool:
    """A rise that keeps slowing down (the second half's slope well below the first half's): a fill
    approaching its plateau, not a steady leak."""
    middle = series[len(series) // 2][0]
    first = _slope_interval([p for p in series if p[0] <= middle])
    second = _slope_interval([p for p in series if p[0] >= middle])
    return first is not None and second is not None and first[0] > 0 and second[0] < STILL_SLOWING * first[0]


def _fill_figures(series: list[list[float]], judged_from: float, filled_at: float | None) -> dict[str, Any]:
    """The warm-up fill: from which usage to which, in how long, and its slope (None without one)."""
    if filled_at is None:
        return {"kv_fill_s": 0.0, "kv_fill_from": None, "kv_fill_to": None, "kv_fill_slope_per_hour": None}
    before = [p for p in series if p[0] < judged_from]
    fit = _slope_interval(before) if len(before) >= 3 else None
    reached = next(v for t, v in series if t >= filled_at)
    return {
        "kv_fill_s": filled_at - series[0][0],
        "kv_fill_from": series[0][1],
        "kv_fill_to": reached,
        "kv_fill_slope_per_hour": None if fit is None else fit[0] * 3600.0,
    }


def _gpu_memory_verdict(
    gpu: Any, steady: tuple[float, float], params: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """GPU memory slope from NVML (memory outside the KV pool: allocator growth, leaks)."""
    limit = float(params.get("max_gpu_memory_slope_mib_per_hour") or 512.0)
    name = "gpu_memory_slope"
    if not gpu.available:
        return (
            verdict(name, NOT_JUDGED, Message(NO_NVML, {"reason": nvml_reason(gpu.reason)})),
            {"gpu_memory_slope_mib_per_hour": None},
        )
    slopes = []
    for key, values in gpu.series.items():
        if not key.endswith("_memory_used_mib"):
            continue
        fit = _slope_interval([p for p in values if steady[0] <= p[0] <= steady[1]])
        if fit is not None:
            slopes.append((key, fit))
    if not slopes:
        return (
            verdict(name, INSUFFICIENT_DATA, Message(FEW_GPU_SAMPLES), None, limit),
            {"gpu_memory_slope_mib_per_hour": None},
        )
    key, (slope, (low, high)) = max(slopes, key=lambda item: item[1][0])
    value, interval = slope * 3600.0, (low * 3600.0, high * 3600.0)
    status = compare(value, interval, limit)
    samples = len(gpu.series[key])
    detail = Message(
        GPU_SLOPE,
        {
            "device": "GPU " + key.removeprefix("gpu").removesuffix("_memory_used_mib"),
            "value": f"{value:+.0f}",
            "low": f"{interval[0]:+.0f}",
            "high": f"{interval[1]:+.0f}",
            "limit": f"{limit:g}",
        },
    )
    return verdict(name, status, detail, value, limit, samples, interval), {
        "gpu_memory_slope_mib_per_hour": value,
        "gpu_memory_slope_interval": list(interval),
    }


def _counter_rate(recording: MetricsRecording, name: str, window: tuple[float, float]) -> tuple[float, float] | None:
    """(increase, seconds) of a cumulative counter over the window; None without two samples."""
    values = [p for p in recording.series.get(name, []) if window[0] <= p[0] <= window[1]]
    if len(values) < 2 or values[-1][0] <= values[0][0]:
        return None
    return max(values[-1][1] - values[0][1], 0.0), values[-1][0] - values[0][0]


def _preemption_trend_verdict(
    recording: MetricsRecording, windows: dict[str, tuple[float, float]], params: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Preemptions per second in the last window against the first: a pool shrinking under a leak or
    fragmentation preempts more as the soak goes on. One extra preemption per window is tolerated."""
    ratio_limit = float(params.get("max_preemption_rate_ratio") or 2.0)
    name = "preemption_rate_trend"
    if "preemptions" not in recording.series:
        return (
            verdict(name, NOT_JUDGED, Message(NO_PREEMPTION_COUNTER)),
            {"preemptions_per_min_first": None, "preemptions_per_min_last": None},
        )
    early = _counter_rate(recording, "preemptions", windows["first_window"])
    late = _counter_rate(recording, "preemptions", windows["last_window"])
    if early is None or late is None:
        return (
            verdict(name, INSUFFICIENT_DATA, Message(FEW_PREEMPTION_SAMPLES)),
            {"preemptions_per_min_first": None, "preemptions_per_min_last": None},
        )
    early_rate, late_rate = early[0] / early[1], late[0] / late[1]
    allowed = early_rate * ratio_limit + 1.0 / late[1]
    figures = {"preemptions_per_min_first": early_rate * 60.0, "preemptions_per_min_last": late_rate * 60.0}
    detail = Message(
        PREEMPTION_TREND,
        {
            "first": f"{early[0]:.0f}",
            "first_rate": f"{early_rate * 60:.1f}",
            "last": f"{late[0]:.0f}",
            "last_rate": f"{late_rate * 60:.1f}",
            "ratio": f"{ratio_limit:g}",
        },
    )
    status = PASS if late_rate <= allowed else FAIL
    return verdict(name, status, detail, late_rate * 60.0, allowed * 60.0, int(early[0] + late[0])), figures


def _fragmentation_verdict(
    recording: MetricsRecording, windows: dict[str, tuple[float, float]], params: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The engine's own fragmentation gauge, late window against the first (a bootstrap interval of
    the difference of means). Real engines export none: not judged, and the KV slope stands in."""
    limit = float(params.get("max_fragmentation_rise") or 0.05)
    name = "fragmentation_stable"
    if "fragmentation_ratio" not in recording.series:
        return (
            verdict(
                name,
                NOT_JUDGED,
                Message(NO_FRAGMENTATION_METRIC),
            ),
            {"fragmentation_first": None, "fragmentation_last": None},
        )
    early = series_in(recording, "fragmentation_ratio", *windows["first_window"])
    late = series_in(recording, "fragmentation_ratio", *windows["last_window"])
    if len(early) < 2 or len(late) < 2:
        return (
            verdict(
                name, INSUFFICIENT_DATA, Message(FEW_FRAGMENTATION_SAMPLES, {"first": len(early), "last": len(late)})
            ),
            {"fragmentation_first": None, "fragmentation_last": None},
        )
    a, b = np.asarray(early), np.asarray(late)
    value = float(b.mean() - a.mean())
    interval = two_sample_interval(late, early, lambda sample: sample.mean(axis=1), np.subtract)
    status = compare(value, interval, limit)
    detail = Message(
        FRAGMENTATION,
        {
            "first": f"{a.mean():.3f}",
            "last": f"{b.mean():.3f}",
            "value": f"{value:+.3f}",
            "low": f"{interval[0]:+.3f}",
            "high": f"{interval[1]:+.3f}",
            "first_n": int(a.size),
            "last_n": int(b.size),
            "limit": f"{limit:g}",
        },
    )
    return verdict(name, status, detail, value, limit, int(a.size + b.size), interval), {
        "fragmentation_first": float(a.mean()),
        "fragmentation_last": float(b.mean()),
    }


# The soak's one-sentence summary, clause by clause (joined by the clause separator of the language).
OBSERVED_LOAD = _(
    "c=%(c)s for %(duration)s s after a %(warmup)s s warm-up (%(excluded)s requests excluded), %(measured)s measured "
    "requests (n=%(first)s first, %(last)s last window)"
)
OBSERVED_TURNS = _("sessions of %(turns)s turns, each turn sending its history")
OBSERVED_LATENCY = _(
    "TTFT p99 %(ttft_first)s -> %(ttft_last)s (%(ttft_drift)s), TPOT p99 %(tpot_first)s -> %(tpot_last)s "
    "(%(tpot_drift)s)"
)
OBSERVED_KV_NONE = _("KV usage slope n/a")
OBSERVED_KV = _("KV usage slope %(slope)s points/h (95%% CI %(low)s to %(high)s)")
OBSERVED_KV_AFTER_FILL = _("%(kv)s after a warm-up fill to %(fill)s in %(seconds)s s")
OBSERVED_WAITING = _("requests waiting %(first)s -> %(last)s")
OBSERVED_QUEUE_WAIT = _("queue wait p95 %(first)s -> %(last)s ms")
OBSERVED_PREEMPTIONS = _("preemptions %(first)s -> %(last)s/min")
OBSERVED_FRAGMENTATION = _("fragmentation %(first)s -> %(last)s")
OBSERVED_GPU = _("GPU memory %(slope)s MiB/h")
OBSERVED_NO_GPU = _("GPU memory not measured (no NVML)")


def _stability_observed(
    params: dict[str, Any],
    concurrency: int,
    duration: float,
    warmup: float,
    outcome: LoadOutcome,
    early: list[RequestRecord],
    late: list[RequestRecord],
    drift: dict[str, Any],
    soak_note: Message | None,
    gpu: Any,
) -> dict[str, Any]:
    """The one-sentence summary of the soak, with its figures: English text (`line`) and the message
    pages render in their language (`line_message`)."""

    def pct(key: str) -> str:
        value = drift.get(key)
        return "n/a" if value is None else f"{value:+.0f} %"

    def p(records: list[RequestRecord], attr: str, q: float) -> float | None:
        values = [getattr(r, attr) for r in records if getattr(r, attr) is not None]
        return float(np.percentile(values, q)) if values else None

    ttft_early, ttft_late = p(early, "ttft_ms", 99), p(late, "ttft_ms", 99)
    tpot_early, tpot_late = p(early, "tpot_ms", 99), p(late, "tpot_ms", 99)
    slope = drift.get("kv_usage_slope_per_hour")
    if slope is None:
        kv = Message(OBSERVED_KV_NONE)
    else:
        low, high = drift["kv_usage_slope_interval"]
        kv = Message(
            OBSERVED_KV, {"slope": f"{slope * 100:+.1f}", "low": f"{low * 100:+.1f}", "high": f"{high * 100:+.1f}"}
        )
    if drift.get("kv_fill_to") is not None:
        kv = Message(
            OBSERVED_KV_AFTER_FILL,
            {"kv": kv, "fill": f"{drift['kv_fill_to']:.0%}", "seconds": f"{drift['kv_fill_s']:.0f}"},
        )
    parts: list[Any] = [soak_note] if soak_note else []
    parts.append(
        Message(
            OBSERVED_LOAD,
            {
                "c": concurrency,
                "duration": f"{duration:g}",
                "warmup": f"{warmup:g}",
                "excluded": len(outcome.warmup),
                "measured": len(outcome.records),
                "first": len(early),
                "last": len(late),
            },
        )
    )
    turns = int(params.get("session_turns") or 1)
    if turns > 1:
        parts.append(Message(OBSERVED_TURNS, {"turns": turns}))
    parts.append(
        Message(
            OBSERVED_LATENCY,
            {
                "ttft_first": format_ms(ttft_early),
                "ttft_last": format_ms(ttft_late),
                "ttft_drift": pct("ttft_ms_p99_drift_pct"),
                "tpot_first": format_ms(tpot_early),
                "tpot_last": format_ms(tpot_late),
                "tpot_drift": pct("tpot_ms_p99_drift_pct"),
            },
        )
    )
    parts.append(kv)
    if drift.get("queue_waiting_first") is not None:
        parts.append(
            Message(
                OBSERVED_WAITING,
                {"first": f"{drift['queue_waiting_first']:.1f}", "last": f"{drift['queue_waiting_last']:.1f}"},
            )
        )
    if drift.get("queue_wait_p95_first_ms") is not None and drift.get("queue_wait_p95_last_ms") is not None:
        parts.append(
            Message(
                OBSERVED_QUEUE_WAIT,
                {"first": f"{drift['queue_wait_p95_first_ms']:.0f}", "last": f"{drift['queue_wait_p95_last_ms']:.0f}"},
            )
        )
    if drift.get("preemptions_per_min_first") is not None:
        parts.append(
            Message(
                OBSERVED_PREEMPTIONS,
                {
                    "first": f"{drift['preemptions_per_min_first']:.1f}",
                    "last": f"{drift['preemptions_per_min_last']:.1f}",
                },
            )
        )
    if drift.get("fragmentation_first") is not None:
        parts.append(
            Message(
                OBSERVED_FRAGMENTATION,
                {"first": f"{drift['fragmentation_first']:.3f}", "last": f"{drift['fragmentation_last']:.3f}"},
            )
        )
    if drift.get("gpu_memory_slope_mib_per_hour") is not None:
        parts.append(Message(OBSERVED_GPU, {"slope": f"{drift['gpu_memory_slope_mib_per_hour']:+.0f}"}))
    else:
        parts.append(Message(OBSERVED_NO_GPU))
    line = Join(parts, CLAUSE_SEPARATOR)
    return {
        "line": str(line),
        "line_message": line.to_dict(),
        "soak_note": None if soak_note is None else str(soak_note),
        "duration_s": duration,
        "recommended_duration_s": float(params.get("recommended_duration_s") or SOAK_S),
        "soak_length": soak_length(params, duration),
        "warmup_s": warmup,
        "warmup_requests": len(outcome.warmup),
        "requests": len(outcome.records),
        "first_window_n": len(early),
        "last_window_n": len(late),
        "ttft_p99_first_ms": ttft_early,
        "ttft_p99_last_ms": ttft_late,
        "tpot_p99_first_ms": tpot_early,
        "tpot_p99_last_ms": tpot_late,
        **{k: v for k, v in drift.items() if not k.endswith("_interval")},
        "gpu_available": bool(gpu.available),
    }


SPEC = TestSpec.of(suite_row.TEST, run_stability)
