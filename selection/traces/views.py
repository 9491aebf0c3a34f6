"""The trace pages: import a production trace, review the one-pager it proposes, accept it.

Thin: the form parses, `selection.traces.services` imports and accepts, the page shows the
proposal beside the current one-pager with each figure's basis and the length and arrival charts.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from benchmarks.charts import style as chart_style
from benchmarks.charts import traces as trace_charts
from benchmarks.traces.catalog import FORMATS
from benchmarks.traces.proposal import concurrency_basis
from selection.models import Constraints, Selection, TraceImport
from selection.setup.forms import CONSTRAINT_UNITS
from selection.traces.forms import TraceUploadForm
from selection.traces.services import accept_trace_proposal, import_trace
from selection.web import attach_service_errors, get_selection, page_context, recent_audit, require_edit

logger = logging.getLogger(__name__)


def _traces_page(request: HttpRequest, selection: Selection, form: TraceUploadForm, status: int = 200) -> HttpResponse:
    return render(
        request,
        "selection/traces.html",
        page_context(
            request,
            selection,
            "constraints",
            form=form,
            traces=selection.traces.select_related("imported_by", "accepted_by"),
            formats=FORMATS.values(),
        ),
        status=status,
    )


def _import_upload(request: HttpRequest, selection: Selection, form: TraceUploadForm) -> tuple[TraceImport, bool]:
    """Import the uploaded trace from a private temporary copy: (trace, created); the service's
    ValidationError passes through."""
    upload = form.cleaned_data["file"]
    with tempfile.TemporaryDirectory(prefix="kvselect-trace-") as directory:
        # a fixed name with the upload's own extensions (.csv, .jsonl, .gz): nothing of the client's path
        suffixes = "".join(x for x in Path(upload.name).suffixes[-2:] if x[1:].isalnum())
        path = Path(directory) / f"trace{suffixes.lower()}"
        with path.open("wb") as handle:
            for chunk in upload.chunks():
                handle.write(chunk)
        try:
            return import_trace(
                selection=selection,
                user=request.user,
                path=path,
                name=upload.name,
                format=form.cleaned_data["format"] or None,
            )
        finally:
            shutil.rmtree(directory, ignore_errors=True)


@login_required
@require_http_methods(["GET", "POST"])
def traces(request: HttpRequest, pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    if request.method != "POST":
        return _traces_page(request, selection, TraceUploadForm())
    require_edit(request, selection)
    form = TraceUploadForm(request.POST, request.FILES)
    if not form.is_valid():
        return _traces_page(request, selection, form, status=400)
    try:
        trace, created = _import_upload(request, selection, form)
    except ValidationError as error:
        attach_service_errors(form, error)
        return _traces_page(request, selection, form, status=400)
    if created:
        messages.success(request, _("Trace imported: review the one-pager it proposes, then accept it."))
    else:
        messages.info(request, _("This file was imported before (same SHA-256): here is its proposal."))
    return redirect("selection:trace", pk=selection.pk, trace_pk=trace.pk)


def _display(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return _("yes") if value else _("no")
    if isinstance(value, float):
        return f"{value:g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _proposal_rows(trace: TraceImport, constraints: Constraints | None) -> list[dict]:
    rows = []
    for item in trace.proposal:
        field = item["field"]
        current = getattr(constraints, field, None) if constraints is not None else None
        basis = item.get("basis") or {}
        rows.append(
            {
                "field": field,
                "label": Constraints._meta.get_field(field).verbose_name,
                "unit": CONSTRAINT_UNITS.get(field, ""),
                "proposed": _display(item["value"]),
                "current": _display(current),
                "changes": constraints is not None and current != item["value"],
                "basis": _translated(basis),
            }
        )
    return rows


def _charts(trace: TraceImport) -> list[dict]:
    data = (trace.statistics or {}).get("charts") or {}
    drawn = []
    with chart_style.translated(_):
        for title, draw in (
            (
                _("Input and output lengths"),
                lambda title: trace_charts.length_distribution(
                    {_("input tokens"): data["input_tokens"], _("output tokens"): data["output_tokens"]}, title=title
                ),
            ),
            (
                _("Arrivals over time"),
                lambda title: trace_charts.arrival_rate(
                    data["arrivals"]["points"], title=title, mean_rps=trace.statistics["rate"]["mean_rps"]
                ),
            ),
        ):
            try:
                drawn.append({"title": title, "svg": draw(title)})
            except (
                KeyError,
                TypeError,
                chart_style.ChartInputError,
            ) as exc:  # a chart the data cannot make is left out
                logger.info("trace %s: chart %r not drawn: %s", trace.pk, title, exc)
    return drawn


def _translated(basis: dict) -> str:
    return _(basis.get("message", "")) % (basis.get("params") or {})


def _pools(statistics: dict) -> list[dict]:
    """Each candidate's KV pool and the prefix sharing it reuses (the trace's import computed them)."""
    sources = {"measured": _("measured"), "capacity plan": _("capacity plan")}
    rows = []
    for name, pool in ((statistics.get("prefix") or {}).get("pools") or {}).items():
        ratio = pool.get("sharing_ratio")
        rows.append(
            {
                "name": name,
                "capacity_tokens": f"{pool['capacity_tokens']:,}",
                "source": sources.get(pool.get("source"), pool.get("source") or "—"),
                "ratio": "—" if ratio is None else f"{ratio:.1%}",
            }
        )
    return rows


def _groups(statistics: dict) -> list[dict]:
    """The trace's requests by group (short, long, multi-turn) with their shares."""
    groups = statistics.get("groups") or {}
    total = sum(groups.values()) or 1
    return [
        {"name": name, "label": label, "count": groups.get(name, 0), "share": groups.get(name, 0) / total}
        for name, label in (("short", _("short")), ("long", _("long")), ("multi_turn", _("multi-turn")))
    ]


def _trace_page(request: HttpRequest, selection: Selection, trace: TraceImport, status: int = 200) -> HttpResponse:
    constraints = Constraints.objects.filter(selection=selection).first()
    statistics = trace.statistics or {}
    rate = statistics.get("rate") or {}
    return render(
        request,
        "selection/trace.html",
        page_context(
            request,
            selection,
            "constraints",
            trace=trace,
            stats=statistics,
            rows=_proposal_rows(trace, constraints),
            has_constraints=constraints is not None,
            groups=_groups(statistics),
            charts=_charts(trace),
            concurrency_basis=_translated(concurrency_basis(statistics["concurrency"]))
            if statistics.get("concurrency")
            else "",
            empty_seconds=f"{rate['empty_seconds_share']:.0%}" if rate.get("empty_seconds_share") is not None else "—",
            pools=_pools(statistics),
            audit=[e for e in recent_audit(selection, 200) if e.field == f"trace:{trace.sha256[:12]}"][:10],
        ),
        status=status,
    )


@login_required
def trace_detail(request: HttpRequest, pk: int, trace_pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    trace = get_object_or_404(selection.traces.select_related("imported_by", "accepted_by"), pk=trace_pk)
    return _trace_page(request, selection, trace)


@login_required
@require_POST
def trace_accept(request: HttpRequest, pk: int, trace_pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    trace = get_object_or_404(selection.traces, pk=trace_pk)
    require_edit(request, selection)
    try:
        accept_trace_proposal(trace=trace, user=request.user)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
        return redirect("selection:trace", pk=selection.pk, trace_pk=trace.pk)
    selection.refresh_from_db()
    messages.success(
        request,
        _("Proposal accepted from trace %(sha)s; inferred scenario: %(scenario)s.")
        % {"sha": trace.sha256[:12], "scenario": selection.get_scenario_display()},
    )
    return redirect("selection:constraints", pk=selection.pk)
