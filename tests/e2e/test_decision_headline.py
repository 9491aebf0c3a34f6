"""The comparison in a real browser (issue 19): the decision is the headline, in English and in
Chinese; every chart gives a candidate the same colour; a measured-only view without a
recommendation says its runs are SIMULATED and links the view that includes them."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import log_in
from tests.support.svg import legend_colours

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

LABELS = ("vLLM prefix on", "SGLang radix", "llama.cpp slots")


def build_selection(people, evidence: str = "MEASURED"):
    """Three candidates with stress runs at two loads; the second has a context ladder, the third a KV series."""
    from benchmarks.models import BenchmarkRun, RunPoint
    from selection.candidates.services import add_candidate, load_engine_catalog
    from selection.models import Engine
    from selection.setup.services import create_selection, save_constraints
    from tests.support.builders import SAMPLE_CONSTRAINTS, rescored, stress_run

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
    candidates = []
    for slug, label, ttft in zip(("vllm", "sglang", "llama-cpp"), LABELS, (300.0, 450.0, 900.0), strict=True):
        engine = Engine.objects.get(slug=slug)
        candidate = add_candidate(
            selection=selection,
            user=alice,
            data={"engine": engine, "engine_version": engine.versions[0], "label": label},
        )
        stress = stress_run(candidate, (ttft / 2, ttft), evidence=evidence)
        candidates.append(candidate)
    stress.timeseries = {"kv_usage_ratio": [[0, 0.1], [5, 0.45], [15, 0.62]]}
    stress.save()
    ladder = BenchmarkRun.objects.create(
        candidate=candidates[1], test="long_context", origin="harness", status="succeeded", evidence=evidence
    )
    for index, tokens in enumerate((1000, 1024, 1536, 8192, 32768)):
        RunPoint.objects.create(
            run=ladder,
            index=index,
            label=f"{tokens} alone",
            ttft_ms={"p50": 40.0 * (index + 1)},
            extra={"input_tokens_requested": tokens},
        )
    return rescored(selection)  # the runs were written past the hooks: the task's body scores them


def chart_svgs(page) -> list[str]:
    return page.locator("figure.chart svg").evaluate_all(
        "els => els.map(e => new XMLSerializer().serializeToString(e))"
    )


def test_the_decision_heads_the_comparison_in_english_and_chinese_with_one_colour_per_candidate(
    live_server, people, new_page, shot, screenshot_dir
):
    from benchmarks.charts import style as chart_style

    selection = build_selection(people)
    base = live_server.url
    page = new_page()
    log_in(page, base, "alice")
    page.goto(f"{base}/selections/{selection.pk}/comparison/")

    headline = page.locator("section.decision")
    assert headline.count() == 1
    verdict = headline.get_attribute("data-verdict")
    assert verdict in ("clear", "close", "inconclusive")
    text = headline.inner_text()
    assert re.search(r"Recommended: (vLLM prefix on|SGLang radix|llama\.cpp slots)", text), text
    assert re.search(r"leads .+ by [+−]\d\.\d{3}", text), text  # the margin
    assert "Evidence coverage:" in text and "could reach" in text  # coverage and upper bounds
    assert "Robustness:" in text and "weight vectors" in text
    assert text.split("\n")[0].strip().lower() == verdict  # the verdict in words, first
    box = headline.bounding_box()
    assert box["y"] < page.locator("h3:has-text('Totals and rank')").bounding_box()["y"]  # above the tables
    assert "These figures hold for the evidence so far" in page.inner_text("#sens-title + .robustness-caveat")

    # one colour per candidate across every chart of the page (bars by rank, evidence by order)
    expected = {label: colour.lower() for label, colour in chart_style.candidate_colours(LABELS).items()}
    seen: dict[str, set[str]] = {}
    svgs = chart_svgs(page)
    assert len(svgs) >= 4  # scores, latency, KV usage, context ladder
    for svg in svgs:
        for label, colour in legend_colours(svg).items():
            if label in expected:
                seen.setdefault(label, set()).add(colour)
    assert seen == {label: {colour} for label, colour in expected.items()}, seen
    assert len(set(expected.values())) == 3
    shot(page, "i19-12-comparison-headline")
    page.locator("section[aria-labelledby=charts-title]").screenshot(
        path=str(screenshot_dir / "i19-13-comparison-charts.png")
    )

    with page.expect_navigation():
        page.select_option("#language-select", "zh-hans")
    page.goto(f"{base}/selections/{selection.pk}/comparison/")
    zh = page.locator("section.decision").inner_text()
    words = {"clear": "明确", "close": "接近", "inconclusive": "无定论"}
    assert zh.split("\n")[0].strip() == words[verdict]
    assert "推荐：" in zh and "证据覆盖率" in zh and "稳健性" in zh and "Recommended" not in zh
    shot(page, "i19-14-comparison-headline-zh-hans")


def test_a_measured_view_without_a_recommendation_links_the_view_with_the_simulated_runs(
    live_server, people, new_page, shot
):
    from selection.models import Gate
    from tests.support.builders import rescored

    selection = build_selection(people, evidence="SIMULATED")
    Gate.objects.create(selection=selection, dimension="scheduling", threshold=0.5)  # only the runs evidence it
    rescored(selection)
    base = live_server.url
    page = new_page()
    log_in(page, base, "alice")
    page.goto(f"{base}/selections/{selection.pk}/comparison/")
    none = page.locator("section.decision[data-verdict=none]")
    assert "No recommendation yet" in none.inner_text()
    assert "finished runs, and they are SIMULATED" in none.inner_text()
    shot(page, "i19-15-comparison-simulated-only")
    page.click("a[data-simulated-view]")
    page.wait_for_url(re.compile(r"simulated=1"))
    assert page.locator("section.decision .badge--simulated").count() == 1
    assert "Recommended: " in page.inner_text("section.decision")
