"""System checks for deployment-critical settings."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register


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


@register()
def embedded_broker_is_development_only(app_configs, **kwargs):
    if settings.CELERY_BROKER_IS_EMBEDDED and not settings.CELERY_TASK_ALWAYS_EAGER:
        return [
            Warning(
                "Celery uses the embedded SQLite broker (development only).",
                hint="Set CELERY_BROKER_URL to a Redis or RabbitMQ URL in production.",
                id="kvselect.W001",
            )
        ]
    return []
