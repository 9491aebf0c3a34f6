"""The selection's procurement details (budget and currency, licence terms, vendor and support,
delivery owner): the create form, the procurement page and the API, each refusing a budget without
its currency by field, saving nothing then, and auditing what changed."""

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from selection.models import AuditEntry

pytestmark = pytest.mark.django_db

DETAILS = {
    "monthly_budget": "48000.00",
    "budget_currency": "usd",
    "licence_terms": "Apache-2.0, no subscription",
    "vendor_support": "Community only; platform team on call",
    "delivery_owner": "Platform team",
}


def test_procurement_page_saves_the_details_and_audits_them(client, architect, selection):
    client.force_login(architect)
    url = reverse("selection:procurement", args=[selection.pk])
    assert client.get(url).status_code == 200
    response = client.post(url, DETAILS)
    assert response.status_code == 302
    selection.refresh_from_db()
    assert selection.budget_currency == "USD" and str(selection.monthly_budget) == "48000.00"
    assert selection.delivery_owner == "Platform team"
    entry = AuditEntry.objects.filter(selection=selection, action="selection.changed").latest("at")
    assert entry.new["budget_currency"] == "USD" and entry.new["vendor_support"].startswith("Community")
    records = client.get(reverse("selection:records", args=[selection.pk])).content.decode()
    assert "data-procurement-facts" in records and "Platform team" in records


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"monthly_budget": "48000", "budget_currency": ""}, "budget_currency"),
        ({"monthly_budget": "", "budget_currency": "EUR"}, "monthly_budget"),
        ({"monthly_budget": "0", "budget_currency": "EUR"}, "monthly_budget"),
        ({"monthly_budget": "48000", "budget_currency": "E1R"}, "budget_currency"),
    ],
)
def test_a_budget_without_its_currency_is_refused_by_field_and_nothing_saved(client, architect, selection, data, field):
    client.force_login(architect)
    response = client.post(reverse("selection:procurement", args=[selection.pk]), {**DETAILS, **data})
    assert response.status_code == 400
    assert field in response.context["form"].errors
    selection.refresh_from_db()
    assert selection.monthly_budget is None and selection.vendor_support == ""


def test_reviewers_read_the_details_but_cannot_change_them(client, reviewer, selection):
    client.force_login(reviewer)
    url = reverse("selection:procurement", args=[selection.pk])
    page = client.get(url)
    assert page.status_code == 200 and "data-procurement-facts" in page.content.decode()
    assert client.post(url, DETAILS).status_code == 403


def test_create_form_takes_the_details(client, architect, team, selection_owners):
    client.force_login(architect)
    response = client.post(
        reverse("selection:create"),
        {
            "name": "Docs QA",
            "team": team.pk,
            "business_owner": selection_owners["business"].pk,
            "platform_owner": selection_owners["platform"].pk,
            "security_owner": selection_owners["security"].pk,
            **DETAILS,
        },
    )
    assert response.status_code == 302
    created = architect.teams.get().selections.get(name="Docs QA")
    assert created.budget_currency == "USD" and created.licence_terms == "Apache-2.0, no subscription"


def test_api_reads_and_writes_the_details_and_names_a_wrong_field(architect, selection, outsider):
    api = APIClient()
    api.force_authenticate(architect)
    url = f"/api/v1/selections/{selection.pk}/"
    patched = api.patch(url, {**DETAILS, "budget_currency": "CNY"}, format="json")
    assert patched.status_code == 200, patched.json()
    body = api.get(url).json()
    assert body["monthly_budget"] == "48000.00" and body["budget_currency"] == "CNY"
    assert body["delivery_owner"] == "Platform team"
    bad = api.patch(url, {"budget_currency": "yuan"}, format="json")
    assert bad.status_code == 400 and "budget_currency" in bad.json()
    assert api.patch(url, {"monthly_budget": None}, format="json").status_code == 400  # CNY needs its amount
    api.force_authenticate(outsider)
    assert api.patch(url, {"delivery_owner": "me"}, format="json").status_code == 404
