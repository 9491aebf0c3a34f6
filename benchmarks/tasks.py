"""Celery tasks of the evidence app and their enqueue helpers. Each task takes an id, claims its
row, and is safe to run twice.

Services enqueue through the helpers here; task bodies call modules that never import this one
(`uploads.parse`, `validation.worker`), so imports stay one-way. The parse task imports the parsers
(`benchmarks.formats`, pyarrow) when it runs, and the validation tasks the worker (the storage, the
identity probe, the run's bookkeeping), as selection's render task imports the renderer: a process
that only enqueues (the web, every `manage.py` command through the admin's services) starts without
them.
"""

from __future__ import annotations

import socket
from datetime import datetime, timedelta

from celery import shared_task
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from benchmarks.models import BenchmarkRun
from benchmarks.validation.engine import EngineUnavailable
from config.celery import DatabaseTask, gpu_queue, publish
from config.outage import retry_database
from selection.domain.messages import Code, Message

UPLOAD_REQUEUE_AFTER = timedelta(seconds=30)  # an upload still `parsing` this long after arrival lost its task
WAITING_FOR_QUEUE = {"phase": "waiting for the job queue"}  # the broker refused the task; beat sends it again


@shared_task(name="benchmarks.tasks.parse_upload", base=DatabaseTask, acks_late=True)
def parse_upload(run_id: int) -> str:
    """Parse a large upload stored raw (the `parse` queue: never behind a backlog of rescorings)."""
    from benchmarks.uploads.parse import parse_stored_upload  # the parsers, loaded by the parse

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
    from benchmarks.validation import worker  # the run's machinery, loaded by the task that runs

    name = f"{self.request.hostname or socket.gethostname()}:{self.request.id}"
    try:
        run = retry_database(lambda: worker.claim(run_id, worker=name), f"run {run_id}: claiming")
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
        why = exc.message if exc.message is not None else Code(str(exc))
        shown = Message(worker.ENGINE_UNREACHABLE, {"why": why})
        return worker.finish_failed(run, f"engine unreachable: {exc}", shown).status


@shared_task(name="benchmarks.tasks.reap_stale_runs", base=DatabaseTask)
def reap_stale_runs(now: datetime | None = None) -> list[int]:
    """Fail (or store the write-ahead result of) runs whose worker stopped sending heartbeats; queue
    again uploads whose parse task was lost and validation runs no worker will otherwise pick up."""
    from benchmarks.validation import worker

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
    """Queue parsing; if the broker is down the run stays `parsing`, says it waits for the job queue, and
    the reaper queues it again."""
    if publish(parse_upload, (run.pk,)):
        return True
    BenchmarkRun.objects.filter(pk=run.pk, status=BenchmarkRun.Status.PARSING).update(progress=WAITING_FOR_QUEUE)
    return False


def enqueue_validation(run: BenchmarkRun) -> bool:
    """Queue a validation run on its GPU pool's queue. If the broker is down the run says so and
    waits; the reaper sends it again (`unsent_validation_runs`), so no queued run is left behind."""
    if not publish(run_validation, (run.pk,), queue=gpu_queue(run.candidate.gpu_pool or None)):
        BenchmarkRun.objects.filter(pk=run.pk, status=BenchmarkRun.Status.QUEUED).update(
            enqueued_at=None, progress={**WAITING_FOR_QUEUE, "percent": 0}
        )
        return False
    BenchmarkRun.objects.filter(pk=run.pk, status=BenchmarkRun.Status.QUEUED).update(
        enqueued_at=timezone.now(), progress={"phase": "queued", "percent": 0}
    )
    return True
