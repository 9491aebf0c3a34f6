"""Celery tasks for evidence. Each takes an id, claims its row, and is safe to run twice."""

from __future__ import annotations

import socket

from celery import shared_task
from celery.utils.log import get_task_logger

from . import services

logger = get_task_logger(__name__)


@shared_task(name="benchmarks.tasks.parse_upload", acks_late=True, max_retries=3, default_retry_delay=5)
def parse_upload(run_id: int) -> str:
    return services.parse_stored_upload(run_id).status


@shared_task(bind=True, name="benchmarks.tasks.run_validation", acks_late=True, reject_on_worker_lost=True,
             max_retries=3, soft_time_limit=4 * 3600, time_limit=4 * 3600 + 120)
def run_validation(self, run_id: int) -> str:
    """Run one validation test. Retries (with backoff) only while the engine is unreachable before load."""
    from .models import BenchmarkRun
    from .validation import EndpointBusy, EngineUnavailable, claim, execute

    try:
        run = claim(run_id, worker=f"{self.request.hostname or socket.gethostname()}:{self.request.id}")
    except EndpointBusy as exc:  # wait for the other test on this engine; does not use up the retries
        raise self.retry(exc=exc, countdown=3, max_retries=self.max_retries + self.request.retries + 1)
    if run is None:
        return "not claimed"
    try:
        return execute(run).status
    except EngineUnavailable as exc:
        if self.request.retries < self.max_retries:
            BenchmarkRun.objects.filter(pk=run_id, status=BenchmarkRun.Status.RUNNING).update(
                status=BenchmarkRun.Status.QUEUED, progress={"phase": f"waiting for the engine: {exc}", "percent": 0})
            raise self.retry(exc=exc, countdown=5 * 2 ** self.request.retries)
        from .validation import _finish_failed

        return _finish_failed(run, f"engine unreachable: {exc}").status


@shared_task(name="benchmarks.tasks.reap_stale_runs")
def reap_stale_runs() -> list[int]:
    from .validation import reap_stale_runs as reap

    return reap()
