"""Major rows of the first-time architect's walk (issue 37 item 1) in a real browser, each failing on
the main the walk was made on: an endpoint serving another model than the selection's is refused
naming both models (walk M2; it was accepted silently), and kept only with a reason that the
candidates page then shows."""

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
