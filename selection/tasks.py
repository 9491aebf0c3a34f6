"""Celery tasks of the selection app and their enqueue helpers. Tasks take ids and are idempotent.

Services enqueue through the helpers here (after their transaction commits); task bodies call
modules that never import this one (scoring services, record rendering), so imports stay one-way.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from celery import shared_task
from django.db import transaction
from django.utils import timezone

from selection.domain.messages import to_json
from selection.domain.scenarios import infer_scenario
from selection.models import DecisionRecord, Selection
from selection.records.reevaluation import flag_records_due
from selection.records.rendering import render_pdf
from selection.scoring.services import refresh_scores

logger = logging.getLogger(__name__)

# A rescoring request still open this long after it was made lost its task (the broker was down or the
# worker died): `resend_rescoring` (beat) sends it again. Longer than a scoring behind a queued upload.
RESCORING_RESEND_AFTER = timedelta(minutes=2)


@shared_task(name="selection.tasks.refresh_scenario")
def refresh_scenario(selection_id: int) -> str:
    """Re-infer a selection's scenario from its stored constraints (idempotent)."""
    selection = Selection.objects.select_related("constraints").get(pk=selection_id)
    scenario, reasons, mix = infer_scenario(selection.constraints.as_domain())
    Selection.objects.filter(pk=selection_id).update(
        scenario=scenario, scenario_reasons=to_json(reasons), scenario_mix=mix
    )
    return scenario


@shared_task(name="selection.tasks.recompute_scores")
def recompute_scores(selection_id: int) -> str:
    """Bring both scorings (final, and with SIMULATED evidence included) up to the evidence, weights and
    gates (the `default` queue). Idempotent: unchanged inputs keep their snapshot. Returns the scoring
    error, "" when none."""
    return refresh_scores(selection_id)


@shared_task(name="selection.tasks.resend_rescoring")
def resend_rescoring(now: datetime | None = None) -> list[int]:
    """Send again the rescoring requests whose task was lost (beat): a broker that was down when the
    evidence changed, a worker that died mid-scoring."""
    now = now or timezone.now()
    stale = list(
        Selection.objects.filter(scores_requested_at__lt=now - RESCORING_RESEND_AFTER).values_list("pk", flat=True)
    )
    for selection_id in stale:
        send_rescoring(selection_id)
    return stale


@shared_task(name="selection.tasks.render_record", acks_late=True, max_retries=2, default_retry_delay=10)
def render_record(record_id: int) -> str:
    """Render an approved record's frozen snapshot to PDF (the `render` queue)."""
    return render_pdf(DecisionRecord.objects.get(pk=record_id)).pdf_sha256


@shared_task(name="selection.tasks.flag_reevaluations")
def flag_reevaluations() -> list[int]:
    """The periodic re-evaluation check (beat): mark signed records that are due and email their owners."""
    return [record.pk for record in flag_records_due()]


def schedule_rescoring(selection_id: int) -> None:
    """Evidence, weights or gates changed: mark the selection's scores as being recomputed (in the
    caller's transaction) and, once it commits, queue the rescoring on the `default` queue."""
    Selection.objects.filter(pk=selection_id).update(scores_requested_at=timezone.now())
    transaction.on_commit(lambda: send_rescoring(selection_id))


def send_rescoring(selection_id: int) -> bool:
    """Queue a rescoring now. Broker down: the request stays marked and `resend_rescoring` sends it
    again once the broker is back, so the pages keep saying "being recomputed" meanwhile."""
    try:
        recompute_scores.apply_async((selection_id,), retry=False)
    except Exception as exc:  # kombu raises OperationalError and friends when the broker is down
        logger.warning("could not queue rescoring of selection %s; the resend job retries: %s", selection_id, exc)
        return False
    return True


def queue_render(record_id: int) -> None:
    """Queue the PDF rendering of a fully approved record (broker down: rendered on first signing)."""
    try:
        render_record.apply_async((record_id,), retry=False)
    except Exception:
        logger.warning("could not queue rendering of record %s; it renders on first signing", record_id)
