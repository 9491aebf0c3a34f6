"""Celery tasks of the selection app. Tasks take ids and are idempotent."""

from __future__ import annotations

from celery import shared_task

from .domain.scenarios import infer_scenario
from .models import Selection


@shared_task(name="selection.tasks.refresh_scenario")
def refresh_scenario(selection_id: int) -> str:
    """Re-infer a selection's scenario from its stored constraints (idempotent)."""
    selection = Selection.objects.select_related("constraints").get(pk=selection_id)
    scenario, reasons, mix = infer_scenario(selection.constraints.as_domain())
    Selection.objects.filter(pk=selection_id).update(scenario=scenario, scenario_reasons=reasons, scenario_mix=mix)
    return scenario


@shared_task(name="selection.tasks.recompute_scores")
def recompute_scores(selection_id: int) -> int:
    """Recompute both scorings (final, and with SIMULATED evidence included) after evidence or weights change."""
    from .scores import compute_scores

    selection = Selection.objects.get(pk=selection_id)
    compute_scores(selection, include_simulated=True)
    return compute_scores(selection, include_simulated=False).pk


@shared_task(name="selection.tasks.render_record", acks_late=True, max_retries=2, default_retry_delay=10)
def render_record(record_id: int) -> str:
    """Render an approved record's frozen snapshot to PDF (the `render` queue)."""
    from .models import DecisionRecord
    from .records import render_pdf

    return render_pdf(DecisionRecord.objects.get(pk=record_id)).pdf_sha256
