"""The walk's dead ends, in a real browser with the real server and worker (issue 37 items 1 and 4):

- M1: a closed-loop concurrency stress starts from the page although the constraints give a rate (an empty
  rate: closed loop), and a rate of 0 is refused on the page, at the page's own URL, before anything is queued;
- N3: the team's only architect is refused as security owner when the selection is created, and the owners
  are changed on the overview;
- n11: a draft naming another candidate than the recommendation is refused on its decision field, in words.
Each fails on 36fc4d7 (the walked commit): the empty rate was "This field is required", the only architect
was accepted as security owner with no way to change the owners in the UI, and the draft was saved.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import OWNERS, log_in
from tests.e2e.test_decision_headline import LABELS, build_selection
from tests.e2e.test_full_flow import wait_for_run_done

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

SHORT = {"concurrency": "4", "duration_s": "2", "warmup_s": "0", "settle_s": "0.5", "abort_fraction": "0"}


def stress_candidate(people, simulator):
    """A selection whose constraints give a request rate, with one vLLM candidate on the simulator."""
    from selection.candidates.services import add_candidate, load_engine_catalog
    from selection.models import Engine
    from selection.setup.services import create_selection, save_constraints
    from tests.support.builders import SAMPLE_CONSTRAINTS

    load_engine_catalog()
    alice = people["architect"]
    selection = create_selection(
        user=alice,
        team=people["team"],
        name="Closed loop",
        business_owner=people["business"],
        platform_owner=people["platform"],
        security_owner=people["security"],
    )
    save_constraints(selection=selection, user=alice, data=dict(SAMPLE_CONSTRAINTS))
    assert selection.constraints.request_rate  # the plan proposes an open loop at this rate
    engine = Engine.objects.get(slug="vllm")
    return add_candidate(
        selection=selection,
        user=alice,
        data={
            "engine": engine,
            "engine_version": engine.versions[0],
            "endpoint_url": simulator.url,
            "metrics_url": simulator.url + "/metrics",
            "model_name": "kvsim-llama-3.1-8b",
        },
    )


def fill_stress(page, rate: str):
    form = page.locator("form[action$='/validation/concurrency_stress/start/']")
    for name, value in {**SHORT, "rate": rate}.items():
        form.locator(f"[name='concurrency_stress-{name}']").fill(value)
    form.locator("button[type=submit]").click()
    page.wait_for_load_state()


def test_a_closed_loop_stress_starts_from_the_page_and_a_zero_rate_is_refused_at_the_pages_url(
    live_server, celery_worker_process, people, simulators, new_page, shot
):
    from benchmarks.models import BenchmarkRun

    candidate = stress_candidate(people, simulators[0])
    base = live_server.url
    page_url = f"{base}/selections/{candidate.selection_id}/candidates/{candidate.pk}/validation/"
    page = new_page()
    log_in(page, base, "alice")
    page.goto(page_url)
    assert page.input_value("[name='concurrency_stress-rate']") != ""  # planned from the constraints

    fill_stress(page, "0")
    assert page.url == page_url  # not …/start/: a reload opens the page
    errors = page.inner_text("form[action$='/validation/concurrency_stress/start/'] .errorlist")
    assert "must be above 0" in errors
    assert not BenchmarkRun.objects.filter(candidate=candidate).exists()
    shot(page, "i37-01-rate-zero-refused")

    fill_stress(page, "")  # empty: closed loop at the planned concurrency
    page.wait_for_url(re.compile(r"/validation/(#runs)?$"))
    run = BenchmarkRun.objects.get(candidate=candidate)
    assert run.params["rate"] is None and run.params["concurrency"] == 4
    assert wait_for_run_done(page, run.pk) == "succeeded", BenchmarkRun.objects.get(pk=run.pk).error
    page.goto(f"{base}/selections/{candidate.selection_id}/runs/{run.pk}/")
    assert "c=4" in page.inner_text("main")  # the closed loop's load point
    shot(page, "i37-02-closed-loop-run")


def test_the_only_architect_is_refused_as_security_owner_and_owners_change_on_the_overview(
    live_server, people, new_page, shot
):
    from selection.models import Selection

    base = live_server.url
    page = new_page()
    log_in(page, base, "alice")
    page.goto(f"{base}/selections/new/")
    page.fill("#id_name", "Dead end")
    page.select_option("#id_team", str(people["team"].pk))
    page.select_option("#id_business_owner", str(people["business"].pk))
    page.select_option("#id_platform_owner", str(people["platform"].pk))
    page.select_option("#id_security_owner", str(people["architect"].pk))  # the team's only architect
    page.fill("#id_monthly_budget", "-500")
    page.click("form.card button[type=submit].btn--primary")
    page.wait_for_load_state()
    errors = page.inner_text(".alert--error")
    assert "Alice Chen is the team's only architect" in errors
    assert "Monthly budget" in errors or "monthly budget" in errors.lower()  # every error at once
    assert not Selection.objects.filter(name="Dead end").exists()
    shot(page, "i37-03-only-architect-refused")

    page.select_option("#id_security_owner", str(people["security"].pk))
    page.fill("#id_monthly_budget", "")
    page.click("form.card button[type=submit].btn--primary")
    page.wait_for_url(re.compile(r"/selections/\d+/constraints/$"))
    selection = Selection.objects.get(name="Dead end")

    page.goto(f"{base}/selections/{selection.pk}/")
    page.click("[data-change-owners]")
    page.select_option("#id_security_owner", str(people["architect"].pk))
    page.click("[data-owners-form] button[type=submit]")
    page.wait_for_load_state()
    assert "only architect" in page.inner_text("[data-owners-form] .alert--error")
    page.select_option("#id_security_owner", str(people["procurement"].pk))
    page.select_option("#id_observer", str(people["security"].pk))
    page.click("[data-owners-form] button[type=submit]")
    page.wait_for_url(re.compile(rf"/selections/{selection.pk}/$"))
    owners = page.inner_text("section[aria-labelledby=owners-title]")
    assert "Paula Novak" in owners and OWNERS["security"][1] in owners
    selection.refresh_from_db()
    assert selection.security_owner == people["procurement"] and selection.observer == people["security"]


def test_a_draft_naming_another_candidate_than_the_recommendation_is_refused_in_words(
    live_server, people, new_page, shot
):
    from selection.models import DecisionRecord
    from selection.scoring.services import latest_score

    selection = build_selection(people)
    winner = str(latest_score(selection, include_simulated=False).result["winner"])
    other = next(c for c in selection.candidates.all() if str(c.pk) != winner)
    assert other.display_name in LABELS
    base = live_server.url
    page = new_page()
    log_in(page, base, "alice")
    page.goto(f"{base}/selections/{selection.pk}/records/")
    page.fill("#id_decision", f"Choose {other.display_name}")
    page.fill("#id_rationale", "the team knows it")
    page.click("button:has-text('Create draft')")
    page.wait_for_load_state()
    errors = page.inner_text(".alert--error")
    assert f"not “{other.display_name}”" in errors and "the record chooses the recommendation" in errors
    assert "decision:" not in errors
    assert not DecisionRecord.objects.filter(selection=selection).exists()
    shot(page, "i37-04-draft-decision-refused")
