"""Details that cost trust, in a real browser (issue 19): the evidence list shows each run's verdict,
the run page reads in Chinese, reviewers are not offered "New selection" and meet a branded 403,
and /api/docs/ draws Swagger UI from kvselect's own static files (no CDN)."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]


def test_verdicts_chinese_run_page_reviewer_and_offline_api_docs(live_server, people, new_page, shot):
    from benchmarks.models import BenchmarkRun
    from selection.candidates.services import add_candidate, load_engine_catalog
    from selection.models import Engine
    from selection.setup.services import create_selection, save_constraints
    from tests.support.builders import SAMPLE_CONSTRAINTS

    load_engine_catalog()
    alice = people["architect"]
    selection = create_selection(
        user=alice,
        team=people["team"],
        name="Support bot",
        business_owner=people["business"],
        platform_owner=people["platform"],
        security_owner=people["security"],
    )
    save_constraints(selection=selection, user=alice, data=dict(SAMPLE_CONSTRAINTS))
    engine = Engine.objects.get(slug="vllm")
    candidate = add_candidate(
        selection=selection, user=alice, data={"engine": engine, "engine_version": "0.11.0", "label": "vLLM"}
    )
    verdicts = {
        "pass": [{"name": "zero_errors", "passed": True, "detail": "no failed requests"}],
        "fail": [
            {"name": "ttft_p95_within_budget", "passed": False, "detail": "p95 912.0 ms vs budget 800 ms"},
            {"name": "zero_errors", "passed": True, "detail": "no failed requests"},
        ],
        "inconclusive": [
            {"name": "zero_errors", "passed": True, "detail": "no failed requests"},
            {"name": "prefix_reused", "passed": None, "detail": "no prefix-hit metric or cached-token usage"},
        ],
        "insufficient_data": [],
    }
    runs = {
        verdict: BenchmarkRun.objects.create(
            candidate=candidate,
            test="prefix_reuse" if verdict == "inconclusive" else "concurrency_stress",
            origin="validation" if items else "upload",
            status="succeeded",
            evidence="SIMULATED",
            tool="kvselect-sim",
            verdicts=items,
            metadata={"engine": "simulator", "model": "kvsim-llama-3.1-8b", "client_clock": "kernel"},
            params={"concurrency": 32, "duration_s": 30.0, "e2e_p95_ms": 20000.0},
        )
        for verdict, items in verdicts.items()
    }
    base = live_server.url

    page = new_page()
    log_in(page, base, "alice")
    page.goto(f"{base}/selections/{selection.pk}/evidence/")
    for verdict, run in runs.items():
        assert page.locator(f"#run-progress-{run.pk} [data-verdict='{verdict}']").count() == 1, verdict
    shot(page, "i19-08-evidence-verdicts")

    with page.expect_navigation():
        page.select_option("#language-select", "zh-hans")
    page.goto(f"{base}/selections/{selection.pk}/runs/{runs['inconclusive'].pk}/")
    body = page.inner_text("main")
    for text in (
        "无法判定",
        "共享前缀被复用",
        "引擎",
        "客户端计时",
        "端到端 p95 预算（毫秒）",
        "从发送请求到收到第一个输出 token 的时间",
    ):
        assert text in body, text
    shot(page, "i19-09-run-zh-hans")

    reviewer = new_page()
    log_in(reviewer, base, people["business"].username)
    assert reviewer.locator("a[href='/selections/new/']").count() == 0
    reviewer.goto(f"{base}/selections/new/")
    assert reviewer.locator("[data-error-page='403'] a[data-way-back]").count() == 1
    shot(reviewer, "i19-10-forbidden")

    docs = new_page()
    log_in(docs, base, "alice")
    outside = []
    docs.on("request", lambda request: None if request.url.startswith(base) else outside.append(request.url))
    docs.goto(f"{base}/api/docs/")
    docs.wait_for_selector(".swagger-ui .information-container", timeout=20_000)
    assert "kvselect API" in docs.inner_text(".swagger-ui")
    assert outside == [], outside  # nothing fetched from another host
    shot(docs, "i19-11-api-docs-offline")
