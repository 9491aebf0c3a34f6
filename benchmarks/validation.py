"""Validation runs: plan the five tests for a candidate, queue them, and execute one in a worker.

The execution side is written for a Celery worker on a GPU node: the run row is claimed
atomically (a redelivered task never runs a live run twice), progress and a heartbeat are
written to the row, cancellation is read from the row, and the result is stored in the same
normalised form as CI uploads.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from datetime import timedelta
from typing import Any
from urllib.parse import urljoin

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from selection.models import Candidate
from selection.secretbox import decrypt

from . import services
from .harness import safety, workloads
from .models import BenchmarkRun
from .result import VALIDATION_TEST_NAMES

logger = logging.getLogger(__name__)

VALIDATION_TESTS = VALIDATION_TEST_NAMES
HEARTBEAT_INTERVAL_S = 5.0
STALE_AFTER = timedelta(seconds=120)  # no heartbeat for this long: the worker is gone
PROGRESS_MIN_INTERVAL_S = 1.0
CANCEL_POLL_S = 0.5
ENGINE_SLUGS = {"vllm": "vllm", "sglang": "sglang", "lmdeploy": "lmdeploy", "tgi": "tgi", "tensorrt-llm": "trtllm",
                "llama-cpp": "llamacpp", "simulator": "simulator"}


class ValidationError(ValueError):
    pass


def plan_for(candidate: Candidate, test: str) -> dict[str, Any]:
    """The test's default parameters derived from the selection's constraints (editable)."""
    constraints = candidate.selection.constraints.as_domain() if hasattr(candidate.selection, "constraints") else {}
    kwargs = {}
    if test == "long_context":
        kwargs["max_model_len"] = (candidate.measured_capacity or {}).get("max_model_len")
    plan = workloads.plan(test, constraints, **kwargs)
    if test == "prefix_reuse" and plan.get("kv_capacity_tokens") is None:
        plan["kv_capacity_tokens"] = kv_capacity_tokens(candidate)
    return plan


def kv_capacity_tokens(candidate: Candidate) -> int | None:
    """The candidate's KV-cache capacity in tokens: measured (engine log) when known, else the
    capacity model's prediction; it turns an engine's KV usage ratio into tokens (prefix test)."""
    measured = (candidate.measured_capacity or {}).get("token_capacity")
    if measured:
        return int(measured)
    from selection.capacity import plan_for_candidate
    from selection.domain.capacity import CapacityError

    try:
        return int(plan_for_candidate(candidate)["token_capacity"])
    except (CapacityError, KeyError, TypeError) as exc:
        logger.info("no KV capacity for candidate %s: %s", candidate.pk, exc)
        return None


def validation_plan(candidate: Candidate) -> dict[str, dict[str, Any]]:
    return {test: plan_for(candidate, test) for test in VALIDATION_TESTS}


def check_candidate_target(candidate: Candidate) -> None:
    """Refuse endpoints outside KVSELECT_ALLOWED_TARGETS (and link-local/metadata) before any connection."""
    if not candidate.endpoint_url:
        raise ValidationError("endpoint_url: the candidate has no endpoint to test")
    for field, url in (("endpoint_url", candidate.endpoint_url), ("metrics_url", candidate.metrics_url)):
        if url:
            try:
                safety.check_target(url, settings.KVSELECT_ALLOWED_TARGETS)
            except safety.TargetRefused as exc:
                raise ValidationError(f"{field}: {str(exc).split(': ', 1)[-1]}") from exc


@transaction.atomic
def start_validation(*, candidate: Candidate, test: str, user, params: dict[str, Any] | None = None,
                     label: str = "") -> BenchmarkRun:
    from selection.services import _require_editor, audit

    _require_editor(user, candidate.selection)
    if test not in VALIDATION_TESTS:
        raise ValidationError(f"test: must be one of {', '.join(VALIDATION_TESTS)}, got {test!r}")
    check_candidate_target(candidate)
    merged = plan_for(candidate, test)
    merged.update(params or {})
    run = BenchmarkRun.objects.create(candidate=candidate, test=test, label=label[:200], origin=BenchmarkRun.Origin.HARNESS,
                                      status=BenchmarkRun.Status.QUEUED, params=merged, uploaded_by=user.get_username(),
                                      progress={"phase": "queued", "percent": 0})
    audit(candidate.selection, user, "validation.started", field=f"run:{run.pk}", new={"test": test, "params": merged})
    from selection.models import Selection

    Selection.objects.filter(pk=candidate.selection_id, status=Selection.Status.DRAFT).update(
        status=Selection.Status.VALIDATING)
    transaction.on_commit(lambda: enqueue_validation(run))
    return run


def enqueue_validation(run: BenchmarkRun) -> bool:
    from config.celery import gpu_queue

    from .tasks import run_validation

    try:
        run_validation.apply_async((run.pk,), queue=gpu_queue(run.candidate.gpu_pool or None), retry=False)
        return True
    except Exception as exc:
        logger.warning("could not queue validation run %s: %s", run.pk, exc)
        BenchmarkRun.objects.filter(pk=run.pk).update(progress={"phase": "waiting for the job queue", "percent": 0})
        return False


def request_cancel(run: BenchmarkRun, user) -> BenchmarkRun:
    from selection.services import _require_editor, audit

    _require_editor(user, run.candidate.selection)
    if run.is_terminal:
        return run
    with transaction.atomic():
        BenchmarkRun.objects.filter(pk=run.pk).update(cancel_requested=True)
        # A run no worker has picked up yet is cancelled at once.
        BenchmarkRun.objects.filter(pk=run.pk, status=BenchmarkRun.Status.QUEUED).update(
            status=BenchmarkRun.Status.CANCELLED, finished_at=timezone.now(), progress={"phase": "cancelled", "percent": 0})
        audit(run.candidate.selection, user, "validation.cancel_requested", field=f"run:{run.pk}")
    run.refresh_from_db()
    return run


# ----------------------------------------------------------------------------- worker side


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
        busy = BenchmarkRun.objects.filter(candidate_id=candidate_id, status=BenchmarkRun.Status.RUNNING,
                                           origin=BenchmarkRun.Origin.HARNESS,
                                           heartbeat_at__gte=now - STALE_AFTER).exclude(pk=run_id).exists()
        if busy and BenchmarkRun.objects.filter(pk=run_id, status=BenchmarkRun.Status.QUEUED).exists():
            raise EndpointBusy(f"candidate {candidate_id} is under another test")
        return _claim(run_id, worker, now)


def _claim(run_id: int, worker: str, now) -> BenchmarkRun | None:
    fields = dict(status=BenchmarkRun.Status.RUNNING, worker=worker[:200], attempt=F("attempt") + 1, started_at=now,
                  heartbeat_at=now, error="", progress={"phase": "starting", "percent": 0})
    taken = BenchmarkRun.objects.filter(pk=run_id, status=BenchmarkRun.Status.QUEUED, cancel_requested=False).update(**fields)
    if not taken:
        # Redelivered after the worker died: restart from a clean state, but never beside a live worker.
        taken = BenchmarkRun.objects.filter(pk=run_id, status=BenchmarkRun.Status.RUNNING,
                                            heartbeat_at__lt=now - STALE_AFTER).update(**fields)
        if taken:
            run = BenchmarkRun.objects.get(pk=run_id)
            run.points.all().delete()
            run.artifacts.all().delete()
    return BenchmarkRun.objects.select_related("candidate__engine", "candidate__selection").get(pk=run_id) if taken else None


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
        clean = {k: payload.get(k) for k in ("phase", "percent", "requests_done", "ttft_p50_ms", "achieved_concurrency")}
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
        from django.db import connection

        from django.db import DatabaseError

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
                            heartbeat_at=timezone.now())
                        last_beat = now
                except DatabaseError as exc:  # a busy database must not silence the heartbeat for good
                    logger.warning("run %s: reporter write failed, retrying: %s", self.run_id, exc)
                    connection.close()
        finally:
            connection.close()


def _probe_simulator(url: str) -> bool:
    """True when the endpoint is kvselect's simulator (its /metrics carries kvsim_info)."""
    try:
        with urllib.request.urlopen(urljoin(url.rstrip("/") + "/", "/metrics"), timeout=3) as response:  # noqa: S310
            return b"kvsim_info" in response.read(2_000_000)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _healthy(url: str) -> bool:
    """True when the engine answers. A 5xx from /health is final: a crashed engine may still list its
    models. /v1/models is asked only when /health is missing (404) or unreachable."""
    for path in ("/health", "/v1/models"):
        try:
            with urllib.request.urlopen(urljoin(url.rstrip("/") + "/", path), timeout=3) as response:  # noqa: S310
                if response.status < 500:
                    return True
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:
                return False
            if not (exc.code == 404 and path == "/health"):
                return True
        except (urllib.error.URLError, OSError, ValueError):
            continue
    return False


def target_for(candidate: Candidate) -> workloads.Target:
    simulated = _probe_simulator(candidate.metrics_url or candidate.endpoint_url)
    engine = "simulator" if simulated else ENGINE_SLUGS.get(candidate.engine.slug, "auto")
    base = candidate.endpoint_url.rstrip("/")
    return workloads.Target(endpoint_url=base, model=candidate.model_name or "default",
                            api_key=decrypt(candidate.api_key_encrypted) or None,
                            metrics_url=candidate.metrics_url or f"{base}/metrics", engine=engine,
                            evidence="SIMULATED" if simulated else "MEASURED",
                            allowed_hosts=list(settings.KVSELECT_ALLOWED_TARGETS))


class EngineUnavailable(RuntimeError):
    """The engine did not answer before the load started (the task may retry)."""


class LaunchedEngine:
    """The candidate's launch recipe, run by the worker: start, wait for /health, stop, keep the log.

    The recipe is an argument list (shlex-split, never a shell) that only the selection's
    architects can set; its output goes to a log file that becomes the run's `engine_log`
    artifact and is parsed for the KV capacity the engine really allocated.
    """

    def __init__(self, recipe: str, endpoint_url: str, startup_timeout_s: float = 600.0) -> None:
        import shlex
        import tempfile

        self.argv = shlex.split(recipe)
        if not self.argv:
            raise ValidationError("launch_recipe: empty command")
        self.endpoint_url = endpoint_url
        self.startup_timeout_s = startup_timeout_s
        self.log = tempfile.NamedTemporaryFile(prefix="kvselect-engine-", suffix=".log", delete=False)
        self.process = None

    def __enter__(self) -> "LaunchedEngine":
        import subprocess

        try:
            self.process = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise EngineUnavailable(f"launch_recipe: could not start {self.argv[0]!r}: {exc.strerror or exc}") from exc
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EngineUnavailable(f"launch_recipe: the engine exited with status {self.process.returncode} "
                                        f"before it was healthy; last log lines: {self.tail()}")
            if _healthy(self.endpoint_url):
                return self
            time.sleep(1.0)
        self.stop()
        raise EngineUnavailable(f"launch_recipe: not healthy within {self.startup_timeout_s:.0f} s")

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        import os
        import signal

        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=30)
            except (ProcessLookupError, PermissionError):
                pass
            except Exception:  # still alive after 30 s
                os.killpg(self.process.pid, signal.SIGKILL)
        self.log.flush()

    def text(self) -> str:
        with open(self.log.name, "rb") as handle:
            return handle.read().decode("utf-8", "replace")

    def tail(self, lines: int = 5) -> str:
        return " | ".join(self.text().strip().splitlines()[-lines:])


def record_measured_capacity(candidate: Candidate, log_text: str, run: BenchmarkRun) -> dict[str, Any] | None:
    """Store what the engine's log says it allocated, next to the capacity model's prediction."""
    from selection.capacity import plan_for_candidate
    from selection.domain.capacity import CapacityError, parse_engine_capacity_log

    found = parse_engine_capacity_log(log_text)
    if not found.get("kv_cache_tokens"):
        return None
    measured = {"token_capacity": found["kv_cache_tokens"], "source": f"engine log of run {run.pk}",
                "run_ids": [run.pk], "evidence": run.evidence, **{k: v for k, v in found.items() if k != "kv_cache_tokens"}}
    try:
        measured["predicted_token_capacity"] = plan_for_candidate(candidate)["token_capacity"]
    except CapacityError as exc:
        measured["prediction_error"] = str(exc)
    Candidate.objects.filter(pk=candidate.pk).update(measured_capacity=measured)
    return measured


def execute(run: BenchmarkRun) -> BenchmarkRun:
    """Run a claimed validation run to a terminal state. Never leaves it `running`."""
    from contextlib import nullcontext

    candidate = run.candidate
    try:
        check_candidate_target(candidate)
    except ValidationError as exc:
        return _finish_failed(run, str(exc))
    engine = LaunchedEngine(candidate.launch_recipe, candidate.endpoint_url) if candidate.launch_recipe.strip() else None
    with engine or nullcontext():
        run = _execute_against_engine(run, candidate)
    if engine is not None:
        log_bytes = engine.text().encode()
        from django.core.files.base import ContentFile

        from .models import Artifact

        artifact = Artifact(run=run, kind=Artifact.Kind.ENGINE_LOG, sha256=services.sha256_hex(log_bytes),
                            size=len(log_bytes))
        artifact.file.save(f"run-{run.pk}-engine.log", ContentFile(log_bytes), save=True)
        record_measured_capacity(candidate, log_bytes.decode("utf-8", "replace"), run)
    return run


def _execute_against_engine(run: BenchmarkRun, candidate: Candidate) -> BenchmarkRun:
    if not _healthy(candidate.endpoint_url):
        raise EngineUnavailable(f"{candidate.endpoint_url} did not answer /health or /v1/models")
    target = target_for(candidate)
    with RunReporter(run.pk) as reporter:
        try:
            result = workloads.run_test_sync(run.test, target, dict(run.params), cancel=reporter.cancelled,
                                             progress=reporter.progress)
        except (workloads.PlanError, ValueError) as exc:
            return _finish_failed(run, f"params: {exc}")
        except Exception as exc:  # the engine or network broke mid-test
            logger.exception("validation run %s failed", run.pk)
            return _finish_failed(run, f"{type(exc).__name__}: {exc}")
    cancelled = reporter.cancelled()
    engine_alive = cancelled or _healthy(candidate.endpoint_url)
    if not engine_alive:
        result.partial = True
        result.notes.append("The engine stopped answering during the test: the data below is partial.")
    status = (BenchmarkRun.Status.CANCELLED if cancelled else
              BenchmarkRun.Status.SUCCEEDED if engine_alive else BenchmarkRun.Status.FAILED)
    if cancelled:
        result.partial = True
    run = services.store_native_result(run=run, result=result, status=status)
    if not engine_alive:
        BenchmarkRun.objects.filter(pk=run.pk).update(error="engine stopped answering during the test (partial data kept)")
    BenchmarkRun.objects.filter(pk=run.pk).update(progress={**(run.progress or {}), "phase": status, "percent": 100})
    from selection.services import schedule_rescoring

    with transaction.atomic():
        schedule_rescoring(candidate.selection_id)
    run.refresh_from_db()
    return run


def _finish_failed(run: BenchmarkRun, error: str) -> BenchmarkRun:
    BenchmarkRun.objects.filter(pk=run.pk).update(status=BenchmarkRun.Status.FAILED, error=error[:5000],
                                                  finished_at=timezone.now(),
                                                  progress={**(run.progress or {}), "phase": "failed"})
    run.refresh_from_db()
    return run


def reap_stale_runs(now=None) -> list[int]:
    """Mark runs whose worker stopped sending heartbeats as failed, with the cause."""
    now = now or timezone.now()
    stale = list(BenchmarkRun.objects.filter(status=BenchmarkRun.Status.RUNNING, heartbeat_at__lt=now - STALE_AFTER)
                 .values_list("pk", flat=True))
    for run_id in stale:
        BenchmarkRun.objects.filter(pk=run_id, status=BenchmarkRun.Status.RUNNING,
                                    heartbeat_at__lt=now - STALE_AFTER).update(
            status=BenchmarkRun.Status.FAILED, finished_at=now, partial=True,
            error=f"worker lost: no heartbeat for more than {int(STALE_AFTER.total_seconds())} s (killed or crashed)")
    # Uploads waiting for a broker that was down: queue their parsing again.
    for run in BenchmarkRun.objects.filter(status=BenchmarkRun.Status.PARSING, origin=BenchmarkRun.Origin.UPLOAD,
                                           created_at__lt=now - timedelta(seconds=30)):
        services.enqueue_parse(run)
    return stale
