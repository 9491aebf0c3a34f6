"""Celery tasks of the selection app and their enqueue helpers. Tasks take ids and are idempotent.

Services enqueue through the helpers here (after their transaction commits); task bodies call
modules that never import this one (scoring services, record rendering), so imports stay one-way.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import transaction

from selection.domain.messages import to_json
from selection.domain.scenarios import infer_scenario
from selection.models import DecisionRecord, Selection
from selection.records.reevaluation import flag_records_due
from selection.records.rendering import render_pdf
from selection.scoring.services import compute_scores

logger = logging.getLogger(__name__)


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
def recompute_scores(selection_id: int) -> int:
    """Recompute both scorings (final, and with SIMULATED evidence included) after evidence or weights change."""
    selection = Selection.objects.get(pk=selection_id)
    compute_scores(selection, include_simulated=True)
    return compute_scores(selection, include_simulated=False).pk


@shared_task(name="selection.tasks.render_record", acks_late=True, max_retries=2, default_retry_delay=10)
def render_record(record_id: int) -> str:
    """Render an approved record's frozen snapshot to PDF (the `render` queue)."""
    return render_pdf(DecisionRecord.objects.get(pk=record_id)).pdf_sha256


@shared_task(name="selection.tasks.flag_reevaluations")
def flag_reevaluations() -> list[int]:
    """The periodic re-evaluation check (beat): mark signed records that are due and email their owners."""
    return [record.pk for record in flag_records_due()]


def schedule_rescoring(selection_id: int) -> None:
    """After the current transaction commits, recompute scores on the `default` queue."""

    def send() -> None:
        try:
            recompute_scores.apply_async((selection_id,), retry=False)
        except Exception:  # broker down: scores are recomputed on the next read or change
            logger.warning("could not queue rescoring of selection %s", selection_id)

    transaction.on_commit(send)


def queue_render(record_id: int) -> None:
    """Queue the PDF rendering of a fully approved record (broker down: rendered on first signing)."""
    try:
        render_record.apply_async((record_id,), retry=False)
    except Exception:
        logger.warning("could not queue rendering of record %s; it renders on first signing", record_id)
