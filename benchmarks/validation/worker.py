"""The worker's side of a validation run: claim, heartbeat and progress, run the test against
the engine (launching it from the candidate's recipe when there is one), store the result.

This module is the only writer of a validation run's state: claim (running), requeue (queued,
while the engine is unreachable), finish (succeeded, failed, cancelled), cancel while queued,
and the reaper's verdict on a worker that stopped sending heartbeats. The run row is claimed
atomically (a redelivered task never runs a live run twice), progress and a heartbeat are
written to the row, cancellation is read from the row, and the result is stored in the same
normalised form as CI uploads.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models import F
from django.utils import timezone

from benchmarks.harness import workloads
from benchmarks.models import Artifact, BenchmarkRun
from benchmarks.storage import save_artifact, store_native_result
from benchmarks.validation.engine import EngineUnavailable, LaunchedEngine
from benchmarks.validation.target import ValidationError, check_candidate_target, healthy, target_for
from selection.capacity.measured import record_measured_capacity
from selection.models import Candidate
from selection.tasks import schedule_rescoring

logger = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 5.0
STALE_AFTER = timedelta(seconds=120)  # no heartbeat for this long: the worker is gone
PROGRESS_MIN_INTERVAL_S = 1.0
CANCEL_POLL_S = 0.5


class EndpointBusy(RuntimeError):
    """Another run is load-testing the same candidate: tests must not overlap on one engine."""


def claim(run_id: int, worker: str) -> BenchmarkRun | None:
    """Atomically take a queued run (or one whose worker died). None: someone else owns it, or it is done.

    Raises EndpointBusy while another live run tests the same candidate (their load would mix).
    """
    now = timezone.now()
    with transaction.atomic():
        candidate_id = BenchmarkRun.objects.filter(pk=run_id).values_list("candidate_id", flat=True).first()
        if candidate_id is None:
            return None
        Candidate.objects.select_for_update().filter(pk=candidate_id).first()  # serialise claims per candidate
        busy = (
            BenchmarkRun.objects.filter(
                candidate_id=candidate_id,
                status=BenchmarkRun.Status.RUNNING,
                origin=BenchmarkRun.Origin.HARNESS,
                heartbeat_at__gte=now - STALE_AFTER,
            )
            .exclude(pk=run_id)
            .exists()
        )
        if busy and BenchmarkRun.objects.filter(pk=run_id, status=BenchmarkRun.Status.QUEUED).exists():
            raise EndpointBusy(f"candidate {candidate_id} is under another test")
        return _claim(run_id, worker, now)


def _claim(run_id: int, worker: str, now) -> BenchmarkRun | None:
    fields = dict(
        status=BenchmarkRun.Status.RUNNING,
        worker=worker[:200],
        attempt=F("attempt") + 1,
        started_at=now,
        heartbeat_at=now,
        error="",
        progress={"phase": "starting", "percent": 0},
    )
    taken = BenchmarkRun.objects.filter(pk=run_id, status=BenchmarkRun.Status.QUEUED, cancel_requested=False).update(
        **fields
    )
    if not taken:
        # Redelivered after the worker died: restart from a clean state, but never beside a live worker.
        taken = BenchmarkRun.objects.filter(
            pk=run_id, status=BenchmarkRun.Status.RUNNING, heartbeat_at__lt=now - STALE_AFTER
        ).update(**fields)
        if taken:
            run = BenchmarkRun.objects.get(pk=run_id)
            run.points.all().delete()
            run.artifacts.all().delete()
    return (
        BenchmarkRun.objects.select_related("candidate__engine", "candidate__selection").get(pk=run_id)
        if taken
        else None
    )


class RunReporter:
    """Progress, heartbeat and cancel flag on the run row, all written from one background thread.

    The harness calls `progress` and `cancelled` from its event loop, where the ORM must not run:
    they only touch memory; the thread does the database work (progress at most once a second,
    a heartbeat every few seconds, the cancel flag twice a second).
    """

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self._latest: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"run-{run_id}-reporter", daemon=True)

    def __enter__(self) -> "RunReporter":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._flush()

    def progress(self, payload: dict[str, Any]) -> None:
        clean = {
            k: payload.get(k) for k in ("phase", "percent", "requests_done", "ttft_p50_ms", "achieved_concurrency")
        }
        with self._lock:
            self._latest = clean

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def _flush(self) -> None:
        with self._lock:
            latest, self._latest = self._latest, None
        if latest is not None:
            BenchmarkRun.objects.filter(pk=self.run_id).update(progress=latest, heartbeat_at=timezone.now())

    def _loop(self) -> None:
        last_progress = last_beat = 0.0
        try:
            while not self._stop.wait(CANCEL_POLL_S):
                now = time.monotonic()
                try:
                    if BenchmarkRun.objects.filter(pk=self.run_id, cancel_requested=True).exists():
                        self._cancel.set()
                    if now - last_progress >= PROGRESS_MIN_INTERVAL_S:
                        self._flush()
                        last_progress = now
                    if now - last_beat >= HEARTBEAT_INTERVAL_S:
                        BenchmarkRun.objects.filter(pk=self.run_id, status=BenchmarkRun.Status.RUNNING).update(
                            heartbeat_at=timezone.now()
                        )
                        last_beat = now
                except DatabaseError as exc:  # a busy database must not silence the heartbeat for good
                    logger.warning("run %s: reporter write failed, retrying: %s", self.run_id, exc)
                    connection.close()
        finally:
            connection.close()


def execute(run: BenchmarkRun) -> BenchmarkRun:
    """Run a claimed validation run to a terminal state. Never leaves it `running`."""
    candidate = run.candidate
    try:
        check_candidate_target(candidate)
    except ValidationError as exc:
        return finish_failed(run, str(exc))
    engine = (
        LaunchedEngine(candidate.launch_recipe, candidate.endpoint_url) if candidate.launch_recipe.strip() else None
    )
    with engine or nullcontext():
        run = _execute_against_engine(run, candidate)
    if engine is not None:
        log_bytes = engine.text().encode()
        save_artifact(run, Artifact.Kind.ENGINE_LOG, f"run-{run.pk}-engine.log", log_bytes)
        record_measured_capacity(candidate, log_bytes.decode("utf-8", "replace"), run)
    return run


def _execute_against_engine(run: BenchmarkRun, candidate: Candidate) -> BenchmarkRun:
    if not healthy(candidate.endpoint_url):
        raise EngineUnavailable(f"{candidate.endpoint_url} did not answer /health or /v1/models")
    target = target_for(candidate)
    with RunReporter(run.pk) as reporter:
        try:
            result = workloads.run_test_sync(
                run.test, target, dict(run.params), cancel=reporter.cancelled, progress=reporter.progress
            )
        except (workloads.PlanError, ValueError) as exc:
            return finish_failed(run, f"params: {exc}")
        except Exception as exc:  # the engine or network broke mid-test
            logger.exception("validation run %s failed", run.pk)
            return finish_failed(run, f"{type(exc).__name__}: {exc}")
    cancelled = reporter.cancelled()
    engine_alive = cancelled or healthy(candidate.endpoint_url)
    if not engine_alive:
        result.partial = True
        result.notes.append("The engine stopped answering during the test: the data below is partial.")
    status = (
        BenchmarkRun.Status.CANCELLED
        if cancelled
        else BenchmarkRun.Status.SUCCEEDED
        if engine_alive
        else BenchmarkRun.Status.FAILED
    )
    if cancelled:
        result.partial = True
    run = store_native_result(run=run, result=result, status=status)
    if not engine_alive:
        BenchmarkRun.objects.filter(pk=run.pk).update(
            error="engine stopped answering during the test (partial data kept)"
        )
    BenchmarkRun.objects.filter(pk=run.pk).update(progress={**(run.progress or {}), "phase": status, "percent": 100})
    with transaction.atomic():
        schedule_rescoring(candidate.selection_id)
    run.refresh_from_db()
    return run


def finish_failed(run: BenchmarkRun, error: str) -> BenchmarkRun:
    BenchmarkRun.objects.filter(pk=run.pk).update(
        status=BenchmarkRun.Status.FAILED,
        error=error[:5000],
        finished_at=timezone.now(),
        progress={**(run.progress or {}), "phase": "failed"},
    )
    run.refresh_from_db()
    return run


def reap_stale_runs(now: datetime | None = None) -> list[int]:
    """Mark runs whose worker stopped sending heartbeats as failed, with the cause."""
    now = now or timezone.now()
    stale = list(
        BenchmarkRun.objects.filter(status=BenchmarkRun.Status.RUNNING, heartbeat_at__lt=now - STALE_AFTER).values_list(
            "pk", flat=True
        )
    )
    for run_id in stale:
        BenchmarkRun.objects.filter(
            pk=run_id, status=BenchmarkRun.Status.RUNNING, heartbeat_at__lt=now - STALE_AFTER
        ).update(
            status=BenchmarkRun.Status.FAILED,
            finished_at=now,
            partial=True,
            error=f"worker lost: no heartbeat for more than {int(STALE_AFTER.total_seconds())} s (killed or crashed)",
        )
    return stale


def requeue(run_id: int, reason: str) -> None:
    """Put a claimed run back in the queue (its task retries later), saying why it waits."""
    BenchmarkRun.objects.filter(pk=run_id, status=BenchmarkRun.Status.RUNNING).update(
        status=BenchmarkRun.Status.QUEUED, progress={"phase": reason, "percent": 0}
    )


def cancel_queued(run_id: int) -> bool:
    """Cancel a run no worker has picked up yet (a running one stops at its next cancel poll)."""
    return bool(
        BenchmarkRun.objects.filter(pk=run_id, status=BenchmarkRun.Status.QUEUED).update(
            status=BenchmarkRun.Status.CANCELLED,
            finished_at=timezone.now(),
            progress={"phase": "cancelled", "percent": 0},
        )
    )
