"""Request-scoped settings for code that must stay free of Django."""

from __future__ import annotations

from django.utils.translation import gettext

from benchmarks import charts


class ChartLanguageMiddleware:
    """Charts drawn while handling a request use the request's language (see `benchmarks.charts.translated`)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with charts.translated(gettext):
            return self.get_response(request)
