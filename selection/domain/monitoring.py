"""Operations out: the record's monitoring table, the Prometheus alerting rules and the Grafana dashboard,
all from one description of what to watch (`operations`, frozen in the record's snapshot).

The first article's list: watch memory (KV-cache usage against the planned headroom), cache hit
rate, swap frequency, fragmentation, queue wait, TTFT and TPOT, OOM errors and request length, and
throughput, error rate and GPU utilisation. Each is a SIGNAL below: the engine roles it reads (the
catalog's `monitoring_metrics`, real metric names per engine version; GPU utilisation from NVIDIA's
DCGM exporter), its PromQL, and its threshold taken from the record:

- memory: KV usage above 1 - the record's headroom (warning) and above CRITICAL_KV_USAGE (critical);
- cache_hit_rate: below HIT_RATE_FLOOR_SHARE of the hit rate validated for the chosen engine;
- swap: where the engine offloads, its offload counters (swap-out and swap-in traffic on the
  dashboard: the swap frequency) and its CPU tier above the same headroom line; preemptions
  (retractions, pauses) above PREEMPTIONS_PER_MINUTE, sustained;
- fragmentation: the engine's own fragmentation gauge above the headroom share where it exports one,
  else KV usage above the headroom line while fewer than half the validated (else planned, and said
  so) concurrency runs (memory held by little work);
- queue_wait: queue time p95 above QUEUE_SHARE_OF_TTFT of the TTFT budget, and requests waiting;
- ttft, tpot: their p95 above the latency budget;
- throughput: generated tokens per second below THROUGHPUT_FLOOR_SHARE of the validated throughput
  while requests wait (demand is there, the engine does not serve it);
- error_rate: failed requests over all requests from the engine's request metrics above
  ERROR_RATE_LIMIT (the staged rollout's gate);
- oom_errors: requests the engine failed (its failure counter; OOM messages in its logs);
- gpu_utilisation: DCGM's GPU utilisation below GPU_IDLE_PERCENT while requests wait (memory-bound:
  the KV cache, not compute, is the limit);
- request_length: prompt length p99 above the longest input a long-context run validated, or, when
  none did, above the constraints' planned maximum, named as planned and not validated;
- engine_up: the scrape target down (a crash, an OOM kill of the process).
A signal whose metric the engine does not export, or whose threshold the record does not have, gets
a row in the table that says so and no rule (never a rule against a metric that does not exist).
Each signal belongs to a watch area (capacity, cost, stability; SIGNAL_WATCH): its row and its alerts
name the record's watcher for that area (`operations["watchers"]`), and carry its action
(SIGNAL_ACTIONS), the same text the record's table prints.

Pure: plain data in, plain data out. Texts are messages (`{message, params}`; the template is also
the gettext msgid), translated where shown. Durations are Prometheus durations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from benchmarks.verdicts import QUEUE_WAIT_SHARE_OF_TTFT
from selection.domain.messages import marked as _

HISTOGRAM_WINDOW = "5m"
CRITICAL_KV_USAGE = 0.95
HIT_RATE_FLOOR_SHARE = 0.5
PREEMPTIONS_PER_MINUTE = 1.0
QUEUE_SHARE_OF_TTFT = QUEUE_WAIT_SHARE_OF_TTFT  # the harness's queue-wait verdict judges the same share
ERROR_RATE_LIMIT = 0.01  # the staged rollout's gate: error rate below 1 % (selection.records.context)
THROUGHPUT_FLOOR_SHARE = 0.5
GPU_IDLE_PERCENT = 30.0
DCGM_JOB = "dcgm-exporter"  # the scrape job of NVIDIA's DCGM exporter (its Helm chart's name)
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # GPU utilisation in %, per GPU (dcgm-exporter's default counters)
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"  # framebuffer memory used, MiB
DCGM_FB_FREE = "DCGM_FI_DEV_FB_FREE"  # framebuffer memory free, MiB
GRAFANA_SCHEMA_VERSION = 39  # the classic dashboard JSON model (Grafana 10.x/11.x)


def _message(message: str, **params: Any) -> dict[str, Any]:
    return {"message": message, "params": params}


# signal id -> title (a message id), in the order of the record's table and the dashboard
SIGNALS: tuple[tuple[str, str], ...] = (
    ("memory", _("KV-cache usage")),
    ("cache_hit_rate", _("Prefix-cache hit rate")),
    ("swap", _("Swaps and preemptions")),
    ("fragmentation", _("Fragmentation")),
    ("queue_wait", _("Queue wait")),
    ("ttft", _("Time to first token")),
    ("tpot", _("Time per output token")),
    ("throughput", _("Throughput")),
    ("error_rate", _("Error rate")),
    ("oom_errors", _("OOM and failed requests")),
    ("gpu_utilisation", _("GPU utilisation")),
    ("request_length", _("Request length")),
    ("engine_up", _("Engine up")),
)
# signal -> the watch area whose watcher it names (selection.domain.project_checks.WATCH_AREAS)
SIGNAL_WATCH = {
    "memory": "capacity",
    "cache_hit_rate": "capacity",
    "swap": "capacity",
    "fragmentation": "capacity",
    "request_length": "capacity",
    "queue_wait": "stability",
    "ttft": "stability",
    "tpot": "stability",
    "error_rate": "stability",
    "oom_errors": "stability",
    "engine_up": "stability",
    "throughput": "cost",
    "gpu_utilisation": "cost",
}
# signal -> what its watcher does when it fires: the record's table and each alert's `action` say it
SIGNAL_ACTIONS = {
    "memory": _(
        "page the platform on-call: hold new sessions at the gateway or add a replica before the headroom is "
        "gone; look for sessions that keep their cache"
    ),
    "cache_hit_rate": _(
        "ticket to the platform team: check prompt templates and request routing for a changed shared prefix; "
        "re-run the prefix-reuse test"
    ),
    "swap": _(
        "page the platform on-call: lower the concurrency limit or add capacity; check that never-swapped "
        "sessions are unaffected"
    ),
    "fragmentation": _(
        "ticket to the platform team: rolling restart in low traffic; re-run the long-run stability test and "
        "re-evaluate if it recurs"
    ),
    "queue_wait": _("page the platform on-call: add a replica or lower the admission limit; check the KV usage"),
    "ttft": _("page the platform on-call: check queue wait and KV usage; shed load or add a replica"),
    "tpot": _("page the platform on-call: check batch size and preemptions; lower the concurrency limit"),
    "throughput": _(
        "ticket to the platform team: requests wait while the engine generates less than validated; check "
        "preemptions, swaps and the GPUs"
    ),
    "error_rate": _("page the platform on-call: read the engine's error log; roll back if a change caused it"),
    "oom_errors": _(
        "page the platform on-call: confirm out-of-memory in the engine's log; lower the concurrency or the "
        "maximum context"
    ),
    "gpu_utilisation": _(
        "ticket to the platform team: the GPUs idle while requests wait (the KV cache is the limit): add KV "
        "capacity or lower the context, not compute"
    ),
    "request_length": _(
        "ticket to the architect: traffic is longer than the record covers; run the long-context test at the "
        "new length or supersede the record"
    ),
    "engine_up": _("page the platform on-call: restart the engine; if it was killed for memory, see OOM"),
}


def _selector(job: str, labels: dict[str, str] | None = None) -> str:
    pairs = {"job": job, **(labels or {})}
    escaped = (f'{k}="' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for k, v in pairs.items())
    return "{" + ", ".join(escaped) + "}"


def _quantile(metric: str, q: float, job: str, window: str = HISTOGRAM_WINDOW) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{_selector(job)}[{window}])))"


def _seconds(ms: float) -> str:
    return f"{ms / 1000.0:g}"


DESCRIPTION = _("Threshold from decision record %(record)s: %(threshold)s. Watcher: %(owner)s.")
ABOUT = _(
    "Generated by kvselect from decision record %(record)s for %(engine)s. Thresholds are the record's "
    "(headroom %(headroom)s %%, the latency budget); change them by superseding the record."
)
SIMULATED_NOTE = _("SIMULATED evidence: not for procurement.")
ABOUT_TITLE = _("About this dashboard")


@dataclass(frozen=True)
class _Watch:
    """What every signal's plan reads: the engine's metrics by role, the record's thresholds, the
    scrape job, and what to say where the engine exports nothing."""

    operations: dict[str, Any]
    job: str

    @property
    def metrics(self) -> dict[str, Any]:
        return self.operations.get("metrics") or {}

    @property
    def limits(self) -> dict[str, Any]:
        return self.operations.get("thresholds") or {}

    @property
    def sel(self) -> str:
        return _selector(self.job)

    @property
    def kv_warning(self) -> float:
        """KV usage past which the record's headroom is being used (1 - headroom)."""
        return self.limits.get("kv_usage_warning") or 1 - self.operations.get("headroom_percent", 20) / 100

    def name(self, role: str) -> str | None:
        entry = self.metrics.get(role)
        return entry["metric"] if entry else None

    def kind(self, role: str) -> str | None:
        entry = self.metrics.get(role)
        return entry["type"] if entry else None

    def series(self, role: str) -> str | None:
        """The role's metric with its selector (the job and the role's own labels, e.g. status="5xx")."""
        entry = self.metrics.get(role)
        if not entry:
            return None
        return entry["metric"] + _selector(self.job, entry.get("labels"))

    def rate(self, role: str, window: str, by: str = "") -> str | None:
        """Per-second rate of a counter role, summed (`by`: per label, e.g. per instance); a histogram
        counts by its _sum (tokens in a token histogram), a growing gauge by deriv."""
        entry = self.metrics.get(role)
        if not entry:
            return None
        total = f"sum by ({by}) " if by else "sum"
        if entry["type"] == "histogram":
            return f"{total}(rate({entry['metric']}_sum{_selector(self.job, entry.get('labels'))}[{window}]))"
        if entry["type"] == "counter":
            return f"{total}(rate({self.series(role)}[{window}]))"
        return f"{total}(deriv({self.series(role)}[{window}]))"

    def shown(self, role: str) -> str | None:
        """The role's metric as the table names it (with its labels)."""
        entry = self.metrics.get(role)
        if not entry:
            return None
        labels = entry.get("labels")
        return entry["metric"] + ("{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")

    @property
    def not_exported(self) -> dict[str, Any]:
        metrics_off = self.operations.get("metrics_off_in_launch_flags")  # launch_flags.FeatureState.as_dict()
        if not metrics_off:
            return _message(_("the engine exports no metric for this: watch its logs"))
        # documented, but the launch flags leave metrics off (SGLang without --enable-metrics)
        if metrics_off.get("flag"):
            return _message(
                _("metrics are off in the launch flags: start the engine with %(flag)s, then watch this"),
                flag=metrics_off["flag"],
            )
        return _message(_("metrics are off in the launch flags: watch the engine's logs"))


def _row(signal: str, title: str, metric: str | None, threshold: dict, rules=(), panels=()) -> dict[str, Any]:
    return {
        "signal": signal,
        "title": title,
        "metric": metric,
        "threshold": threshold,
        "rules": list(rules),
        "panels": list(panels),
        "watch": SIGNAL_WATCH[signal],
    }


def _plan_memory(w: _Watch, signal: str, title: str) -> dict[str, Any]:
    kv = w.name("kv_usage")
    warn = w.kv_warning
    if kv is None:
        return _row(signal, title, None, w.not_exported)
    expr = f"max({kv}{w.sel})"
    return _row(
        signal,
        title,
        kv,
        _message(
            _(
                "KV-cache usage above %(warn)s for 5 min (the %(headroom)s %% headroom is being used), above "
                "%(crit)s for 2 min critical"
            ),
            warn=f"{warn:.0%}",
            headroom=f"{(1 - warn) * 100:g}",
            crit=f"{CRITICAL_KV_USAGE:.0%}",
        ),
        [
            _rule("KVCacheHeadroomUsed", f"{expr} > {warn:g}", "5m", "warning", signal),
            _rule("KVCacheNearlyFull", f"{expr} > {CRITICAL_KV_USAGE:g}", "2m", "critical", signal),
        ],
        [(title, expr, "percentunit", warn)],
    )


def _plan_cache_hit_rate(w: _Watch, signal: str, title: str) -> dict[str, Any]:
    hits, queries, gauge = w.name("cache_hits"), w.name("cache_queries"), w.name("cache_hit_rate")
    if hits and queries:
        metric = f"{hits} / {queries}"
        expr = f"sum(rate({hits}{w.sel}[15m])) / sum(rate({queries}{w.sel}[15m]))"
    elif gauge:
        metric, expr = gauge, f"avg({gauge}{w.sel})"
    else:
        return _row(signal, title, None, w.not_exported)
    validated = w.limits.get("prefix_hit_ratio_validated")
    if validated is None:
        return _row(
            signal,
            title,
            metric,
            _message(_("no hit rate was validated: watched, no alert")),
            (),
            [(title, expr, "percentunit", None)],
        )
    floor = HIT_RATE_FLOOR_SHARE * validated
    return _row(
        signal,
        title,
        metric,
        _message(
            _("hit rate below %(floor)s (half the validated %(validated)s) for 15 min"),
            floor=f"{floor:.0%}",
            validated=f"{validated:.0%}",
        ),
        [_rule("PrefixCacheHitRateLow", f"{expr} < {floor:.4g}", "15m", "warning", signal)],
        [(title, expr, "percentunit", floor)],
    )


def _preemption_parts(w: _Watch, signal: str) -> tuple[list, list, dict | None]:
    """The preemption rule, panel and threshold text (none without a preemption metric)."""
    preempt = w.name("preemptions")
    if preempt is None:
        return [], [], None
    if w.kind("preemptions") == "counter":
        expr = f"sum(rate({preempt}{w.sel}[5m])) * 60"
        threshold = _message(_("more than %(n)s preemption per minute for 10 min"), n=f"{PREEMPTIONS_PER_MINUTE:g}")
        rule_expr, limit = f"{expr} > {PREEMPTIONS_PER_MINUTE:g}", PREEMPTIONS_PER_MINUTE
    else:
        expr = f"max({preempt}{w.sel})"
        threshold = _message(_("requests preempted (retracted or paused) for 10 min"))
        rule_expr, limit = f"{expr} > 0", 0
    return (
        [_rule("KVCachePreemptions", rule_expr, "10m", "warning", signal)],
        [(_("Preemptions"), expr, "short", limit)],
        threshold,
    )


def _plan_swap(w: _Watch, signal: str, title: str) -> dict[str, Any]:
    """Where the engine offloads: swap frequency from its offload counters (out and back in, bytes/s)
    and its CPU tier against the record's headroom; and preemptions, the swaps and recomputes forced
    by a full GPU pool."""
    rules, panels, preempt_text = _preemption_parts(w, signal)
    out_rate, in_rate, tier = w.rate("swap_out", "5m"), w.rate("swap_in", "5m"), w.name("offload_usage")
    parts, metrics = [], [m for m in (w.shown("swap_out"), w.shown("swap_in"), tier, w.name("preemptions")) if m]
    if out_rate:
        panels.insert(0, (_("Swap-out to the offload tier (bytes/s)"), out_rate, "Bps", None))
    if in_rate:
        panels.insert(1 if out_rate else 0, (_("Swap-in from the offload tier (bytes/s)"), in_rate, "Bps", None))
    if tier is not None:
        expr = f"max({tier}{w.sel})"
        warn = w.kv_warning
        rules.insert(0, _rule("KVOffloadTierHeadroomUsed", f"{expr} > {warn:g}", "10m", "warning", signal))
        panels.append((_("Offload tier usage"), expr, "percentunit", warn))
        parts.append(
            _message(
                _("offload tier above %(warn)s for 10 min (swapped-out sessions start losing their cache)"),
                warn=f"{warn:.0%}",
            )
        )
    elif out_rate or in_rate:
        parts.append(_message(_("swap frequency on the dashboard (offload traffic out and back in)")))
    if preempt_text is not None:
        parts.append(preempt_text)
    if not parts:
        return _row(signal, title, None, w.not_exported)
    threshold = parts[0] if len(parts) == 1 else _message(_("%(first)s; %(second)s"), first=parts[0], second=parts[1])
    return _row(signal, title, ", ".join(metrics), threshold, rules, panels)


def _plan_fragmentation(w: _Watch, signal: str, title: str) -> dict[str, Any]:
    gauge = w.name("fragmentation")
    if gauge is not None:  # the engine states its fragmentation: waste above the headroom's share alerts
        share = round(1 - w.kv_warning, 4)
        expr = f"max({gauge}{w.sel})"
        return _row(
            signal,
            title,
            gauge,
            _message(
                _("fragmentation above %(share)s of the KV pool for 15 min (the headroom wasted)"),
                share=f"{share:.0%}",
            ),
            [_rule("KVCacheFragmented", f"{expr} > {share:g}", "15m", "warning", signal)],
            [(title, expr, "percentunit", share)],
        )
    kv, running = w.name("kv_usage"), w.name("running")
    if kv is None or running is None:
        return _row(
            signal,
            title,
            kv or running,
            w.not_exported
            if kv is None
            else _message(
                _("the engine exports no running-requests gauge: fragmentation is judged from KV usage alone")
            ),
        )
    validated = w.limits.get("validated_concurrency")
    concurrency = validated or w.limits.get("planned_concurrency")
    if not concurrency:
        return _row(
            signal,
            title,
            f"{kv}, {running}",
            _message(_("no validated or planned concurrency: watched, no alert")),
            (),
            [(_("Running requests"), f"sum({running}{w.sel})", "short", None)],
        )
    half, warn = concurrency / 2, w.kv_warning
    text = (
        _("KV usage above %(kv)s while fewer than %(half)s requests run (half the validated %(n)s) for 10 min")
        if validated
        else _(
            "KV usage above %(kv)s while fewer than %(half)s requests run (half the planned %(n)s, not validated) "
            "for 10 min"
        )
    )
    return _row(
        signal,
        title,
        f"{kv}, {running}",
        _message(text, kv=f"{warn:.0%}", half=f"{half:g}", n=concurrency),
        [
            _rule(
                "KVCacheFragmented",
                f"(max({kv}{w.sel}) > {warn:g}) and on() (sum({running}{w.sel}) < {half:g})",
                "10m",
                "warning",
                signal,
            )
        ],
        [(_("Running requests"), f"sum({running}{w.sel})", "short", half)],
    )


def _plan_queue_wait(w: _Watch, signal: str, title: str) -> dict[str, Any]:
    wait, waiting = w.name("queue_wait"), w.name("queue_length")
    ttft_ms = w.limits.get("ttft_p95_ms")
    if wait is None and waiting is None:
        return _row(signal, title, None, w.not_exported)
    rules, panels, parts = [], [], []
    if wait is not None:
        expr = _quantile(wait, 0.95, w.job)
        panels.append((_("Queue wait p95"), expr, "s", ttft_ms and QUEUE_SHARE_OF_TTFT * ttft_ms / 1000))
        if ttft_ms:
            limit = QUEUE_SHARE_OF_TTFT * ttft_ms
            rules.append(_rule("QueueWaitHigh", f"{expr} > {_seconds(limit)}", "10m", "warning", signal))
            parts.append(
                _message(
                    _("queue wait p95 above %(limit)s ms (%(share)s of the TTFT budget) for 10 min"),
                    limit=f"{limit:g}",
                    share=f"{QUEUE_SHARE_OF_TTFT:.0%}",
                )
            )
    if waiting is not None:
        expr = f"sum({waiting}{w.sel})"
        panels.append((_("Requests waiting"), expr, "short", None))
        rules.append(_rule("RequestsQueueing", f"{expr} > 0", "15m", "info", signal))
        parts.append(_message(_("requests waiting for 15 min")))
    if len(parts) == 2:
        threshold = _message(_("%(first)s; %(second)s"), first=parts[0], second=parts[1])
    else:
        threshold = parts[0] if parts else _message(_("no latency budget: watched, no alert"))
    return _row(signal, title, ", ".join(m for m in (wait, waiting) if m), threshold, rules, panels)


def _plan_latency(w: _Watch, signal: str, title: str) -> dict[str, Any]:
    metric = w.name(signal)
    budget = w.limits.get(f"{signal}_p95_ms")
    if metric is None:
        return _row(signal, title, None, w.not_exported)
    expr = _quantile(metric, 0.95, w.job)
    if budget is None:
        return _row(
            signal,
            title,
            metric,
            _message(_("no latency budget: watched, no alert")),
            (),
            [(f"{title} p95", expr, "s", None)],
        )
    return _row(
        signal,
        title,
        metric,
        _message(_("p95 above the %(budget)s ms budget for 10 min"), budget=f"{budget:g}"),
        [
            _rule(
                "TTFTOverBudget" if signal == "ttft" else "TPOTOverBudget",
                f"{expr} > {_seconds(budget)}",
                "10m",
                "critical",
                signal,
            )
        ],
        [(f"{title} p95", expr, "s", budget / 1000)],
    )


def _plan_throughput(w: _Watch, signal: str, title: str) -> dict[str, Any]:
    """Generated tokens per second; below a share of the validated throughput while requests wait."""
    rate, waiting = w.rate("generation_tokens", "5m", by="instance"), w.name("queue_length")
    if rate is None:
        return _row(signal, title, None, w.not_exported)
    validated = w.limits.get("validated_output_tokens_per_s")
    if not validated or waiting is None:
        reason = (
            _("no throughput was validated: watched, no alert")
            if not validated
            else _("the engine exports no waiting-requests gauge: watched, no alert")
        )
        return _row(signal, title, w.shown("generation_tokens"), _message(reason), (), [(title, rate, "short", None)])
    floor = THROUGHPUT_FLOOR_SHARE * validated
    return _row(
        signal,
        title,
        w.shown("generation_tokens"),
        _message(
            _(
                "below %(floor)s output tokens/s per replica (half the validated %(validated)s) while requests "
                "wait, for 10 min"
            ),
            floor=f"{floor:,.0f}",
            validated=f"{validated:,.0f}",
        ),
        [
            _rule(
                "ThroughputLow",
                f"({rate} < {floor:g}) and on(instance) (sum by (instance) ({waiting}{w.sel}) > 0)",
                "10m",
                "warning",
                signal,
            )
        ],
        [(title, rate, "short", floor)],
    )


def _plan_error_rate(w: _Watch, signal: str, title: str) -> dict[str, Any]:
    """Failed requests over all requests, from the engine's own request metrics."""
    failed, total = w.rate("errors", "10m"), w.rate("requests", "10m")
    if failed is None or total is None:
        return _row(
            signal,
            title,
            w.shown("errors") or w.shown("requests"),
            w.not_exported if failed is None else _message(_("the engine counts no requests: watched, no alert")),
            (),
            [(_("Failed requests per second"), failed, "short", None)] if failed else (),
        )
    expr = f"{failed} / {total}"
    return _row(
        signal,
        title,
        f"{w.shown('errors')} / {w.shown('requests')}",
        _message(
            _("more than %(limit)s of requests failed over 10 min (the staged rollout's gate)"),
            limit=f"{ERROR_RATE_LIMIT:.0%}",
        ),
        [_rule("ErrorRateHigh", f"({expr}) > {ERROR_RATE_LIMIT:g}", "10m", "critical", signal)],
        [(title, expr, "percentunit", ERROR_RATE_LIMIT)],
    )


def _plan_oom_errors(w: _Watch, signal: str, title: str) -> dict[str, Any]:
    """Requests the engine failed, from its own failure counter (an out-of-memory error fails them;
    the engine's log says which were OOM)."""
    errors = w.series("errors")
    if errors is None:
        return _row(
            signal,
            title,
            None,
            _message(
                _(
                    "the engine counts no failed requests: OOM messages are in its logs; a crash shows as the "
                    "engine going down"
                )
            ),
        )
    kind = w.kind("errors")
    expr = f"sum(increase({errors}[10m]))" if kind in ("counter", "histogram") else f"sum(delta({errors}[10m]))"
    return _row(
        signal,
        title,
        w.shown("errors"),
        _message(_("requests the engine failed in the last 10 min; confirm OOM in its logs")),
        [_rule("RequestsFailing", f"{expr} > 0", "0m", "warning", signal)],
        [(_("Failed requests (10 min)"), expr, "short", 0)],
    )


def _plan_gpu_utilisation(w: _Watch, signal: str, title: str) -> dict[str, Any]:
    """DCGM's GPU utilisation; low while requests wait means the KV cache, not compute, limits."""
    dcgm = str(w.operations.get("dcgm_job") or DCGM_JOB)
    util = f"avg({DCGM_GPU_UTIL}{_selector(dcgm)})"
    used, free = f"sum({DCGM_FB_USED}{_selector(dcgm)})", f"sum({DCGM_FB_FREE}{_selector(dcgm)})"
    memory = f"{used} / ({used} + {free})"
    panels = [(title, util, "percent", GPU_IDLE_PERCENT), (_("GPU memory used"), memory, "percentunit", None)]
    waiting = w.name("queue_length")
    metric = f"{DCGM_GPU_UTIL}, {DCGM_FB_USED}, {DCGM_FB_FREE} (job {dcgm})"
    if waiting is None:
        return _row(
            signal,
            title,
            metric,
            _message(_("the engine exports no waiting-requests gauge: watched, no alert")),
            (),
            panels,
        )
    return _row(
        signal,
        title,
        metric,
        _message(
            _("GPU utilisation below %(util)s %% while requests wait, for 10 min (memory-bound)"),
            util=f"{GPU_IDLE_PERCENT:g}",
        ),
        [
            _rule(
                "GPUIdleWhileQueueing",
                f"({util} < {GPU_IDLE_PERCENT:g}) and on() (sum({waiting}{w.sel}) > 0)",
                "10m",
                "warning",
                signal,
            )
        ],
        panels,
    )


def _plan_request_length(w: _Watch, signal: str, title: str) -> dict[str, Any]:
    metric = w.name("request_length")
    longest = w.limits.get("max_input_tokens")
    if metric is None:
        return _row(signal, title, None, w.not_exported)
    expr = _quantile(metric, 0.99, w.job, "15m")
    if not longest:
        return _row(
            signal,
            title,
            metric,
            _message(_("no maximum input stated: watched, no alert")),
            (),
            [(_("Prompt length p99"), expr, "short", None)],
        )
    if w.limits.get("max_input_validated"):
        text = _("prompt length p99 above the validated %(n)s tokens for 15 min (outside the record's boundary)")
        alert = "RequestsBeyondValidatedLength"
    else:
        text = _(
            "prompt length p99 above the planned maximum input of %(n)s tokens for 15 min (not validated: no "
            "long-context run served it)"
        )
        alert = "RequestsBeyondPlannedLength"
    return _row(
        signal,
        title,
        metric,
        _message(text, n=f"{longest:,}"),
        [_rule(alert, f"{expr} > {longest}", "15m", "warning", signal)],
        [(_("Prompt length p99"), expr, "short", longest)],
    )


def _plan_engine_up(w: _Watch, signal: str, title: str) -> dict[str, Any]:
    return _row(
        signal,
        title,
        "up",
        _message(_("the engine's scrape target down for 1 min (a crash, or the process killed for memory)")),
        [_rule("EngineDown", f"up{w.sel} == 0", "1m", "critical", signal)],
        [(_("Engine up"), f"up{w.sel}", "short", None)],
    )


# signal id -> how its row, rules and panels are planned; SIGNALS lists the same ids (a test checks)
SIGNAL_PLANS = {
    "memory": _plan_memory,
    "cache_hit_rate": _plan_cache_hit_rate,
    "swap": _plan_swap,
    "fragmentation": _plan_fragmentation,
    "queue_wait": _plan_queue_wait,
    "ttft": _plan_latency,
    "tpot": _plan_latency,
    "throughput": _plan_throughput,
    "error_rate": _plan_error_rate,
    "oom_errors": _plan_oom_errors,
    "gpu_utilisation": _plan_gpu_utilisation,
    "request_length": _plan_request_length,
    "engine_up": _plan_engine_up,
}


def watcher(operations: dict[str, Any], signal: str) -> str:
    """Who watches `signal` after launch: the record's watcher for its area, else the record's owner."""
    watchers = operations.get("watchers") or {}
    return watchers.get(SIGNAL_WATCH.get(signal, "stability")) or operations.get("owner", "")


def plan_signals(operations: dict[str, Any], job: str | None = None) -> list[dict[str, Any]]:
    """Per signal: {signal, title, metric, threshold (message), rules: [...], panels: [...]}.

    `rules` are Prometheus alerting rules (alert, expr, for, labels, annotations); `panels` are
    (title, expr, unit) for the dashboard. Both empty when the engine exports no metric for it."""
    job = job or operations.get("job") or (operations.get("engine") or {}).get("slug") or "engine"
    watch = _Watch(operations, job)
    return [SIGNAL_PLANS[signal](watch, signal, title) for signal, title in SIGNALS]


def _rule(alert: str, expr: str, duration: str, severity: str, signal: str) -> dict[str, str]:
    return {"alert": alert, "expr": expr, "duration": duration, "severity": severity, "signal": signal}


def alert_rules(operations: dict[str, Any], translate=lambda text: text, job: str | None = None) -> dict[str, Any]:
    """The Prometheus rule file (a dict to dump as YAML): one group with every signal's rules."""
    rows = plan_signals(operations, job)
    engine = operations.get("engine") or {}
    job = job or operations.get("job") or engine.get("slug") or "engine"
    evidence = operations.get("evidence") or "MEASURED"
    rules = []
    for item in rows:
        threshold = render(item["threshold"], translate)
        for rule in item["rules"]:
            annotations = {
                "summary": f"{translate(item['title'])} ({engine.get('name', '')}): {threshold}",
                "description": translate(DESCRIPTION)
                % {
                    "record": operations.get("record_id", ""),
                    "threshold": threshold,
                    "owner": watcher(operations, item["signal"]),
                },
                "action": translate(SIGNAL_ACTIONS[item["signal"]]),
            }
            if operations.get("rollback") and rule["severity"] == "critical":
                annotations["runbook"] = operations["rollback"]
            rules.append(
                {
                    "alert": rule["alert"],
                    "expr": rule["expr"],
                    "for": rule["duration"],
                    "labels": {
                        "severity": rule["severity"],
                        "signal": item["signal"],
                        "watch": item["watch"],
                        "engine": engine.get("slug", ""),
                        "record": operations.get("record_id", ""),
                        "evidence": evidence,
                    },
                    "annotations": annotations,
                }
            )
    name = re.sub(r"[^a-zA-Z0-9_]+", "_", f"kvselect_{operations.get('record_id', 'record')}_{job}").strip("_")
    return {"groups": [{"name": name, "interval": "30s", "rules": rules}]}


def render(message: dict[str, Any], translate=lambda text: text) -> str:
    """A message's text in the language `translate` gives (nested messages rendered first)."""
    params = {
        key: render(value, translate) if isinstance(value, dict) and "message" in value else value
        for key, value in (message.get("params") or {}).items()
    }
    return translate(message["message"]) % params if params else translate(message["message"])


def dashboard(operations: dict[str, Any], translate=lambda text: text, job: str | None = None) -> dict[str, Any]:
    """A Grafana dashboard (classic JSON model) with one panel per watched series, thresholds drawn."""
    rows = plan_signals(operations, job)
    engine = operations.get("engine") or {}
    job = job or operations.get("job") or engine.get("slug") or "engine"
    simulated = (operations.get("evidence") or "MEASURED") == "SIMULATED"
    record_id = operations.get("record_id", "")
    dcgm_job = str(operations.get("dcgm_job") or DCGM_JOB)
    panels: list[dict[str, Any]] = []
    text = translate(ABOUT) % {
        "record": record_id,
        "engine": engine.get("name", ""),
        "headroom": f"{operations.get('headroom_percent', 0):g}",
    }
    if simulated:
        text = translate(SIMULATED_NOTE) + " " + text
    panels.append(
        {
            "id": 1,
            "type": "text",
            "title": translate(ABOUT_TITLE),
            "gridPos": {"h": 3, "w": 24, "x": 0, "y": 0},
            "options": {"mode": "markdown", "content": text},
        }
    )
    x, y = 0, 3
    for item in rows:
        for title, expr, unit, limit in item["panels"]:
            panel_id = len(panels) + 1
            steps = [{"color": "green", "value": None}]
            if limit is not None:
                steps.append({"color": "red", "value": float(limit)})
            panels.append(
                {
                    "id": panel_id,
                    "type": "timeseries",
                    "title": translate(title),
                    "description": render(item["threshold"], translate),
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
                    "targets": [
                        {
                            "refId": "A",
                            "expr": expr.replace(f'job="{job}"', 'job="$job"').replace(
                                f'job="{dcgm_job}"', 'job="$dcgm_job"'
                            ),
                            "legendFormat": "",
                        }
                    ],
                    "fieldConfig": {
                        "defaults": {
                            "unit": unit,
                            "thresholds": {"mode": "absolute", "steps": steps},
                            "custom": {"thresholdsStyle": {"mode": "line" if limit is not None else "off"}},
                        },
                        "overrides": [],
                    },
                    "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
                }
            )
            x = 12 if x == 0 else 0
            y += 8 if x == 0 else 0
    uid = re.sub(r"[^a-zA-Z0-9-]", "-", f"kvselect-{record_id}".lower())[:40]
    return {
        "id": None,
        "uid": uid,
        "title": f"kvselect {record_id}: {engine.get('name', '')}" + (" (SIMULATED)" if simulated else ""),
        "description": text,
        "tags": ["kvselect", engine.get("slug", "engine"), "kv-cache"] + (["SIMULATED"] if simulated else []),
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": GRAFANA_SCHEMA_VERSION,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "job",
                    "label": "job",
                    "type": "query",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": {"query": "label_values(up, job)", "refId": "job"},
                    "definition": "label_values(up, job)",
                    "current": {"text": job, "value": job},
                    "refresh": 1,
                    "hide": 0,
                },
                {
                    "name": "dcgm_job",
                    "label": "DCGM exporter job",
                    "type": "query",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": {"query": "label_values(up, job)", "refId": "dcgm_job"},
                    "definition": "label_values(up, job)",
                    "current": {"text": dcgm_job, "value": dcgm_job},
                    "refresh": 1,
                    "hide": 0,
                },
            ]
        },
        "annotations": {"list": []},
        "links": [],
        "panels": panels,
    }
