"""Celery tasks for evidence. Each takes an id, claims its row, and is safe to run twice."""

from __future__ import annotations

from celery import shared_task

from . import services


@shared_task(name="benchmarks.tasks.parse_upload", acks_late=True, max_retries=3, default_retry_delay=5)
def parse_upload(run_id: int) -> str:
    return services.parse_stored_upload(run_id).status
