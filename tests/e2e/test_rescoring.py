"""The comparison while its scores are recomputed, in a real browser (issue 30 item 3): the page says
so, polls, and reloads itself once the task wrote the new snapshot."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import log_in
from tests.e2e.test_decision_headline import build_selection

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]


def test_the_comparison_says_being_recomputed_and_reloads_itself_when_the_task_ran(
    live_server, people, new_page, monkeypatch
):
    from django.utils import timezone

    from selection import tasks as selection_tasks
    from selection.models import Candidate, Selection
    from selection.scoring.services import refresh_scores
    from tests.support.builders import stress_run

    # no task is sent: a live worker (CI's, on the real broker) would otherwise rescore and clear the
    # request before the page is read; this test plays the worker below
    monkeypatch.setattr(selection_tasks, "send_rescoring", lambda selection_id: None)
    selection = build_selection(people)
    stress_run(Candidate.objects.filter(selection=selection).first(), (10.0, 20.0))
    # what an evidence hook does, without sending the task: this test plays the worker below
    Selection.objects.filter(pk=selection.pk).update(
        scores_requested_at=timezone.now(), inputs_changed_at=timezone.now()
    )
    page = new_page()
    log_in(page, live_server.url, "alice")
    page.goto(f"{live_server.url}/selections/{selection.pk}/comparison/")
    assert page.locator("[data-scores-state=recomputing]").count() == 1
    assert "Being recomputed" in page.inner_text("#scores-status")
    assert "Totals and rank" in page.inner_text("main")  # the previous snapshot stays readable
    refresh_scores(selection.pk)  # the task ran
    page.wait_for_selector("[data-scores-state=current]", state="attached", timeout=30_000)
    assert "Being recomputed" not in page.inner_text("main")
