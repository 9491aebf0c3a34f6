"""What the run and validation pages show, computed from plain data (no Django imports).

The views pass model fields (dicts, lists, numbers) in and get rows and chart inputs out, so the
shaping rules (which percentile goes in which column, what counts as a KV series, how a typed
parameter is read back from a form) are testable in milliseconds and shared by every page.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from typing import Any, Mapping, Sequence

from benchmarks import suite
from benchmarks import verdicts as verdict_status
from benchmarks.charts import catalog as chart_catalog
from benchmarks.charts import style as chart_style
from benchmarks.result import DEFINITIONS, STAT_KEYS
from benchmarks.suite import overload as overload_spec
from benchmarks.suite.base import Figure
from selection.domain import messages
from selection.domain.messages import marked as _
from selection.domain.scoring.sentences import METRIC_NAMES

logger = logging.getLogger(__name__)

LATENCY_COLUMNS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


# The pass criteria the validation tests state ({name, passed, detail}), by name; a criterion a
# test adds later shows its own name. "name[label]" qualifies a criterion with the load point.
CRITERION_TITLES = {
    "ttft_p95_within_budget": _("TTFT p95 within the budget"),
    "tpot_p95_within_budget": _("TPOT p95 within the budget"),
    "e2e_p95_within_budget": _("End-to-end p95 within the budget"),
    "zero_errors": _("No failed requests"),
    "concurrency_held": _("The requested concurrency was held"),
    "kv_back_to_baseline_after_aborts": _("KV usage back to its baseline after aborted requests"),
    "largest_rung_succeeds": _("The longest required context succeeds"),
    "short_traffic_isolated": _("Short requests unaffected by the long one"),
    "continuation_identical": _("Resumed sessions continue exactly as without the pause"),
    "eviction_exercised": _("The idle sessions' KV was seen evicted or offloaded"),
    "resume_cheaper_than_recompute": _("Resuming an evicted session is cheaper than recomputing it"),
    "never_swap_sessions_warm": _("Never-swap sessions come back warm"),
    "swap_in_delay_within_budget": _("Sessions that accept a swap-in delay resume within it"),
    "idle_kv_released": _("The idle sessions' KV is released"),
    "kv_below_own_allocation": _("KV use below one copy of the prefix per request"),
    "kv_below_theory": _("Peak KV with prefix caching clearly below every request holding its own prompt"),
    "kv_below_prefix_off": _("Peak KV with prefix caching clearly below the same load with caching off"),
    "prefix_reused": _("The shared prefix is reused"),
    "ttft_p50_drift": _("TTFT p50 drift within the limit"),
    "ttft_p99_drift": _("TTFT p99 drift within the limit"),
    "tpot_p50_drift": _("TPOT p50 drift within the limit"),
    "tpot_p99_drift": _("TPOT p99 drift within the limit"),
    "kv_usage_slope": _("KV usage steady under steady load"),
    "gpu_memory_slope": _("GPU memory steady under steady load"),
    "preemption_rate_trend": _("Preemptions do not grow over the soak"),
    "fragmentation_stable": _("Fragmentation does not grow over the soak"),
    "queue_not_growing": _("The waiting queue does not grow over the soak"),
    "queue_wait_p95_within_budget": _("Queue wait p95 within its share of the TTFT budget"),
    "switch_errors": _("No request failed across the switch and the rollback"),
    "budget_recovered_after_switch": _("Back within the budget soon after the switch"),
    "budget_recovered_after_rollback": _("Back within the budget soon after the rollback"),
    "flood_held": _("The other tenant's flood loaded the engine"),
    "tenant_a_ttft_slowdown": _("The interactive tenant's TTFT slowdown under the flood within the limit"),
    "tenant_a_protected": _("The interactive tenant protected under the flood"),
    "rate_held": _("The requested request rate was held"),
    "arrivals_on_time": _("Requests sent on the trace's clock"),
    "requests_released_after_aborts": _("No request left running after the aborts"),
    "sustainable_load_meets_target": _("The target load is sustainable"),
    "overload_handled_gracefully": _("Overload handled by rejection or bounded queueing"),
    "recovered_within_bound": _("Recovered within the bound after the overload"),
}
CRITERION_QUALIFIERS = {
    "resume": _("after the pause"),
    "prefix_on": _("prefix caching on"),
    "prefix_off": _("prefix caching off"),
    "before": _("before the switch"),
    "tenant_a_flood": _("tenant A under the flood"),
    "short": _("short requests"),
    "long": _("long requests"),
}
# A load point's label in words (the harness names its points by phase); the qualifiers above too.
POINT_LABELS = {
    **CRITERION_QUALIFIERS,
    "all": _("all requests"),
    "first_window": _("first window"),
    "last_window": _("last window"),
    "turn1": _("first turn"),
    "warm": _("warm sessions"),
    "never_swap": _("sessions never swapped"),
    "recompute": _("recomputed sessions"),
    "pressure": _("memory pressure"),
    "switched": _("on the new version"),
    "rolled_back": _("rolled back"),
    "after": _("after the switch"),
    "tenant_a_alone": _("tenant A alone"),
    "tenant_b_flood": _("tenant B's flood"),
    "alone": _("alone"),
    "with_background": _("with background traffic"),
}
# A verdict's status in words (benchmarks.verdicts.STATUSES).
STATUS_LABELS = verdict_status.STATUS_LABELS
# Provenance keys a run's metadata commonly holds (tools add their own, shown as they are).
METADATA_LABELS = {
    "engine_host": _("Engine host (what the engine ran as and on)"),
    "engine": _("Engine"),
    "model": _("Model"),
    "gpu": _("GPU"),
    "hardware": _("Hardware"),
    "target": _("Target"),
    "endpoint_url": _("Endpoint"),
    "params": _("Parameters"),
    "prompts": _("Prompts"),
    "client_clock": _("Client clock"),
    "engine_metrics": _("Engine metrics"),
    "raw_metric_names": _("Engine metric names"),
    "platform": _("Platform"),
    "source": _("Source"),
    "schema_version": _("Schema version"),
    "results_version": _("Results version"),
    "labels": _("Labels"),
    "run_info": _("Run information"),
    "input_config": _("Input configuration"),
    "derived": _("Derived figures"),
    "switch": _("Model switch"),
    "isolation": _("Tenant isolation"),
    "client_bound": _("Client-bound"),
    "tool": _("Tool"),
    "tool_version": _("Tool version"),
    "simulator": _("Simulator"),
    "kv_after": _("KV cache after the load"),
    "kv_baseline": _("KV cache before the load"),
    "lengths": _("Request lengths"),
    "observed": _("Observed"),
    "note_messages": _("Notes (in every language)"),
    "traffic_groups": _("Traffic groups"),
    "largest_successful_rung": _("Longest context served (tokens)"),
    # what the validation tests record beside their points (the harness's workloads)
    "sizing": _("Sizing"),
    "eviction": _("Eviction"),
    "resume": _("Resume"),
    "continuation": _("Continuation"),
    "never_swap": _("Sessions never swapped out"),
    "active_turns": _("Active turns"),
    "drift": _("Drift"),
    "warmup_excluded": _("Warm-up excluded"),
    "sessions": _("Sessions"),
    "off_target": _("Endpoint with prefix caching off"),
    "pace_independent": _("Figures independent of the client's pace"),
    "host_activity": _("Load client's machine activity"),
    "conclusions": _("Conclusions"),
    "layout": _("Layout"),
    "telemetry_stats": _("Telemetry statistics"),
    "trace": _("Trace"),
}
# metadata keys whose value lists measured figures by their keys (prefix reuse's `pace_independent`)
FIGURE_LIST_KEYS = frozenset({"pace_independent"})
# words a key's parts read as when no label is known ("kv_usage_ratio" -> "KV usage ratio")
KEY_WORDS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "kv": "KV", "e2e": "end-to-end", "gpu": "GPU", "cpu": "CPU"}
DEFINITION_TITLES = {
    "ttft_ms": _("time from sending the request to receiving the first output token (ms)"),
    "tpot_ms": _("per request: (end-to-end - TTFT) / (output tokens - 1); excludes the first token (ms)"),
    "itl_ms": _("gap between consecutive output tokens, per token (a chunk of k tokens counts k gaps of dt/k) (ms)"),
    "e2e_ms": _("time from sending the request to receiving the last byte (ms)"),
    "request_throughput": _("completed requests per second of benchmark wall time"),
    "output_token_throughput": _("output tokens per second of benchmark wall time"),
    "error_rate": _("failed requests / (completed + failed)"),
    "goodput": _("completed requests per second meeting every SLO of the latency budget"),
}


def key_words(key: str) -> str:
    """A data key as words, for keys no label table knows: "kv_usage_ratio" reads "KV usage ratio"
    (never the identifier itself)."""
    words = [KEY_WORDS.get(word, word) for word in str(key).split("_") if word]
    text = " ".join(words) or str(key)
    return text[0].upper() + text[1:]


def provenance_rows(
    metadata: Mapping[str, Any] | None, label=lambda key: key_words(key), translate=lambda text: text
) -> list[dict[str, Any]]:
    """A run's provenance as the page lists it: each key's label (`METADATA_LABELS`, else `label`),
    a plain value as it is, a list of measured figures (`FIGURE_LIST_KEYS`) as each figure's name with
    its key (`figures`: the page sets the key as code), and a structured one (a dict, a list of dicts)
    as indented JSON for a code block, never flattened into "key: value" prose."""
    rows = []
    for key, value in sorted((metadata or {}).items()):
        name = translate(METADATA_LABELS[key]) if key in METADATA_LABELS else label(key)
        structured = isinstance(value, dict) or (
            isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value)
        )
        figures = key in FIGURE_LIST_KEYS and isinstance(value, list) and not structured
        rows.append(
            {
                "key": key,
                "label": name,
                "value": None if structured or figures else value,
                "figures": [
                    {"key": str(k), "name": translate(METRIC_NAMES[k]) if k in METRIC_NAMES else ""} for k in value
                ]
                if figures
                else [],
                "json": json.dumps(value, indent=2, ensure_ascii=False, default=str) if structured else "",
            }
        )
    return rows


def criterion_title(name: str) -> str | None:
    """The English title of a verdict (its name without a [load point]): the shared table's, else the
    one its test's module states (`TEST.verdict_titles`); None when neither knows it."""
    if name in CRITERION_TITLES:
        return CRITERION_TITLES[name]
    return next((test.verdict_titles[name] for test in suite.TESTS if name in test.verdict_titles), None)


def criterion_rows(
    verdicts: Sequence[Mapping[str, Any]] | None, translate=lambda text: text, render_message=messages.render
) -> list[dict[str, Any]]:
    """The run page's pass criteria: each with its title and qualifier (through `translate`), its
    status (benchmarks.verdicts.STATUSES), sample size and interval, and the test's detail (a
    message rendered by `render_message` in the page's language)."""
    rows = []
    for verdict in verdicts or []:
        name = str(verdict.get("name") or "")
        base, _sep, qualifier = name.partition("[")
        qualifier = qualifier.rstrip("]")
        title = criterion_title(base)
        rows.append(
            {
                "name": name,
                "title": translate(title) if title else base.replace("_", " "),  # words, never an identifier
                "qualifier": translate(CRITERION_QUALIFIERS[qualifier])
                if qualifier in CRITERION_QUALIFIERS
                else qualifier,
                "status": verdict_status.status_of(verdict),
                "n": verdict.get("n"),
                "interval": verdict.get("interval"),
                "detail": str(render_message(verdict_status.detail_of(verdict)) or ""),
            }
        )
    return rows


def verdict_label(name: str, translate=lambda text: text) -> str:
    """A verdict's name in words: its title and, in brackets, the load point it judged
    ("Resumed sessions continue exactly as without the pause", "TTFT p95 within the budget (after
    the pause)"). A name the table lacks reads as its words, never as an identifier."""
    base, _sep, qualifier = str(name or "").partition("[")
    qualifier = qualifier.rstrip("]")
    title = criterion_title(base)
    title = translate(title) if title else base.replace("_", " ")
    if not qualifier:
        return title
    shown = translate(CRITERION_QUALIFIERS[qualifier]) if qualifier in CRITERION_QUALIFIERS else qualifier
    return f"{title} ({shown})"


def status_label(status: str, translate=lambda text: text) -> str:
    """A verdict status in words (`STATUS_LABELS`)."""
    return translate(STATUS_LABELS[status]) if status in STATUS_LABELS else str(status).replace("_", " ")


def number(value: Any) -> str:
    """A judged figure as a table prints it: hundreds and up without decimals, tens with one, units
    with two, small shares with three significant digits; "—" when missing."""
    if isinstance(value, bool) or value is None:
        return "—" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"  # a count
    finite = _finite(value)
    if finite is None:
        return str(value)
    if abs(finite) >= 100:
        return f"{finite:,.0f}"
    if abs(finite) >= 10:
        return f"{finite:.1f}"
    if abs(finite) >= 1:
        return f"{finite:.2f}"
    return f"{finite:.3g}"


def interval_text(interval: Any) -> str:
    """A [low, high] interval as "low–high", "" when there is none."""
    if not isinstance(interval, (list, tuple)) or len(interval) != 2:
        return ""
    if _finite(interval[0]) is None or _finite(interval[1]) is None:
        return ""
    return f"{number(interval[0])}–{number(interval[1])}"


# Figures a verdict states in words, stored as their English ids (the overload test's behaviour,
# "queueing"), shown in the reader's language; any other word figure is a translated template.
WORD_FIGURES = overload_spec.BEHAVIOUR_NAMES


def figure_text(value: Any, translate=lambda text: text, render_message=messages.render) -> str:
    """A verdict's figure or limit as the result table prints it: a number formatted, a word in the
    reader's language, nothing when there is none."""
    if value is None:
        return ""
    if isinstance(value, str):
        return str(render_message(WORD_FIGURES[value])) if value in WORD_FIGURES else str(translate(value))
    return number(value)


def judged_rows(
    verdicts: Sequence[Mapping[str, Any]] | None, translate=lambda text: text, render_message=messages.render
) -> list[dict[str, Any]]:
    """Each verdict as the record's result table prints it: the criterion and its outcome in words,
    the figure it judged against its limit, its sample size and interval, and the test's detail (a
    message rendered by `render_message` in the record's language)."""
    return [
        {
            "criterion": verdict_label(row["name"], translate),
            "status": row["status"],
            "outcome": status_label(row["status"], translate),
            "value": figure_text(verdict.get("value"), translate, render_message),
            "threshold": figure_text(verdict.get("threshold"), translate, render_message),
            "n": row["n"],
            "interval": interval_text(row["interval"]),
            "detail": row["detail"],
        }
        for verdict, row in zip(verdicts or [], criterion_rows(verdicts, translate, render_message), strict=True)
    ]


def _shown(figure: Figure, translate) -> dict[str, Any]:
    """A test's figure as its result table prints it: {name, value, unit, n, interval}."""
    label = translate(figure.name)
    return {
        "name": label % dict(figure.params) if figure.params else label,
        "value": number(figure.value),
        "unit": figure.unit if figure.value is not None else "",
        "n": figure.n,
        "interval": interval_text(figure.interval),
    }


def _load_figures(points: Sequence[Mapping[str, Any]], translate) -> list[dict]:
    """Any other test: the heaviest load level it ran (not a traffic group's part of it, nor a step
    back down), at the budgets' percentile, with the requests it completed."""
    levels = [p for p in points if not (p.get("extra") or {}).get("traffic_group")]
    levels = [p for p in levels if (p.get("extra") or {}).get("direction") != "down"] or list(points)
    if not levels:
        return []
    last = levels[-1]
    percentile = chart_percentile(levels) or "p95"
    n = last.get("requests_completed")
    rows = []
    for name, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms")):
        value = (last.get(key) or {}).get(percentile)
        if value is not None:
            rows.append({"name": f"{name} {percentile}", "value": f"{value:.1f}", "unit": "ms", "n": n, "interval": ""})
    if last.get("error_rate") is not None:
        rows.append(_shown(Figure(_("error rate"), 100 * float(last["error_rate"]), "%", n), translate))
    return rows


def result_figures(
    test: str, points: Sequence[Mapping[str, Any]], metadata: Mapping[str, Any] | None, translate=lambda text: text
) -> list[dict[str, Any]]:
    """The figures a test judged, for its result table: {name, value, unit, n, interval}. Each test's
    module under `benchmarks.suite` says which (its `TEST.figures`: the swap test's warm, resumed
    and recomputed TTFT, prefix reuse on and off, each context rung, the soak's first and last
    window); a test without them, or whose run lacks them, shows its heaviest load level."""
    row = suite.BY_ID.get(test)
    figures = row.figures(points, metadata or {}) if row is not None and row.figures is not None else None
    if figures is None:
        return _load_figures(points, translate)
    return [_shown(figure, translate) for figure in figures]


KV_SERIES_SUFFIX = "kv_usage_ratio"


def _finite(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def point_x(point: Mapping[str, Any], index: int) -> tuple[float, str]:
    """The load a point was measured at, and what that number is (concurrency, rate or order)."""
    for key, kind in (
        ("concurrency", "concurrency"),
        ("achieved_concurrency", "concurrency"),
        ("request_rate", "rate"),
    ):
        value = _finite(point.get(key))
        if value is not None:
            return value, kind
    return float(index + 1), "index"


def point_label(label: Any, translate=lambda text: text) -> str:
    """A load point's label in words: a phase the harness names ("first_window", "16K with_background")
    from `POINT_LABELS`, word by word; anything else (a tool's own label, "c=32", "4 req/s") as it is."""
    words = []
    for word in str(label or "").split(" "):
        if word in POINT_LABELS:
            words.append(translate(POINT_LABELS[word]))
        elif "_" in word and word.replace("_", "").isalnum():
            words.append(key_words(word).lower())
        else:
            words.append(word)
    return " ".join(words)


def percentile_rows(
    points: Sequence[Mapping[str, Any]], translate=lambda text: text, render_message=messages.render
) -> list[dict[str, Any]]:
    """One row per load point: its load, its label in words and each latency metric's statistics
    (None = missing)."""
    rows = []
    for index, point in enumerate(points):
        x, kind = point_x(point, index)
        row = {
            "index": index,
            "label": point_label(point.get("label"), translate),
            "load": x,
            "load_kind": kind,
            "requests_completed": point.get("requests_completed"),
            "requests_failed": point.get("requests_failed"),
            "request_throughput": _finite(point.get("request_throughput")),
            "output_token_throughput": _finite(point.get("output_token_throughput")),
            "error_rate": _finite(point.get("error_rate")),
            "goodput": _finite(point.get("goodput")),
            "slo_attainment": _finite(point.get("slo_attainment")),
            "client_bound": point.get("client_bound"),
            "client_bound_reasons": [
                render_message(reason)
                for reason in (point.get("extra") or {}).get("client_bound_reason_messages")
                or (point.get("extra") or {}).get("client_bound_reasons")
                or []
            ],
        }
        for metric in LATENCY_COLUMNS:
            stats = point.get(metric) or {}
            row[metric] = {key: _finite(stats.get(key)) for key in STAT_KEYS}
        rows.append(row)
    return rows


PERCENTILE_PREFERENCE = ("p95", "p99", "p90", "p50", "mean")


def chart_percentile(points: Sequence[Mapping[str, Any]]) -> str | None:
    """The percentile to chart: p95 (the budgets' percentile) when any point has it, else the next best."""
    for percentile in PERCENTILE_PREFERENCE:
        if any(_finite((p.get(m) or {}).get(percentile)) is not None for p in points for m in ("ttft_ms", "tpot_ms")):
            return percentile
    return None


TRAFFIC_GROUPS = {"short": _("short requests"), "long": _("long requests"), "multi_turn": _("multi-turn sessions")}


def latency_series(
    name: str, points: Sequence[Mapping[str, Any]], percentile: str | None = None, translate=lambda text: text
) -> dict[str, dict[str, list]]:
    """Input for `charts.latency_vs_concurrency`: {name: {concurrency, ttft_ms, tpot_ms}}, sorted by load,
    at `percentile` (default: `chart_percentile`), or {} when no point has a latency figure. A traffic
    group's point (short, long: a part of one load, measured at its own concurrency) is a series of its
    own, "name · short requests", never joined by a line to a load point."""
    percentile = percentile or chart_percentile(points)
    if percentile is None:
        return {}
    parts: dict[str, list[Mapping[str, Any]]] = {}
    for point in points:
        group = (point.get("extra") or {}).get("traffic_group")
        label = f"{name} · {translate(TRAFFIC_GROUPS.get(group, group))}" if group else name
        parts.setdefault(label, []).append(point)
    out = {}
    for label, own in sorted(parts.items(), key=lambda item: item[0] != name):
        series = _latency_line(own, percentile)
        if series is not None:
            out[label] = series
    return out


def _latency_line(points: Sequence[Mapping[str, Any]], percentile: str) -> dict[str, list] | None:
    xs, ttft, tpot = [], [], []
    for index, point in enumerate(points):
        xs.append(point_x(point, index)[0])
        ttft.append(_finite((point.get("ttft_ms") or {}).get(percentile)))
        tpot.append(_finite((point.get("tpot_ms") or {}).get(percentile)))
    if not any(v is not None for v in ttft + tpot):
        return None
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    return {
        "concurrency": [xs[i] for i in order],
        "ttft_ms": [ttft[i] for i in order],
        "tpot_ms": [tpot[i] for i in order],
    }


def kv_series(timeseries: Mapping[str, Sequence[Sequence[Any]]]) -> dict[str, list[list[float]]]:
    """The KV-cache usage series of a run (`kv_usage_ratio`, `prefix_off.kv_usage_ratio`, ...)."""
    out = {}
    for name, points in (timeseries or {}).items():
        if name == KV_SERIES_SUFFIX or name.endswith("." + KV_SERIES_SUFFIX):
            pairs = [[float(p[0]), p[1]] for p in points or [] if len(p) >= 2 and _finite(p[0]) is not None]
            if pairs:
                out[name] = pairs
    return out


def definition_rows(original: Mapping[str, Any], translate=lambda text: text) -> list[dict[str, str]]:
    """kvselect's definition of each metric next to the tool's original one (when the file had it)."""
    keys = list(DEFINITIONS) + [k for k in (original or {}) if k not in DEFINITIONS]
    return [
        {
            "metric": key,
            "kvselect": translate(DEFINITION_TITLES[key]) if key in DEFINITION_TITLES else DEFINITIONS.get(key, ""),
            # the tool's own wording only where it differs: kvselect's harness writes kvselect's (English) definitions
            "original": ""
            if (original or {}).get(key) == DEFINITIONS.get(key)
            else str((original or {}).get(key) or ""),
        }
        for key in keys
        if key in DEFINITIONS or (original or {}).get(key)
    ]


# The phases a run reports (`validation.worker`, `tasks`, the workloads' reporters), in words the
# page translates (a finished run shows no phase); a phase not listed (a load-point label, "up 2") is
# shown as the run reported it.
PHASES = {
    "queued": _("queued"),
    "starting": _("starting"),
    "running": _("running"),
    "parsing": _("parsing"),
    "waiting for the hardware": _("waiting for the hardware"),
    "waiting for the job queue": _("waiting for the job queue"),
    "load": _("load"),
    "warm": _("warm-up"),
    "turn1": _("first turns"),
    "resume": _("resume after the pause"),
    "recompute": _("recompute with the cache cleared"),
    "pressure": _("memory pressure"),
    "never_swap": _("never-swap sessions"),
    "replay": _("replay"),
    "tenant A alone": _("tenant A alone"),
    "tenant A under flood": _("tenant A under flood"),
    "before": _("before the switch"),
    "switched": _("after the switch"),
    "rolled_back": _("after the rollback"),
}
WAITING_FOR_ENGINE = "waiting for the engine: "


def phase_label(phase: str) -> messages.Message | str:
    """A run's phase as people read it: a known phase as a message the page translates, the engine
    wait with its (technical) reason, any other phase (a load-point label) as reported."""
    if phase in PHASES:
        return messages.Message(PHASES[phase])
    if phase.startswith(WAITING_FOR_ENGINE):
        return messages.Message(_("waiting for the engine: %(reason)s"), {"reason": phase[len(WAITING_FOR_ENGINE) :]})
    return phase


def progress_view(progress: Mapping[str, Any] | None, status: str, terminal: bool) -> dict[str, Any]:
    """The progress bar's figures: phase (and its label), percent clamped to 0-100, requests done,
    live TTFT p50."""
    progress = progress or {}
    percent = _finite(progress.get("percent"))
    if terminal and status == "succeeded":
        percent = 100.0
    percent = max(0.0, min(100.0, percent if percent is not None else 0.0))
    return {
        "phase": str(progress.get("phase") or status),
        "phase_label": phase_label(str(progress.get("phase") or status)),
        "percent": round(percent, 1),
        "requests_done": progress.get("requests_done"),
        "ttft_p50_ms": _finite(progress.get("ttft_p50_ms")),
        "terminal": terminal,
        "waiting_for": waiting_view(progress.get("waiting_for")) if status == "queued" else None,
    }


def waiting_view(holder: Any) -> dict[str, Any] | None:
    """The run a queued run waits for (`validation.worker.hardware_holder`): its id, test, candidate
    (only in the same selection) and the shared hardware as (kind, name) pairs."""
    if not isinstance(holder, Mapping) or holder.get("run") is None:
        return None
    hardware = []
    for key in holder.get("hardware") or []:
        kind, _sep, name = str(key).partition(":")
        hardware.append({"kind": kind, "name": name})
    return {
        "run": holder["run"],
        "test": str(holder.get("test") or ""),
        "candidate": holder.get("candidate"),
        "other_selection": bool(holder.get("other_selection")),
        "hardware": hardware,
    }


# ------------------------------------------------------------------ editable test parameters


def param_kind(default: Any) -> str:
    """How a planned parameter is edited: bool, int, float, int_list, float_list, json or text."""
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, int):
        return "int"
    if isinstance(default, float):
        return "float"
    if isinstance(default, list) and default and all(isinstance(v, int) and not isinstance(v, bool) for v in default):
        return "int_list"
    if (
        isinstance(default, list)
        and default
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in default)
    ):
        return "float_list"
    if isinstance(default, str):
        return "text"
    return "json"  # None, dicts, empty or mixed lists


def format_param(value: Any, kind: str) -> str:
    if kind in ("int_list", "float_list"):
        return ", ".join(str(v) for v in value)
    if kind == "json":
        return "" if value is None else json.dumps(value)
    return "" if value is None else str(value)


class ParamError(ValueError):
    """A parameter value that cannot be read. `code` says what was expected (the form words it)."""

    def __init__(self, code: str, detail: str = ""):
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code, self.detail = code, detail


def parse_param(raw: str, kind: str) -> Any:
    """Read a form value back into the planned parameter's type. Empty json/text -> None.

    Error codes: ``empty_list``, ``not_numbers`` (detail: the text), ``not_positive``,
    ``bad_json`` (detail: the parser's message and column).
    """
    text = (raw or "").strip()
    if kind in ("int_list", "float_list"):
        parts = [p for p in text.replace(";", ",").split(",") if p.strip()]
        if not parts:
            raise ParamError("empty_list")
        try:
            values = [int(p) if kind == "int_list" else float(p) for p in parts]
        except ValueError:
            raise ParamError("not_numbers", text) from None
        if any(v <= 0 for v in values):
            raise ParamError("not_positive")
        return values
    if kind == "json":
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise ParamError("bad_json", f"{error.msg}, column {error.colno}") from None
    return text or None


def inline_svg(svg: str) -> str:
    """An SVG document for inline HTML: drop the XML declaration and DOCTYPE before <svg."""
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else ""


@functools.lru_cache(maxsize=256)
def _chart_cached(name: str, arguments: str, language: str) -> str:
    return inline_svg(chart_catalog.CHARTS[name](**json.loads(arguments)))


def chart_svg(name: str, **arguments) -> str:
    """A chart as inline SVG ("" when the input cannot be drawn); identical inputs in the same
    language render once."""
    try:
        return _chart_cached(name, json.dumps(arguments, sort_keys=True, default=str), chart_style.translation_key())
    except (chart_style.ChartInputError, ValueError, TypeError) as error:
        logger.warning("chart %s not drawn: %s", name, error)
        return ""


PASS, FAIL, INCONCLUSIVE, INSUFFICIENT_DATA = "pass", "fail", "inconclusive", "insufficient_data"


def observed_line(metadata: Mapping[str, Any] | None, simulated: bool, render_message=messages.render) -> str:
    """What a validation test observed, in one sentence with its figures and sample sizes (the
    harness writes metadata["observed"]["line"] in English and, where written as a message,
    ["line_message"], rendered by `render_message` in the page's language); empty for uploads,
    which carry figures only."""
    observed = (metadata or {}).get("observed")
    if not isinstance(observed, Mapping):
        return ""
    line = render_message(observed.get("line_message")) or observed.get("line")
    if not line:
        return ""
    return f"SIMULATED — {line}" if simulated else str(line)


def run_notes(notes: Sequence[str] | None, metadata: Mapping[str, Any] | None, render_message=messages.render) -> list:
    """A run's notes as its page shows them: each written as a message (metadata["note_messages"],
    by the note's index) rendered by `render_message` in the page's language, the others as stored."""
    stored = (metadata or {}).get("note_messages") or {}
    return [render_message(stored[str(i)]) if str(i) in stored else note for i, note in enumerate(notes or [])]


def run_verdict(verdicts: Sequence[Mapping[str, Any]] | None) -> str:
    """A finished run's overall verdict from its pass criteria: FAIL when any criterion failed;
    PASS when every one passed; INSUFFICIENT_DATA when none could be judged (or the run has no
    criteria, as most uploads); otherwise INCONCLUSIVE (some passed, the rest inconclusive, not
    exercised or short of data: a run is only as good as its weakest verdict). A criterion the
    engine's documented cache model makes not applicable counts neither way; a run whose every
    criterion is not applicable is NOT_APPLICABLE."""
    all_statuses = [verdict_status.status_of(dict(v)) for v in verdicts or []]
    statuses = [status for status in all_statuses if status != verdict_status.NOT_APPLICABLE]
    if all_statuses and not statuses:
        return verdict_status.NOT_APPLICABLE
    if FAIL in statuses:
        return FAIL
    if statuses and all(status == PASS for status in statuses):
        return PASS
    if not any(status in (PASS, INCONCLUSIVE) for status in statuses):
        return INSUFFICIENT_DATA
    return INCONCLUSIVE


# what to do about a failed run, by how its error begins (benchmarks.validation.worker, benchmarks.tasks,
# benchmarks.uploads.parse write them); the first match wins, the last is the engine's
FAILURE_ADVICE = (
    (
        ("params:",),
        _(
            "A parameter was refused before any request was sent: correct it "
            "on the validation page and run the test again."
        ),
    ),
    (
        ("worker lost",),
        _("The worker running the test stopped (killed or restarted) before it stored a result: run the test again."),
    ),
    (
        ("launch_recipe:", "engine unreachable: launch_recipe:"),
        _(
            "kvselect could not start the engine from the candidate's launch "
            "recipe: check the recipe, then run the test again."
        ),
    ),
    (
        ("endpoint_url:", "metrics_url:", "prefix_off_endpoint_url:", "prefix_off_metrics_url:"),
        _(
            "The outbound allow-list refused one of the candidate's URLs before any request: "
            "edit the candidate's URL, or ask an administrator to allow the host."
        ),
    ),
    (
        ("engine unreachable:",),
        _(
            "The engine never answered, so nothing was measured: check that it runs "
            "at the candidate's endpoint, then run the test again."
        ),
    ),
)
UPLOAD_ADVICE = _(
    "The file could not be parsed; nothing was stored from it: upload the tool's own result file unchanged."
)
ENGINE_ADVICE = _("Check the candidate's endpoint and engine, then run the test again.")


def failure_advice(error: str, origin: str) -> str:
    """What to do about a failed run (an English msgid, translated where shown): a parameter refused,
    a lost worker, a refused URL or an engine that never answered are not told to check the endpoint."""
    if origin == "upload":
        return UPLOAD_ADVICE
    return next((advice for starts, advice in FAILURE_ADVICE if error.startswith(starts)), ENGINE_ADVICE)


def run_progress_context(selection: Any, run: Any, can_edit: bool) -> dict[str, Any]:
    """What the run progress fragment needs (`templates/benchmarks/_run_progress.html`)."""
    return {
        "selection": selection,
        "run": run,
        "can_edit": can_edit,
        "progress": progress_view(run.progress, run.status, run.is_terminal),
        "verdict": run_verdict(run.verdicts) if run.status == "succeeded" else None,
    }


GPU_SOURCES = {
    "engine_metrics": _("from the engine's metrics"),
    "dcgm": _("from the DCGM exporter"),
    "worker_nvml": _("from the worker's NVML (it launched the engine)"),
    "upload": _("from the upload's metadata"),
}


def engine_host(metadata: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What the engine ran as and on, as the run's probe before the load recorded it (served models,
    version and where it was read, the engine host's GPUs and where they were read; never the load
    client's), as facts for the run page to put in words and code (`benchmarks/_engine_host.html`);
    None when the run recorded none.

    The version's source is a request ("GET /version", shown as code), a metric ("metric
    vllm:build_info": the word, then the name as code) or the upload's metadata (words). A GPU's
    driver is a version (code), or "simulated" for the simulator's (words)."""
    host = (metadata or {}).get("engine_host")
    if not isinstance(host, Mapping):
        return None
    identity = host.get("identity") or {}
    source = str(identity.get("version_source") or "")
    metric = source.removeprefix("metric ") if source.startswith("metric ") else ""
    gpu = identity.get("gpu") or {}
    return {
        "models": [str(m) for m in (*(identity.get("served_models") or []), *(identity.get("model_paths") or []))],
        "version": str(identity.get("engine_version") or ""),
        "version_request": source if source.startswith("GET ") else "",
        "version_metric": metric,
        "version_from_upload": source == "upload metadata",
        "gpu": {
            "count": gpu.get("count") or "",
            "model": str(gpu["model"]),
            "memory_gib": f"{float(gpu['memory_gib']):g}" if gpu.get("memory_gib") else "",
            "driver": str(gpu.get("driver") or ""),
            "simulated_driver": gpu.get("driver") == "simulated",
            "source": GPU_SOURCES.get(gpu.get("source") or ""),
        }
        if gpu.get("model")
        else None,
    }
