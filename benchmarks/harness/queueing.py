"""Queue wait and queue growth: the judging rules on the engine's own queue signals.

Queue wait is what a request spends waiting before the engine schedules it; it is part of the client's
TTFT but the client cannot separate it from prefill. The engines that export it do so as a histogram
of every request's wait (vLLM `vllm:request_queue_time_seconds`, SGLang `sglang:queue_time_seconds`,
LMDeploy, TensorRT-LLM, TGI; `metrics.HISTOGRAMS`): the harness reads the observations the histogram
gained over a window, so each request of the window is counted once, by the engine.

- queue wait p95 within the budget: the p95 over the window's requests against QUEUE_WAIT_SHARE_OF_TTFT
  of the TTFT budget (the share the exported alert uses, `selection.domain.monitoring`). A histogram
  knows a quantile only to its bucket: the bucket's bounds are the interval, so a limit inside the
  bucket is inconclusive, never a pass.
- the queue does not grow (soak): the engine's waiting-requests gauge in the last window against the
  first (a bootstrap interval of the difference of means), with the queue wait of both windows
  beside it where the engine exports it. A badly managed cache is fast at first and, after a while,
  queues: at the same load the waiting queue grows.
Pure: a metrics recording in, verdicts and figures out.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from benchmarks.harness.metrics import HISTOGRAMS, MetricsRecording, histogram_quantile
from benchmarks.verdicts import (
    FAIL,
    INCONCLUSIVE,
    INSUFFICIENT_DATA,
    MIN_SAMPLES,
    NOT_JUDGED,
    PASS,
    QUEUE_WAIT_SHARE_OF_TTFT,
    compare,
    two_sample_interval,
    verdict,
)
from selection.domain.messages import Message
from selection.domain.messages import marked as _

QUEUE_WAIT = "queue_wait"
# a queue-time histogram as a sentence names it: its metric name in English, what it is in other languages
HISTOGRAM_CONTEXT = "queue-time histogram"
NO_HISTOGRAM = _(
    "the engine exports no queue-time histogram: the wait of each request is not measured, only the "
    "number of requests waiting"
)
NO_TTFT_BUDGET = _("no TTFT budget: the queue wait is reported, not judged")
SHARE_OF_BUDGET = _("%(share)s of the %(budget)s ms TTFT budget")
FEW_WAITS = _(
    "queue wait from %(n)s requests (%(metric)s): at least %(min)s are needed (limit %(limit)s ms, %(share)s)"
)
BEYOND_LAST_BUCKET = _("above %(low)s ms (the histogram's last bucket)")
IN_BUCKET = _("%(value)s ms (its histogram bucket %(low)s–%(high)s ms)")
QUEUE_WAIT_P95 = _(
    "queue wait p95 %(where)s, mean %(mean)s ms, n=%(n)s requests (%(metric)s) vs <= %(limit)s ms (%(share)s)"
)
LIMIT_IN_BUCKET = _("%(detail)s: the limit falls inside the bucket that holds the p95")
NO_WAITING_GAUGE = _("the engine exports no waiting-requests gauge")
FEW_QUEUE_SAMPLES = _("%(early)s and %(late)s queue-length samples in the windows")
QUEUE_GROWTH = _(
    "requests waiting %(first)s in the first window -> %(last)s in the last (%(change)s%(ci)s; "
    "%(early)s and %(late)s samples)%(waits)s vs a rise <= %(limit)s at the same load"
)
QUEUE_GROWTH_CI = _(", 95%% CI %(low)s–%(high)s")
QUEUE_WAIT_CHANGE = _("; queue wait p95 %(first)s -> %(last)s ms")
GROWTH_STRADDLES = _("%(detail)s: the interval straddles the limit (a longer soak narrows it)")
MIN_QUEUE_GROWTH = 1.0  # requests: a queue this much longer on average is within noise at any load
QUEUE_GROWTH_SHARE = 0.1  # of the concurrency: the default allowed rise of the mean queue length


def queue_wait_figures(recording: MetricsRecording, start: float, end: float) -> dict[str, Any] | None:
    """The queue wait of the requests the engine scheduled in [start, end] (recording seconds):
    {metric, n, mean_ms, p50_ms, p95_ms, p95_bounds_ms, p99_ms}; None when the engine exports no
    queue-time histogram or no two scrapes frame the window."""
    window = recording.histogram_between(QUEUE_WAIT, start, end)
    if window is None:
        return None
    n = int(round(window["count"]))
    figures: dict[str, Any] = {"metric": window["metric"], "n": n}
    if n <= 0:
        return figures | {"mean_ms": None, "p50_ms": None, "p95_ms": None, "p95_bounds_ms": None, "p99_ms": None}
    figures["mean_ms"] = window["sum"] / window["count"] * 1000.0
    for q in (50, 95, 99):
        found = histogram_quantile(q / 100.0, window["buckets"])
        figures[f"p{q}_ms"] = None if found is None else found[0] * 1000.0
        if q == 95 and found is not None:
            figures["p95_bounds_ms"] = [found[1] * 1000.0, found[2] * 1000.0 if math.isfinite(found[2]) else None]
    figures.setdefault("p95_bounds_ms", None)
    return figures


def histogram_name(metric: str) -> str | Message:
    """A queue-time histogram's metric name as a message where kvselect knows it (`HISTOGRAMS`)."""
    known = {name for names in HISTOGRAMS[QUEUE_WAIT].values() for name in names}
    return Message(metric, context=HISTOGRAM_CONTEXT) if metric in known else metric


def queue_wait_verdict(
    figures: dict[str, Any] | None, ttft_budget_ms: float | None, name: str = "queue_wait_p95_within_budget"
) -> dict[str, Any]:
    """Queue wait p95 against QUEUE_WAIT_SHARE_OF_TTFT of the TTFT budget (the histogram bucket holding
    the p95 is its interval)."""
    if figures is None:
        return verdict(name, NOT_JUDGED, Message(NO_HISTOGRAM))
    if not ttft_budget_ms:
        return verdict(name, NOT_JUDGED, Message(NO_TTFT_BUDGET), None, None, figures["n"])
    limit = QUEUE_WAIT_SHARE_OF_TTFT * float(ttft_budget_ms)
    n, value, bounds = figures["n"], figures.get("p95_ms"), figures.get("p95_bounds_ms")
    share = Message(
        SHARE_OF_BUDGET, {"share": f"{QUEUE_WAIT_SHARE_OF_TTFT:.0%}", "budget": f"{float(ttft_budget_ms):g}"}
    )
    if n < MIN_SAMPLES or value is None or bounds is None:
        return verdict(
            name,
            INSUFFICIENT_DATA,
            Message(
                FEW_WAITS,
                {
                    "n": n,
                    "metric": histogram_name(figures["metric"]),
                    "min": MIN_SAMPLES,
                    "limit": f"{limit:g}",
                    "share": share,
                },
            ),
            value,
            limit,
            n,
        )
    low, high = bounds
    # a bucket holds the waits above its lower bound up to its upper one (Prometheus's `le`): a p95 in a
    # bucket starting at the limit is beyond it
    if high is None:  # beyond the histogram's last finite bucket: only its lower bound is known
        status = FAIL if low >= limit else INCONCLUSIVE
        where = Message(BEYOND_LAST_BUCKET, {"low": f"{low:g}"})
        interval = None
    else:
        status = PASS if high <= limit else FAIL if low >= limit else INCONCLUSIVE
        where = Message(IN_BUCKET, {"value": f"{value:.1f}", "low": f"{low:g}", "high": f"{high:g}"})
        interval = (low, high)
    detail = Message(
        QUEUE_WAIT_P95,
        {
            "where": where,
            "mean": f"{figures['mean_ms']:.1f}",
            "n": n,
            "metric": histogram_name(figures["metric"]),
            "limit": f"{limit:g}",
            "share": share,
        },
    )
    if status == INCONCLUSIVE:
        detail = Message(LIMIT_IN_BUCKET, {"detail": detail})
    return verdict(name, status, detail, value, limit, n, interval)


def queue_growth_verdict(
    recording: MetricsRecording,
    windows: dict[str, tuple[float, float]],
    concurrency: int,
    max_growth: float | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The waiting queue in the last window against the first at the same load (mean requests waiting,
    a bootstrap interval of the difference), with each window's queue wait where the engine exports
    it. `max_growth`: the allowed rise in requests (default QUEUE_GROWTH_SHARE of the concurrency, at
    least MIN_QUEUE_GROWTH). Returns the verdict and its figures."""
    limit = float(max_growth) if max_growth is not None else max(MIN_QUEUE_GROWTH, QUEUE_GROWTH_SHARE * concurrency)
    name = "queue_not_growing"
    first, last = windows["first_window"], windows["last_window"]
    waits = {label: queue_wait_figures(recording, *windows[label]) for label in ("first_window", "last_window")}
    figures: dict[str, Any] = {
        "queue_waiting_first": None,
        "queue_waiting_last": None,
        "queue_wait_p95_first_ms": (waits["first_window"] or {}).get("p95_ms"),
        "queue_wait_p95_last_ms": (waits["last_window"] or {}).get("p95_ms"),
    }
    if "waiting" not in recording.series:
        return verdict(name, NOT_JUDGED, Message(NO_WAITING_GAUGE)), figures
    early = [v for t, v in recording.series["waiting"] if first[0] <= t <= first[1]]
    late = [v for t, v in recording.series["waiting"] if last[0] <= t <= last[1]]
    if len(early) < 2 or len(late) < 2:
        return (
            verdict(name, INSUFFICIENT_DATA, Message(FEW_QUEUE_SAMPLES, {"early": len(early), "late": len(late)})),
            figures,
        )
    a, b = np.asarray(early, dtype=float), np.asarray(late, dtype=float)
    value = float(b.mean() - a.mean())
    interval = two_sample_interval(late, early, lambda sample: sample.mean(axis=1), np.subtract)
    status = compare(value, interval, limit)
    figures.update(queue_waiting_first=float(a.mean()), queue_waiting_last=float(b.mean()))
    waits_text: Message | str = ""
    if figures["queue_wait_p95_first_ms"] is not None and figures["queue_wait_p95_last_ms"] is not None:
        waits_text = Message(
            QUEUE_WAIT_CHANGE,
            {"first": f"{figures['queue_wait_p95_first_ms']:.0f}", "last": f"{figures['queue_wait_p95_last_ms']:.0f}"},
        )
    ci = Message(QUEUE_GROWTH_CI, {"low": f"{interval[0]:+.2f}", "high": f"{interval[1]:+.2f}"}) if interval else ""
    detail = Message(
        QUEUE_GROWTH,
        {
            "first": f"{a.mean():.2f}",
            "last": f"{b.mean():.2f}",
            "change": f"{value:+.2f}",
            "ci": ci,
            "early": int(a.size),
            "late": int(b.size),
            "waits": waits_text,
            "limit": f"{limit:g}",
        },
    )
    if status == INCONCLUSIVE:
        detail = Message(GROWTH_STRADDLES, {"detail": detail})
    return verdict(name, status, detail, value, limit, int(a.size + b.size), interval), figures
