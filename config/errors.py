"""Error pages. A database outage (a restart, a failover) is a 503 with Retry-After on every page,
as it is in the API, never a bare 500: the page is rendered without touching the database (no
session, no user, no context processors) and reloads itself after the Retry-After delay. An upload
the server's disk refused (full, read-only) is a 507 naming the problem (`config.uploads`): JSON for
the API and for clients that ask for JSON, the branded page otherwise.
"""

from __future__ import annotations

import logging
import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import loader
from django.views.defaults import server_error as django_server_error

from config.uploads import UploadSpoolFailure, storage_detail, storage_problem

logger = logging.getLogger(__name__)

DATABASE_RETRY_AFTER_S = 5
DATABASE_ERRORS = (OperationalError, InterfaceError)


def database_unavailable(request: HttpRequest) -> HttpResponse:
    """503 with Retry-After: JSON for the API, the branded page for everything else."""
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse(
            {
                "detail": "The database is temporarily unavailable; nothing was stored. "
                f"Retry in {DATABASE_RETRY_AFTER_S} s."
            },
            status=503,
        )
    else:
        body = loader.get_template("503.html").render({"retry_after": DATABASE_RETRY_AFTER_S})
        response = HttpResponse(body, status=503)
    response["Retry-After"] = str(DATABASE_RETRY_AFTER_S)
    response["Cache-Control"] = "no-store"
    return response


def wants_json(request: HttpRequest) -> bool:
    return request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", "")


def upload_not_stored(request: HttpRequest, failure: UploadSpoolFailure) -> HttpResponse:
    """507: the upload could not be written to the server's disk; nothing was stored."""
    logger.error("upload to %s not stored: %s", request.path, failure.error)
    if wants_json(request):
        return JsonResponse({"detail": storage_detail(failure.error)}, status=507)
    body = loader.get_template("507.html").render({"problem": storage_problem(failure.error)})
    return HttpResponse(body, status=507)


class DatabaseUnavailableMiddleware:
    """A view that fails on a lost database connection answers 503, one whose upload the disk refused
    507 (also with DEBUG on)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, DATABASE_ERRORS):
            logger.warning("database unavailable during %s: %s", request.path, exception)
            return database_unavailable(request)
        if isinstance(exception, UploadSpoolFailure):
            return upload_not_stored(request, exception)
        return None


def server_error(request: HttpRequest, template_name: str = "500.html") -> HttpResponse:
    """handler500: a database error raised outside a view (the session or the user lookup in a
    middleware) is the same 503, an upload the disk refused while a middleware read the body (the
    CSRF check reads the form) the same 507; anything else is Django's 500."""
    error = sys.exc_info()[1]
    if isinstance(error, DATABASE_ERRORS):
        logger.warning("database unavailable during %s: %s", request.path, error)
        return database_unavailable(request)
    if isinstance(error, UploadSpoolFailure):
        return upload_not_stored(request, error)
    return django_server_error(request, template_name)
