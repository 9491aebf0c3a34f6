"""Celery tasks of the evidence app and their enqueue helpers. Each task takes an id, claims its
row, and is safe to run twice.

Services enqueue through the helpers here; task bodies call modules that never import this one
(`uploads.parse`, `validation.worker`), so imports stay one-way.
"""

from __future__ import annotations

import socket
from datetime import datetime, timedelta

from celery import shared_task
from celery.utils.log import get_task_logger
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from benchmarks.models import BenchmarkRun
from benchmarks.uploads.parse import parse_stored_upload
from benchmarks.validation import worker
from benchmarks.validation.engine import EngineUnavailable
from config.celery import gpu_queue

logger = get_task_logger(__name__)

UPLOAD_REQUEUE_AFTER = timedelta(seconds=30)  # an upload still `parsing` this long after arrival lost its task


@shared_task(name="benchmarks.tasks.parse_upload", acks_late=True, max_retries=3, default_retry_delay=5)
def parse_upload(run_id: int) -> str:
    return parse_stored_upload(run_id).status


@shared_task(
    bind=True,
    name="benchmarks.tasks.run_validation",
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=3,
    soft_time_limit=5 * 3600,  # the longest planned test, a 4 h multi-turn soak, and its warm-up
    time_limit=5 * 3600 + 120,
)
def run_validation(self, run_id: int) -> str:
    """Run one validation test. Retries (with backoff) only while the engine is unreachable before load."""
    try:
        run = worker.claim(run_id, worker=f"{self.request.hostname or socket.gethostname()}:{self.request.id}")
    except worker.HardwareBusy as exc:  # wait for the run on this hardware; does not use up the retries
        BenchmarkRun.objects.filter(pk=run_id, status=BenchmarkRun.Status.QUEUED).update(enqueued_at=timezone.now())
        raise self.retry(exc=exc, countdown=3, max_retries=self.max_retries + self.request.retries + 1) from exc
    if run is None:
        return "not claimed"
    try:
        return worker.execute(run).status
    except EngineUnavailable as exc:
        if self.request.retries < self.max_retries:
            worker.requeue(run_id, f"waiting for the engine: {exc}")
            raise self.retry(exc=exc, countdown=5 * 2**self.request.retries) from exc
        return worker.finish_failed(run, f"engine unreachable: {exc}").status


@shared_task(name="benchmarks.tasks.reap_stale_runs")
def reap_stale_runs(now: datetime | None = None) -> list[int]:
    """Fail (or store the write-ahead result of) runs whose worker stopped sending heartbeats; queue
    again uploads whose parse task was lost and validation runs no worker will otherwise pick up."""
    now = now or timezone.now()
    stale = worker.reap_stale_runs(now)
    for run in BenchmarkRun.objects.filter(
        status=BenchmarkRun.Status.PARSING, origin=BenchmarkRun.Origin.UPLOAD, created_at__lt=now - UPLOAD_REQUEUE_AFTER
    ):
        enqueue_parse(run)
    for run in unsent_validation_runs(now).select_related("candidate"):
        enqueue_validation(run)
    return stale


def unsent_validation_runs(now: datetime):
    """Queued validation runs whose task the broker refused (sent again after a short grace), or took
    so long ago that its message may be lost (a broker restarted without its data). A copy of a
    message that is still queued is harmless: the claim lets one task run it."""
    unsent = timedelta(seconds=settings.KVSELECT_UNSENT_REQUEUE_S)
    resend = timedelta(seconds=settings.KVSELECT_QUEUED_RESEND_S)
    return BenchmarkRun.objects.filter(
        Q(enqueued_at__isnull=True, created_at__lt=now - unsent) | Q(enqueued_at__lt=now - resend),
        status=BenchmarkRun.Status.QUEUED,
        origin=BenchmarkRun.Origin.HARNESS,
        cancel_requested=False,
    )


def enqueue_parse(run: BenchmarkRun) -> bool:
    """Queue parsing; if the broker is down the run stays `parsing` and the reaper re-queues it."""
    try:
        parse_upload.apply_async((run.pk,), retry=False)
        return True
    except Exception as exc:  # kombu raises OperationalError and friends when the broker is down
        logger.warning("broker unavailable, run %s waits for the reaper: %s", run.pk, exc)
        BenchmarkRun.objects.filter(pk=run.pk).update(progress={"phase": "waiting for the job queue"})
        return False


def enqueue_validation(run: BenchmarkRun) -> bool:
    """Queue a validation run on its GPU pool's queue. If the broker is down the run says so and
    waits; the reaper sends it again (`unsent_validation_runs`), so no queued run is left behind."""
    try:
        run_validation.apply_async((run.pk,), queue=gpu_queue(run.candidate.gpu_pool or None), retry=False)
    except Exception as exc:
        logger.warning("could not queue validation run %s: %s", run.pk, exc)
        BenchmarkRun.objects.filter(pk=run.pk, status=BenchmarkRun.Status.QUEUED).update(
            enqueued_at=None, progress={"phase": "waiting for the job queue", "percent": 0}
        )
        return False
    BenchmarkRun.objects.filter(pk=run.pk, status=BenchmarkRun.Status.QUEUED).update(
        enqueued_at=timezone.now(), progress={"phase": "queued", "percent": 0}
    )
    return True
