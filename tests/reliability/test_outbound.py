"""Outbound load safety at the application level: refused before any connection is opened."""

from __future__ import annotations

import socket
from unittest import mock

import pytest
from django.utils import translation
from rest_framework.test import APIClient

from benchmarks.models import BenchmarkRun
from benchmarks.validation.dispatch import ValidationError, start_validation
from benchmarks.validation.worker import claim, execute
from selection.candidates.services import add_candidate
from selection.i18n import message_html
from selection.models import Candidate

pytestmark = pytest.mark.reliability


@pytest.fixture
def no_connections(monkeypatch):
    """Any outbound TCP connection attempt fails the test."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise AssertionError(f"a connection was attempted: {args}")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", lambda self, *a: refuse(*a))
    return attempts


def _candidate(selection, user, engines, url):
    return add_candidate(
        selection=selection,
        user=user,
        data={"engine": engines["vllm"], "engine_version": "0.11.0", "endpoint_url": url},
    )


@pytest.mark.parametrize("address", ["169.254.169.254", "fd00:ec2::254", "169.254.10.1"])
def test_allow_listed_name_resolving_to_metadata_or_link_local_is_refused_via_the_api(
    selection_with_constraints, architect, engines, settings, no_connections, address
):
    settings.KVSELECT_ALLOWED_TARGETS = ["engine.internal"]
    candidate = _candidate(selection_with_constraints, architect, engines, "http://engine.internal:8000")
    client = APIClient()
    client.force_authenticate(architect)
    with mock.patch("benchmarks.harness.safety._resolve", return_value=[address]):
        response = client.post(
            f"/api/v1/candidates/{candidate.pk}/validations/", {"test": "concurrency_stress"}, format="json"
        )
    assert response.status_code == 400, response.content
    assert "endpoint_url" in response.json()
    assert not BenchmarkRun.objects.exists() and no_connections == []


@pytest.mark.django_db(transaction=True)
def test_dns_rebinding_between_start_and_execution_is_refused_by_the_worker(
    selection_with_constraints, architect, engines, settings, no_connections
):
    settings.KVSELECT_ALLOWED_TARGETS = ["engine.internal"]
    candidate = _candidate(selection_with_constraints, architect, engines, "http://engine.internal:8000")
    with (
        mock.patch("benchmarks.harness.safety._resolve", return_value=["10.0.0.5"]),
        mock.patch("benchmarks.validation.dispatch.enqueue_validation"),
    ):
        run = start_validation(candidate=candidate, test="concurrency_stress", user=architect)
    with mock.patch("benchmarks.harness.safety._resolve", return_value=["169.254.169.254"]):
        done = execute(claim(run.pk, "w1"))
    assert done.status == "failed" and "endpoint_url" in done.error
    assert no_connections == []
    # the run page says why in its language: the field as code, the refusal translated (the API keeps the English)
    assert done.error == (
        "endpoint_url: 'engine.internal' resolves to 169.254.169.254, a cloud metadata address; refused"
    )
    with translation.override("zh-hans"):
        shown = str(message_html(done.error_message))
    assert shown == "<code>endpoint_url</code>：engine.internal 解析为 169.254.169.254，属于云元数据地址；已拒绝"


@pytest.mark.parametrize(
    "url",
    [
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://[::ffff:169.254.169.254]/",
        "http://user:pw@127.0.0.1:8000/",
        "file:///etc/passwd",
        "gopher://127.0.0.1:70/",
    ],
)
def test_hostile_endpoint_urls_never_start_a_run(selection_with_constraints, architect, engines, no_connections, url):
    from django.core.exceptions import ValidationError as ModelValidationError

    with pytest.raises(ModelValidationError) as refused:  # refused when saved, naming the field
        _candidate(selection_with_constraints, architect, engines, url)
    assert "endpoint_url" in refused.value.message_dict
    # a candidate stored before the rule (or the allow-list) changed is refused again before a run
    candidate = Candidate.objects.create(
        selection=selection_with_constraints, engine=engines["vllm"], engine_version="0.11.0", endpoint_url=url
    )
    with pytest.raises(ValidationError, match="endpoint_url"):
        start_validation(candidate=candidate, test="concurrency_stress", user=architect)
    assert not BenchmarkRun.objects.exists() and no_connections == []
