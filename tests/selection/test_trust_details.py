"""Details that cost trust: one date format in the user's time zone, owners by their full names,
branded error pages with a way back, and "New selection" only for those who may start one."""

from __future__ import annotations

from datetime import date, datetime
from datetime import timezone as dt_timezone
from zoneinfo import ZoneInfo

import pytest
from django.test import RequestFactory
from django.utils import timezone
from django.views.defaults import server_error

from selection.middleware import TIMEZONE_COOKIE, user_zone
from selection.models import Membership
from selection.templatetags.kvselect import audit_value, when
from tests.support.builders import make_selection, make_user

MOMENT = datetime(2026, 3, 2, 13, 5, 9, tzinfo=dt_timezone.utc)


def test_one_date_format_names_its_zone():
    assert when(MOMENT) == "2026-03-02 13:05 UTC"
    assert when(MOMENT, "s") == "2026-03-02 13:05:09 UTC"
    with timezone.override(ZoneInfo("Asia/Shanghai")):
        assert when(MOMENT) == "2026-03-02 21:05 UTC+08:00"
        assert when("2026-03-02T13:05:09+00:00") == "2026-03-02 21:05 UTC+08:00"  # record snapshots hold ISO text
    with timezone.override(ZoneInfo("America/New_York")):
        assert when(MOMENT) == "2026-03-02 08:05 UTC-05:00"
    assert when(date(2026, 9, 1)) == "2026-09-01" and when("2026-09-01") == "2026-09-01"
    assert when(None) == "" and when("not a date") == "not a date"


def test_only_real_time_zones_are_used():
    assert user_zone("Europe/Berlin") == ZoneInfo("Europe/Berlin")
    assert user_zone("Asia%2FShanghai") == ZoneInfo("Asia/Shanghai")
    for bad in ("", "Europe", "../../etc/passwd", "Mars/Olympus", "x" * 100):
        assert user_zone(bad) is None


def test_the_audit_trail_shows_numbers_as_numbers():
    assert audit_value(20000.0) == "20,000"
    assert audit_value(0.123456) == "0.1235"
    assert audit_value(1234567.5) == "1,234,567.5"
    assert audit_value({"weight": 2e-05}) == "Weight: 0.00002"  # the key in words (audit_field)
    assert "e+" not in audit_value(1e12) and "e-" not in audit_value(1e-7)


@pytest.fixture
def team_with_reviewer(team, architect):
    owner = make_user("wei", team, Membership.Role.REVIEWER)
    owner.first_name, owner.last_name = "伟", "张"
    owner.save()
    architect.first_name, architect.last_name = "Alice", "Chen"
    architect.save()
    return owner


def test_pages_show_times_in_the_users_zone_and_owners_by_name(client, architect, team, team_with_reviewer):
    selection = make_selection(architect, team)
    selection.business_owner = team_with_reviewer
    selection.save()
    client.force_login(architect)
    client.cookies[TIMEZONE_COOKIE] = "Asia/Shanghai"
    body = client.get(f"/selections/{selection.pk}/").content.decode()
    assert "张伟" in body and "Alice Chen" in body  # overview and audit trail: names, not user names
    assert "UTC+08:00" in body  # the audit trail's times, in the browser's zone


def test_reviewers_do_not_see_new_selection(client, architect, team, team_with_reviewer):
    client.force_login(team_with_reviewer)
    body = client.get("/").content.decode()
    assert "/selections/new/" not in body
    response = client.get("/selections/new/")
    assert response.status_code == 403
    assert 'data-error-page="403"' in response.content.decode()
    client.force_login(architect)
    assert "/selections/new/" in client.get("/").content.decode()


def test_error_pages_are_branded_with_a_way_back(client, architect):
    client.force_login(architect)
    response = client.get("/selections/999999/")
    body = response.content.decode()
    assert response.status_code == 404
    assert 'data-error-page="404"' in body and "data-way-back" in body and 'href="/"' in body
    request = RequestFactory().get("/boom/")
    body = server_error(request).content.decode()
    assert 'data-error-page="500"' in body and "data-way-back" in body and "kvselect" in body
