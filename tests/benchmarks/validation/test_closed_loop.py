"""Closed-loop and open-loop stress are both startable whatever the constraints give (issue 37 item 4):
an empty rate is a closed loop, a rate of 0 is refused before anything is queued (on the page, the API and
in the service), a positive rate is an open loop; a refusal re-renders at the validation page's URL."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from benchmarks.harness import workloads
from benchmarks.models import BenchmarkRun
from benchmarks.validation.dispatch import ValidationError, start_validation
from benchmarks.validation.forms import ValidationParamsForm
from selection.candidates.services import add_candidate

pytestmark = pytest.mark.django_db

SHORT = {"concurrency": 4, "duration_s": 2, "warmup_s": 0, "settle_s": 0.5}


@pytest.fixture
def candidate(selection_with_constraints, architect, engines):
    assert selection_with_constraints.constraints.request_rate  # the constraints give a rate
    return add_candidate(
        selection=selection_with_constraints,
        user=architect,
        data={"engine": engines["vllm"], "engine_version": "0.11.0", "endpoint_url": "http://127.0.0.1:9"},
    )


def posted(plan: dict, rate: str) -> dict:
    values = {**plan, **SHORT}
    data = {f"concurrency_stress-{k}": str(v) for k, v in values.items() if isinstance(v, (int, float, str))}
    data["concurrency_stress-rate"] = rate
    return data


def test_the_rate_is_optional_and_must_be_above_zero_when_given():
    plan = workloads.plan("concurrency_stress", {"request_rate": 8.0, "peak_concurrency": 32})
    assert plan["rate"] == 8.0
    empty = ValidationParamsForm(posted(plan, ""), plan=plan, test="concurrency_stress")
    assert empty.is_valid(), empty.errors
    assert empty.params()["rate"] is None  # closed loop at the planned concurrency
    zero = ValidationParamsForm(posted(plan, "0"), plan=plan, test="concurrency_stress")
    assert not zero.is_valid() and "must be above 0" in zero.errors["rate"][0]
    four = ValidationParamsForm(posted(plan, "4"), plan=plan, test="concurrency_stress")
    assert four.is_valid() and four.params()["rate"] == 4.0


def test_a_rate_planned_as_none_can_still_be_given():
    plan = workloads.plan("overload", {"peak_concurrency": 32})
    assert plan["rate"] is None
    form = ValidationParamsForm({"overload-rate": "2.5"}, plan=plan, test="overload")
    form.is_valid()
    assert "rate" not in form.errors and form.cleaned_data["rate"] == 2.5


def test_a_spec_says_what_cannot_run():
    spec = workloads.SPECS["concurrency_stress"]
    assert spec.problems({"rate": None, "concurrency": 4}) == {}
    assert set(spec.problems({"rate": 0, "concurrency": 0.0, "duration_s": -1})) == {"rate", "duration_s"}
    assert spec.problems({"concurrency": None})["concurrency"][0] == "a number is required"
    assert spec.problems({"rate": "fast"})["rate"][0].startswith("must be a number")


def test_the_page_queues_a_closed_loop_and_refuses_zero_at_the_pages_url(client, architect, candidate):
    plan = workloads.plan("concurrency_stress", candidate.selection.constraints.as_domain())
    client.force_login(architect)
    start = reverse("selection:validation-start", args=[candidate.selection_id, candidate.pk, "concurrency_stress"])
    page = reverse("selection:validation", args=[candidate.selection_id, candidate.pk])

    response = client.post(start, posted(plan, "0"))
    assert response.status_code == 400 and not BenchmarkRun.objects.exists()
    body = response.content.decode()
    assert "must be above 0" in body and f'data-page-url="{page}"' in body
    assert client.get(start).status_code == 302 and client.get(start)["Location"] == page  # a reload opens the page

    response = client.post(start, posted(plan, ""))
    assert response.status_code == 302
    run = BenchmarkRun.objects.get()
    assert run.status == "queued" and run.params["rate"] is None and run.params["concurrency"] == 4


def test_the_api_refuses_zero_before_queueing_and_accepts_null(architect, candidate):
    api = APIClient()
    api.force_authenticate(architect)
    url = f"/api/v1/candidates/{candidate.pk}/validations/"
    refused = api.post(url, {"test": "concurrency_stress", "params": {"rate": 0}}, format="json")
    assert refused.status_code == 400 and "must be above 0" in refused.json()["rate"][0]
    assert not BenchmarkRun.objects.exists()
    accepted = api.post(url, {"test": "concurrency_stress", "params": {"rate": None}}, format="json")
    assert accepted.status_code == 202 and accepted.json()["params"]["rate"] is None
    with pytest.raises(ValidationError, match="rate: must be above 0"):
        start_validation(candidate=candidate, test="concurrency_stress", user=architect, params={"rate": -2})
