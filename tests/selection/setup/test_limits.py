"""Absurd or inconsistent constraints (and review-by dates) are refused when saved, naming the field."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone
from rest_framework.test import APIClient

from selection.domain import limits
from selection.models import Constraints, DecisionRecord
from selection.setup.forms import ConstraintsForm
from selection.setup.services import save_constraints
from tests.support.builders import SAMPLE_CONSTRAINTS, VALID_CONSTRAINTS

ABSURD = {
    "peak_concurrency": 10**12,
    "request_rate": 1e12,
    "throughput_target_tokens_s": 1e15,
    "avg_output_tokens": 10**9,
    "max_output_tokens": 10**9,
    "gpu_count_budget": 10**12,
    "cost_per_gpu_hour": "99999999.00",
    "ops_team_size": 10**9,
    "ttft_p95_ms": 1e12,
    "tpot_p95_ms": 1e12,
    "e2e_p95_ms": 1e12,
}


def test_every_number_of_the_one_pager_has_bounds():
    numbers = {
        f.name
        for f in Constraints._meta.concrete_fields
        if f.get_internal_type() in ("PositiveIntegerField", "FloatField", "DecimalField")
    }
    assert numbers == set(limits.CONSTRAINT_BOUNDS)


def test_the_domain_names_each_breach():
    breaches = limits.constraint_breaches({"never_swap_sessions": 50, "concurrent_sessions": 10, "tpot_p95_ms": 1e9})
    assert ("never_swap_sessions", limits.ABOVE_FIELD, {"other": "concurrent_sessions", "limit": 10.0}) in breaches
    assert ("tpot_p95_ms", limits.OUT_OF_RANGE, {"min": 0.1, "max": 600_000}) in breaches
    assert limits.constraint_breaches({"never_swap_sessions": 5}) == [
        ("never_swap_sessions", limits.NEEDS_FIELD, {"other": "concurrent_sessions"})
    ]
    assert limits.constraint_breaches({"request_rate": float("nan")})[0][1] == limits.NOT_FINITE
    assert limits.constraint_breaches(SAMPLE_CONSTRAINTS) == []
    assert limits.plain_number(1e6) == "1,000,000" and limits.plain_number(0.1) == "0.1"


@pytest.mark.parametrize("field", sorted(ABSURD))
def test_absurd_numbers_are_refused_by_the_service(selection, architect, field):
    with pytest.raises(ValidationError) as caught:
        save_constraints(selection=selection, user=architect, data=dict(SAMPLE_CONSTRAINTS, **{field: ABSURD[field]}))
    assert field in caught.value.message_dict, caught.value.message_dict
    assert len(caught.value.message_dict[field]) == 1  # said once, not by the validator and the bound
    assert not Constraints.objects.filter(selection=selection).exists()


def test_never_swapped_sessions_may_not_exceed_concurrent_sessions(selection, architect):
    data = dict(SAMPLE_CONSTRAINTS, multi_turn=True, average_turns=6, concurrent_sessions=100, never_swap_sessions=500)
    with pytest.raises(ValidationError) as caught:
        save_constraints(selection=selection, user=architect, data=data)
    assert caught.value.message_dict == {"never_swap_sessions": ["must not exceed concurrent sessions (100)"]}
    save_constraints(selection=selection, user=architect, data=dict(data, never_swap_sessions=100))


def test_the_form_names_each_absurd_field():
    form = ConstraintsForm(
        {
            **VALID_CONSTRAINTS,
            "gpu_count_budget": "1000000000000",
            "max_output_tokens": "1000000000",
            "ttft_p95_ms": "900000",
            "e2e_p95_ms": "20000",
            "ops_team_size": "5000000",
        },
        model_configs=[],
    )
    assert not form.is_valid()
    assert form.errors["gpu_count_budget"] == ["must be between 1 and 100,000"]
    assert form.errors["max_output_tokens"] == ["must be between 1 and 1,000,000"]
    assert form.errors["ttft_p95_ms"] == ["must not exceed end-to-end p95 budget (ms) (20000)"]
    assert form.errors["ops_team_size"] == ["must be between 1 and 100,000"]


def test_the_api_names_each_absurd_field(architect, selection):
    client = APIClient()
    client.force_authenticate(architect)
    response = client.put(
        f"/api/v1/selections/{selection.pk}/constraints/", dict(SAMPLE_CONSTRAINTS, **ABSURD), format="json"
    )
    assert response.status_code == 400, response.content
    assert set(ABSURD) <= set(response.json()), response.json()


def test_a_review_by_date_must_lie_ahead_and_within_five_years(selection_with_constraints, architect):
    today = timezone.localdate()
    record = DecisionRecord(selection=selection_with_constraints, version=1, created_by=architect)
    for bad, words in (
        (today, "after today"),
        (date(2001, 1, 1), "after today"),
        (today + timedelta(days=6 * 366), "within 5 years"),
    ):
        record.review_by = bad
        with pytest.raises(ValidationError) as caught:
            record.full_clean()
        assert words in caught.value.message_dict["review_by"][0]
    record.review_by = today + timedelta(days=180)
    record.full_clean()
    assert limits.latest_review_by(date(2024, 2, 29)) == date(2029, 2, 28)


def test_the_records_api_refuses_a_past_review_by_date(selection_with_constraints, architect):
    client = APIClient()
    client.force_authenticate(architect)
    response = client.post(
        f"/api/v1/selections/{selection_with_constraints.pk}/records/", {"review_by": "2001-01-01"}, format="json"
    )
    assert response.status_code == 400 and "review_by" in response.json(), response.content


def test_the_swap_in_delay_class_is_a_multi_turn_budget_bounded_and_named(selection, architect):
    """The second session class of the one-pager (issue 36 item 7): the swap-in delay the other sessions
    accept. Only for multi-turn traffic, within bounds, refused naming the field by the service, the form
    and the API; stored and returned by the API."""
    multi = dict(SAMPLE_CONSTRAINTS, multi_turn=True, average_turns=6, concurrent_sessions=100, never_swap_sessions=4)
    with pytest.raises(ValidationError) as caught:
        save_constraints(
            selection=selection, user=architect, data=dict(SAMPLE_CONSTRAINTS, swap_in_delay_budget_ms=300)
        )
    assert caught.value.message_dict == {"swap_in_delay_budget_ms": ["only meaningful for multi-turn sessions"]}
    form = ConstraintsForm({**VALID_CONSTRAINTS, "swap_in_delay_budget_ms": "7200000"}, model_configs=[])
    assert not form.is_valid() and form.errors["swap_in_delay_budget_ms"] == ["must be between 0 and 3,600,000"]
    assert "swap_in_delay_budget_ms" in [f.name for _key, _title, fields in form.groups() for f in fields]
    client = APIClient()
    client.force_authenticate(architect)
    url = f"/api/v1/selections/{selection.pk}/constraints/"
    refused = client.put(url, dict(multi, swap_in_delay_budget_ms=-1), format="json")
    assert refused.status_code == 400 and "swap_in_delay_budget_ms" in refused.json(), refused.content
    saved = client.put(url, dict(multi, swap_in_delay_budget_ms=300), format="json")
    assert saved.status_code == 200, saved.content
    assert saved.json()["swap_in_delay_budget_ms"] == 300 and selection.constraints.swap_in_delay_budget_ms == 300
