"""A complete, valid decision-record context for tests and the record benchmark.

Plain data in the shape `selection.domain.records` defines: every section filled, fake charts
and hashes, a Chinese business owner (so the PDF needs CJK fonts).
"""

from __future__ import annotations

import hashlib
import math

from benchmarks.charts import candidates as candidate_charts
from selection.domain import catalog, project_checks


def sample_chart_svg(title: str, seed: int, points: int = 60) -> str:
    """A small deterministic line chart as SVG markup (stand-in for the chart module)."""
    w, h, pad = 480, 200, 30
    ys = [0.5 + 0.35 * math.sin((i + seed) / 6.0) * math.cos(seed + i / 17.0) for i in range(points)]
    coords = " ".join(
        f"{pad + i * (w - 2 * pad) / (points - 1):.1f},{h - pad - y * (h - 2 * pad):.1f}" for i, y in enumerate(ys)
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


def drawn_chart_svg(index: int, title: str) -> str:
    """One of the record's chart kinds drawn by the chart module (matplotlib, as `run_charts` draws
    them). WeasyPrint turns their transparency into dozens of Form XObjects per chart, which is what
    made verification slow (issue 17); `sample_chart_svg` creates none."""
    if index % 3 == 0:
        points = [(t * 2.0, 0.3 + 0.4 * abs(math.sin(t / 20 + index))) for t in range(300)]
        return candidate_charts.kv_usage_over_time({"vLLM 0.33.0": points}, title=title, limit=0.9, simulated=True)
    if index % 3 == 1:
        load = [1, 2, 4, 8, 16, 32, 64, 128, 256]
        series = {"concurrency": load, "ttft_ms": [40 + 3 * c for c in load], "tpot_ms": [10 + c / 10 for c in load]}
        return candidate_charts.latency_vs_concurrency({"vLLM 0.33.0": series}, percentile="p99", simulated=True)
    return candidate_charts.ttft_vs_context(
        {"vLLM 0.33.0": [(2**k, 30 * k) for k in range(9, 16)]}, percentile="p50", simulated=True
    )


def with_drawn_charts(context: dict) -> dict:
    """`context` with every chart drawn by the chart module (see `drawn_chart_svg`)."""
    for i, test in enumerate(context["validation"]):
        for chart in test["charts"]:
            chart["svg"] = drawn_chart_svg(i, chart["title"])
    return context


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
    tests = ["Concurrency stress", "Long context", "Swap-out and recovery", "Prefix reuse", "Long-run stability"]
    validation = []
    for i in range(max(n_charts, len(tests))):
        name = tests[i % len(tests)]
        cand = "vLLM 0.33.0" if i % 2 == 0 else "SGLang 0.5.23"
        validation.append(
            {
                "test": name if i < len(tests) else f"{name} (repeat {i // len(tests)})",
                "candidate": cand,
                "summary": f"{cand} held the target load; memory stayed below the planned ceiling.",
                "verdict": "pass" if i % 4 else "inconclusive",
                "metrics": [
                    {"name": "TTFT p99", "value": f"{420 + 13 * i}", "unit": "ms"},
                    {"name": "error rate", "value": f"{0.1 * (i % 3):.1f}", "unit": "%"},
                    {"name": "peak KV-cache usage", "value": f"{71 + i % 9}", "unit": "%"},
                ],
                "charts": (
                    [
                        {
                            "title": f"KV-cache usage over time — {name}",
                            "svg": sample_chart_svg(f"KV-cache usage — {name}", i),
                        }
                    ]
                    if i < n_charts
                    else []
                ),
            }
        )
    manifest = [
        {
            "kind": "run" if i % 2 == 0 else "artifact",
            "name": f"run-{i:03d}" if i % 2 == 0 else f"artifacts/run-{i - 1:03d}/requests.parquet",
            "tool": "vllm bench serve" if i % 3 else "guidellm",
            "version": "0.33.0" if i % 3 else "0.8.1",
            "sha256": _fake_sha(f"artifact-{i}"),
            "provenance": provenance,
        }
        for i in range(n_manifest)
    ]
    return {
        "record": {
            "id": "DR-2026-0007",
            "version": 2,
            "title": "Inference engine for customer-service chat (scenario A)",
            "created_at": "2026-11-29T10:00:00+00:00",
            "language": "en",
        },
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
            "applies_to": [
                "short chat turns up to 8K tokens",
                "up to 256 concurrent sessions",
                "H100 80 GB, one GPU per replica",
            ],
            "does_not_apply_to": [
                "contexts above 32K tokens at high concurrency (use retrieval or chunking)",
                "other GPU generations or memory sizes",
                "offline batch workloads",
            ],
        },
        "constraints": [
            {"label": "Concurrency", "value": "200 sustained, 256 peak"},
            {"label": "Context length", "value": "average 1.5K, maximum 8K tokens"},
            {"label": "Multi-turn", "value": "yes, 6 turns on average"},
            {"label": "Latency budget", "value": "TTFT p99 < 800 ms, TPOT p99 < 60 ms"},
            {"label": "Memory limit", "value": "80 GB per GPU, 1 GPU per replica"},
            {"label": "Operations team", "value": "3 engineers, no dedicated CUDA expertise"},
        ],
        "scenario": {
            "id": "A",
            "name": "High-concurrency short text",
            "reasons": ["many short requests", "strict latency", "shared system prompt"],
        },
        "weights": {
            "source": "edited",
            "edited_by": "李娜 (platform)",
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
            {
                "dimension": "Memory allocation and reuse",
                "threshold": "fragmentation < 10 % at 200 concurrent",
                "results": [
                    {"candidate": "vLLM 0.33.0", "passed": True},
                    {"candidate": "SGLang 0.5.23", "passed": True},
                    {"candidate": "TGI 3.3", "passed": False, "note": "no KV usage metric"},
                ],
            },
            {
                "dimension": "concurrency scheduling",
                "threshold": "error rate < 0.5 % at 256 concurrent",
                "results": [
                    {"candidate": "vLLM 0.33.0", "passed": True},
                    {"candidate": "SGLang 0.5.23", "passed": True},
                ],
            },
        ],
        "candidates": [
            {
                "name": "vLLM",
                "version": "0.33.0",
                "kept": True,
                "screening_note": "documents paged KV cache, prefix caching, preemption",
                "documentation": "docs.vllm.ai — design/paged_attention",
            },
            {
                "name": "SGLang",
                "version": "0.5.23",
                "kept": True,
                "screening_note": "radix-tree prefix cache, HiCache offload documented",
            },
            {
                "name": "TGI",
                "version": "3.3",
                "kept": False,
                "screening_note": "maintenance mode; no KV usage or hit-rate metric",
            },
        ],
        "economics": {
            "tables": [
                {
                    "columns": ["vLLM 0.33.0", "SGLang 0.5.23"],
                    "rows": [
                        {
                            "key": "monthly",
                            "label": "Monthly cost at the target load",
                            "cells": [
                                {"text": "3,698.00 USD", "meta": "2 replica(s) × 1 GPU(s)", "status": ""},
                                {"text": "—", "meta": "", "status": ""},
                            ],
                        },
                        {
                            "key": "budget",
                            "label": "Against the monthly budget",
                            "cells": [
                                {"text": "within the budget by 8,302.00 USD (69%)", "meta": "", "status": "pass"},
                                {"text": "cannot be derived: no GPU price", "meta": "", "status": ""},
                            ],
                        },
                    ],
                }
            ],
            "budget": "12,000.00 USD",
            "hours_per_month": "730",
            "host_price": "3.00 USD",
        },
        "capacity": [
            {
                "candidate": "vLLM 0.33.0",
                "configuration": "Llama-3.1-8B bf16, block 16",
                "rows": [
                    {"quantity": "KV bytes per token", "unit": "KiB", "predicted": 128, "measured": 128},
                    {"quantity": "max concurrent at 2K", "unit": "requests", "predicted": 240, "measured": 226},
                    {"quantity": "peak memory at 200 concurrent", "unit": "GiB", "predicted": 55.0, "measured": 61.3},
                ],
            },
            {
                "candidate": "SGLang 0.5.23",
                "configuration": "Llama-3.1-8B bf16, page 1",
                "rows": [
                    {"quantity": "max concurrent at 2K", "unit": "requests", "predicted": 240, "measured": 231},
                    {"quantity": "peak memory at 200 concurrent", "unit": "GiB", "predicted": 55.0, "measured": None},
                ],
            },
        ],
        "validation": validation,
        "scores": {
            "criteria": ["alloc", "reuse", "concurrency", "context", "persistence", "observability", "cost"],
            "rows": [
                {
                    "candidate": "vLLM 0.33.0",
                    "values": [0.8, 0.8, 1.0, 0.6, 0.6, 1.0, 0.8],
                    "total": 0.812,
                    "topsis": 0.71,
                    "rank": 1,
                },
                {
                    "candidate": "SGLang 0.5.23",
                    "values": [1.0, 1.0, 0.8, 0.6, None, 0.6, 0.8],  # None: no swap-out evidence ("—")
                    "total": 0.78,
                    "topsis": 0.68,
                    "rank": 2,
                },
            ],
            "method": "The weighted sum decides; TOPSIS agrees: vLLM is also first by closeness (0.710).",
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
            "headroom": {
                "percent": 20,
                "statement": "Plan 200 concurrent requests at 2K tokens: "
                "KV cache 48.0 GiB + weights 16.1 GiB = 64.1 GiB of 80 GiB (20 % headroom).",
            },
            "monitoring": [
                {
                    "signal": "memory",
                    "metric": "vllm:kv_cache_usage_perc",
                    "threshold": "> 0.90 for 5 min",
                    "action": "page platform on-call",
                    "owner": "platform",
                },
                {
                    "signal": "cache_hit_rate",
                    "metric": "rate(vllm:prefix_cache_hits_total[5m]) / rate(vllm:prefix_cache_queries_total[5m])",
                    "threshold": "< 0.30 for 15 min",
                    "action": "ticket",
                    "owner": "platform",
                },
                {
                    "signal": "swap",
                    "metric": "rate(vllm:num_preemptions_total[5m])",
                    "threshold": "> 1/s for 5 min",
                    "action": "page",
                    "owner": "platform",
                },
                {
                    "signal": "fragmentation",
                    "metric": 'vllm:num_requests_waiting_by_reason{reason="capacity"} '
                    "while vllm:kv_cache_usage_perc < 0.8",
                    "threshold": "> 0 for 10 min",
                    "action": "ticket",
                    "owner": "platform",
                },
            ],
            "swap_policy": {
                "statement": "Preempted requests are recomputed; idle chat sessions may lose their cache after 10 min.",
                "never_swap": ["VIP escalation sessions", "payment dialogues"],
            },
            "hardware": "Measured on NVIDIA H100 80 GB (SXM); results do not carry to other "
            "memory sizes or GPU generations.",
            "kv_format_compatibility": "Engine or model upgrades invalidate the whole cache; "
            "roll replicas one at a time with 30 % extra headroom.",
            "fallback": "Route to the previous engine pool (SGLang 0.5.23) via the gateway.",
            "rollback": "Redeploy the previous image tag; cache rebuilds within 10 min.",
        },
        "evidence": [
            {
                "kind": "configuration",
                "checks": "engine flags, model revision, image digest",
                "evidence": "git tag deploy/2026-11-29",
                "review": "change record CHG-1042",
            },
            {
                "kind": "runtime",
                "checks": "latency, errors, KV usage",
                "evidence": "Prometheus, 30 days",
                "review": "queryable per tenant",
            },
            {
                "kind": "responsibility",
                "checks": "approvals and alert owners",
                "evidence": "this record, on-call rota",
                "review": "platform team",
            },
            {
                "kind": "review",
                "checks": "degradation and rollback",
                "evidence": "post-launch review",
                "review": "observer owns the conclusion",
            },
        ],
        "manifest": manifest,
        "owners": [
            {
                "role": "business",
                "name": business_owner,
                "team": "Customer service",
                "approved_at": "2026-11-29T11:00:00+00:00",
                "certificate_sha256": _fake_sha("business certificate"),
                "certificate_subject": f"CN={business_owner},O=Example",
            },
            {
                "role": "platform",
                "name": "李娜",
                "team": "Platform",
                "approved_at": "2026-11-29T11:10:00+00:00",
                "certificate_sha256": _fake_sha("platform certificate"),
                "certificate_subject": "CN=李娜,O=Example",
            },
            {
                "role": "security",
                "name": "Sam Okafor",
                "team": "Security",
                "approved_at": "2026-11-29T11:20:00+00:00",
                "certificate_sha256": _fake_sha("security certificate"),
                "certificate_subject": "CN=Sam Okafor,O=Example",
            },
        ],
        "seal": {"name": "kvselect organisational seal"},
        "observer": {
            "name": "王芳",
            "team": "Platform SRE",
            "watches": "capacity, cost per 1K requests and stability for 90 days",
        },
        "review": {"review_by": "2027-05-31", "triggers": []},
        "lineage": {"supersedes": "DR-2026-0007 v1", "superseded_by": None},
        "operations": sample_operations(simulated),
        "project_checks": sample_project_checks(business_owner),
    }


def sample_operations(simulated: bool = True) -> dict:
    """What the record's monitoring export reads: vLLM 0.11.0's metrics from the shipped catalog."""
    caps = catalog.capabilities("vllm", "0.11.0")
    return {
        "record_id": "DR-2026-0007-v2",
        "engine": {"slug": "vllm", "version": "0.11.0", "name": "vLLM 0.11.0"},
        "job": "vllm",
        "metrics_endpoint": caps["metrics_endpoint"],
        "metrics": caps["monitoring_metrics"],
        "metrics_source": caps["sources"]["monitoring_metrics"],
        "headroom_percent": 20,
        "thresholds": {
            "kv_usage_warning": 0.8,
            "ttft_p95_ms": 800.0,
            "tpot_p95_ms": 60.0,
            "e2e_p95_ms": 15000.0,
            "max_input_tokens": 4096,
            "max_input_validated": True,
            "validated_concurrency": 200,
            "planned_concurrency": 200,
            "validated_output_tokens_per_s": 1000.0,
            "prefix_hit_ratio_validated": 0.62,
        },
        "evidence": "SIMULATED" if simulated else "MEASURED",
        "owner": "李娜",
        "rollback": "Redeploy the previous image tag; cache rebuilds within 10 min.",
    }


def sample_project_checks(business_owner: str = "张伟") -> dict:
    checks = project_checks.normalise(
        {
            "affected": {"applications": ["support chat", "ticket triage"], "teams": ["Customer service"], "data": []},
            "readiness": {
                "permissions": {"status": "ready", "note": "gateway API keys per application"},
                "monitoring": {"status": "ready", "note": "alerts.yml loaded in Prometheus"},
                "logs": {"status": "not_ready", "note": "error logs not yet queryable per tenant"},
            },
            "acceptance": {"pilot_result": "Answers fit the support scenario at the pilot's 5 % share."},
            "security": {"audit_trail": {"status": "ready", "note": "kvselect audit trail, config changes in git"}},
            "watch": {"capacity": "王芳", "cost": "Finance: 陈静"},
        }
    )
    stages = [
        {
            "stage": "pilot",
            "traffic_percent": 5.0,
            "gate": "TTFT p95 within 800 ms for 7 days",
            "decides": business_owner,
        },
        {"stage": "full", "traffic_percent": 100.0, "gate": "error rate below 1 %", "decides": business_owner},
    ]
    return project_checks.record_section(checks, stages, "王芳", {"readiness": {}, "security": {}})


def sample_economics_headline(long_text: bool = False) -> dict:
    """Page 1's cost and growth rows as `selection.scoring.economics.economics_headline` writes them
    (``long_text``: an offload tier whose basis and sources fill every printed limit)."""
    basis = "--kv-transfer-config OffloadingConnector with a long connector configuration " * (3 if long_text else 0)
    return {
        "monthly": "123,456,789.00 USD",
        "status": "over",
        "verdict": "over the budget by 123,408,789.00 USD (257,102%)",
        "breakdown": "4,096 replica(s) × 8 GPU(s) × 2.50 USD per GPU-hour × 730 h + 1,048,576.0 GiB host memory "
        f"({basis or '--kv-offloading-size 256'}) × 3.25 USD per GiB-month",
        "replicas": "throughput target over 1,310 output tokens/s per replica (run-12)",
        "growth_label": "At the expected growth (×1.5 in 12 months)",
        "growth": "6,144 replica(s), 49,152 GPU(s), 185,185,183.50 USD per month",
        "growth_verdict": "over the budget by 185,137,183.50 USD (385,702%); over the GPU budget of 8",
        "growth_status": "over",
        "limits": "KV pool runs out at ×1.2 (engine-stated KV pool (run-12)); latency budget at ×1.0 or more "
        "(the highest load tested was within the budget) (run-12)",
        "limits_short": "Traffic growth: the KV pool lasts to ×1.2, the latency budget to ×1.0 or more (sources and "
        "breakdown: section 7)",
    }


def sample_summary(open_items: int = 2, long_text: bool = False) -> dict:
    """A procurement summary (the snapshot's `summary`) as `selection.records.summary` writes it.
    ``long_text`` fills every free-text field to its longest printed length (the one-page check)."""
    filler = "Support contract with 24x7 escalation, named engineer and quarterly reviews. " * 6
    keys = [
        ("readiness", "logs"),
        ("readiness", "monitoring"),
        ("readiness", "rollback"),
        ("readiness", "capacity"),
        ("readiness", "permissions"),
        ("security", "permissions"),
        ("security", "logs"),
        ("security", "audit_trail"),
    ]
    return {
        "fit": [
            {
                "key": "concurrency",
                "constraint": "Concurrency within the latency budget (per GPU)",
                "required": "≥ 64 requests/GPU",
                "observed": "71.50 requests/GPU",
                "status": "pass",
                "runs": ["run-12"],
                "simulated": False,
                "configuration": False,
            },
            {
                "key": "ttft",
                "constraint": "TTFT p95",
                "required": "≤ 800 ms",
                "observed": "912 ms",
                "status": "fail",
                "runs": ["run-12"],
                "simulated": False,
                "configuration": False,
            },
            {
                "key": "tpot",
                "constraint": "TPOT p95",
                "required": "≤ 60 ms",
                "observed": "41.20 ms",
                "status": "pass",
                "runs": ["run-12"],
                "simulated": False,
                "configuration": False,
            },
            {
                "key": "context",
                "constraint": "Longest input served",
                "required": "≥ 32,768 tokens",
                "observed": "",
                "status": "not_validated",
                "runs": [],
                "simulated": False,
                "configuration": False,
            },
            {
                "key": "throughput",
                "constraint": "Output throughput within the budget (per GPU)",
                "required": "≥ 1,250 tokens/s per GPU",
                "observed": "1,310 tokens/s per GPU",
                "status": "pass",
                "runs": ["run-12"],
                "simulated": False,
                "configuration": False,
            },
            {
                "key": "memory_headroom",
                "constraint": "KV-cache headroom at the target load",
                "required": "≥ 20%",
                "observed": "14%",
                "status": "fail",
                "runs": ["run-12"],
                "simulated": False,
                "configuration": False,
            },
            {
                "key": "team",
                "constraint": "Operations team",
                "required": "3 people",
                "observed": "documented complexity: medium",
                "status": "not_validated",
                "runs": [],
                "simulated": False,
                "configuration": False,
                "documented": True,
            },
            {
                "key": "gpu_budget",
                "constraint": "GPUs per replica within the GPU budget",
                "required": "≤ 8 GPUs",
                "observed": "2 GPUs",
                "status": "pass",
                "runs": [],
                "simulated": False,
                "configuration": True,
            },
        ],
        "budget": {"monthly": "48,000.00", "currency": "USD"},
        "cost_per_mtok": {"value": "0.84", "runs": ["run-12"], "simulated": False},
        "gpu_price": "2.50",
        "economics": sample_economics_headline(long_text),
        "licence": {
            "value": "Apache-2.0",
            "source": "https://github.com/vllm-project/vllm/blob/v0.11.0/LICENSE",
            "note": "License-Expression: Apache-2.0 in the 0.11.0 wheel metadata",
            "terms": filler if long_text else "Apache-2.0, no subscription",
        },
        "vendor_support": filler if long_text else "Community only; platform team on call",
        "delivery_owner": "Platform team — 王芳"
        + (" (rollout lead, answers for the schedule)" * 4 if long_text else ""),
        "test_gaps": [
            {"test": title, "outcome": outcome, "detail": detail, "run": run}
            for title, outcome, detail, run in [
                (
                    "Swap-out and recovery",
                    "failed",
                    "eviction_exercised, continuation_correct" * (3 if long_text else 1),
                    "run-14",
                ),
                ("Prefix reuse", "inconclusive", "", "run-15"),
                ("Long-run stability", "insufficient data", "", "run-16"),
                ("Overload and rejection", "not run", "", ""),
                ("Model switch and rollback", "not run", "", ""),
                ("Tenant isolation", "failed", "tenant_isolated", "run-18"),
            ]
        ],
        "open_items": [
            {
                "key": f"{section}.{item}",
                "section": section,
                "item": item,
                "label": f"{'Platform readiness' if section == 'readiness' else 'Security checklist'}: {item}",
                "note": filler if long_text else "error logs not yet queryable per tenant",
                "owner_roles": ["platform"] if section == "readiness" else ["security"],
                "status": "open",
                "reason": "",
                "decided_by": "",
            }
            for section, item in keys[:open_items]
        ],
    }
