"""Steps 6 and 7 in the browser: the side-by-side comparison and the decision records.

Thin views in the style of ``views.py``: the selection resolves through ``selections_for`` (another
team's selection is a 404), writes go through ``scores`` and ``records`` (which enforce who may do
what: a PermissionDenied there is a 403 here), and service ValidationErrors land on the forms.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import translation
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from selection import selectors
from selection.domain.project_checks import CONFIRMED_BY
from selection.domain.records import OWNER_ROLES
from selection.i18n import person_name, record_language
from selection.models import DecisionRecord, Selection
from selection.records.forms import CommentForm, RecordDraftForm, SignForm, VerifyForm
from selection.records.operations import ALERTS_FILE, DASHBOARD_FILE, export_monitoring, exportable
from selection.records.services import (
    approve,
    archive_draft,
    comment,
    create_draft,
    next_signer_role,
    owner_role,
    restore_draft,
    sign,
    start_reevaluation,
    start_review,
    update_draft,
)
from selection.records.verification import verification_report
from selection.tasks import queue_render
from selection.web import attach_service_errors, get_selection, page_context, require_edit


def language_name(code: str) -> str:
    """A language code as its speakers write it ("zh-hans" -> 简体中文), for the record's language note."""
    try:
        return translation.get_language_info(code)["name_local"]
    except KeyError:
        return code


def _role_label(role: str) -> str:
    return {"business": _("Business owner"), "platform": _("Platform owner"), "security": _("Security owner")}.get(
        role, role
    )


# --------------------------------------------------------------------------- comparison


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
    selection = get_selection(request, pk)
    supersedes = None
    if request.method == "POST":
        require_edit(request, selection)
        if request.POST.get("supersedes"):
            supersedes = _get_record(selection, request.POST["supersedes"])
        form = RecordDraftForm(request.POST)
        if form.is_valid():
            continued = selectors.open_draft(selection, supersedes)
            try:
                record = create_draft(
                    selection=selection, user=request.user, supersedes=supersedes, **form.cleaned_data
                )
            except ValidationError as error:
                attach_service_errors(form, error)
            else:
                if continued is not None and continued.pk == record.pk:
                    text = _(
                        "Draft v%(version)s updated: a new attempt continues the open draft rather than adding a "
                        "version. Next: check it and send it to review."
                    )
                else:
                    text = _("Draft v%(version)s created. Next: check it and send it to review.")
                messages.success(request, text % {"version": record.version})
                return redirect("selection:record", pk=selection.pk, record_pk=record.pk)
    else:
        if request.GET.get("supersedes"):
            supersedes = _get_record(selection, request.GET["supersedes"])
        form = RecordDraftForm(initial=_initial_from(supersedes))
    records = list(selection.records.select_related("supersedes", "created_by").order_by("-version"))
    rows = [{"record": r, "successor": _successor(r)} for r in records if r.archived_at is None]
    return render(
        request,
        "selection/decision/records.html",
        page_context(
            request,
            selection,
            "records",
            rows=rows,
            archived=[r for r in records if r.archived_at is not None],
            open_draft=selectors.open_draft(selection, supersedes),
            form=form,
            supersedes=supersedes,
        ),
    )


def _initial_from(record: DecisionRecord | None) -> dict:
    if record is None:
        return {}
    return {
        k: getattr(record, k) for k in ("decision", "rationale", "applies_to", "does_not_apply_to", "project_checks")
    }


def _timeline(record: DecisionRecord, approvals: list) -> list[dict]:
    events = [
        {
            "when": record.created_at,
            "what": _("Draft v%(v)s created by %(who)s") % {"v": record.version, "who": person_name(record.created_by)},
        }
    ]
    if record.review_started_at:
        events.append({"when": record.review_started_at, "what": _("Sent to review; snapshot frozen")})
    for approval in approvals:
        events.append(
            {
                "when": approval.approved_at,
                "what": _("Approved by the %(role)s (%(who)s)")
                % {"role": _role_label(approval.role).lower(), "who": person_name(approval.user)},
            }
        )
    for approval in approvals:
        if approval.signed_at:
            events.append(
                {
                    "when": approval.signed_at,
                    "what": _("Signed by the %(role)s (%(subject)s)")
                    % {"role": _role_label(approval.role).lower(), "subject": approval.certificate_subject or "—"},
                }
            )
    events.sort(key=lambda e: e["when"])
    return events


def _record_page(
    request: HttpRequest,
    selection: Selection,
    record: DecisionRecord,
    *,
    edit_form=None,
    comment_form=None,
    sign_form=None,
    review_problems=None,
    status: int = 200,
) -> HttpResponse:
    approvals = list(record.approvals.select_related("user"))
    approved_roles = {a.role for a in approvals}
    mine = owner_role(request.user, selection)
    next_signer = next_signer_role(record) if record.status == DecisionRecord.Status.APPROVED else None
    in_review = record.status == DecisionRecord.Status.IN_REVIEW
    frozen = {o.get("role"): o.get("certificate_sha256") for o in (record.snapshot or {}).get("owners", [])}
    owners = [
        {
            "role": role,
            "label": _role_label(role),
            "user": getattr(selection, f"{role}_owner"),
            "certificate": frozen.get(role),
            "approval": next((a for a in approvals if a.role == role), None),
            "can_approve": in_review and role in mine and role not in approved_roles,
            "confirms": _confirms(role),
        }
        for role in OWNER_ROLES
    ]
    can_edit = selectors.can_edit(request.user, selection)
    context = page_context(
        request,
        selection,
        "records",
        record=record,
        owners=owners,
        timeline=_timeline(record, approvals),
        comments=record.comments.select_related("author"),
        successor=_successor(record),
        sign_role={"role": next_signer, "label": _role_label(next_signer), "certificate": frozen.get(next_signer)}
        if next_signer in mine
        else None,
        next_signer={"role": next_signer, "label": _role_label(next_signer)} if next_signer else None,
        edit_form=edit_form
        or (RecordDraftForm(instance=record) if can_edit and not record.frozen and not record.archived_at else None),
        comment_form=comment_form or CommentForm(),
        sign_form=sign_form or SignForm(),
        can_comment=selectors.can_review(request.user, selection) or bool(mine),
        review_problems=review_problems or [],
        snapshot=record.snapshot or {},
        record_language=language_name(
            ((record.snapshot or {}).get("record") or {}).get("language") or record_language()
        ),
        has_pdf=bool(record.signed_pdf or record.pdf) or record.status == DecisionRecord.Status.APPROVED,
        monitoring_export=exportable(record),
        open_items=((record.snapshot or {}).get("project_checks") or {}).get("open_items") or [],
        development_signatures=any(a.development_certificate for a in approvals),
    )
    return render(request, "selection/decision/record.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def record_detail(request: HttpRequest, pk: int, record_pk: int) -> HttpResponse:
    """The record page; POST edits the draft (architects only)."""
    selection = get_selection(request, pk)
    record = _get_record(selection, record_pk)
    if request.method == "POST":
        require_edit(request, selection)
        form = RecordDraftForm(request.POST, instance=DecisionRecord.objects.get(pk=record.pk))
        if form.is_valid():
            try:
                update_draft(record=record, user=request.user, **form.cleaned_data)
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
    """start_review, archive and restore a draft (architects), comment (reviewers, architects, owners),
    approve (the named owner)."""
    selection = get_selection(request, pk)
    record = _get_record(selection, record_pk)
    action = request.POST.get("action")
    back = redirect("selection:record", pk=selection.pk, record_pk=record.pk)
    if action == "start_review":
        try:
            start_review(record=record, user=request.user)
        except ValidationError as error:
            problems = error.messages
            return _record_page(request, selection, record, review_problems=problems, status=400)
        messages.success(
            request,
            _("Record v%(v)s is in review: the snapshot is frozen. The three owners approve next.")
            % {"v": record.version},
        )
        return back
    if action == "comment":
        form = CommentForm(request.POST)
        if form.is_valid():
            try:
                comment(record=record, user=request.user, text=form.cleaned_data["text"])
            except ValidationError as error:
                attach_service_errors(form, error)
            else:
                messages.success(request, _("Comment added."))
                return back
        return _record_page(request, selection, record, comment_form=form, status=400)
    if action == "approve":
        role = request.POST.get("role", "")
        try:
            approve(record=record, user=request.user, role=role, comment_text=request.POST.get("comment", ""))
        except ValidationError as error:
            messages.error(request, " ".join(error.messages))
        else:
            messages.success(request, _("Approved as %(role)s.") % {"role": _role_label(role).lower()})
        return back
    if action in ("archive", "restore"):
        try:
            (archive_draft if action == "archive" else restore_draft)(record=record, user=request.user)
        except ValidationError as error:
            messages.error(request, " ".join(error.messages))
            return back
        if action == "archive":
            messages.success(
                request,
                _("Draft v%(v)s archived: it is out of the records list and kept in the audit trail.")
                % {"v": record.version},
            )
            return redirect("selection:records", pk=selection.pk)
        messages.success(request, _("Draft v%(v)s restored.") % {"v": record.version})
        return back
    messages.error(request, _("Unknown action: %(action)s.") % {"action": action or "—"})
    return back


@sensitive_post_parameters("passphrase")
@login_required
@require_POST
@sensitive_variables("passphrase", "pkcs12", "form")  # innermost: hides this frame's locals in error reports
def record_sign(request: HttpRequest, pk: int, record_pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    record = _get_record(selection, record_pk)
    role = request.POST.get("role", "")
    if role not in owner_role(request.user, selection):
        raise PermissionDenied(_("Only the named owner can sign for this role."))
    form = SignForm(request.POST, request.FILES)
    if form.is_valid():
        pkcs12 = form.cleaned_data["pkcs12"].read()
        passphrase = form.cleaned_data["passphrase"]
        try:
            record = sign(record=record, user=request.user, role=role, pkcs12=pkcs12, passphrase=passphrase)
        except ValidationError as error:
            attach_service_errors(form, error)
        else:
            if record.status == DecisionRecord.Status.SIGNED:
                messages.success(
                    request, _("Signed. All three owners have signed: the record is final; download it below.")
                )
            else:
                messages.success(
                    request,
                    _("Signed as %(role)s. The %(next)s signs next.")
                    % {"role": _role_label(role).lower(), "next": _role_label(next_signer_role(record) or "").lower()},
                )
            return redirect("selection:record", pk=selection.pk, record_pk=record.pk)
    return _record_page(request, selection, record, sign_form=form, status=400)


@login_required
@require_POST
def record_reevaluate(request: HttpRequest, pk: int, record_pk: int) -> HttpResponse:
    """Start re-evaluating a signed record: draft the record that supersedes it (architects)."""
    selection = get_selection(request, pk)
    require_edit(request, selection)
    record = _get_record(selection, record_pk)
    try:
        successor = start_reevaluation(record=record, user=request.user)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
        return redirect("selection:record", pk=selection.pk, record_pk=record.pk)
    messages.success(
        request,
        _("Re-evaluation started: draft v%(new)s supersedes v%(old)s. Check it against the changed inputs.")
        % {"new": successor.version, "old": record.version},
    )
    return redirect("selection:record", pk=selection.pk, record_pk=successor.pk)


@login_required
@require_GET
def record_pdf(request: HttpRequest, pk: int, record_pk: int) -> HttpResponse:
    """Download the record's PDF. A GET never writes: an approved record whose PDF is not rendered
    yet has its rendering queued again (the `render` queue; signing renders it too) and the page says so."""
    selection = get_selection(request, pk)
    record = _get_record(selection, record_pk)
    if record.status == DecisionRecord.Status.APPROVED and not record.pdf:
        queue_render(record.pk)
        response = render(
            request,
            "selection/decision/record_pdf_pending.html",
            page_context(request, selection, "records", record=record),
            status=503,
        )
        response["Retry-After"] = "5"
        return response
    source = record.signed_pdf or record.pdf
    if not source:
        raise Http404(_("No PDF yet: it is rendered once all three owners have approved."))
    response = FileResponse(
        source.open("rb"),
        content_type="application/pdf",
        as_attachment=True,
        filename=f"decision-record-{selection.pk}-v{record.version}.pdf",
    )
    response["Cache-Control"] = "private, no-transform"
    return response


def _confirms(role: str) -> list[str]:
    """The project checks an owner's approval confirms (selection.domain.project_checks.CONFIRMED_BY)."""
    names = {
        "affected": _("affected applications, teams and data"),
        "readiness": _("platform readiness"),
        "acceptance": _("acceptance of the pilot and the staged rollout"),
        "security": _("the security checklist"),
    }
    return [names[section] for section, roles in CONFIRMED_BY.items() if role in roles]


@login_required
def record_monitoring(request: HttpRequest, pk: int, record_pk: int, kind: str) -> HttpResponse:
    """alerts.yml or dashboard.json of a signed record (any member who sees the selection)."""
    selection = get_selection(request, pk)
    record = _get_record(selection, record_pk)
    try:
        files = export_monitoring(record)
    except ValidationError as error:
        raise Http404(" ".join(error.messages)) from error
    name = {"alerts": ALERTS_FILE, "dashboard": DASHBOARD_FILE}[kind]
    response = HttpResponse(files[name], content_type="application/yaml" if kind == "alerts" else "application/json")
    response["Content-Disposition"] = f'attachment; filename="record-{selection.pk}-v{record.version}-{name}"'
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
                report = verification_report(form.cleaned_data["file"].read())
            except Exception as exc:  # a damaged PDF: say so instead of a 500
                form.add_error("file", _("This PDF could not be read: %(error)s") % {"error": exc})
                status = 400
            else:
                for signature in report.get("signatures", []):
                    for key in ("signing_time", "timestamp"):
                        signature[key] = parse_datetime(signature[key] or "")
                if report.get("error") and not report.get("signatures"):
                    status = 400  # not a readable PDF: the page says why
                # link the record only when the user may see its selection; otherwise just "issued by kvselect"
                issued = report.get("record") or {}
                report["record"] = (
                    DecisionRecord.objects.filter(
                        pk=issued.get("id"), selection__in=selectors.selections_for(request.user)
                    )
                    .select_related("selection")
                    .first()
                )
        else:
            status = 400
    return render(request, "selection/decision/verify.html", {"form": form, "report": report}, status=status)
