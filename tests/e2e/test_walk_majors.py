"""Major rows of the first-time architect's walk (issue 37 item 1) in a real browser, each failing on
the main the walk was made on: an endpoint serving another model than the selection's is refused
naming both models (walk M2; it was accepted silently), and kept only with a reason that the
candidates page then shows; a recommendation that misses the TTFT budget is headed "misfit", naming
the budget, never "Clear" (walk N2)."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import log_in
from tests.e2e.flow import create_selection, fill_constraints, save_constraints

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

OTHER_MODEL = "Qwen2.5-7B-Instruct"


def test_an_endpoint_serving_another_model_is_refused_naming_both_and_kept_only_with_a_reason(
    live_server, people, new_page, shot
):
    from benchmarks.simulator.config import SimConfig
    from benchmarks.simulator.server import ServerThread
    from selection.candidates.services import load_engine_catalog
    from selection.models import Candidate, Engine

    load_engine_catalog()
    server = ServerThread(
        SimConfig(profile="paged-prefix", time_scale=50.0, model=OTHER_MODEL.lower(), served_model_name=OTHER_MODEL)
    ).start()
    try:
        base = live_server.url
        page = new_page()
        log_in(page, base, "alice")
        pk = create_selection(page, base, people, "Walk M2: another model")
        fill_constraints(page)  # target model Llama-3.1-8B
        save_constraints(page, pk)

        page.goto(f"{base}/selections/{pk}/candidates/")
        engine = Engine.objects.get(slug="vllm")
        page.select_option("#id_engine", str(engine.pk))
        page.fill("#id_engine_version", engine.versions[0])
        page.fill("#id_label", "vLLM on the wrong model")
        page.fill("#id_endpoint_url", server.url)
        page.fill("#id_gpu_model", "H100")
        page.click("button:has-text('Add candidate')")
        page.wait_for_load_state()
        refusal = page.inner_text("main")
        assert not Candidate.objects.filter(selection_id=pk).exists(), refusal[:3000]
        assert f"the endpoint serves {OTHER_MODEL}" in refusal, refusal[:3000]
        assert "not the selection's model Llama-3.1-8B" in refusal, refusal[:3000]
        shot(page, "walk-m2-another-model-refused")

        page.fill("#id_model_justification", "The 8B endpoint is not up yet; this one shows the engine's behaviour.")
        page.click("button:has-text('Add candidate')")
        page.wait_for_load_state()
        assert Candidate.objects.filter(selection_id=pk).count() == 1, page.inner_text("main")[:2000]
        page.goto(f"{base}/selections/{pk}/candidates/")
        notes = page.inner_text("main")
        assert f"the endpoint serves {OTHER_MODEL}" in notes and "not the selection's model Llama-3.1-8B" in notes, (
            notes[:2000]
        )
        shot(page, "walk-m2-another-model-kept")
    finally:
        server.stop()


def test_a_recommendation_that_misses_the_ttft_budget_says_so_and_is_not_clear(live_server, people, new_page, shot):
    """Walk N2: an engine 34x over the TTFT budget was headed 'CLEAR — Recommended' on the comparison.
    Now the headline's verdict is 'misfit' and names the missed budget."""
    from selection.candidates.services import add_candidate, load_engine_catalog
    from selection.models import Engine
    from selection.setup.services import create_selection, save_constraints
    from tests.support.builders import SAMPLE_CONSTRAINTS, rescored, stress_run

    load_engine_catalog()
    alice = people["architect"]
    selection = create_selection(
        user=alice,
        team=people["team"],
        name="Walk N2: over the budget",
        business_owner=people["business"],
        platform_owner=people["platform"],
        security_owner=people["security"],
    )
    save_constraints(selection=selection, user=alice, data=dict(SAMPLE_CONSTRAINTS))  # TTFT p95 budget 800 ms
    engine = Engine.objects.get(slug="vllm")
    candidate = add_candidate(
        selection=selection, user=alice, data={"engine": engine, "engine_version": engine.versions[0], "label": "vLLM"}
    )
    stress_run(candidate, (20_000.0, 27_000.0))  # 34x the budget at the planned load
    selection = rescored(selection)

    base = live_server.url
    page = new_page()
    log_in(page, base, "alice")
    page.goto(f"{base}/selections/{selection.pk}/comparison/")
    headline = page.locator("section.decision")
    text = headline.inner_text()
    assert headline.get_attribute("data-verdict") == "misfit", text
    assert "Misses the constraints" in text and "TTFT" in text and "Clear:" not in text, text
    shot(page, "walk-n2-misfit-headline")
