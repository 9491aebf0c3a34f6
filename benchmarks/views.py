"""Evidence pages of a selection: validation runs with live progress, run results, CI tokens, uploads.

Same rules as `selection.views`: the selection is resolved through `selectors.selections_for`
(another team's is a 404), writes need `selectors.can_edit` (reviewers get a 403), and every
write goes through a service (`selection.services`, `benchmarks.services`, `benchmarks.validation`).
"""

from __future__ import annotations

import functools
import json
import logging

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from selection import selectors
from selection import services as selection_services
from selection.forms import attach_service_errors
from selection.models import Candidate, Selection, UploadToken
from selection.views import _context, _get_selection, _require_edit

from . import charts, presentation
from . import services as evidence_services
from . import validation as validation_service
from .forms import ResultUploadForm, UploadTokenForm, ValidationParamsForm
from .models import Artifact, BenchmarkRun
from .result import DEFINITIONS

logger = logging.getLogger(__name__)

def _test_info() -> dict[str, dict[str, str]]:
    """Title and description per test, translated at request time."""
    return {
        "concurrency_stress": {"title": _("1. Concurrency stress"), "text": _(
            "Hold the target concurrency for the duration: KV usage, queueing, preemptions and latency "
            "percentiles over time. Passes when TTFT p95 is within the budget, no request fails, and KV usage "
            "returns to its baseline after the deliberate aborts.")},
        "long_context": {"title": _("2. Long context"), "text": _(
            "A ladder of long inputs (16K to 128K tokens, capped at the model's maximum), alone and beside short "
            "traffic: TTFT and KV usage per rung and the largest rung that succeeds.")},
        "swap_recovery": {"title": _("3. Swap-out and recovery"), "text": _(
            "Multi-turn sessions, some idle between turns while other traffic fills the cache: resume TTFT "
            "against warm TTFT, and with greedy decoding the continuation must be identical.")},
        "prefix_reuse": {"title": _("4. Prefix reuse"), "text": _(
            "Requests sharing a long system prompt, with prefix caching on (and off as a second configuration): "
            "KV usage and TTFT against the capacity model's “every request allocates its own” figure.")},
        "stability": {"title": _("5. Long-run stability"), "text": _(
            "Medium concurrency for a long time: drift of TTFT/TPOT p50 and p99 between the first and last "
            "windows, the KV usage trend, preemptions and errors.")},
    }


# ----------------------------------------------------------------------------- helpers


def _candidate(selection: Selection, candidate_pk: int) -> Candidate:
    return get_object_or_404(selection.candidates.select_related("engine"), pk=candidate_pk)


def _run(selection: Selection, run_pk: int) -> BenchmarkRun:
    return get_object_or_404(BenchmarkRun.objects.select_related("candidate__engine", "candidate__selection"),
                             pk=run_pk, candidate__selection=selection)


def inline_svg(svg: str) -> str:
    """An SVG document for inline HTML: drop the XML declaration and DOCTYPE before <svg."""
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else ""


@functools.lru_cache(maxsize=256)
def _chart_cached(name: str, arguments: str) -> str:
    return inline_svg(charts.CHARTS[name](**json.loads(arguments)))


def chart_svg(name: str, **arguments) -> str:
    """A chart as inline SVG ("" when the input cannot be drawn); identical inputs render once."""
    try:
        return _chart_cached(name, json.dumps(arguments, sort_keys=True, default=str))
    except (charts.ChartInputError, ValueError, TypeError) as error:
        logger.warning("chart %s not drawn: %s", name, error)
        return ""


def _progress_context(selection: Selection, run: BenchmarkRun, can_edit: bool) -> dict:
    return {"selection": selection, "run": run, "can_edit": can_edit,
            "progress": presentation.progress_view(run.progress, run.status, run.is_terminal)}


def _hx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


# ----------------------------------------------------------------------------- evidence overview


@login_required
@require_GET
def evidence(request: HttpRequest, pk: int) -> HttpResponse:
    """Step 5: per candidate, its capacity and validation pages and its runs; recent runs; CI uploads."""
    selection = _get_selection(request, pk)
    terminal = [s.value for s in BenchmarkRun.TERMINAL]
    candidates = selection.candidates.select_related("engine").annotate(
        run_count=Count("runs", distinct=True),
        succeeded_count=Count("runs", filter=Q(runs__status=BenchmarkRun.Status.SUCCEEDED), distinct=True),
        active_count=Count("runs", filter=~Q(runs__status__in=terminal), distinct=True))
    runs = (BenchmarkRun.objects.filter(candidate__selection=selection).select_related("candidate__engine")
            .order_by("-created_at", "-id")[:25])
    can_edit = selectors.can_edit(request.user, selection)
    return render(request, "benchmarks/evidence.html", _context(
        request, selection, "evidence", candidates=candidates,
        runs=[_progress_context(selection, run, can_edit) for run in runs],
        token_count=selection.upload_tokens.filter(revoked_at__isnull=True).count()))


# ----------------------------------------------------------------------------- validation


def _plan_forms(candidate: Candidate, bound: ValidationParamsForm | None = None) -> list[dict]:
    info = _test_info()
    plan = validation_service.validation_plan(candidate)
    cards = []
    for test, params in plan.items():
        form = bound if bound is not None and bound.test == test else ValidationParamsForm(plan=params, test=test)
        cards.append({"test": test, "form": form, **info.get(test, {"title": test, "text": ""})})
    return cards


def _validation_page(request: HttpRequest, selection: Selection, candidate: Candidate,
                     bound: ValidationParamsForm | None = None, refusal: dict | None = None,
                     status: int = 200) -> HttpResponse:
    context = _context(request, selection, "evidence", candidate=candidate, refusal=refusal)
    context["cards"] = _plan_forms(candidate, bound)
    runs = candidate.runs.all()[:50]
    context["runs"] = [_progress_context(selection, run, context["can_edit"]) for run in runs]
    return render(request, "benchmarks/validation.html", context, status=status)


@login_required
@require_GET
def validation(request: HttpRequest, pk: int, candidate_pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    return _validation_page(request, selection, _candidate(selection, candidate_pk))


@login_required
@require_POST
def validation_start(request: HttpRequest, pk: int, candidate_pk: int, test: str) -> HttpResponse:
    selection = _get_selection(request, pk)
    _require_edit(request, selection)
    candidate = _candidate(selection, candidate_pk)
    plan = validation_service.validation_plan(candidate)
    if test not in plan:
        messages.error(request, _("Unknown test “%(test)s”: choose one of the five tests below.") % {"test": test})
        return redirect("selection:validation", pk=selection.pk, candidate_pk=candidate.pk)
    form = ValidationParamsForm(request.POST, plan=plan[test], test=test)
    if not form.is_valid():
        return _validation_page(request, selection, candidate, bound=form, status=400)
    try:
        run = validation_service.start_validation(candidate=candidate, test=test, user=request.user,
                                                  params=form.params(), label=form.cleaned_data.get("label") or "")
    except validation_service.ValidationError as error:
        field, _sep, reason = str(error).partition(": ")
        refusal = {"test": test, "field": field if reason else "", "reason": reason or field}
        return _validation_page(request, selection, candidate, bound=form, refusal=refusal, status=400)
    messages.success(request, _("Run #%(run)s of %(test)s queued. Its progress updates below.") % {
        "run": run.pk, "test": test})
    return redirect(reverse("selection:validation", args=[selection.pk, candidate.pk]) + "#runs")


# ----------------------------------------------------------------------------- runs


@login_required
@require_GET
def run_progress(request: HttpRequest, pk: int, run_pk: int) -> HttpResponse:
    """The progress fragment; it keeps polling itself (htmx) until the run is terminal."""
    selection = _get_selection(request, pk)
    run = _run(selection, run_pk)
    return render(request, "benchmarks/_run_progress.html",
                  _progress_context(selection, run, selectors.can_edit(request.user, selection)))


@login_required
@require_POST
def run_cancel(request: HttpRequest, pk: int, run_pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    _require_edit(request, selection)
    run = validation_service.request_cancel(_run(selection, run_pk), request.user)
    if _hx(request):
        return render(request, "benchmarks/_run_progress.html", _progress_context(selection, run, True))
    if run.status == BenchmarkRun.Status.CANCELLED:
        messages.success(request, _("Run #%(run)s cancelled.") % {"run": run.pk})
    elif run.is_terminal:
        messages.info(request, _("Run #%(run)s had already finished; nothing to cancel.") % {"run": run.pk})
    else:
        messages.info(request, _("Cancel requested: run #%(run)s stops within seconds and keeps its partial data.") % {
            "run": run.pk})
    return redirect("selection:run", pk=selection.pk, run_pk=run.pk)


def _budget(selection: Selection, name: str) -> float | None:
    constraints = getattr(selection, "constraints", None)
    value = getattr(constraints, name, None) if constraints is not None else None
    return float(value) if value is not None else None


@login_required
@require_GET
def run_detail(request: HttpRequest, pk: int, run_pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    run = _run(selection, run_pk)
    points = list(run.points.values())
    rows = presentation.percentile_rows(points)
    simulated = run.is_simulated
    latency_chart = ""
    percentile = presentation.chart_percentile(points)
    series = presentation.latency_series(run.label or run.candidate.display_name, points, percentile)
    if series:
        budgets = percentile == "p95"  # the latency budget is a p95: drawn only against p95 lines
        latency_chart = chart_svg("latency_vs_concurrency", series=series, simulated=simulated, percentile=percentile,
                                  ttft_budget_ms=_budget(selection, "ttft_p95_ms") if budgets else None,
                                  tpot_budget_ms=_budget(selection, "tpot_p95_ms") if budgets else None,
                                  title=_("TTFT and TPOT %(percentile)s per load point") % {"percentile": percentile})
    kv = presentation.kv_series(run.timeseries)
    kv_chart = chart_svg("kv_usage_over_time", series=kv, simulated=simulated,
                         title=_("KV-cache usage over time")) if kv else ""
    artifacts = list(run.artifacts.all())
    has_requests = any(a.kind == Artifact.Kind.REQUESTS for a in artifacts)
    api_requests = reverse("run-requests", args=[run.pk])
    context = _context(
        request, selection, "evidence", run=run, candidate=run.candidate, rows=rows, latency_chart=latency_chart,
        kv_chart=kv_chart, kv_series_names=list(kv), artifacts=artifacts, has_requests=has_requests,
        csv_url=f"{api_requests}?as=csv", parquet_url=f"{api_requests}?as=parquet",
        definitions=presentation.definition_rows(run.definitions), kvselect_definitions=DEFINITIONS,
        metadata=sorted((run.metadata or {}).items()), params=sorted((run.params or {}).items()),
        verdicts=run.verdicts or [], passed=sum(1 for v in run.verdicts or [] if v.get("passed")),
        load_kind=rows[0]["load_kind"] if rows else "")
    context["progress"] = presentation.progress_view(run.progress, run.status, run.is_terminal)
    return render(request, "benchmarks/run.html", context)


# ----------------------------------------------------------------------------- CI tokens and uploads


def _uploads_page(request: HttpRequest, selection: Selection, *, token_form=None, upload_form=None, new_token=None,
                  refusals=None, status: int = 200) -> HttpResponse:
    candidates = selection.candidates.select_related("engine")
    first = candidates.first()
    results_url = request.build_absolute_uri(reverse("candidate-results", args=[first.pk if first else 0]))
    if not first:
        results_url = results_url.replace("/candidates/0/", "/candidates/<CANDIDATE_ID>/")
    context = _context(
        request, selection, "evidence", candidates=candidates, first_candidate=first,
        tokens=selection.upload_tokens.select_related("created_by"),
        token_form=token_form or UploadTokenForm(), new_token=new_token, results_url=results_url,
        upload_form=upload_form or ResultUploadForm(candidates=candidates, initial=_upload_initial(request, candidates)),
        refusals=refusals or {})
    return render(request, "benchmarks/uploads.html", context, status=status)


def _upload_initial(request: HttpRequest, candidates) -> dict:
    """Preselect the candidate (and test) a link came from: ?candidate=<id>&test=<name>."""
    initial = {}
    wanted = request.GET.get("candidate", "")
    if wanted.isdigit() and any(c.pk == int(wanted) for c in candidates):
        initial["candidate"] = int(wanted)
    if request.GET.get("test") in dict(BenchmarkRun._meta.get_field("test").choices):
        initial["test"] = request.GET["test"]
    return initial


@login_required
@require_GET
def uploads(request: HttpRequest, pk: int) -> HttpResponse:
    return _uploads_page(request, _get_selection(request, pk))


@login_required
@require_POST
def token_create(request: HttpRequest, pk: int) -> HttpResponse:
    """Create a token and show the raw value in this one response only (it is stored hashed)."""
    selection = _get_selection(request, pk)
    _require_edit(request, selection)
    form = UploadTokenForm(request.POST)
    if not form.is_valid():
        return _uploads_page(request, selection, token_form=form, status=400)
    try:
        token, raw = selection_services.create_upload_token(selection=selection, user=request.user,
                                                            name=form.cleaned_data["name"])
    except DjangoValidationError as error:
        attach_service_errors(form, error)
        return _uploads_page(request, selection, token_form=form, status=400)
    response = _uploads_page(request, selection, new_token={"token": token, "raw": raw})
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def token_revoke(request: HttpRequest, pk: int, token_pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    _require_edit(request, selection)
    token = get_object_or_404(UploadToken, pk=token_pk, selection=selection)
    selection_services.revoke_upload_token(token=token, user=request.user)
    messages.success(request, _("Token “%(name)s” revoked: uploads with it are refused from now on.") % {
        "name": token.name})
    return redirect("selection:uploads", pk=selection.pk)


UPLOAD_FIELDS = {"file", "test", "format", "label", "candidate"}


@login_required
@require_POST
def result_upload(request: HttpRequest, pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    _require_edit(request, selection)
    candidates = selection.candidates.select_related("engine")
    form = ResultUploadForm(request.POST, request.FILES, candidates=candidates)
    if not form.is_valid():
        return _uploads_page(request, selection, upload_form=form, status=400)
    data, handle = form.cleaned_data, form.cleaned_data["file"]
    refusals = None
    try:
        run, created = evidence_services.ingest_upload(
            candidate=data["candidate"], data=handle.read(), filename=handle.name, test=data["test"],
            fmt=data.get("format") or None, label=data.get("label") or "", uploader=request.user.get_username(),
            idempotency_key=data.get("idempotency_key") or "")
    except evidence_services.IngestError as error:
        form.add_error(error.field if error.field in UPLOAD_FIELDS else None, str(error))
    except evidence_services.StorageFailure as error:
        form.add_error(None, _("The file could not be stored (%(error)s). Nothing was recorded; try again, and tell "
                               "an administrator if it keeps failing.") % {"error": error})
    except ValueError as error:  # the parsers: UnrecognisedFormat (with .refusals) or FormatError
        refusals = getattr(error, "refusals", None)
        if refusals:
            form.add_error("file", _("No parser recognised this file. Each format tried and why it refused is listed "
                                     "below; pick the format yourself if you know it, or upload the tool's own "
                                     "result file unchanged."))
        else:
            form.add_error("file", _("The file was recognised but could not be read: %(error)s. Nothing was stored.") % {
                "error": error})
    else:
        if not created:
            messages.info(request, _("This upload was already received: showing the first run."))
        elif run.status == BenchmarkRun.Status.PARSING:
            messages.success(request, _("File stored; it is large, so it is parsed in the background."))
        else:
            messages.success(request, _("Result uploaded and parsed."))
        return redirect("selection:run", pk=selection.pk, run_pk=run.pk)
    return _uploads_page(request, selection, upload_form=form, refusals=refusals, status=400)
