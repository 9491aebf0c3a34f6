"""System checks for deployment-critical settings."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from benchmarks.harness.client_timing import RECEIVE_CLOCKS


@register(Tags.security, deploy=False)
def secret_key_required(app_configs, **kwargs):
    if getattr(settings, "SECRET_KEY_MISSING", False):
        return [
            Error(
                "SECRET_KEY is not set and DEBUG is off.",
                hint="Set the SECRET_KEY environment variable (50+ random characters).",
                id="kvselect.E001",
            )
        ]
    return []


@register(deploy=True)
def embedded_broker_is_development_only(app_configs, **kwargs):
    """A deployment check (`manage.py check --deploy`): the embedded broker is what a laptop and the
    demo are meant to use, so plain `check` and every other command stay quiet about it."""
    if settings.CELERY_BROKER_IS_EMBEDDED and not settings.CELERY_TASK_ALWAYS_EAGER:
        return [
            Warning(
                "Celery uses the embedded SQLite broker (development only).",
                hint="Set CELERY_BROKER_URL to a Redis or RabbitMQ URL in production.",
                id="kvselect.W001",
            )
        ]
    return []


@register()
def receive_clock_known(app_configs, **kwargs):
    value = settings.KVSELECT_RECEIVE_CLOCK
    if value not in RECEIVE_CLOCKS:
        return [
            Error(
                f"KVSELECT_RECEIVE_CLOCK is {value!r}: it must be one of {', '.join(RECEIVE_CLOCKS)}.",
                hint="kernel: the kernel's receive stamps (exact, the default); user: user-space read times.",
                id="kvselect.E002",
            )
        ]
    return []
