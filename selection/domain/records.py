"""What a decision record must contain: the context dict the PDF template renders.

Pure (no Django). ``build_record_context`` checks a context, lists every missing or wrong
section in ONE error, and adds derived values (capacity deviations, the SIMULATED flag);
``sample_record_context`` builds a complete example for tests, the demo and the benchmark.

Context shape (sections appear in the PDF in this order; "[...]" = list of):

    record:        {id, version:int, title, created_at (ISO str), language?}
    simulated:     bool - derived: True when any manifest entry is SIMULATED (may not be False then)
    decision:      {chosen_engine, chosen_configuration, summary, rationale:[str]}
    risk_boundary: {applies_to:[str], does_not_apply_to:[str]}
    constraints:   [{label, value}]                       - the one-page business constraints
    scenario:      {id: A|B|C|D, name, reasons:[str]}
    weights:       {source: preset|edited, edited_by?, edit_reason?,
                    items:[{criterion, weight: float, preset?: float}]}
    gates:         [{dimension, threshold, results:[{candidate, passed: bool, note?}]}]
    candidates:    [{name, version, kept: bool, screening_note, documentation?}]
    capacity:      [{candidate, configuration, rows:[{quantity, unit, predicted, measured?}]}]
                   build adds per row: deviation_pct (float|None), flagged (|deviation| > 10 %)
    validation:    [{test, candidate, summary, verdict: pass|fail|inconclusive,
                     metrics:[{name, value, unit}], charts:[{title, svg: str (SVG markup)}]}]
    scores:        {criteria:[str], rows:[{candidate, values:[float], topsis: float, rank:int}],
                    sensitivity:[str], evidence_coverage:[{candidate, coverage: 0..1, note?}],
                    scoring_rules:[{criterion, rule}]}
    rollout:       {headroom:{percent: 20..30, statement},
                    monitoring:[{signal: memory|cache_hit_rate|swap|fragmentation|<other>,
                                 metric (the engine's real name), threshold, action?, owner?}],
                    swap_policy:{statement, never_swap:[str]},
                    hardware, kv_format_compatibility, fallback, rollback}
    evidence:      [{kind: configuration|runtime|responsibility|review, checks, evidence, review}]
    manifest:      [{kind: run|artifact, name, tool, version, sha256 (64 hex),
                     provenance: MEASURED|SIMULATED}]
    owners:        [{role: business|platform|security, name, team?, approved_at?: ISO str}]
    seal:          {name}?                                  - optional organisational seal box
    observer:      {name, team?, watches}
    review:        {review_by: ISO date, triggers:[str]}  - build merges REEVALUATION_TRIGGERS
    lineage:       {supersedes?: str, superseded_by?: str}
"""

from __future__ import annotations

import copy
import hashlib
import math
import re
from typing import Any

REQUIRED_SECTIONS = (
    "record",
    "decision",
    "risk_boundary",
    "constraints",
    "scenario",
    "weights",
    "gates",
    "candidates",
    "capacity",
    "validation",
    "scores",
    "rollout",
    "evidence",
    "manifest",
    "owners",
    "observer",
    "review",
)  # lineage (supersedes / superseded_by) and seal are optional
OWNER_ROLES = ("business", "platform", "security")
MONITORED_SIGNALS = ("memory", "cache_hit_rate", "swap", "fragmentation")
EVIDENCE_KINDS = ("configuration", "runtime", "responsibility", "review")
PROVENANCES = ("MEASURED", "SIMULATED")
HEADROOM_RANGE = (20.0, 30.0)
CAPACITY_FLAG_FRACTION = 0.10
REEVALUATION_TRIGGERS = (
    "engine major version change",
    "model change",
    "hardware change (GPU generation or memory size)",
    "traffic profile change (concurrency, context lengths, multi-turn share)",
)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class RecordContextError(ValueError):
    """The record context is incomplete or inconsistent; ``problems`` lists every issue."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("record context: " + "; ".join(problems))


def capacity_deviation(predicted: float, measured: float | None) -> float | None:
    """Relative deviation of measured from predicted in percent (None if not measured)."""
    if measured is None or predicted in (None, 0):
        return None
    return (float(measured) - float(predicted)) / abs(float(predicted)) * 100.0


def missing_sections(context: dict) -> list[str]:
    """Names of required top-level sections that are absent or empty."""
    return [s for s in REQUIRED_SECTIONS if context.get(s) in (None, "", [], {})]


def _need(ctx: dict, path: str, problems: list[str]) -> Any:
    cur: Any = ctx
    for part in path.split("."):
        if not isinstance(cur, dict) or cur.get(part) in (None, "", [], {}):
            problems.append(f"{path}: missing")
            return None
        cur = cur[part]
    return cur


def build_record_context(context: dict) -> dict:
    """Validate ``context`` and return a copy with derived fields; raise RecordContextError.

    Derived: ``simulated`` (True if any manifest entry is SIMULATED), capacity rows'
    ``deviation_pct``/``flagged``, the standard re-evaluation triggers merged into
    ``review.triggers``, and ``lineage`` defaulted to empty.
    """
    problems = [f"{s}: missing" for s in missing_sections(context)]
    ctx = copy.deepcopy(context)
    ctx.setdefault("lineage", {})
    if problems:
        raise RecordContextError(problems)

    for path in ("record.id", "record.title", "decision.chosen_engine", "decision.summary",
                 "risk_boundary.applies_to", "risk_boundary.does_not_apply_to",
                 "scenario.id", "weights.items", "rollout.headroom", "rollout.monitoring",
                 "rollout.swap_policy", "rollout.hardware", "rollout.kv_format_compatibility",
                 "rollout.fallback", "rollout.rollback", "observer.name", "review.review_by"):
        _need(ctx, path, problems)

    weights = ctx["weights"]
    if weights.get("source") not in ("preset", "edited"):
        problems.append(f"weights.source: must be 'preset' or 'edited', got {weights.get('source')!r}")
    elif weights["source"] == "edited" and not (weights.get("edited_by") and weights.get("edit_reason")):
        problems.append("weights: edited weights need edited_by and edit_reason")

    headroom = (ctx["rollout"].get("headroom") or {}).get("percent")
    lo, hi = HEADROOM_RANGE
    if not isinstance(headroom, (int, float)) or math.isnan(headroom) or not lo <= headroom <= hi:
        problems.append(f"rollout.headroom.percent: must be within {lo:g}-{hi:g} %, got {headroom!r}")

    signals = {m.get("signal") for m in ctx["rollout"].get("monitoring") or []}
    for sig in MONITORED_SIGNALS:
        if sig not in signals:
            problems.append(f"rollout.monitoring: no alert for signal {sig!r}")
    for i, m in enumerate(ctx["rollout"].get("monitoring") or []):
        if not m.get("metric") or not m.get("threshold"):
            problems.append(f"rollout.monitoring[{i}]: needs metric and threshold")

    kinds = {e.get("kind") for e in ctx["evidence"]}
    for kind in EVIDENCE_KINDS:
        if kind not in kinds:
            problems.append(f"evidence: no {kind!r} row")

    simulated = False
    for i, item in enumerate(ctx["manifest"]):
        if item.get("provenance") not in PROVENANCES:
            problems.append(f"manifest[{i}].provenance: must be MEASURED or SIMULATED, "
                            f"got {item.get('provenance')!r}")
        simulated |= item.get("provenance") == "SIMULATED"
        if not _SHA256.match(str(item.get("sha256", ""))):
            problems.append(f"manifest[{i}].sha256: must be 64 lowercase hex characters")
        for key in ("name", "tool", "version"):
            if not item.get(key):
                problems.append(f"manifest[{i}].{key}: missing")
    if ctx.get("simulated") is False and simulated:
        problems.append("simulated: is False but the manifest holds SIMULATED evidence")
    ctx["simulated"] = bool(ctx.get("simulated")) or simulated

    roles = [o.get("role") for o in ctx["owners"]]
    for role in OWNER_ROLES:
        if roles.count(role) != 1:
            problems.append(f"owners: need exactly one {role!r} owner, got {roles.count(role)}")
    for i, o in enumerate(ctx["owners"]):
        if not o.get("name"):
            problems.append(f"owners[{i}].name: missing")

    for block in ctx["capacity"]:
        for row in block.get("rows", []):
            dev = capacity_deviation(row.get("predicted"), row.get("measured"))
            row["deviation_pct"] = dev
            row["flagged"] = dev is not None and abs(dev) > CAPACITY_FLAG_FRACTION * 100

    for i, test in enumerate(ctx["validation"]):
        for j, chart in enumerate(test.get("charts", [])):
            if "<svg" not in str(chart.get("svg", "")):
                problems.append(f"validation[{i}].charts[{j}].svg: not SVG markup")

    triggers = list(ctx["review"].get("triggers") or [])
    for t in REEVALUATION_TRIGGERS:
        if t not in triggers:
            triggers.append(t)
    ctx["review"]["triggers"] = triggers
    # order owners business, platform, security for the signature page
    ctx["owners"] = sorted(ctx["owners"], key=lambda o: OWNER_ROLES.index(o["role"])
                           if o.get("role") in OWNER_ROLES else 99)
    if problems:
        raise RecordContextError(problems)
    return ctx


# --------------------------------------------------------------------------- sample


def sample_chart_svg(title: str, seed: int, points: int = 60) -> str:
    """A small deterministic line chart as SVG markup (stand-in for the chart module)."""
    w, h, pad = 480, 200, 30
    ys = [0.5 + 0.35 * math.sin((i + seed) / 6.0) * math.cos(seed + i / 17.0) for i in range(points)]
    coords = " ".join(
        f"{pad + i * (w - 2 * pad) / (points - 1):.1f},{h - pad - y * (h - 2 * pad):.1f}"
        for i, y in enumerate(ys)
    )
    safe_title = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}">'
        f'<rect x="0" y="0" width="{w}" height="{h}" fill="white"/>'
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#444"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="#444"/>'
        f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{coords}"/>'
        f'<text x="{w / 2}" y="18" text-anchor="middle" font-size="13">{safe_title}</text>'
        f"</svg>"
    )


def _fake_sha(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def sample_record_context(
    simulated: bool = True,
    n_charts: int = 2,
    n_manifest: int = 6,
    business_owner: str = "张伟",
) -> dict:
    """A complete, valid record context (vLLM chosen for scenario A), SIMULATED by default."""
    provenance = "SIMULATED" if simulated else "MEASURED"
    tests = ["Concurrency stress", "Long context", "Swap-out and recovery", "Prefix reuse",
             "Long-run stability"]
    validation = []
    for i in range(max(n_charts, len(tests))):
        name = tests[i % len(tests)]
        cand = "vLLM 0.33.0" if i % 2 == 0 else "SGLang 0.5.23"
        validation.append({
            "test": name if i < len(tests) else f"{name} (repeat {i // len(tests)})",
            "candidate": cand,
            "summary": f"{cand} held the target load; memory stayed below the planned ceiling.",
            "verdict": "pass" if i % 4 else "inconclusive",
            "metrics": [
                {"name": "TTFT p99", "value": f"{420 + 13 * i}", "unit": "ms"},
                {"name": "error rate", "value": f"{0.1 * (i % 3):.1f}", "unit": "%"},
                {"name": "peak KV-cache usage", "value": f"{71 + i % 9}", "unit": "%"},
            ],
            "charts": ([{"title": f"KV-cache usage over time — {name}",
                         "svg": sample_chart_svg(f"KV-cache usage — {name}", i)}]
                       if i < n_charts else []),
        })
    manifest = [
        {"kind": "run" if i % 2 == 0 else "artifact",
         "name": f"run-{i:03d}" if i % 2 == 0 else f"artifacts/run-{i - 1:03d}/requests.parquet",
         "tool": "vllm bench serve" if i % 3 else "guidellm",
         "version": "0.33.0" if i % 3 else "0.8.1",
         "sha256": _fake_sha(f"artifact-{i}"),
         "provenance": provenance}
        for i in range(n_manifest)
    ]
    return {
        "record": {"id": "DR-2026-0007", "version": 2,
                   "title": "Inference engine for customer-service chat (scenario A)",
                   "created_at": "2026-11-29T10:00:00+00:00", "language": "en"},
        "simulated": simulated,
        "decision": {
            "chosen_engine": "vLLM 0.33.0",
            "chosen_configuration": "paged KV cache, block size 16, prefix caching on, "
                                    "max_num_seqs 256, gpu_memory_utilization 0.75",
            "summary": "Choose vLLM 0.33.0 for customer-service chat on 1x H100 80 GB. It met "
                       "the concurrency and prefix-reuse gates with the lowest memory per "
                       "concurrent request and the best observability.",
            "rationale": [
                "Paged allocation kept fragmentation below 4 % at 256 concurrent requests.",
                "Prefix caching cut KV memory by 38 % for the shared system prompt.",
                "SGLang scored within 0.03 TOPSIS; vLLM's metrics cover all four alert signals.",
            ],
        },
        "risk_boundary": {
            "applies_to": ["short chat turns up to 8K tokens", "up to 256 concurrent sessions",
                           "H100 80 GB, one GPU per replica"],
            "does_not_apply_to": ["contexts above 32K tokens at high concurrency (use "
                                  "retrieval or chunking)", "other GPU generations or memory "
                                  "sizes", "offline batch workloads"],
        },
        "constraints": [
            {"label": "Concurrency", "value": "200 sustained, 256 peak"},
            {"label": "Context length", "value": "average 1.5K, maximum 8K tokens"},
            {"label": "Multi-turn", "value": "yes, 6 turns on average"},
            {"label": "Latency budget", "value": "TTFT p99 < 800 ms, TPOT p99 < 60 ms"},
            {"label": "Memory limit", "value": "80 GB per GPU, 1 GPU per replica"},
            {"label": "Operations team", "value": "3 engineers, no dedicated CUDA expertise"},
        ],
        "scenario": {"id": "A", "name": "high-concurrency short text",
                     "reasons": ["many short requests", "strict latency", "shared system prompt"]},
        "weights": {
            "source": "edited", "edited_by": "李娜 (platform)",
            "edit_reason": "observability raised: the on-call team is small",
            "items": [
                {"criterion": "memory allocation strategy", "weight": 0.20, "preset": 0.20},
                {"criterion": "cache reuse", "weight": 0.18, "preset": 0.20},
                {"criterion": "concurrency control", "weight": 0.20, "preset": 0.20},
                {"criterion": "context extension", "weight": 0.08, "preset": 0.10},
                {"criterion": "cache persistence", "weight": 0.04, "preset": 0.05},
                {"criterion": "observability", "weight": 0.15, "preset": 0.10},
                {"criterion": "cost control", "weight": 0.15, "preset": 0.15},
            ],
        },
        "gates": [
            {"dimension": "memory allocation and reuse", "threshold": "fragmentation < 10 % at 200 concurrent",
             "results": [{"candidate": "vLLM 0.33.0", "passed": True},
                         {"candidate": "SGLang 0.5.23", "passed": True},
                         {"candidate": "TGI 3.3", "passed": False, "note": "no KV usage metric"}]},
            {"dimension": "concurrency scheduling", "threshold": "error rate < 0.5 % at 256 concurrent",
             "results": [{"candidate": "vLLM 0.33.0", "passed": True},
                         {"candidate": "SGLang 0.5.23", "passed": True}]},
        ],
        "candidates": [
            {"name": "vLLM", "version": "0.33.0", "kept": True,
             "screening_note": "documents paged KV cache, prefix caching, preemption",
             "documentation": "docs.vllm.ai — design/paged_attention"},
            {"name": "SGLang", "version": "0.5.23", "kept": True,
             "screening_note": "radix-tree prefix cache, HiCache offload documented"},
            {"name": "TGI", "version": "3.3", "kept": False,
             "screening_note": "maintenance mode; no KV usage or hit-rate metric"},
        ],
        "capacity": [
            {"candidate": "vLLM 0.33.0", "configuration": "Llama-3.1-8B bf16, block 16",
             "rows": [
                 {"quantity": "KV bytes per token", "unit": "KiB", "predicted": 128, "measured": 128},
                 {"quantity": "max concurrent at 2K", "unit": "requests", "predicted": 240, "measured": 226},
                 {"quantity": "peak memory at 200 concurrent", "unit": "GiB", "predicted": 55.0, "measured": 61.3},
             ]},
            {"candidate": "SGLang 0.5.23", "configuration": "Llama-3.1-8B bf16, page 1",
             "rows": [
                 {"quantity": "max concurrent at 2K", "unit": "requests", "predicted": 240, "measured": 231},
                 {"quantity": "peak memory at 200 concurrent", "unit": "GiB", "predicted": 55.0, "measured": None},
             ]},
        ],
        "validation": validation,
        "scores": {
            "criteria": ["alloc", "reuse", "concurrency", "context", "persistence", "observability", "cost"],
            "rows": [
                {"candidate": "vLLM 0.33.0", "values": [4, 4, 5, 3, 3, 5, 4], "topsis": 0.71, "rank": 1},
                {"candidate": "SGLang 0.5.23", "values": [5, 5, 4, 3, 4, 3, 4], "topsis": 0.68, "rank": 2},
            ],
            "sensitivity": [
                "vLLM stays first unless the observability weight falls below 0.09.",
                "Raising cache reuse above 0.26 makes SGLang first.",
            ],
            "evidence_coverage": [
                {"candidate": "vLLM 0.33.0", "coverage": 0.9, "note": "long-run test 4 h of 8 h"},
                {"candidate": "SGLang 0.5.23", "coverage": 0.7, "note": "no swap-out test"},
            ],
            "scoring_rules": [
                {"criterion": "memory allocation", "rule": "5 = fragmentation < 2 %, 1 = > 20 %"},
                {"criterion": "observability", "rule": "5 = all four alert signals exported as metrics"},
            ],
        },
        "rollout": {
            "headroom": {"percent": 25, "statement": "Plan 200 concurrent requests at 2K tokens: "
                         "KV cache 48.0 GiB + weights 16.1 GiB = 64.1 GiB of 80 GiB (25 % headroom)."},
            "monitoring": [
                {"signal": "memory", "metric": "vllm:kv_cache_usage_perc", "threshold": "> 0.90 for 5 min",
                 "action": "page platform on-call", "owner": "platform"},
                {"signal": "cache_hit_rate", "metric": "rate(vllm:prefix_cache_hits_total[5m]) / "
                 "rate(vllm:prefix_cache_queries_total[5m])", "threshold": "< 0.30 for 15 min",
                 "action": "ticket", "owner": "platform"},
                {"signal": "swap", "metric": "rate(vllm:num_preemptions_total[5m])",
                 "threshold": "> 1/s for 5 min", "action": "page", "owner": "platform"},
                {"signal": "fragmentation", "metric": "vllm:num_requests_waiting_by_reason{reason=\"capacity\"} "
                 "while vllm:kv_cache_usage_perc < 0.8", "threshold": "> 0 for 10 min",
                 "action": "ticket", "owner": "platform"},
            ],
            "swap_policy": {"statement": "Preempted requests are recomputed; idle chat sessions "
                            "may lose their cache after 10 min.",
                            "never_swap": ["VIP escalation sessions", "payment dialogues"]},
            "hardware": "Measured on NVIDIA H100 80 GB (SXM); results do not carry to other "
                        "memory sizes or GPU generations.",
            "kv_format_compatibility": "Engine or model upgrades invalidate the whole cache; "
                                       "roll replicas one at a time with 30 % extra headroom.",
            "fallback": "Route to the previous engine pool (SGLang 0.5.23) via the gateway.",
            "rollback": "Redeploy the previous image tag; cache rebuilds within 10 min.",
        },
        "evidence": [
            {"kind": "configuration", "checks": "engine flags, model revision, image digest",
             "evidence": "git tag deploy/2026-11-29", "review": "change record CHG-1042"},
            {"kind": "runtime", "checks": "latency, errors, KV usage", "evidence": "Prometheus, 30 days",
             "review": "queryable per tenant"},
            {"kind": "responsibility", "checks": "approvals and alert owners",
             "evidence": "this record, on-call rota", "review": "platform team"},
            {"kind": "review", "checks": "degradation and rollback", "evidence": "post-launch review",
             "review": "observer owns the conclusion"},
        ],
        "manifest": manifest,
        "owners": [
            {"role": "business", "name": business_owner, "team": "Customer service",
             "approved_at": "2026-11-29T11:00:00+00:00"},
            {"role": "platform", "name": "李娜", "team": "Platform", "approved_at": "2026-11-29T11:10:00+00:00"},
            {"role": "security", "name": "Sam Okafor", "team": "Security",
             "approved_at": "2026-11-29T11:20:00+00:00"},
        ],
        "seal": {"name": "kvselect organisational seal"},
        "observer": {"name": "王芳", "team": "Platform SRE",
                     "watches": "capacity, cost per 1K requests and stability for 90 days"},
        "review": {"review_by": "2027-05-31", "triggers": []},
        "lineage": {"supersedes": "DR-2026-0007 v1", "superseded_by": None},
    }
