"""Bad input is refused at the door, in a real browser (issue 19): absurd constraints and a bad
candidate are refused when saved, naming each field, and nothing is stored; a long unbroken name
neither breaks the dashboard nor the selection's header. Screenshots of the pages these changed.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import log_in
from tests.e2e.flow import create_selection, fill_constraints

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

LONG_NAME = "Support-bot-" + "x" * 180  # 192 characters without a space


def fits_the_viewport(page) -> bool:
    return page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


def error_summary(page) -> str:
    return page.inner_text(".alert--error")


def test_absurd_constraints_and_a_bad_candidate_are_refused_naming_the_fields(live_server, people, new_page, shot):
    from selection.candidates.services import load_engine_catalog

    load_engine_catalog()
    base = live_server.url
    page = new_page()
    log_in(page, base, "alice")
    pk = create_selection(page, base, people, LONG_NAME)

    constraints_are_refused_naming_the_fields(page, pk, shot)
    a_bad_candidate_is_refused_naming_the_fields(page, base, pk, shot)
    the_pages_a_first_time_architect_meets_next(page, base, pk, shot)


def constraints_are_refused_naming_the_fields(page, pk: int, shot) -> None:
    """Absurd constraints: refused, every field named, nothing stored; then sane ones are saved."""
    from selection.models import Constraints

    fill_constraints(page)
    for name, value in {
        "gpu_count_budget": "1000000000000",
        "max_output_tokens": "1000000000",
        "ops_team_size": "5000000",
        "request_rate": "1e12",
        "e2e_p95_ms": "500",  # below the TTFT budget of 800 ms
    }.items():
        page.fill(f"#id_{name}", value)
    page.click("form .actions button[type=submit].btn--primary")
    page.wait_for_load_state()
    assert re.search(rf"/selections/{pk}/constraints/$", page.url)
    summary = error_summary(page)
    assert "Nothing was saved" in summary
    for label, words in (
        ("GPU count budget", "must be between 1 and 100,000"),
        ("max output tokens", "must be between 1 and 1,000,000"),
        ("operations team size", "must be between 1 and 100,000"),
        ("request rate (req/s)", "must be between 0 and 1,000,000"),
        ("TTFT p95 budget (ms)", "must not exceed end-to-end p95 budget (ms) (500)"),
    ):
        assert re.search(rf"{re.escape(label)}: {re.escape(words)}", summary, re.I), (label, summary)
    assert not Constraints.objects.filter(selection_id=pk).exists()
    assert fits_the_viewport(page)  # the long name wraps in the header
    shot(page, "i19-01-constraints-refused")

    fill_constraints(page)
    page.fill("#id_gpu_count_budget", "8")
    page.fill("#id_e2e_p95_ms", "20000")
    page.click("form .actions button[type=submit].btn--primary")
    page.wait_for_url(re.compile(rf"/selections/{pk}/scenario/$"))
    shot(page, "i19-02-scenario-weights")


def add_vllm_candidate(page, base: str, pk: int, label: str, **fields: str) -> None:
    from selection.models import Engine

    page.goto(f"{base}/selections/{pk}/candidates/")
    page.select_option("#id_engine", str(Engine.objects.get(slug="vllm").pk))
    page.fill("#id_engine_version", "0.11.0")
    page.fill("#id_label", label)
    for name, value in fields.items():
        if name == "kv_precision":
            page.select_option("#id_kv_precision", value)
        else:
            page.fill(f"#id_{name}", value)
    page.click("button:has-text('Add candidate')")
    page.wait_for_load_state()


def a_bad_candidate_is_refused_naming_the_fields(page, base: str, pk: int, shot) -> None:
    """A bad candidate: refused with each field named; a good one is saved."""
    from selection.models import Candidate

    add_vllm_candidate(
        page,
        base,
        pk,
        "vLLM fp8",
        kv_precision="fp8",
        gpu_count="4",
        tensor_parallel="4",
        endpoint_url="http://127.0.0.1:8000/v1",
    )
    assert Candidate.objects.filter(selection_id=pk).count() == 1
    add_vllm_candidate(
        page,
        base,
        pk,
        "VLLM FP8",
        kv_precision="int4",
        gpu_count="8",
        tensor_parallel="16",
        endpoint_url="http://169.254.169.254/latest",
        metrics_url="http://user:secret@127.0.0.1:8000/metrics",
    )
    summary = error_summary(page)
    for label, words in (
        ("Label", "already called “vLLM fp8”"),
        ("Tensor parallel (TP)", "TP 16 needs at least 16 GPUs; the candidate has 8"),
        ("KV precision", "vLLM has no int4 KV cache"),
        ("Endpoint URL (OpenAI-compatible)", "metadata"),
        ("Metrics URL (Prometheus)", "credentials in the URL"),
    ):
        assert f"{label}: " in summary and words in summary, (label, words, summary)
    assert page.locator("#id_tensor_parallel[aria-describedby]").count() == 1  # the input points at its error
    assert Candidate.objects.filter(selection_id=pk).count() == 1
    shot(page, "i19-03-candidate-refused")
    add_vllm_candidate(page, base, pk, "Absurd", gpu_count="1000000000000", tensor_parallel="1")
    assert "GPU count: must be between 1 and 100,000" in error_summary(page)


def the_pages_a_first_time_architect_meets_next(page, base: str, pk: int, shot) -> None:
    from selection.models import Candidate

    candidate = Candidate.objects.get(selection_id=pk)
    page.goto(f"{base}/selections/{pk}/candidates/{candidate.pk}/validation/")
    assert page.locator('[data-estimate="stability"] [data-estimate-warning="long"]').count() == 1
    shot(page, "i19-04-validation-estimates")
    page.goto(f"{base}/selections/{pk}/")
    assert fits_the_viewport(page)
    assert "Wei Zhang" in page.inner_text("main")  # owners by their full names
    assert re.search(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", page.inner_text("main"))  # one date format, zone named
    shot(page, "i19-05-overview")
    page.goto(f"{base}/")
    assert fits_the_viewport(page)
    link = page.locator(f"a[href='/selections/{pk}/']")
    assert link.get_attribute("title") == LONG_NAME  # clipped in the table, whole in the tooltip
    shot(page, "i19-06-dashboard-long-name")
    page.goto(f"{base}/selections/999999/")
    assert page.locator("[data-error-page='404'] a[data-way-back]").count() == 1
    shot(page, "i19-07-not-found")
