"""A database outage on a web page is a branded 503 with Retry-After, as in the API (issue 20 item 4).
The same against a real PostgreSQL that is stopped mid-run is in test_real_services.py."""

from __future__ import annotations

from unittest import mock

import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.db import InterfaceError, OperationalError
from django.test import Client

pytestmark = pytest.mark.reliability

ERRORS = [
    OperationalError("server closed the connection unexpectedly"),
    InterfaceError("connection already closed"),
]


def assert_branded_503(response) -> None:
    assert response.status_code == 503, response.content[:300]
    assert response["Retry-After"] == "5"
    body = response.content.decode()
    assert "kvselect is temporarily unavailable" in body and "data-unavailable" in body
    assert 'http-equiv="refresh" content="5"' in body  # it reloads itself once the database is back
    # the branded error layout, as 403/404/413/500/507: the way back and the footer
    assert 'data-error-page="503"' in body and "data-way-back" in body and "Back to your selections" in body
    assert 'class="footer"' in body and "Simulated results are always labelled SIMULATED." in body


@pytest.mark.parametrize("error", ERRORS)
def test_a_page_whose_view_loses_the_database_is_a_branded_503(client, architect, error):
    client.force_login(architect)
    with mock.patch("selection.selectors.selections_for", side_effect=error):
        response = client.get("/")
    assert_branded_503(response)


@pytest.mark.parametrize("error", ERRORS)
def test_a_database_error_in_a_middleware_is_a_503_not_a_bare_500(architect, error):
    """The session is loaded by a middleware-level lookup (request.user), outside the view's reach."""
    client = Client(raise_request_exception=False)
    client.force_login(architect)
    with mock.patch.object(SessionStore, "load", side_effect=error):
        response = client.get("/")
    assert_branded_503(response)


def test_the_api_keeps_its_json_503(architect):
    client = Client(raise_request_exception=False)
    client.force_login(architect)
    with mock.patch.object(SessionStore, "load", side_effect=OperationalError("the database system is starting up")):
        response = client.get("/api/v1/selections/")
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert "temporarily unavailable" in response.json()["detail"]
