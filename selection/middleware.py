"""Request-scoped settings for code that must stay free of Django."""

from __future__ import annotations

from urllib.parse import unquote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.utils import timezone
from django.utils.translation import get_language, gettext

from benchmarks.charts import style as chart_style


class ChartLanguageMiddleware:
    """Charts drawn while handling a request use the request's language (see `benchmarks.charts.style.translated`)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with chart_style.translated(gettext, language=get_language):
            return self.get_response(request)


TIMEZONE_COOKIE = "kvselect_tz"


class TimezoneMiddleware:
    """Times show in the user's time zone: the IANA name the browser reports (static/js/kvselect.js
    keeps it in the `kvselect_tz` cookie); UTC until it is known or when it is not a real zone."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        zone = user_zone(request.COOKIES.get(TIMEZONE_COOKIE, ""))
        if zone is None:
            timezone.deactivate()
        else:
            timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()


def user_zone(name: str) -> ZoneInfo | None:
    name = unquote(name or "").strip()
    if not name or len(name) > 64:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # "Europe" is a folder, not a zone
        return None
