"""Celery tasks of the selection app and their enqueue helpers. Tasks take ids and are idempotent.

Services enqueue through the helpers here (after their transaction commits); task bodies call
modules that never import this one (scoring services, record rendering), so imports stay one-way.
Every process that enqueues imports this module (the web, the scoring worker, each `manage.py`
command through the admin's services), so the renderer and the signing library are imported by the
render task when it runs (HackSoft's task bodies import what they run), never at start-up.

Rescoring coalesces: every change of a scoring input stamps the selection and marks it for
rescoring in the change's transaction (`schedule_rescoring`), but at most one `recompute_scores`
task is pending per selection (`rescoring_queued_at`, claimed atomically before sending). A change
made while that task waits or runs only marks the selection: the task scores again until a pass
ends with nothing new requested, then releases its claim. Fifty uploaders make one task per
selection, not one per upload.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from celery import shared_task
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from config.celery import DatabaseTask, publish
from config.outage import DATABASE_ERRORS
from selection.domain.messages import to_json
from selection.domain.scenarios import infer_scenario
from selection.models import DecisionRecord, Selection
from selection.records.reevaluation import flag_records_due
from selection.scoring.services import refresh_scores

logger = logging.getLogger(__name__)

# A pending rescoring task not heard of for this long was lost (a broker restarted without its data, a
# worker killed mid-scoring): the claim lapses and `resend_rescoring` (beat) or the next change sends
# another. A running task renews its claim after each pass.
RESCORING_RESEND_AFTER = timedelta(minutes=2)
# One task scores for at most this long (a steady stream of uploads), then hands over to a fresh task at
# the back of the queue, so that other selections' rescorings are not held up.
RESCORING_TASK_BUDGET_S = 60.0
# After a pass, a task whose selection changed less than this long ago waits (at most this long) for
# the burst to end before letting go: a CI matrix uploading every second or two is one task, not one
# per gap between uploads.
RESCORING_QUIET_S = 3.0


@shared_task(name="selection.tasks.refresh_scenario", base=DatabaseTask)
def refresh_scenario(selection_id: int) -> str:
    """Re-infer a selection's scenario from its stored constraints (idempotent; the scenario is a
    scoring input, so a change is stamped and rescored)."""
    selection = Selection.objects.select_related("constraints").get(pk=selection_id)
    scenario, reasons, mix = infer_scenario(selection.constraints.as_domain())
    changed = (selection.scenario, selection.scenario_mix) != (scenario, mix)
    with transaction.atomic():
        Selection.objects.filter(pk=selection_id).update(
            scenario=scenario, scenario_reasons=to_json(reasons), scenario_mix=mix
        )
        if changed:
            schedule_rescoring(selection_id)
    return scenario


@shared_task(name="selection.tasks.recompute_scores", base=DatabaseTask)
def recompute_scores(selection_id: int) -> str:
    """Bring both scorings (final, and with SIMULATED evidence included) up to the evidence, weights and
    gates (the `default` queue), pass after pass while changes keep arriving; then release the
    selection's claim. Idempotent: unchanged inputs keep their snapshot. Returns the scoring error,
    "" when none."""
    deadline = time.monotonic() + RESCORING_TASK_BUDGET_S
    try:
        while True:
            error = refresh_scores(selection_id)
            settle(selection_id)
            if release_rescoring(selection_id):
                return error
            renew_rescoring(selection_id)  # a change came in during the pass: score again
            if time.monotonic() > deadline:
                if not publish(recompute_scores, (selection_id,)):
                    abandon_rescoring(selection_id)
                return error
    except DATABASE_ERRORS:
        raise  # the claim stays: DatabaseTask runs the task again once the database is back
    except Exception:
        abandon_rescoring(selection_id)  # the resend job (or the next change) sends another
        raise


@shared_task(name="selection.tasks.resend_rescoring", base=DatabaseTask)
def resend_rescoring(now: datetime | None = None) -> list[int]:
    """Send again the rescoring requests without a live task (beat): the broker was down when the
    evidence changed, or the task was lost (a broker restarted without its data, a worker killed)."""
    now = now or timezone.now()
    waiting = Selection.objects.filter(scores_requested_at__isnull=False).filter(unclaimed(now))
    sent = []
    for selection_id in waiting.values_list("pk", flat=True):
        if send_rescoring(selection_id, now=now):
            sent.append(selection_id)
    return sent


@shared_task(
    name="selection.tasks.render_record", base=DatabaseTask, acks_late=True, max_retries=2, default_retry_delay=10
)
def render_record(record_id: int) -> str:
    """Render an approved record's frozen snapshot to PDF (the `render` queue)."""
    from selection.records.rendering import render_pdf  # WeasyPrint and pyHanko, loaded by the render

    return render_pdf(DecisionRecord.objects.get(pk=record_id)).pdf_sha256


@shared_task(name="selection.tasks.flag_reevaluations", base=DatabaseTask)
def flag_reevaluations() -> list[int]:
    """The periodic re-evaluation check (beat): mark signed records that are due and email their owners."""
    return [record.pk for record in flag_records_due()]


def schedule_rescoring(selection_id: int) -> None:
    """A scoring input changed (evidence, constraints, weights, gates, a candidate): stamp the selection
    and mark its scores as being recomputed, in the caller's transaction; once it commits, queue a
    rescoring unless one is already pending (which then covers this change)."""
    now = timezone.now()
    Selection.objects.filter(pk=selection_id).update(inputs_changed_at=now, scores_requested_at=now)
    # robust: the change is committed; a database gone in between leaves the request for the resend job
    transaction.on_commit(lambda: send_rescoring(selection_id), robust=True)


def unclaimed(now: datetime) -> Q:
    """Selections with no live rescoring task: none sent, or one not heard of for RESCORING_RESEND_AFTER."""
    return Q(rescoring_queued_at__isnull=True) | Q(rescoring_queued_at__lt=now - RESCORING_RESEND_AFTER)


def send_rescoring(selection_id: int, now: datetime | None = None) -> bool:
    """Queue a rescoring unless one is pending: True when one is queued now. Broker down: the claim is
    released and the request stays marked; `resend_rescoring` sends it once the broker is back, so
    the pages keep saying "being recomputed" meanwhile."""
    now = now or timezone.now()
    if not Selection.objects.filter(unclaimed(now), pk=selection_id).update(rescoring_queued_at=now):
        return False  # a pending task covers the change (or the selection is gone)
    if publish(recompute_scores, (selection_id,)):
        return True
    logger.debug("could not queue rescoring of selection %s; the resend job retries", selection_id)
    abandon_rescoring(selection_id)
    return False


def settle(selection_id: int) -> None:
    """Wait, at most RESCORING_QUIET_S, until the selection's inputs have been quiet that long or a new
    change asks for another pass."""
    quiet = RESCORING_QUIET_S
    deadline = time.monotonic() + quiet
    while time.monotonic() < deadline:
        row = Selection.objects.filter(pk=selection_id).values_list("scores_requested_at", "inputs_changed_at").first()
        if row is None or row[0] is not None or row[1] is None:
            return  # gone, a new change to score now, or never changed
        if (timezone.now() - row[1]).total_seconds() >= quiet:
            return
        time.sleep(0.25)


def release_rescoring(selection_id: int) -> bool:
    """End a task's claim when nothing is requested any more (one statement, so a change committed
    just before it keeps the claim and the task scores again). True when the task may stop."""
    if Selection.objects.filter(pk=selection_id, scores_requested_at__isnull=True).update(rescoring_queued_at=None):
        return True
    return not Selection.objects.filter(pk=selection_id).exists()


def renew_rescoring(selection_id: int) -> None:
    """The task is alive: its claim does not lapse while it scores pass after pass."""
    Selection.objects.filter(pk=selection_id).update(rescoring_queued_at=timezone.now())


def abandon_rescoring(selection_id: int) -> None:
    """Drop the claim without covering the request: the next change or the resend job sends a task."""
    Selection.objects.filter(pk=selection_id).update(rescoring_queued_at=None)


def queue_render(record_id: int) -> None:
    """Queue the PDF rendering of a fully approved record (broker down: rendered on first signing)."""
    if not publish(render_record, (record_id,)):
        logger.debug("could not queue rendering of record %s; it renders on first signing", record_id)
