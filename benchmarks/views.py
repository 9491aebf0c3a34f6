"""Evidence pages of a selection: validation runs with live progress, run results, CI tokens, uploads.

Same rules as `selection.views`: the selection is resolved through `selectors.selections_for`
(another team's is a 404), writes need `selectors.can_edit` (reviewers get a 403), and every
write goes through a service (`selection.services`, `benchmarks.services`, `benchmarks.validation`).
"""

from __future__ import annotations

import logging

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from benchmarks import presentation
from benchmarks.models import Artifact, BenchmarkRun
from benchmarks.presentation import run_progress_context
from benchmarks.result import DEFINITIONS
from benchmarks.run_charts import run_page_charts
from benchmarks.validation.dispatch import request_cancel
from benchmarks.validation.forms import param_label
from selection import selectors
from selection.i18n import message_literals, message_text
from selection.models import Selection
from selection.web import get_selection, page_context, require_edit

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- helpers


def _run(selection: Selection, run_pk: int) -> BenchmarkRun:
    return get_object_or_404(
        BenchmarkRun.objects.select_related("candidate__engine", "candidate__selection"),
        pk=run_pk,
        candidate__selection=selection,
    )


def _hx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


# ----------------------------------------------------------------------------- evidence overview


@login_required
@require_GET
def evidence(request: HttpRequest, pk: int) -> HttpResponse:
    """Step 5: per candidate, its capacity and validation pages and its runs; recent runs; CI uploads."""
    selection = get_selection(request, pk)
    terminal = [s.value for s in BenchmarkRun.TERMINAL]
    candidates = selectors.compared_candidates(selection).annotate(
        run_count=Count("runs", distinct=True),
        succeeded_count=Count("runs", filter=Q(runs__status=BenchmarkRun.Status.SUCCEEDED), distinct=True),
        active_count=Count("runs", filter=~Q(runs__status__in=terminal), distinct=True),
    )
    runs = (
        BenchmarkRun.objects.filter(candidate__selection=selection)
        .select_related("candidate__engine")
        .order_by("-created_at", "-id")[:25]
    )
    can_edit = selectors.can_edit(request.user, selection)
    return render(
        request,
        "benchmarks/evidence.html",
        page_context(
            request,
            selection,
            "evidence",
            candidates=candidates,
            archived=selectors.archived_candidates(selection).annotate(run_count=Count("runs", distinct=True)),
            runs=[run_progress_context(selection, run, can_edit) for run in runs],
            token_count=selection.upload_tokens.filter(revoked_at__isnull=True).count(),
        ),
    )


# ----------------------------------------------------------------------------- validation


# ----------------------------------------------------------------------------- runs


@login_required
@require_GET
def run_progress(request: HttpRequest, pk: int, run_pk: int) -> HttpResponse:
    """The progress fragment; it keeps polling itself (htmx) until the run is terminal."""
    selection = get_selection(request, pk)
    run = _run(selection, run_pk)
    return render(
        request,
        "benchmarks/_run_progress.html",
        run_progress_context(selection, run, selectors.can_edit(request.user, selection)),
    )


@login_required
@require_POST
def run_cancel(request: HttpRequest, pk: int, run_pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    require_edit(request, selection)
    run = request_cancel(_run(selection, run_pk), request.user)
    if _hx(request):
        return render(request, "benchmarks/_run_progress.html", run_progress_context(selection, run, True))
    if run.status == BenchmarkRun.Status.CANCELLED:
        messages.success(request, _("Run #%(run)s cancelled.") % {"run": run.pk})
    elif run.is_terminal:
        messages.info(request, _("Run #%(run)s had already finished; nothing to cancel.") % {"run": run.pk})
    else:
        messages.info(
            request,
            _("Cancel requested: run #%(run)s stops within seconds and keeps its partial data.") % {"run": run.pk},
        )
    return redirect("selection:run", pk=selection.pk, run_pk=run.pk)


@login_required
@require_GET
def run_detail(request: HttpRequest, pk: int, run_pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    run = _run(selection, run_pk)
    return render(
        request, "benchmarks/run.html", page_context(request, selection, "evidence", **_run_page(selection, run))
    )


def _run_page(selection: Selection, run: BenchmarkRun) -> dict:
    """The run page's figures: percentile rows, charts, artifacts, definitions, metadata, verdicts, progress."""
    points = list(run.points.values())
    rows = presentation.percentile_rows(points, translate=_, render_message=message_text)
    latency_chart, kv_chart, kv_names = run_page_charts(selection, run, points)
    artifacts = list(run.artifacts.all())
    has_data = run.status == BenchmarkRun.Status.SUCCEEDED or bool(rows)
    api_requests = reverse("run-requests", args=[run.pk])
    return dict(
        run=run,
        candidate=run.candidate,
        rows=rows,
        latency_chart=latency_chart,
        kv_chart=kv_chart,
        kv_series_names=kv_names,
        artifacts=artifacts,
        has_requests=any(a.kind == Artifact.Kind.REQUESTS for a in artifacts),
        csv_url=f"{api_requests}?as=csv",
        parquet_url=f"{api_requests}?as=parquet",
        definitions=presentation.definition_rows(run.definitions, translate=_),
        kvselect_definitions=DEFINITIONS,
        metadata=presentation.provenance_rows(run.metadata, label=param_label, translate=_),
        params=presentation.provenance_rows(run.params, label=lambda key: param_label(key, run.test), translate=_),
        verdicts=presentation.criterion_rows(run.verdicts, translate=_, render_message=message_text),
        # the figures the test judged, as the record's result table shows them (its suite module's `figures`)
        figures=presentation.result_figures(run.test, points, run.metadata, _) if has_data else [],
        observed=presentation.observed_line(run.metadata, run.is_simulated, render_message=message_text),
        notes=presentation.run_notes(run.notes, run.metadata, render_message=message_literals),
        engine_host=presentation.engine_host(run.metadata),
        passed=sum(1 for v in run.verdicts or [] if v.get("passed")),
        load_kind=rows[0]["load_kind"] if rows else "",
        progress=presentation.progress_view(run.progress, run.status, run.is_terminal),
        verdict=presentation.run_verdict(run.verdicts) if run.status == BenchmarkRun.Status.SUCCEEDED else None,
        # a run that stored nothing (refused parameters, an engine that never answered) measured nothing
        has_data=has_data,
        advice=presentation.failure_advice(run.error, run.origin) if run.status == BenchmarkRun.Status.FAILED else "",
    )
