"""The worker's side of a validation run: claim, heartbeat and progress, run the test against
the engine (launching it from the candidate's recipe when there is one), store the result.

This module is the only writer of a validation run's state: claim (running), requeue (queued,
while the engine is unreachable), finish (succeeded, failed, cancelled), cancel while queued,
and the reaper's verdict on a worker that stopped sending heartbeats. The run row is claimed
atomically (a redelivered task never runs a live run twice), progress and a heartbeat are
written to the row, cancellation is read from the row, and the result is stored in the same
normalised form as CI uploads. The load itself is `loadtest`'s, imported when a claimed run starts
its load: claiming, reaping and cancelling (the web, beat) never load the load generator.

Liveness: a background thread writes a heartbeat every `KVSELECT_HEARTBEAT_INTERVAL_S` (5 s) from
the claim until the run is terminal (engine launch and storing included); a run without one for
`KVSELECT_HEARTBEAT_STALE_S` (30 s) is reaped by the task beat runs every
`KVSELECT_REAPER_INTERVAL_S` (15 s): a dead worker is detected within 30 + 15 = 45 s.

Durability: a finished result is written to its write-ahead file before the database
(`storage.write_pending`), then stored in one transaction that is retried, on a fresh
connection, while the database is restarting (`KVSELECT_STORE_RETRY_S`, 10 min). The reaper
stores a stale run's write-ahead result instead of failing it, and says why it had to.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Any, Mapping

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from benchmarks import suite
from benchmarks.harness import identity
from benchmarks.models import Artifact, BenchmarkRun, HardwareSlot
from benchmarks.result import NormalizedResult
from benchmarks.storage import (
    discard_pending,
    pending_envelope,
    read_pending,
    save_artifact,
    store_native_result,
    write_pending,
)
from benchmarks.validation.engine import EngineUnavailable, LaunchedEngine
from benchmarks.validation.hardware import hardware_keys, origin_of, shared
from benchmarks.validation.target import (
    ValidationError,
    check_candidate_target,
    healthy,
    refused_urls,
)
from config.outage import DATABASE, retry_database
from selection.candidates.probing import probe_before_run
from selection.capacity.stating import record_measured_capacity
from selection.domain.messages import LABEL_SEPARATOR, NAME_SEPARATOR, Code, Join, Message, load
from selection.domain.messages import marked as _
from selection.models import Candidate
from selection.tasks import schedule_rescoring

logger = logging.getLogger(__name__)

PROGRESS_MIN_INTERVAL_S = 1.0
CANCEL_POLL_S = 0.5
WORKER_LOST = "worker lost"  # how the reaper's verdict begins (a live worker may take its run back)


def heartbeat_interval_s() -> float:
    return float(settings.KVSELECT_HEARTBEAT_INTERVAL_S)


def stale_after() -> timedelta:
    """No heartbeat for this long: the worker is gone."""
    return timedelta(seconds=float(settings.KVSELECT_HEARTBEAT_STALE_S))


class HardwareBusy(RuntimeError):
    """Another live run loads hardware this run needs (the same candidate, GPU pool or engine host):
    runs sharing hardware would measure each other, so this one waits. `holder` says who holds it
    (`waiting_for`)."""

    def __init__(self, holder: dict[str, Any]) -> None:
        self.holder = holder
        super().__init__(f"waiting for {', '.join(holder.get('hardware') or ['the candidate'])}: run {holder['run']}")


def machine_name() -> str:
    """The machine this worker runs on (loopback endpoints are on it)."""
    return socket.gethostname()


def simulated_devices(candidate: Candidate) -> dict[str, str]:
    """origin -> simulated GPU, for each of the candidate's engine endpoints that answers as kvselect's
    simulator (`identity.simulated_device`), asked before the claim; only URLs the outbound
    allow-list lets the worker reach (resolved now, as before a run: nothing is sent when a name
    resolves to a refused address). An endpoint that does not answer is left out (its host's key)."""
    urls = [u for u in (candidate.endpoint_url, candidate.prefix_off_endpoint_url) if u]
    if not urls or refused_urls({str(i): u for i, u in enumerate(urls)}):
        return {}
    devices = {}
    for url in urls:
        origin = origin_of(url)
        if origin is not None and origin not in devices:
            device = identity.simulated_device(url, allowed_hosts=settings.KVSELECT_ALLOWED_TARGETS)
            if device:
                devices[origin] = device
    return devices


def run_hardware(
    candidate: Candidate, machine: str | None = None, devices: Mapping[str, str] | None = None
) -> list[str]:
    """The hardware keys a run of `candidate` loads (`validation.hardware`); `devices`: the simulated
    GPUs its endpoints said they are (`simulated_devices`)."""
    urls = (
        candidate.endpoint_url,
        candidate.metrics_url,
        candidate.prefix_off_endpoint_url,
        candidate.prefix_off_metrics_url,
    )
    return hardware_keys(gpu_pool=candidate.gpu_pool, urls=urls, machine=machine or machine_name(), devices=devices)


def claim(
    run_id: int, worker: str, machine: str | None = None, devices: Mapping[str, str] | None = None
) -> BenchmarkRun | None:
    """Atomically take a queued run (or one whose worker died). None: someone else owns it, or it is done.

    Raises HardwareBusy while another live run loads the same candidate or any of the hardware this
    run needs (its GPU pool, its engine's hosts or simulated GPUs): their loads would mix. The waiting
    run's progress names the run holding it. Claims lock the hardware's rows (`HardwareSlot`, in key
    order) so that two workers never both see the hardware free. `devices` (tests): the simulated GPUs
    the endpoints name, else asked here, before the transaction (no network inside it)."""
    if devices is None:
        endpoints = Candidate.objects.filter(runs__pk=run_id).first()
        devices = simulated_devices(endpoints) if endpoints is not None else {}
    now = timezone.now()
    with transaction.atomic():
        candidate = (
            Candidate.objects.filter(runs__pk=run_id).select_related("selection").first()
        )  # serialise claims per candidate and per hardware key
        if candidate is None:
            return None
        keys = run_hardware(candidate, machine, devices)
        for key in keys:
            HardwareSlot.objects.get_or_create(key=key)
        list(HardwareSlot.objects.select_for_update().filter(key__in=keys).order_by("key"))
        Candidate.objects.select_for_update().filter(pk=candidate.pk).first()
        holder = hardware_holder(run_id, candidate, keys, now) or earlier_queued_run(run_id, candidate)
        queued = BenchmarkRun.objects.filter(pk=run_id, status=BenchmarkRun.Status.QUEUED).exists()
        if holder is None or not queued:
            return _claim(run_id, worker, now, keys)
    BenchmarkRun.objects.filter(pk=run_id, status=BenchmarkRun.Status.QUEUED).update(
        progress={"phase": "waiting for the hardware", "percent": 0, "waiting_for": holder}
    )
    raise HardwareBusy(holder)


def earlier_queued_run(run_id: int, candidate: Candidate) -> dict[str, Any] | None:
    """The candidate's oldest validation run queued before `run_id`, as a waiting run shows it: a
    candidate's runs start in the order they were queued (whichever task retries first when the
    hardware frees would otherwise take it). None when `run_id` is the oldest. A run whose message
    was lost is sent again by the reaper (`tasks.unsent_validation_runs`), so nothing waits forever."""
    earlier = (
        BenchmarkRun.objects.filter(
            candidate=candidate,
            status=BenchmarkRun.Status.QUEUED,
            origin=BenchmarkRun.Origin.HARNESS,
            cancel_requested=False,
            pk__lt=run_id,
        )
        .order_by("pk")
        .first()
    )
    if earlier is None:
        return None
    return {
        "run": earlier.pk,
        "test": earlier.test,
        "candidate": candidate.display_name,
        "other_selection": False,
        "hardware": [],
        "since": None,
    }


def hardware_holder(run_id: int, candidate: Candidate, keys: list[str], now: datetime) -> dict[str, Any] | None:
    """The live run holding hardware that `run_id` needs, as a waiting run shows it: its id and test,
    the shared hardware, and its candidate only when it is in the same selection (another team's
    candidates stay unnamed). None when nothing is held."""
    live = (
        BenchmarkRun.objects.filter(
            status=BenchmarkRun.Status.RUNNING,
            origin=BenchmarkRun.Origin.HARNESS,
            heartbeat_at__gte=now - stale_after(),
        )
        .exclude(pk=run_id)
        .select_related("candidate")
        .order_by("started_at", "pk")
    )
    for other in live:
        common = shared(other.hardware or [], keys)
        if other.candidate_id != candidate.pk and not common:
            continue
        same_selection = other.candidate.selection_id == candidate.selection_id
        return {
            "run": other.pk,
            "test": other.test,
            "candidate": other.candidate.display_name if same_selection else None,
            "other_selection": not same_selection,
            "hardware": common,
            "since": other.started_at.isoformat() if other.started_at else None,
        }
    return None


def _claim(run_id: int, worker: str, now, hardware: list[str]) -> BenchmarkRun | None:
    fields = dict(
        status=BenchmarkRun.Status.RUNNING,
        hardware=hardware,
        worker=worker[:200],
        attempt=F("attempt") + 1,
        started_at=now,
        heartbeat_at=now,
        error="",
        error_message=None,
        progress={"phase": "starting", "percent": 0},
    )
    taken = BenchmarkRun.objects.filter(pk=run_id, status=BenchmarkRun.Status.QUEUED, cancel_requested=False).update(
        **fields
    )
    if not taken:
        # Redelivered after the worker died: restart from a clean state, but never beside a live worker.
        taken = BenchmarkRun.objects.filter(
            pk=run_id, status=BenchmarkRun.Status.RUNNING, heartbeat_at__lt=now - stale_after()
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


def owned_by(attempt: int) -> Q:
    """The rows an attempt still owns: running under it, or reaped as lost while it was in fact alive
    (the database was away longer than the heartbeat threshold): the live worker takes it back."""
    return Q(attempt=attempt) & (
        Q(status=BenchmarkRun.Status.RUNNING) | Q(status=BenchmarkRun.Status.FAILED, error__startswith=WORKER_LOST)
    )


def with_reconnect(operation, what: str, budget_s: float | None = None):
    """Run a database operation; on a lost connection (a restart, a failover) reconnect and retry
    with backoff for up to `budget_s` (KVSELECT_STORE_RETRY_S), then raise the last error (one log
    line per outage: `config.outage`)."""
    return retry_database(operation, what, budget_s)


class RunReporter:
    """Heartbeat, progress and cancel flag on the run row, all written from one background thread.

    It runs from the claim until the run is terminal. The harness calls `progress` and `cancelled`
    from its event loop, where the ORM must not run: they only touch memory; the thread does the
    database work (progress at most once a second, a heartbeat every few seconds, the cancel flag
    twice a second) on its own connection, reconnecting after a database restart. Nothing here
    raises into the caller: a lost progress update is only a stale percentage.
    """

    def __init__(self, run_id: int, attempt: int) -> None:
        self.run_id, self.attempt = run_id, attempt
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
        self._thread.join(timeout=15)

    def progress(self, payload: dict[str, Any]) -> None:
        clean = {
            k: payload.get(k) for k in ("phase", "percent", "requests_done", "ttft_p50_ms", "achieved_concurrency")
        }
        with self._lock:
            self._latest = clean

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def _rows(self):
        return BenchmarkRun.objects.filter(pk=self.run_id, attempt=self.attempt, status=BenchmarkRun.Status.RUNNING)

    def _flush(self) -> None:
        with self._lock:
            latest = self._latest
        if latest is not None:
            self._rows().update(progress=latest, heartbeat_at=timezone.now())
            with self._lock:
                if self._latest is latest:
                    self._latest = None

    def _beat(self) -> None:
        now = timezone.now()
        if self._rows().update(heartbeat_at=now):
            return
        revived = BenchmarkRun.objects.filter(owned_by(self.attempt), pk=self.run_id).exclude(
            status=BenchmarkRun.Status.RUNNING
        )
        revive = {"status": BenchmarkRun.Status.RUNNING, "error": "", "error_message": None, "finished_at": None}
        if revived.update(**revive, heartbeat_at=now):
            logger.warning("run %s: reaped as lost while its worker was alive; taken back", self.run_id)

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
                    if now - last_beat >= heartbeat_interval_s():
                        self._beat()
                        last_beat = now
                    DATABASE.recovered()
                except DatabaseError as exc:  # a restarting database must not silence the heartbeat for good
                    DATABASE.failed(exc, f"run {self.run_id}'s progress reporter")  # one line per outage
                    logger.debug("run %s: reporter write failed, retrying: %s", self.run_id, exc)
                    connection.close()
        finally:
            connection.close()


def execute(run: BenchmarkRun) -> BenchmarkRun:
    """Run a claimed validation run to a terminal state, with a heartbeat throughout."""
    with RunReporter(run.pk, run.attempt) as reporter:
        return _execute(run, reporter)


def _execute(run: BenchmarkRun, reporter: RunReporter) -> BenchmarkRun:
    candidate = run.candidate
    try:
        check_candidate_target(candidate)
    except ValidationError as exc:  # the allow-list refused a URL: the page says why in its language
        field = str(exc).partition(": ")[0]
        shown = None if exc.reason is None else Join([Code(field), exc.reason], LABEL_SEPARATOR)
        return finish_failed(run, str(exc), shown)
    engine = (
        LaunchedEngine(candidate.launch_recipe, candidate.endpoint_url) if candidate.launch_recipe.strip() else None
    )
    with engine or nullcontext():
        run = _execute_against_engine(run, candidate, reporter, launched=engine is not None)
    if engine is not None:
        log_bytes = engine.text().encode()

        def keep_log() -> None:
            save_artifact(run, Artifact.Kind.ENGINE_LOG, f"run-{run.pk}-engine.log", log_bytes)
            record_measured_capacity(candidate, log_bytes.decode("utf-8", "replace"), run)

        with_reconnect(keep_log, f"run {run.pk}: engine log")
    return run


def _execute_against_engine(
    run: BenchmarkRun, candidate: Candidate, reporter: RunReporter, launched: bool = False
) -> BenchmarkRun:
    from benchmarks.validation import loadtest  # the load generator, loaded when a run starts its load

    if not healthy(candidate.endpoint_url):
        raise EngineUnavailable(
            f"{candidate.endpoint_url} did not answer /health or /v1/models", no_answer(candidate.endpoint_url)
        )
    # what the engine runs as and on, asked before the load (the run records it; another model is refused)
    provenance = probe_before_run(candidate, launched=launched)
    if provenance["refusal"]:
        refused = provenance.get("refusal_message") or Code(provenance["refusal"])
        return finish_failed(
            run, f"model_name: {provenance['refusal']}", Join([Code("model_name"), refused], LABEL_SEPARATOR)
        )
    target = loadtest.target_for(candidate)
    extra: dict[str, Any] = {}
    if suite.BY_ID[run.test].off_variant:
        off = loadtest.prefix_off_target_for(candidate, target)
        if off is not None and off.endpoint_url != target.endpoint_url and not healthy(off.endpoint_url):
            raise EngineUnavailable(
                f"prefix_off_endpoint_url: {off.endpoint_url} did not answer /health or /v1/models",
                Join([Code("prefix_off_endpoint_url"), no_answer(off.endpoint_url)], LABEL_SEPARATOR),
            )
        extra["off_target"] = off
    load_at_start = load_average()
    try:
        result = loadtest.run_test(
            run.test, target, dict(run.params), cancel=reporter.cancelled, progress=reporter.progress, **extra
        )
    except (loadtest.PlanError, ValueError) as exc:
        return finish_failed(run, f"params: {exc}", Message(PARAMS_REFUSED, {"problem": Code(str(exc))}))
    except Exception as exc:  # the engine or network broke mid-test
        logger.exception("validation run %s failed", run.pk)
        error = f"{type(exc).__name__}: {exc}"
        return finish_failed(run, error, Message(STOPPED_ON_ERROR, {"error": Code(error)}))
    try:
        record_host_activity(run, result, load_at_start)
    except (OperationalError, InterfaceError) as exc:  # never hold the result back for it: finish() writes it ahead
        connection.close()  # a restart killed this connection; finish() stores on a fresh one
        result.add_note(Message(HOST_ACTIVITY_UNCHECKED, {"error": str(exc)}))
    result.metadata["engine_host"] = {k: provenance[k] for k in ("at", "identity", "findings", "kept_model")}
    cancelled = reporter.cancelled()
    stopped_points = [p for p in result.points if p.extra.get("stopped_early")]
    stopped = [p.extra["stopped_early"] for p in stopped_points]
    engine_alive = cancelled or (not stopped and healthy(candidate.endpoint_url))
    error, message = "", None
    if stopped and not cancelled:
        result.partial = True
        why = load(stopped_points[0].extra.get("stopped_early_message")) or Code(stopped[0])
        message = Message(STOPPED_EARLY, {"why": why})
        result.add_note(message)
        error = f"stopped early: {stopped[0]} (partial data kept)"
    elif not engine_alive:
        result.partial = True
        message = Message(ENGINE_GONE)
        result.add_note(message)
        error = "engine stopped answering during the test (partial data kept)"
    status = (
        BenchmarkRun.Status.CANCELLED
        if cancelled
        else BenchmarkRun.Status.SUCCEEDED
        if engine_alive
        else BenchmarkRun.Status.FAILED
    )
    if cancelled:
        result.partial = True
    return finish(run, result, status, error, message)


def no_answer(url: str) -> Message:
    """The engine at `url` answered neither health check (EngineUnavailable's message)."""
    return Message(NO_ANSWER, {"url": Code(url), "health": Code("/health"), "models": Code("/v1/models")})


def rescore(run: BenchmarkRun) -> None:
    """A finished run is new evidence: stamp its selection and queue the rescoring (in the storing transaction)."""
    schedule_rescoring(run.candidate.selection_id)


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages of the worker's machine (None where the OS has none)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def worker_machine(worker: str) -> str:
    """The machine part of a run's `worker` ("celery@node-3:<task id>" -> "celery@node-3")."""
    return worker.rsplit(":", 1)[0] if ":" in worker else worker


def overlapping_runs(run: BenchmarkRun, until: datetime) -> list[dict[str, Any]]:
    """The other validation runs that ran while `run` did, on its hardware or from its load client's
    machine, with what they shared and for how long (another team's candidate stays unnamed)."""
    if run.started_at is None:
        return []
    others = (
        BenchmarkRun.objects.filter(origin=BenchmarkRun.Origin.HARNESS, started_at__lt=until)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=run.started_at))
        .exclude(pk=run.pk)
        .exclude(started_at__isnull=True)
        .select_related("candidate")
        .order_by("started_at", "pk")
    )
    machine = worker_machine(run.worker or "")
    found = []
    for other in others:
        common = shared(other.hardware or [], run.hardware or [])
        same_client = bool(machine) and worker_machine(other.worker or "") == machine
        if not common and not same_client and other.candidate_id != run.candidate_id:
            continue
        end = min(other.finished_at or until, until)
        same_selection = other.candidate.selection_id == run.candidate.selection_id
        found.append(
            {
                "run": other.pk,
                "test": other.test,
                "candidate": other.candidate.display_name if same_selection else None,
                "shared_hardware": common,
                "same_load_client": same_client,
                "overlap_s": round(max((end - max(other.started_at, run.started_at)).total_seconds(), 0.0), 1),
            }
        )
    return found


# the host-activity notes (`record_host_activity`): English in run.notes, messages beside them
# (metadata["note_messages"], by the note's index) for pages in any language
RAN_BESIDE = _(
    "Run %(run)s (%(test)s) ran beside this one for %(seconds)s s on %(where)s: latencies and throughput here may "
    "carry its load."
)
SAME_LOAD_CLIENT = _("the same load client")
SATURATED = _(
    "The load client's machine was saturated (1-minute load average %(load)s on %(cpus)s CPUs): client timings may "
    "carry other work."
)


# the worker's other notes (English in run.notes, messages beside them)
HOST_ACTIVITY_UNCHECKED = _(
    "Other runs on this hardware could not be checked: the database was unavailable (%(error)s)."
)
STOPPED_EARLY = _("The load stopped early: %(why)s. The data below is partial.")
ENGINE_GONE = _("The engine stopped answering during the test: the data below is partial.")
STORED_BY_REAPER = _("Stored by the reaper from the worker's write-ahead file (written %(written)s): %(cause)s.")
WRITE_REFUSED = _("the database refused the worker's write (%(error)s) and the worker stopped before a retry succeeded")
NO_ANSWER = _("%(url)s did not answer %(health)s or %(models)s")
ENGINE_UNREACHABLE = _("the engine could not be reached: %(why)s")
PARAMS_REFUSED = _("the test's parameters cannot run: %(problem)s")
STOPPED_ON_ERROR = _("the test stopped on an error: %(error)s")
WORKER_LOST_MESSAGE = _(
    "the worker sent no heartbeat for more than %(seconds)s s (killed or crashed); no result was stored, "
    "so the run has no data"
)
WORKER_STOPPED = _("the worker stopped (killed or crashed) after the test finished, before it was stored")


# Notes stored before pages named a test by its title held Message(test id, TEST_CONTEXT): the .po keeps
# those entries so they still read as titles in Chinese.
TEST_CONTEXT = "validation test id"


def _test_title(test_id: str) -> str | Message:
    """A test as a page's note names it: its title in the page's language (an English page shows
    "Concurrency stress", never `concurrency_stress`); an id the suite does not know as it is."""
    return Message(suite.title_of(test_id)) if test_id in suite.BY_ID else test_id


def record_host_activity(run: BenchmarkRun, result: NormalizedResult, load_at_start: list[float] | None) -> None:
    """What else ran on the run's hardware and load client while it ran, and how busy the load
    client's machine was (its load average against its CPUs), in `metadata["host_activity"]`; a note
    says when another run overlapped or the machine was saturated (latencies then carry that load)."""
    now = timezone.now()
    overlaps = overlapping_runs(run, now)
    cpus = os.cpu_count() or 1
    at_end = load_average()
    result.metadata["host_activity"] = {
        "hardware": list(run.hardware or []),
        "load_client": worker_machine(run.worker or ""),
        "cpus": cpus,
        "load_average": {"start": load_at_start, "end": at_end},
        "overlapping_runs": overlaps,
    }
    for item in overlaps:
        where = NAME_SEPARATOR.join(item["shared_hardware"]) if item["shared_hardware"] else Message(SAME_LOAD_CLIENT)
        figures = {"run": item["run"], "where": where, "seconds": f"{item['overlap_s']:g}"}
        # the API's English names the test by its id (what scripts pass), the pages by its title
        result.add_note(
            Message(RAN_BESIDE, {**figures, "test": _test_title(item["test"])}),
            str(Message(RAN_BESIDE, {**figures, "test": item["test"]})),
        )
    busiest = max((loads[0] for loads in (load_at_start, at_end) if loads), default=None)
    if busiest is not None and busiest > cpus:
        result.add_note(Message(SATURATED, {"load": f"{busiest:g}", "cpus": cpus}))


def finish(
    run: BenchmarkRun, result: NormalizedResult, status: str, error: str = "", message: Message | Join | None = None
) -> BenchmarkRun:
    """Store a finished test's result: the write-ahead file first, then the database (retried on a
    fresh connection while it restarts). If the database stays away, the file is left for the
    reaper with the reason, and the error is raised."""
    error_message = None if message is None else message.to_dict()
    envelope = pending_envelope(
        run_id=run.pk, attempt=run.attempt, status=status, error=error, result=result, error_message=error_message
    )
    write_pending(run.pk, run.attempt, envelope)

    def store() -> BenchmarkRun | None:
        try:
            stored = store_native_result(
                run=run,
                result=result,
                status=status,
                error=error,
                error_message=error_message,
                owned_by=owned_by(run.attempt),
                on_stored=rescore,
            )
        except (OperationalError, InterfaceError) as exc:
            if not envelope["store_error"]:  # the file says why the database does not have it yet
                envelope["store_error"] = f"{type(exc).__name__}: {exc}".strip()[:500]
                write_pending(run.pk, run.attempt, envelope)
            raise
        return stored

    stored = with_reconnect(store, f"run {run.pk}: storing the result")
    discard_pending(run.pk, run.attempt)
    if stored is None:  # another attempt owns the run now (redelivered after this one went silent)
        logger.warning("run %s: attempt %s no longer owns the run; its result was not stored", run.pk, run.attempt)
        run.refresh_from_db()
        return run
    return stored


def finish_failed(run: BenchmarkRun, error: str, message: Message | Join | None = None) -> BenchmarkRun:
    """The run failed: `error` is the English the API gives; `message`, when given, the same as a message
    the run page renders in its language (BenchmarkRun.error_message)."""

    def write() -> None:
        BenchmarkRun.objects.filter(owned_by(run.attempt), pk=run.pk).update(
            status=BenchmarkRun.Status.FAILED,
            error=error[:5000],
            error_message=None if message is None else message.to_dict(),
            finished_at=timezone.now(),
            progress={"phase": "failed", "percent": (run.progress or {}).get("percent", 0)},
        )
        run.refresh_from_db()

    with_reconnect(write, f"run {run.pk}: recording the failure")
    return run


def reap_stale_runs(now: datetime | None = None) -> list[int]:
    """Runs whose worker stopped sending heartbeats: store the result the worker wrote ahead when
    there is one, else fail the run, saying which happened and that no data was stored."""
    now = now or timezone.now()
    threshold = now - stale_after()
    stale = list(
        BenchmarkRun.objects.filter(status=BenchmarkRun.Status.RUNNING, heartbeat_at__lt=threshold).values_list(
            "pk", "attempt"
        )
    )
    for run_id, attempt in stale:
        still_stale = Q(status=BenchmarkRun.Status.RUNNING, heartbeat_at__lt=threshold, attempt=attempt)
        envelope = read_pending(run_id, attempt)
        if envelope is not None and _recover(run_id, attempt, envelope, still_stale):
            continue
        seconds = int(stale_after().total_seconds())
        BenchmarkRun.objects.filter(still_stale, pk=run_id).update(
            status=BenchmarkRun.Status.FAILED,
            finished_at=now,
            partial=False,
            progress={"phase": "failed", "percent": 0},
            error=f"{WORKER_LOST}: no heartbeat for more than {seconds} s (killed or crashed); "
            "no result was stored, so the run has no data",
            error_message=Message(WORKER_LOST_MESSAGE, {"seconds": seconds}).to_dict(),
        )
    return [run_id for run_id, _ in stale]


def _recover(run_id: int, attempt: int, envelope: dict[str, Any], still_stale: Q) -> bool:
    """Store a stale attempt's write-ahead result. True when it was stored."""
    run = BenchmarkRun.objects.filter(pk=run_id).first()
    if run is None:
        return False
    result: NormalizedResult = envelope["result"]
    cause = (
        Message(WRITE_REFUSED, {"error": str(envelope["store_error"])})
        if envelope.get("store_error")
        else Message(WORKER_STOPPED)
    )
    result.add_note(Message(STORED_BY_REAPER, {"written": str(envelope.get("written_at")), "cause": cause}))
    stored = store_native_result(
        run=run,
        result=result,
        status=envelope["status"],
        error=envelope.get("error") or "",
        error_message=envelope.get("error_message"),
        owned_by=still_stale,
        on_stored=rescore,
    )
    if stored is None:
        return False
    discard_pending(run_id, attempt)
    logger.warning("run %s: stored from its write-ahead file by the reaper (%s)", run_id, cause)
    return True


def requeue(run_id: int, reason: str) -> None:
    """Put a claimed run back in the queue (its task retries later), saying why it waits."""
    BenchmarkRun.objects.filter(pk=run_id, status=BenchmarkRun.Status.RUNNING).update(
        status=BenchmarkRun.Status.QUEUED, progress={"phase": reason, "percent": 0}, enqueued_at=timezone.now()
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
