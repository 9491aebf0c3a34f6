"""Owners without dead ends (issue 37 item 4): the team's only architect cannot be made security owner (the
security owner never drafts, so nobody could), refused at creation on the page and the API; the owners
can be changed on the overview with the API's rules; the new selection form shows every error at once."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from selection.models import AuditEntry, Membership, Selection, Team
from tests.support.builders import make_selection, make_user, team_owners

pytestmark = pytest.mark.django_db


@pytest.fixture
def team():
    return Team.objects.create(name="Platform")


@pytest.fixture
def architect(team):
    user = make_user("alice", team)
    user.first_name, user.last_name = "Alice", "Chen"
    user.save()
    return user


def create_form(team, owners, **extra) -> dict:
    return {
        "name": "Contract review",
        "team": team.pk,
        **{f"{role}_owner": user.pk for role, user in owners.items()},
        **extra,
    }


def test_the_only_architect_as_security_owner_is_refused_at_creation_with_every_other_error(client, architect, team):
    owners = team_owners(team)
    client.force_login(architect)
    data = create_form(
        team,
        {"business": owners["business"], "platform": owners["business"], "security": architect},
        monthly_budget="-500",
        budget_currency="zz1",
    )
    response = client.post(reverse("selection:create"), data)
    assert response.status_code == 200 and not Selection.objects.exists()
    errors = response.context["form"].errors
    assert "Alice Chen is the team's only architect" in errors["security_owner"][0]
    assert "nobody could draft it" in errors["security_owner"][0]
    # all at once: the owners, the budget and its currency in the same answer
    assert {"platform_owner", "security_owner", "monthly_budget", "budget_currency"} <= set(errors)


def test_a_second_architect_makes_the_architect_a_possible_security_owner(client, architect, team):
    owners = team_owners(team)
    make_user("bob", team)  # another architect drafts
    client.force_login(architect)
    data = create_form(team, {"business": owners["business"], "platform": owners["platform"], "security": architect})
    assert client.post(reverse("selection:create"), data).status_code == 302
    assert Selection.objects.get().security_owner == architect


def test_the_api_refuses_the_dead_end_and_reports_every_error_at_once(architect, team):
    owners = team_owners(team)
    api = APIClient()
    api.force_authenticate(architect)
    body = {
        "name": "x",
        "team": team.name,
        "business_owner": owners["business"].username,
        "platform_owner": owners["business"].username,
        "security_owner": architect.username,
        "monthly_budget": "100",
    }
    response = api.post("/api/v1/selections/", body, format="json")
    assert response.status_code == 400, response.json()
    assert {"platform_owner", "security_owner", "budget_currency"} <= set(response.json())
    assert "only architect" in str(response.json()["security_owner"])

    selection = make_selection(architect, team)
    patched = api.patch(f"/api/v1/selections/{selection.pk}/", {"security_owner": "alice"}, format="json")
    assert patched.status_code == 400 and "only architect" in str(patched.json()["security_owner"])


def test_an_observer_is_refused_before_the_body_is_read(team, architect):
    selection = make_selection(architect, team)
    observer = make_user("olga", team, Membership.Role.REVIEWER)
    api = APIClient()
    api.force_authenticate(observer)
    assert api.put(f"/api/v1/selections/{selection.pk}/constraints/", {}, format="json").status_code == 403
    assert api.post(f"/api/v1/selections/{selection.pk}/candidates/", {}, format="json").status_code == 403
    assert api.patch(f"/api/v1/selections/{selection.pk}/", {"name": ""}, format="json").status_code == 403


def test_the_owners_are_changed_on_the_overview_with_the_apis_rules(client, architect, team):
    selection = make_selection(architect, team)
    owners = team_owners(team)
    newcomer = make_user("nina", team, Membership.Role.REVIEWER)
    client.force_login(architect)
    overview = client.get(reverse("selection:detail", args=[selection.pk])).content.decode()
    assert reverse("selection:owners", args=[selection.pk]) in overview

    url = reverse("selection:owners", args=[selection.pk])
    refused = client.post(
        url,
        {
            "business_owner": owners["business"].pk,
            "platform_owner": owners["business"].pk,
            "security_owner": architect.pk,
        },
    )
    assert refused.status_code == 400
    errors = refused.context["form"].errors
    assert "three different people" in errors["platform_owner"][0] and "only architect" in errors["security_owner"][0]
    selection.refresh_from_db()
    assert selection.platform_owner == owners["platform"]

    saved = client.post(
        url,
        {
            "business_owner": owners["business"].pk,
            "platform_owner": owners["platform"].pk,
            "security_owner": newcomer.pk,
            "observer": owners["business"].pk,
        },
    )
    assert saved.status_code == 302
    selection.refresh_from_db()
    assert (selection.security_owner, selection.observer) == (newcomer, owners["business"])
    entry = AuditEntry.objects.filter(selection=selection, action="selection.changed").latest("pk")
    assert entry.new["security_owner"] == "nina"


def test_a_reviewer_sees_the_owners_but_cannot_change_them(client, architect, team):
    selection = make_selection(architect, team)
    reviewer = make_user("rita", team, Membership.Role.REVIEWER)
    client.force_login(reviewer)
    url = reverse("selection:owners", args=[selection.pk])
    assert "data-owners-form" not in client.get(url).content.decode()
    assert client.post(url, {}).status_code == 403


def test_the_security_owner_is_told_on_the_records_page_instead_of_a_draft_form(client, architect, team):
    owners = team_owners(team)
    make_user("bob", team)
    selection = Selection.objects.create(
        team=team,
        name="s",
        business_owner=owners["business"],
        platform_owner=owners["platform"],
        security_owner=architect,
        created_by=architect,
    )
    client.force_login(architect)
    page = client.get(reverse("selection:records", args=[selection.pk])).content.decode()
    assert "data-security-owner-drafts" in page and "data-record-form" not in page
    assert reverse("selection:owners", args=[selection.pk]) in page
