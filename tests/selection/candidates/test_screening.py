"""The documentation screen runs before the tests: a candidate the documentation rules out is shown
screened out with the reason and the source link, is not offered for tests, and an audited override
with a justification lets it be tested."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError as DjangoValidationError
from django.urls import reverse

from benchmarks.models import BenchmarkRun
from benchmarks.validation.dispatch import ValidationError, start_validation
from benchmarks.validation.plan import priority_order, validation_plan
from selection.candidates.screening import documentation_screen, override_screen
from selection.candidates.services import add_candidate
from selection.models import AuditEntry
from selection.setup.services import set_gates


@pytest.fixture
def persistence_first(selection_with_constraints, architect, settings):
    settings.KVSELECT_ALLOWED_TARGETS = ["127.0.0.1"]
    set_gates(selection=selection_with_constraints, user=architect, gates={"memory": 0.4, "persistence": 0.3})
    return selection_with_constraints


def _candidate(selection, user, engine, version):
    return add_candidate(
        selection=selection,
        user=user,
        data={"engine": engine, "engine_version": version, "endpoint_url": "http://127.0.0.1:9"},
    )


def test_a_candidate_without_a_documented_offload_is_screened_out_and_not_offered_for_tests(
    persistence_first, architect, engines
):
    tgi = _candidate(persistence_first, architect, engines["tgi"], "3.3.6")
    screen = documentation_screen(tgi)
    assert screen["status"] == "screened_out" and screen["dimensions"] == ("memory", "persistence")
    assert "Cross-turn persistence and offload needs a KV offload tier" in str(screen["reasons"][0])
    with pytest.raises(ValidationError, match=r"^screen: the documentation screen rules this candidate out"):
        start_validation(candidate=tgi, test="swap_recovery", user=architect)
    assert not BenchmarkRun.objects.filter(candidate=tgi).exists()


def test_the_override_needs_a_justification_is_audited_and_lets_the_tests_run(persistence_first, architect, engines):
    tgi = _candidate(persistence_first, architect, engines["tgi"], "3.3.6")
    with pytest.raises(DjangoValidationError):
        override_screen(candidate=tgi, user=architect, justification="  ")
    assert not AuditEntry.objects.filter(action="candidate.screen_overridden").exists()
    override_screen(candidate=tgi, user=architect, justification="we will add LMCache in front")
    tgi.refresh_from_db()
    assert documentation_screen(tgi)["status"] == "overridden"
    entry = AuditEntry.objects.get(action="candidate.screen_overridden")
    assert entry.justification == "we will add LMCache in front" and "offload" in entry.old["reasons"][0]
    run = start_validation(candidate=tgi, test="swap_recovery", user=architect)
    assert run.status == BenchmarkRun.Status.QUEUED


def test_a_kept_candidate_needs_no_override(persistence_first, architect, engines):
    vllm = _candidate(persistence_first, architect, engines["vllm"], "0.11.0")
    assert documentation_screen(vllm)["status"] == "kept"
    with pytest.raises(DjangoValidationError):
        override_screen(candidate=vllm, user=architect, justification="why not")


def test_the_candidates_page_shows_the_screen_with_reasons_and_sources_labelled(
    client, persistence_first, architect, engines
):
    tgi = _candidate(persistence_first, architect, engines["tgi"], "3.3.6")
    _candidate(persistence_first, architect, engines["vllm"], "0.11.0")
    client.force_login(architect)
    body = client.get(reverse("selection:candidates", args=[persistence_first.pk])).content.decode()
    assert f'data-screen="{tgi.pk}" data-screen-status="screened_out"' in body
    assert "needs a KV offload tier (CPU, disk or remote) for idle sessions" in body
    # vLLM's allocation strategy is read from a .py file: a source; llama.cpp-style README pages are documentation
    assert (
        'href="https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/config/cache.py" rel="noopener" '
        'data-source-kind="source">source</a>' in body
    )
    assert 'data-source-kind="documentation">documentation</a>' in body
    # the project's homepage is cited from its pyproject: a source, not documentation
    assert '(source: <a href="https://github.com/vllm-project/vllm/blob/v0.11.0/pyproject.toml"' in body
    response = client.post(
        reverse("selection:candidate-screen-override", args=[persistence_first.pk, tgi.pk]),
        {"justification": "pilot with an external KV store"},
    )
    assert response.status_code == 302
    body = client.get(reverse("selection:candidates", args=[persistence_first.pk])).content.decode()
    assert 'data-screen-status="overridden"' in body and "pilot with an external KV store" in body


def test_the_validation_page_of_a_screened_out_candidate_offers_no_run(client, persistence_first, architect, engines):
    tgi = _candidate(persistence_first, architect, engines["tgi"], "3.3.6")
    client.force_login(architect)
    body = client.get(reverse("selection:validation", args=[persistence_first.pk, tgi.pk])).content.decode()
    assert "data-screened-out" in body and body.count('class="btn btn--primary" disabled') >= 1


def test_the_plan_proposes_the_priority_dimensions_tests_first_and_the_others_optional(
    client, persistence_first, architect, engines
):
    vllm = _candidate(persistence_first, architect, engines["vllm"], "0.11.0")
    assert priority_order(vllm) == [
        ("concurrency_stress", True),
        ("swap_recovery", True),
        ("prefix_reuse", True),
        ("stability", True),
        ("long_context", False),
        ("overload", False),
        ("model_switch", False),
        ("isolation", False),
    ]
    assert list(validation_plan(vllm))[:4] == ["concurrency_stress", "swap_recovery", "prefix_reuse", "stability"]
    client.force_login(architect)
    body = client.get(reverse("selection:validation", args=[persistence_first.pk, vllm.pk])).content.decode()
    assert body.count('data-priority="priority"') == 4 and body.count('data-priority="optional"') == 4
    assert body.index('id="test-stability"') < body.index('id="test-long_context"')
    assert "data-screened-out" not in body


def test_the_screen_reads_in_chinese(client, persistence_first, architect, engines, settings):
    tgi = _candidate(persistence_first, architect, engines["tgi"], "3.3.6")
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    client.force_login(architect)
    body = client.get(reverse("selection:candidates", args=[persistence_first.pk])).content.decode()
    assert "文档筛选" in body and "已筛除" in body and "跨轮持久化与卸载需要供空闲会话使用的 KV 卸载层级" in body
    assert 'data-source-kind="source">源代码</a>' in body
    body = client.get(reverse("selection:validation", args=[persistence_first.pk, tgi.pk])).content.decode()
    assert "文档筛选排除了该候选：不提供测试。" in body and "可选" in body


def test_the_api_refuses_a_screened_out_candidates_test_naming_the_screen(persistence_first, architect, engines):
    from rest_framework.test import APIClient

    tgi = _candidate(persistence_first, architect, engines["tgi"], "3.3.6")
    api = APIClient()
    api.force_authenticate(architect)
    response = api.post(f"/api/v1/candidates/{tgi.pk}/validations/", {"test": "swap_recovery"}, format="json")
    assert response.status_code == 400, response.content
    assert "documentation screen rules this candidate out" in response.json()["screen"][0]
    assert not BenchmarkRun.objects.filter(candidate=tgi).exists()
