"""Request bodies larger than an upload may be are refused before they are read.

- `RequestSizeLimitMiddleware`: a Content-Length above KVSELECT_MAX_UPLOAD_BYTES plus the
  multipart envelope (KVSELECT_REQUEST_OVERHEAD_BYTES) is a 413 at once, before the CSRF check
  or the upload parser reads a byte (gunicorn's gthread worker then drains at most 64 KiB of
  what is left before it closes the connection).
- `ChunkedBodyLimit` (WSGI, around the Django application): Django reads a body only up to its
  Content-Length, so a chunked body without one would read as empty. Under a server that
  delimits the body itself (`wsgi.input_terminated`, gunicorn), the body is read into a
  temporary file, at most the same limit (beyond it: 413, and nothing more is read),
  and handed to Django with its length.
"""

from __future__ import annotations

import json
import logging
import tempfile

from django.conf import settings
from django.core.handlers.wsgi import WSGIRequest
from django.http import HttpResponse, JsonResponse
from django.template import loader
from django.utils import translation
from django.utils.http import url_has_allowed_host_and_scheme

from config.uploads import storage_detail

logger = logging.getLogger(__name__)

CHUNK = 1024 * 1024


def body_limit() -> int:
    return int(settings.KVSELECT_MAX_UPLOAD_BYTES) + int(settings.KVSELECT_REQUEST_OVERHEAD_BYTES)


def too_large_message(size: int | None) -> str:
    limit = int(settings.KVSELECT_MAX_UPLOAD_BYTES)
    what = f"The request body ({size:,} bytes)" if size is not None else "The request body"
    return f"{what} exceeds the limit of {limit:,} bytes for an upload; nothing was read or stored."


def too_large_page(request, size: int | None) -> HttpResponse:
    """The branded 413 page, in the reader's language (the cookie or the browser's), with a way back to
    the form the file came from. Rendered before the session and the user are read: no database."""
    referer = request.META.get("HTTP_REFERER", "")
    back = referer if url_has_allowed_host_and_scheme(referer, allowed_hosts={request.get_host()}) else ""
    context = {
        "size_mib": f"{size / 2**20:,.1f}" if size else "",
        "limit_mib": f"{int(settings.KVSELECT_MAX_UPLOAD_BYTES) / 2**20:,.0f}",
        "back_url": back,
    }
    with translation.override(translation.get_language_from_request(request)):
        body = loader.render_to_string("413.html", context)
    response = HttpResponse(body, status=413)
    response["Connection"] = "close"  # the rest of the body is not read
    return response


class RequestSizeLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > body_limit():
            message = too_large_message(length)
            if request.path.startswith("/api/"):
                return JsonResponse({"file": [message]}, status=413)
            return too_large_page(request, length)
        return self.get_response(request)


class ChunkedBodyLimit:
    """WSGI middleware: a chunked request body, bounded, becomes one Django can read."""

    def __init__(self, application) -> None:
        self.application = application

    def __call__(self, environ, start_response):
        chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
        if not chunked or environ.get("CONTENT_LENGTH") or not environ.get("wsgi.input_terminated"):
            return self.application(environ, start_response)
        limit = body_limit()
        try:
            spool = tempfile.TemporaryFile(dir=settings.FILE_UPLOAD_TEMP_DIR)
        except OSError as exc:  # the upload directory is read-only or gone
            drain_input(environ["wsgi.input"], limit)
            return self.not_stored(environ, start_response, exc)
        size = 0
        source = environ["wsgi.input"]
        try:
            while chunk := source.read(CHUNK):
                size += len(chunk)
                if size > limit:
                    spool.close()
                    return self.refuse(environ, start_response)
                spool.write(chunk)
            spool.seek(0)
        except OSError as exc:  # disk full: the spool (already unlinked) is closed, nothing stays open
            close_quietly(spool)
            drain_input(source, limit - size)  # the client gets the 507, not a reset connection
            return self.not_stored(environ, start_response, exc)
        environ = dict(environ, CONTENT_LENGTH=str(size))
        environ["wsgi.input"] = spool
        environ.pop("HTTP_TRANSFER_ENCODING", None)
        try:
            return self.application(environ, start_response)
        finally:
            spool.close()  # Django has read what it needs before returning its response

    @staticmethod
    def not_stored(environ, start_response, error: OSError):
        """507, as `config.errors` answers when Django's own spooling fails."""
        logger.error("chunked upload to %s not stored: %s", environ.get("PATH_INFO", ""), error)
        body = json.dumps({"detail": storage_detail(error)}).encode()
        start_response(
            "507 Insufficient Storage", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        return [body]

    @staticmethod
    def refuse(environ, start_response):
        message = too_large_message(None)
        if environ.get("PATH_INFO", "").startswith("/api/"):
            body, kind = json.dumps({"file": [message]}).encode(), "application/json"
        else:
            page = too_large_page(WSGIRequest(dict(environ, CONTENT_LENGTH="0")), None)
            body, kind = page.content, page["Content-Type"]
        start_response(
            "413 Request Entity Too Large",
            [("Content-Type", kind), ("Content-Length", str(len(body)))],
        )
        return [body]


def close_quietly(handle) -> None:
    try:
        handle.close()
    except OSError:  # a buffered tail the full disk refuses: the descriptor is closed anyway
        pass


def drain_input(source, budget: int) -> None:
    """Read and drop up to `budget` bytes of a body the server will not store."""
    while budget > 0 and (chunk := source.read(min(CHUNK, budget))):
        budget -= len(chunk)
