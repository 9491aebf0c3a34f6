"""Archive instead of delete, in a real browser (issue 19): a junk candidate leaves the comparison,
a draft record leaves the records list, a selection leaves the dashboard and turns read-only;
each is kept, audited and restorable."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import log_in
from tests.e2e.test_decision_headline import build_selection

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]


def test_archive_a_candidate_a_draft_and_the_selection_then_restore(
    live_server, celery_worker_process, people, new_page, shot
):
    from selection.models import AuditEntry, Candidate

    selection = build_selection(people)
    junk = Candidate.objects.get(selection=selection, label="llama.cpp slots")
    base = live_server.url
    page = new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the archive buttons ask first
    log_in(page, base, "alice")

    # --- a candidate -------------------------------------------------------------------------------
    page.goto(f"{base}/selections/{selection.pk}/candidates/")
    page.click(f"button[data-archive-candidate='{junk.pk}']")
    page.wait_for_load_state()
    assert "archived" in page.inner_text(".messages")
    assert page.locator(f"button[data-archive-candidate='{junk.pk}']").count() == 0
    page.click("[data-archived-candidates] summary")
    assert "llama.cpp slots" in page.inner_text("[data-archived-candidates]")
    shot(page, "i19-16-candidate-archived")
    # archived is archived everywhere (issue 37 item 3): no "Start validating", no Run, not in the upload form
    page.goto(f"{base}/selections/{selection.pk}/evidence/")
    validation_url = f"/selections/{selection.pk}/candidates/{junk.pk}/validation/"
    assert page.locator(f"table a[href='{validation_url}']").count() == 0
    page.click("[data-archived-candidates] summary")
    assert "llama.cpp slots" in page.inner_text("[data-archived-candidates]")
    page.goto(f"{base}{validation_url}")
    assert "it takes no new evidence" in page.inner_text(f"[data-archived-candidate='{junk.pk}']")
    assert page.locator("form[action*='/validation/'] button[type=submit]:enabled").count() == 0
    page.goto(f"{base}/selections/{selection.pk}/uploads/")
    assert page.locator(f"#id_candidate option[value='{junk.pk}']").count() == 0
    page.goto(f"{base}/selections/{selection.pk}/comparison/")
    # the worker rescores after the archive; until then the page says so and polls, then reloads itself
    page.wait_for_selector("[data-scores-state=current]", state="attached", timeout=60_000)
    assert "llama.cpp slots" not in page.inner_text("main")

    # --- a draft record --------------------------------------------------------------------------------
    page.goto(f"{base}/selections/{selection.pk}/records/")
    page.fill("#id_rationale", "first attempt")
    page.click("button:has-text('Create draft')")
    page.wait_for_url(re.compile(rf"/selections/{selection.pk}/records/\d+/$"))
    page.goto(f"{base}/selections/{selection.pk}/records/")
    page.fill("#id_rationale", "second attempt")
    page.click("button:has-text('Create draft')")
    page.wait_for_url(re.compile(rf"/selections/{selection.pk}/records/\d+/$"))
    assert "Draft v1 updated" in page.inner_text(".messages")  # no orphan v2
    page.click("button[data-archive-record]")
    page.wait_for_url(re.compile(rf"/selections/{selection.pk}/records/$"))
    assert "Draft v1 archived" in page.inner_text(".messages")
    assert page.locator("[data-archived-records]").count() == 1
    shot(page, "i19-17-draft-archived")

    # --- the selection ---------------------------------------------------------------------------------
    page.goto(f"{base}/selections/{selection.pk}/")
    page.click("button[data-archive-selection]")
    page.wait_for_load_state()
    assert page.locator("[data-archived-selection]").count() == 1
    assert page.locator("a:has-text('Add candidates'), button:has-text('Add candidate')").count() == 0
    shot(page, "i19-18-selection-archived")
    page.goto(f"{base}/")
    assert page.locator(f"a.clip[href='/selections/{selection.pk}/']").count() == 0
    page.click("a[data-archived-selections]")
    assert page.locator(f"a.clip[href='/selections/{selection.pk}/']").count() == 1
    page.goto(f"{base}/selections/{selection.pk}/")
    page.click("[data-archived-selection] button")
    page.wait_for_load_state()
    assert page.locator("[data-archived-selection]").count() == 0

    done = set(AuditEntry.objects.filter(selection=selection).values_list("action", flat=True))
    assert {"candidate.archived", "record.archived", "selection.archived", "selection.restored"} <= done
