"""Steps 6 and 7 in the browser: the side-by-side comparison and the decision records.

Thin views in the style of ``views.py``: the selection resolves through ``selections_for`` (another
team's selection is a 404), writes go through ``scores`` and ``records`` (which enforce who may do
what: a PermissionDenied there is a 403 here), and service ValidationErrors land on the forms.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Max, Q
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.dateparse import parse_datetime
from django.utils.translation import get_language
from django.utils.translation import gettext as _
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from django.views.decorators.http import require_http_methods, require_POST

from benchmarks import charts
from benchmarks.models import BenchmarkRun

from . import records, run_charts, scores, selectors
from .domain import criteria as criteria_domain
from .forms import attach_service_errors
from .forms_decision import CommentForm, RecordDraftForm, SignForm, VerifyForm
from .i18n_names import person_name, translate_name
from .models import DecisionRecord, Selection
from .views import _context, _get_selection, _require_edit

def _role_label(role: str) -> str:
    return {"business": _("Business owner"), "platform": _("Platform owner"),
            "security": _("Security owner")}.get(role, role)


# --------------------------------------------------------------------------- comparison


def comparison_table(result: dict[str, Any]) -> dict[str, Any]:
    """The Score.result reshaped for a side-by-side table: candidates as columns (by rank), then
    one block per dimension with its criteria. A missing score stays None (shown as "missing")."""
    columns = sorted(result.get("candidates", []),
                     key=lambda c: (c.get("screened_out", False), c.get("rank") or 10**6, c.get("label", "")))
    dimension_names = {d.id: translate_name(d.name) for d in criteria_domain.DIMENSIONS}
    weights = result.get("weights") or {}
    seen = [d.id for d in criteria_domain.DIMENSIONS if any(d.id in (c.get("dimensions") or {}) for c in columns)]
    blocks = []
    for dimension in seen:
        criteria_ids = list(dict.fromkeys(
            cid for c in columns for cid, crit in (c.get("criteria") or {}).items() if crit.get("dimension") == dimension))
        criteria_rows = []
        for cid in criteria_ids:
            criterion = criteria_domain.CRITERIA_BY_ID.get(cid)
            criteria_rows.append({
                "id": cid, "name": translate_name(criterion.name) if criterion else cid, "weight": weights.get(cid),
                "cells": [_cell((c.get("criteria") or {}).get(cid)) for c in columns]})
        blocks.append({"id": dimension, "name": dimension_names.get(dimension, dimension),
                       "cells": [_cell((c.get("dimensions") or {}).get(dimension)) for c in columns],
                       "criteria": criteria_rows})
    gate_rows = []
    for dimension, threshold in (result.get("gates") or {}).items():
        cells = []
        for c in columns:
            gate = next((g for g in c.get("gates") or [] if g.get("dimension") == dimension), None)
            cells.append(gate or {"passed": None, "score": None, "reason": ""})
        gate_rows.append({"id": dimension, "name": dimension_names.get(dimension, dimension), "threshold": threshold,
                          "cells": cells})
    missing = {c.get("candidate"): sorted({ind.get("indicator") for crit in (c.get("criteria") or {}).values()
                                           for ind in crit.get("indicators") or [] if ind.get("status") == "missing"})
               for c in columns}
    return {"columns": columns, "dimensions": blocks, "gates": gate_rows,
            "missing": [missing[c.get("candidate")] for c in columns],
            "winner": next((c for c in columns if c.get("candidate") == result.get("winner")), None)}


def _cell(data: dict | None) -> dict:
    data = data or {}
    score = data.get("score")
    return {"score": score, "upper": data.get("score_upper"), "coverage": data.get("coverage"),
            "status": data.get("status") or ("missing" if score is None else "ok"), "missing": score is None,
            "explanation": data.get("explanation", ""), "simulated": data.get("uses_simulated", False)}


def _concurrency_series(selection: Selection, include_simulated: bool) -> tuple[dict, bool]:
    """TTFT/TPOT p95 against concurrency per candidate, from its latest succeeded concurrency_stress run
    (measured preferred; simulated only when the toggle includes it)."""
    allowed = [BenchmarkRun.Evidence.MEASURED] + ([BenchmarkRun.Evidence.SIMULATED] if include_simulated else [])
    runs = (BenchmarkRun.objects.filter(candidate__selection=selection, test="concurrency_stress",
                                        status=BenchmarkRun.Status.SUCCEEDED, evidence__in=allowed)
            .select_related("candidate", "candidate__engine").prefetch_related("points"))
    chosen: dict[int, BenchmarkRun] = {}
    for run in runs:  # newest first; a measured run beats a simulated one
        current = chosen.get(run.candidate_id)
        if current is None or (current.evidence != run.evidence and run.evidence == BenchmarkRun.Evidence.MEASURED):
            chosen[run.candidate_id] = run
    series, simulated = {}, False
    for run in chosen.values():
        points = sorted((p for p in run.points.all()
                         if (p.concurrency if p.concurrency is not None else p.achieved_concurrency) is not None),
                        key=lambda p: p.concurrency if p.concurrency is not None else p.achieved_concurrency)
        if not points:
            continue
        label = run.candidate.display_name + (" (SIMULATED)" if run.evidence == BenchmarkRun.Evidence.SIMULATED else "")
        series[label] = {
            "concurrency": [p.concurrency if p.concurrency is not None else p.achieved_concurrency for p in points],
            "ttft_ms": [(p.ttft_ms or {}).get("p95") for p in points],
            "tpot_ms": [(p.tpot_ms or {}).get("p95") for p in points]}
        simulated = simulated or run.evidence == BenchmarkRun.Evidence.SIMULATED
    return series, simulated


def _charts(selection: Selection, score, table: dict, include_simulated: bool) -> dict[str, str]:
    """The comparison's SVG charts (cached per score snapshot, language and toggle)."""
    # The evidence charts read runs the scoring inputs do not cover (time series, ladder points):
    # the newest run and finish time of the selection are part of the key.
    runs = BenchmarkRun.objects.filter(candidate__selection=selection).aggregate(last=Max("id"), done=Max("finished_at"))
    key = (f"kvselect:cmp-charts:{selection.pk}:{score.pk}:{score.inputs_hash}:{runs['last']}:{runs['done']}:"
           f"{int(include_simulated)}:{get_language()}")
    cached = cache.get(key)
    if cached is not None:
        return cached
    simulated = not score.signable
    out: dict[str, str] = {}
    bars = {c["label"]: {d: (c.get("dimensions") or {}).get(d, {}).get("score") for d in c.get("dimensions") or {}}
            for c in table["columns"]}
    if bars and any(bars.values()):
        try:
            out["dimension_bars"] = charts.dimension_bars(
                bars, dimensions=[b["id"] for b in table["dimensions"]],
                labels={b["id"]: b["name"] for b in table["dimensions"]},
                gates={g["id"]: float(g["threshold"]) for g in table["gates"]}, simulated=simulated,
                title=_("Score per dimension"))
        except charts.ChartInputError:
            pass
    series, series_simulated = _concurrency_series(selection, include_simulated)
    if series:
        constraints = getattr(selection, "constraints", None)
        out["latency"] = charts.latency_vs_concurrency(
            series, ttft_budget_ms=getattr(constraints, "ttft_p95_ms", None),
            tpot_budget_ms=getattr(constraints, "tpot_p95_ms", None), simulated=series_simulated,
            title=_("TTFT and TPOT against concurrency"))
    out.update(_evidence_charts(selection, include_simulated))
    cache.set(key, out, 600)
    return out


def _evidence_charts(selection: Selection, include_simulated: bool) -> dict[str, str]:
    """KV usage over time, TTFT against context, prefix on/off and soak drift, from each candidate's
    latest run of the matching test (the same chart module as the PDF)."""
    from .evidence import latest_runs

    kv, context, prefix, drift = {}, {}, {}, {}
    flags = {"kv": False, "context": False, "prefix": False, "drift": False}
    for candidate in selection.candidates.select_related("engine"):
        runs = {test: run for test, run in latest_runs(candidate).items() if include_simulated or not run.is_simulated}
        name = candidate.display_name
        stress = runs.get("concurrency_stress")
        if stress is not None and (usage := run_charts.kv_usage(stress)):
            kv[name] = usage
            flags["kv"] |= stress.is_simulated
        ladder = runs.get("long_context")
        if ladder is not None and (rungs := run_charts.context_rungs(ladder)):
            context[name] = rungs
            flags["context"] |= ladder.is_simulated
        reuse = runs.get("prefix_reuse")
        if reuse is not None and (peaks := run_charts.prefix_peaks(reuse)):
            prefix[name] = peaks
            flags["prefix"] |= reuse.is_simulated
        soak = runs.get("stability")
        if soak is not None and (points := run_charts.soak_drift_points(soak)):
            drift[name] = points
            flags["drift"] |= soak.is_simulated
    out: dict[str, str] = {}
    renderers = (
        ("kv_usage", kv, lambda: charts.kv_usage_over_time(kv, title=_("KV-cache usage over time"),
                                                            simulated=flags["kv"])),
        ("ttft_context", context, lambda: charts.ttft_vs_context(context, title=_("TTFT against context length"),
                                                                 simulated=flags["context"])),
        ("prefix", prefix, lambda: charts.prefix_on_off(prefix, metric=_(run_charts.PREFIX_METRIC),
                                                        title=_(run_charts.PREFIX_TITLE), simulated=flags["prefix"])),
        ("soak", drift, lambda: charts.soak_drift(drift, title=_(run_charts.SOAK_TITLE), simulated=flags["drift"])),
    )
    for key, data, draw in renderers:
        if data:
            try:
                out[key] = draw()
            except (charts.ChartInputError, TypeError, ValueError):
                pass
    return out


def _changed_since(selection: Selection, when) -> bool:
    """Whether settings (audited) or runs changed after `when`: then the page rescores (a no-op when the
    inputs hash is unchanged), so nobody reads a stale comparison."""
    runs = BenchmarkRun.objects.filter(candidate__selection=selection)
    return (selection.audit.exclude(action__startswith="record.").filter(at__gt=when).exists()
            or runs.filter(Q(created_at__gt=when) | Q(finished_at__gt=when)).exists())


@login_required
def comparison(request: HttpRequest, pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    include_simulated = request.GET.get("simulated") == "1"
    candidate_count = selection.candidates.count()
    score, error = None, ""
    if candidate_count:
        score = scores.latest_score(selection, include_simulated)
        if score is None or _changed_since(selection, score.computed_at):
            try:
                score = scores.compute_scores(selection, include_simulated=include_simulated)
            except ValueError as exc:  # the scoring inputs name the field and the problem
                error = str(exc)
    table = comparison_table(score.result) if score else None
    return render(request, "selection/decision/comparison.html", _context(
        request, selection, "comparison", score=score, table=table, error=error, candidate_count=candidate_count,
        include_simulated=include_simulated, charts=_charts(selection, score, table, include_simulated) if score else {},
        result=score.result if score else {}))


@login_required
@require_POST
def comparison_recompute(request: HttpRequest, pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    _require_edit(request, selection)
    include_simulated = request.POST.get("simulated") == "1"
    target = redirect("selection:comparison", pk=selection.pk)
    if include_simulated:
        target["Location"] += "?simulated=1"
    if not selection.candidates.exists():
        messages.error(request, _("Nothing to score yet: add candidates and evidence first."))
        return target
    try:
        score = scores.compute_scores(selection, include_simulated=include_simulated)
    except ValueError as exc:
        messages.error(request, _("Scoring failed: %(error)s") % {"error": exc})
    else:
        messages.success(request, _("Scores recomputed (rules %(rules)s, inputs %(hash)s).") % {
            "rules": score.rules_version, "hash": score.inputs_hash[:12]})
    return target


# --------------------------------------------------------------------------- records


def _get_record(selection: Selection, record_pk: int) -> DecisionRecord:
    return get_object_or_404(selection.records.select_related("supersedes", "created_by"), pk=record_pk)


def _successor(record: DecisionRecord) -> DecisionRecord | None:
    try:
        return record.superseded_by
    except DecisionRecord.DoesNotExist:
        return None


@login_required
@require_http_methods(["GET", "POST"])
def record_list(request: HttpRequest, pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    supersedes = None
    if request.method == "POST":
        _require_edit(request, selection)
        if request.POST.get("supersedes"):
            supersedes = _get_record(selection, request.POST["supersedes"])
        form = RecordDraftForm(request.POST)
        if form.is_valid():
            try:
                record = records.create_draft(selection=selection, user=request.user, supersedes=supersedes,
                                              **form.cleaned_data)
            except ValidationError as error:
                attach_service_errors(form, error)
            else:
                messages.success(request, _("Draft v%(version)s created. Next: check it and send it to review.") % {
                    "version": record.version})
                return redirect("selection:record", pk=selection.pk, record_pk=record.pk)
    else:
        if request.GET.get("supersedes"):
            supersedes = _get_record(selection, request.GET["supersedes"])
        form = RecordDraftForm(initial=_initial_from(supersedes))
    rows = [{"record": r, "successor": _successor(r)}
            for r in selection.records.select_related("supersedes", "created_by").order_by("-version")]
    return render(request, "selection/decision/records.html", _context(
        request, selection, "records", rows=rows, form=form, supersedes=supersedes))


def _initial_from(record: DecisionRecord | None) -> dict:
    if record is None:
        return {}
    return {k: getattr(record, k) for k in ("decision", "rationale", "applies_to", "does_not_apply_to")}


def _timeline(record: DecisionRecord, approvals: list) -> list[dict]:
    events = [{"when": record.created_at, "what": _("Draft v%(v)s created by %(who)s") % {
        "v": record.version, "who": person_name(record.created_by)}}]
    if record.review_started_at:
        events.append({"when": record.review_started_at, "what": _("Sent to review; snapshot frozen")})
    for approval in approvals:
        events.append({"when": approval.approved_at, "what": _("Approved by the %(role)s (%(who)s)") % {
            "role": _role_label(approval.role).lower(), "who": person_name(approval.user)}})
    for approval in approvals:
        if approval.signed_at:
            events.append({"when": approval.signed_at, "what": _("Signed by the %(role)s (%(subject)s)") % {
                "role": _role_label(approval.role).lower(), "subject": approval.certificate_subject or "—"}})
    events.sort(key=lambda e: e["when"])
    return events


def _record_page(request: HttpRequest, selection: Selection, record: DecisionRecord, *, edit_form=None,
                 comment_form=None, sign_form=None, review_problems=None, status: int = 200) -> HttpResponse:
    approvals = list(record.approvals.select_related("user"))
    approved_roles = {a.role for a in approvals}
    mine = records.owner_role(request.user, selection)
    next_signer = records.next_signer_role(record) if record.status == DecisionRecord.Status.APPROVED else None
    in_review = record.status == DecisionRecord.Status.IN_REVIEW
    owners = [{"role": role, "label": _role_label(role), "user": getattr(selection, f"{role}_owner"),
               "approval": next((a for a in approvals if a.role == role), None),
               "can_approve": in_review and role in mine and role not in approved_roles} for role in records.ROLES]
    can_edit = selectors.can_edit(request.user, selection)
    context = _context(
        request, selection, "records", record=record, owners=owners, timeline=_timeline(record, approvals),
        comments=record.comments.select_related("author"), successor=_successor(record),
        sign_role={"role": next_signer, "label": _role_label(next_signer)} if next_signer in mine else None,
        next_signer={"role": next_signer, "label": _role_label(next_signer)} if next_signer else None,
        edit_form=edit_form or (RecordDraftForm(instance=record) if can_edit and not record.frozen else None),
        comment_form=comment_form or CommentForm(), sign_form=sign_form or SignForm(),
        can_comment=selectors.can_review(request.user, selection) or bool(mine),
        review_problems=review_problems or [], snapshot=record.snapshot or {},
        has_pdf=bool(record.signed_pdf or record.pdf) or record.status == DecisionRecord.Status.APPROVED)
    return render(request, "selection/decision/record.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def record_detail(request: HttpRequest, pk: int, record_pk: int) -> HttpResponse:
    """The record page; POST edits the draft (architects only)."""
    selection = _get_selection(request, pk)
    record = _get_record(selection, record_pk)
    if request.method == "POST":
        _require_edit(request, selection)
        form = RecordDraftForm(request.POST, instance=DecisionRecord.objects.get(pk=record.pk))
        if form.is_valid():
            try:
                records.update_draft(record=record, user=request.user, **form.cleaned_data)
            except ValidationError as error:
                attach_service_errors(form, error)
            else:
                messages.success(request, _("Draft saved."))
                return redirect("selection:record", pk=selection.pk, record_pk=record.pk)
        return _record_page(request, selection, record, edit_form=form, status=400)
    return _record_page(request, selection, record)


@login_required
@require_POST
def record_action(request: HttpRequest, pk: int, record_pk: int) -> HttpResponse:
    """start_review (architects), comment (reviewers, architects, owners), approve (the named owner)."""
    selection = _get_selection(request, pk)
    record = _get_record(selection, record_pk)
    action = request.POST.get("action")
    back = redirect("selection:record", pk=selection.pk, record_pk=record.pk)
    if action == "start_review":
        try:
            records.start_review(record=record, user=request.user)
        except ValidationError as error:
            problems = error.messages
            return _record_page(request, selection, record, review_problems=problems, status=400)
        messages.success(request, _("Record v%(v)s is in review: the snapshot is frozen. The three owners approve next.")
                         % {"v": record.version})
        return back
    if action == "comment":
        form = CommentForm(request.POST)
        if form.is_valid():
            try:
                records.comment(record=record, user=request.user, text=form.cleaned_data["text"])
            except ValidationError as error:
                attach_service_errors(form, error)
            else:
                messages.success(request, _("Comment added."))
                return back
        return _record_page(request, selection, record, comment_form=form, status=400)
    if action == "approve":
        role = request.POST.get("role", "")
        try:
            records.approve(record=record, user=request.user, role=role, comment_text=request.POST.get("comment", ""))
        except ValidationError as error:
            messages.error(request, " ".join(error.messages))
        else:
            messages.success(request, _("Approved as %(role)s.") % {"role": _role_label(role).lower()})
        return back
    messages.error(request, _("Unknown action: %(action)s.") % {"action": action or "—"})
    return back


@sensitive_post_parameters("passphrase")
@login_required
@require_POST
@sensitive_variables("passphrase", "pkcs12", "form")  # innermost: hides this frame's locals in error reports
def record_sign(request: HttpRequest, pk: int, record_pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    record = _get_record(selection, record_pk)
    role = request.POST.get("role", "")
    if role not in records.owner_role(request.user, selection):
        raise PermissionDenied(_("Only the named owner can sign for this role."))
    form = SignForm(request.POST, request.FILES)
    if form.is_valid():
        pkcs12 = form.cleaned_data["pkcs12"].read()
        passphrase = form.cleaned_data["passphrase"]
        try:
            record = records.sign(record=record, user=request.user, role=role, pkcs12=pkcs12, passphrase=passphrase)
        except ValidationError as error:
            attach_service_errors(form, error)
        else:
            if record.status == DecisionRecord.Status.SIGNED:
                messages.success(request, _("Signed. All three owners have signed: the record is final; download it below."))
            else:
                messages.success(request, _("Signed as %(role)s. The %(next)s signs next.") % {
                    "role": _role_label(role).lower(), "next": _role_label(records.next_signer_role(record) or "").lower()})
            return redirect("selection:record", pk=selection.pk, record_pk=record.pk)
    return _record_page(request, selection, record, sign_form=form, status=400)


@login_required
def record_pdf(request: HttpRequest, pk: int, record_pk: int) -> HttpResponse:
    selection = _get_selection(request, pk)
    record = _get_record(selection, record_pk)
    if record.status == DecisionRecord.Status.APPROVED and not record.pdf:
        record = records.render_pdf(record)
    source = record.signed_pdf or record.pdf
    if not source:
        raise Http404(_("No PDF yet: it is rendered once all three owners have approved."))
    response = FileResponse(source.open("rb"), content_type="application/pdf", as_attachment=True,
                            filename=f"decision-record-{selection.pk}-v{record.version}.pdf")
    response["Cache-Control"] = "private, no-transform"
    return response


# --------------------------------------------------------------------------- verification


@login_required
@require_http_methods(["GET", "POST"])
def verify(request: HttpRequest) -> HttpResponse:
    """Any signed-in user (procurement included): upload a PDF, see each signature and whether kvselect issued it."""
    report, status = None, 200
    form = VerifyForm(request.POST or None, request.FILES or None)
    if request.method == "POST":
        if form.is_valid():
            try:
                report = records.verify(form.cleaned_data["file"].read())
            except Exception as exc:  # a damaged PDF: say so instead of a 500
                form.add_error("file", _("This PDF could not be read: %(error)s") % {"error": exc})
                status = 400
            else:
                for signature in report.get("signatures", []):
                    signature["signing_time"] = parse_datetime(signature["signing_time"] or "")
                # link the record only when the user may see its selection; otherwise just "issued by kvselect"
                if report.get("error") and not report.get("signatures"):
                    status = 400  # not a readable PDF: the page says why
                report["record"] = DecisionRecord.objects.filter(
                    signed_sha256=report["sha256"], selection__in=selectors.selections_for(request.user)
                ).select_related("selection").first()
        else:
            status = 400
    return render(request, "selection/decision/verify.html", {"form": form, "report": report}, status=status)
