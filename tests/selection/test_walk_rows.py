"""Rows of the first-time architect's walk (issue 37) fixed after the earlier batches: a run's phase in
the page's language, the record's section 11 and re-evaluation triggers in the record's language,
the draft form's field names, the budget as one number format, one sub-navigation, where an upload
came from, the comparison's empty charts when SIMULATED runs are left out, and a bounded
justification for keeping a screened-out candidate."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import translation

from benchmarks import presentation
from benchmarks.models import BenchmarkRun
from selection.candidates.screening import JUSTIFICATION_MAX, override_screen
from selection.candidates.services import add_candidate
from selection.domain import records as records_domain
from selection.i18n import message_text
from selection.records import context as record_context
from selection.records.pdf import render_record_html
from selection.setup.services import set_gates
from tests.support.record_context import sample_record_context


def test_a_runs_phase_reads_in_the_pages_language():
    queued = presentation.progress_view({"phase": "queued", "percent": 0}, "queued", False)
    engine = presentation.progress_view({"phase": "waiting for the engine: no /health"}, "queued", False)
    point = presentation.progress_view({"phase": "up 2"}, "running", False)
    assert queued["phase"] == "queued"  # the template still compares the stored phase
    with translation.override("zh-hans"):
        assert message_text(queued["phase_label"]) == "排队中"
        assert message_text(engine["phase_label"]) == "等待引擎就绪：no /health"
        assert message_text(presentation.phase_label("warm")) == "预热"
    assert point["phase_label"] == "up 2"  # a load point's own label stays as the run reported it


def test_the_records_triggers_and_evidence_kinds_read_in_its_language():
    assert record_context.TRIGGER_TEXTS == records_domain.REEVALUATION_TRIGGERS  # the catalogue keeps them all
    context = sample_record_context(simulated=False, n_charts=0, n_manifest=1)
    context["record"]["language"] = "zh-hans"
    context["review"]["triggers"] = list(records_domain.REEVALUATION_TRIGGERS)
    with translation.override("en"):
        html = render_record_html(context)
    assert "引擎主版本变更" in html and "engine major version change" not in html
    assert "<td>配置</td>" in html and "<td>configuration</td>" not in html


@pytest.mark.django_db
def test_section_11_is_written_in_the_records_language(selection_with_constraints):
    with translation.override("zh-hans"):
        rows = record_context._evidence_section(selection_with_constraints, [])
    assert rows[0]["checks"] == "引擎版本、启动参数、模型与硬件"
    assert rows[1]["evidence"] == "清单中列出的 0 次验证运行"
    assert {row["kind"] for row in rows} == set(records_domain.EVIDENCE_KINDS)  # the domain's ids stay


@pytest.mark.django_db
def test_the_records_page_names_the_decision_once_shows_the_budget_grouped_and_no_repeated_tabs(
    client, architect, selection_with_constraints
):
    selection = selection_with_constraints
    selection.monthly_budget = 12000
    selection.budget_currency = "EUR"
    selection.save(update_fields=["monthly_budget", "budget_currency"])
    client.force_login(architect)
    html = client.get(reverse("selection:records", args=[selection.pk])).content.decode()
    assert "12,000.00 EUR per month" in html
    assert ">Chosen candidate<" in html or "Chosen candidate</label>" in html
    subnav = html.split('class="subtabs"', 1)[1].split("</nav>", 1)[0]
    assert "Verify a signed PDF" in subnav and "Comparison" not in subnav and "Decision records" not in subnav


def test_an_upload_is_an_upload_whoever_sent_it():
    assert str(BenchmarkRun(origin=BenchmarkRun.Origin.UPLOAD).origin_label) == "Upload"
    assert str(BenchmarkRun(origin=BenchmarkRun.Origin.HARNESS).origin_label) == "Validation run"


@pytest.mark.django_db
def test_a_justification_over_the_limit_is_refused_not_cut(selection_with_constraints, architect, engines, settings):
    settings.KVSELECT_ALLOWED_TARGETS = ["127.0.0.1"]
    set_gates(selection=selection_with_constraints, user=architect, gates={"memory": 0.4, "persistence": 0.3})
    tgi = add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["tgi"], "engine_version": "3.3.6", "endpoint_url": "http://127.0.0.1:9"},
    )
    with pytest.raises(ValidationError, match="at most 2,000 characters; this one has 5,000"):
        override_screen(candidate=tgi, user=architect, justification="x" * 5000)
    kept = override_screen(candidate=tgi, user=architect, justification="y" * JUSTIFICATION_MAX)
    assert len(kept.screen_override["justification"]) == JUSTIFICATION_MAX


@pytest.mark.parametrize(
    ("url", "chinese"),
    [
        ("http://169.254.169.254/v1", "169.254.169.254 是云元数据地址，始终拒绝"),
        ("http://user:pw@127.0.0.1:9/v1", "URL 中不接受凭据；请使用 API 密钥字段"),
        ("http://10.9.8.7:8000/v1", "主机 10.9.8.7 不在 KVSELECT_ALLOWED_TARGETS 中（允许：127.0.0.1）"),
    ],
)
def test_the_allow_lists_refusals_read_in_the_pages_language(url, chinese, settings):
    """Walk m11: '169.254.169.254 is a cloud metadata address and is always refused' on a Chinese page."""
    from benchmarks.validation.target import refused_urls
    from selection.i18n import message_text

    settings.KVSELECT_ALLOWED_TARGETS = ["127.0.0.1"]
    reason = refused_urls({"endpoint_url": url}, resolver=lambda host, port: [])["endpoint_url"]
    with translation.override("zh-hans"):
        assert message_text(reason) == chinese
    with translation.override("en"):
        assert message_text(reason) == str(reason)  # English: the check's words
