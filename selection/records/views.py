"""Steps 6 and 7 in the browser: the side-by-side comparison and the decision records.

Thin views in the style of ``views.py``: the selection resolves through ``selections_for`` (another
team's selection is a 404), writes go through ``scores`` and ``records`` (which enforce who may do
what: a PermissionDenied there is a 403 here), and service ValidationErrors land on the forms.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import translation
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from selection import selectors
from selection.certificates.trust import HsmConfigurationError, hsm_key_for, production_roots
from selection.domain import tie_ground as tie_domain
from selection.domain.project_checks import CONFIRMED_BY
from selection.domain.records import OWNER_ROLES
from selection.i18n import certificate_name, person_name, record_language, role_name
from selection.models import DecisionRecord, Selection
from selection.records import signing_client
from selection.records.forms import (
    CommentForm,
    HsmSignForm,
    RecordDraftForm,
    SignatureUploadForm,
    SignForm,
    VerifyForm,
)
from selection.records.open_items import as_rows, close_open_item, record_blockers
from selection.records.operations import ALERTS_FILE, DASHBOARD_FILE, export_monitoring, exportable
from selection.records.services import (
    approve,
    archive_draft,
    comment,
    complete_signature,
    create_draft,
    frozen_tie_ground,
    next_signer_role,
    owner_role,
    pending_signature_request,
    prepare_signature,
    restore_draft,
    sign,
    sign_with_hsm,
    signature_request_document,
    start_reevaluation,
    start_review,
    tied_candidates,
    update_draft,
)
from selection.records.summary import item_label
from selection.records.verification import verification_report
from selection.tasks import queue_render
from selection.web import action_of, attach_service_errors, get_selection, page_context, page_url, require_edit


def language_name(code: str) -> str:
    """A language code as its speakers write it ("zh-hans" -> 简体中文), for the record's language note."""
    try:
        return translation.get_language_info(code)["name_local"]
    except KeyError:
        return code


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
    params = request.POST if request.method == "POST" else request.GET
    supersedes = _get_record(selection, params["supersedes"]) if params.get("supersedes") else None
    if request.method == "POST":
        require_edit(request, selection)
        form = RecordDraftForm(request.POST, tied=tied_candidates(selection))
        if form.is_valid():
            record = _create_draft(request, selection, supersedes, form)
            if record is not None:
                return redirect("selection:record", pk=selection.pk, record_pk=record.pk)
    else:
        form = RecordDraftForm(initial=_initial_from(supersedes), tied=tied_candidates(selection))
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


def _create_draft(
    request: HttpRequest, selection: Selection, supersedes: DecisionRecord | None, form: RecordDraftForm
) -> DecisionRecord | None:
    """Create the draft (or continue the open one) and say which; None with the errors on `form`."""
    continued = selectors.open_draft(selection, supersedes)
    try:
        record = create_draft(selection=selection, user=request.user, supersedes=supersedes, **form.cleaned_data)
    except ValidationError as error:
        attach_service_errors(form, error)
        return None
    if continued is not None and continued.pk == record.pk:
        text = _(
            "Draft v%(version)s updated: a new attempt continues the open draft rather than adding a "
            "version. Next: check it and send it to review."
        )
    else:
        text = _("Draft v%(version)s created. Next: check it and send it to review.")
    messages.success(request, text % {"version": record.version})
    return record


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
                % {"role": role_name(approval.role).lower(), "who": person_name(approval.user)},
            }
        )
    for approval in approvals:
        if approval.signed_at:
            events.append(
                {
                    "when": approval.signed_at,
                    "what": _("Signed by the %(role)s (%(subject)s)")
                    % {
                        "role": role_name(approval.role).lower(),
                        "subject": certificate_name(approval.certificate_subject) or "—",
                    },
                }
            )
    events.sort(key=lambda e: e["when"])
    return events


def _signing_options(request: HttpRequest, record: DecisionRecord, role: str | None) -> dict | None:
    """How the signing owner can sign here: their pending owner-side request and its commands, the HSM
    when a key is configured for them, the PKCS#12 upload unless a non-development root forbids it."""
    if role is None:
        return None
    pending = pending_signature_request(record, request.user, role)
    request_url = reverse("selection:record-sign-request", kwargs={"pk": record.selection_id, "record_pk": record.pk})
    try:
        hsm = hsm_key_for(request.user.get_username()) is not None
    except HsmConfigurationError:
        hsm = False
    return {
        "pending": pending,
        "request_url": f"{request_url}?role={role}",
        "request_file": f"signature-request-{record.pk}-{role}.json",
        # the server as the owner's browser reached it (not a configured default port): what the command calls
        "base_url": request.build_absolute_uri("/").rstrip("/"),
        "client_wheel": request.build_absolute_uri(
            reverse("selection:signing-client", kwargs={"filename": signing_client.wheel().filename})
        ),
        "hsm": hsm,
        "production_roots": ", ".join(root.common_name or root.subject for root in production_roots()),
    }


@require_GET
def signing_client_wheel(request: HttpRequest, filename: str) -> HttpResponse:
    """The owners' signing command as a wheel (no login: pip cannot log in, and it holds no secret)."""
    built = signing_client.wheel()
    if filename != built.filename:
        raise Http404(_("No such download: the signing command is %(name)s.") % {"name": built.filename})
    response = HttpResponse(built.content, content_type="application/octet-stream")
    response["Content-Disposition"] = f'attachment; filename="{built.filename}"'
    response["ETag"] = f'"{built.sha256}"'
    return response


def _record_page(
    request: HttpRequest,
    selection: Selection,
    record: DecisionRecord,
    *,
    review_problems=None,
    status: int = 200,
    **forms,
) -> HttpResponse:
    """The record page; `forms` (edit_form, comment_form, sign_form, hsm_form, upload_form) carry a
    bound form with its errors back to the page."""
    approvals = list(record.approvals.select_related("user"))
    mine = owner_role(request.user, selection)
    context = page_context(
        request,
        selection,
        "records",
        record=record,
        **_owners_and_signing(request, selection, record, approvals, mine),
        **_record_forms(request, selection, record, forms),
        **_record_state(record, approvals, mine),
        timeline=_timeline(record, approvals),
        comments=record.comments.select_related("author"),
        successor=_successor(record),
        can_comment=selectors.can_review(request.user, selection) or bool(mine),
        review_problems=review_problems or [],
        page_url=page_url("selection:record", pk=selection.pk, record_pk=record.pk),
    )
    return render(request, "selection/decision/record.html", context, status=status)


def _record_forms(request: HttpRequest, selection: Selection, record: DecisionRecord, forms: dict) -> dict:
    """The page's forms: the bound ones given, else empty ones (the draft form only where it can be edited)."""
    editable = selectors.can_edit(request.user, selection) and not record.frozen and not record.archived_at
    return {
        "edit_form": forms.get("edit_form")
        or (RecordDraftForm(instance=record, tied=tied_candidates(selection)) if editable else None),
        "comment_form": forms.get("comment_form") or CommentForm(),
        "sign_form": forms.get("sign_form") or SignForm(),
        "hsm_form": forms.get("hsm_form") or HsmSignForm(),
        "upload_form": forms.get("upload_form") or SignatureUploadForm(),
    }


def _record_state(record: DecisionRecord, approvals: list, mine) -> dict:
    """What the snapshot and the record's state show: language, PDF, exports, open and blocking items."""
    snapshot = record.snapshot or {}
    return {
        "snapshot": snapshot,
        "record_language": language_name((snapshot.get("record") or {}).get("language") or record_language()),
        "has_pdf": bool(record.signed_pdf or record.pdf) or record.status == DecisionRecord.Status.APPROVED,
        "signatures_done": sum(1 for a in approvals if a.signed_at),
        "monitoring_export": exportable(record),
        "open_items": (snapshot.get("project_checks") or {}).get("open_items") or [],
        "development_signatures": any(a.development_certificate for a in approvals),
        "blocking_items": [{**row, "can_close": bool(set(row["owner_roles"]) & set(mine))} for row in as_rows(record)],
        "procurement_blockers": record_blockers(record),
    }


def _owners_and_signing(
    request: HttpRequest, selection: Selection, record: DecisionRecord, approvals: list, mine
) -> dict:
    """The owners' rows (who approved, who may approve now) and who signs next, and how."""
    approved_roles = {a.role for a in approvals}
    next_signer = next_signer_role(record) if record.status == DecisionRecord.Status.APPROVED else None
    in_review = record.status == DecisionRecord.Status.IN_REVIEW
    frozen = {o.get("role"): o.get("certificate_sha256") for o in (record.snapshot or {}).get("owners", [])}
    owners = [
        {
            "role": role,
            "label": role_name(role),
            "user": getattr(selection, f"{role}_owner"),
            "certificate": frozen.get(role),
            "approval": next((a for a in approvals if a.role == role), None),
            "can_approve": in_review and role in mine and role not in approved_roles,
            "confirms": _confirms(role),
            # the business owner confirms a stated ground for choosing among tied candidates when approving
            "confirms_tie_ground": role == tie_domain.BUSINESS_CONFIRMS and frozen_tie_ground(record) is not None,
        }
        for role in OWNER_ROLES
    ]
    signs_here = next_signer in mine
    return {
        "owners": owners,
        "sign_role": {"role": next_signer, "label": role_name(next_signer), "certificate": frozen.get(next_signer)}
        if signs_here
        else None,
        "next_signer": {"role": next_signer, "label": role_name(next_signer)} if next_signer else None,
        "signing": _signing_options(request, record, next_signer if signs_here else None),
    }


@login_required
@require_http_methods(["GET", "POST"])
def record_detail(request: HttpRequest, pk: int, record_pk: int) -> HttpResponse:
    """The record page; POST edits the draft (architects only)."""
    selection = get_selection(request, pk)
    record = _get_record(selection, record_pk)
    if request.method == "POST":
        require_edit(request, selection)
        form = RecordDraftForm(
            request.POST, instance=DecisionRecord.objects.get(pk=record.pk), tied=tied_candidates(selection)
        )
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
@action_of("selection:record", "pk", "record_pk")
def record_action(request: HttpRequest, pk: int, record_pk: int) -> HttpResponse:
    """start_review, archive and restore a draft (architects), comment (reviewers, architects, owners),
    approve (the named owner)."""
    selection = get_selection(request, pk)
    record = _get_record(selection, record_pk)
    action = request.POST.get("action")
    handler = _RECORD_ACTIONS.get(action)
    if handler is None:
        messages.error(request, _("Unknown action: %(action)s.") % {"action": action or "—"})
        return redirect("selection:record", pk=selection.pk, record_pk=record.pk)
    return handler(request, selection, record)


def _back(record: DecisionRecord) -> HttpResponse:
    return redirect("selection:record", pk=record.selection_id, record_pk=record.pk)


def _start_review(request: HttpRequest, selection: Selection, record: DecisionRecord) -> HttpResponse:
    try:
        start_review(record=record, user=request.user)
    except ValidationError as error:
        return _record_page(request, selection, record, review_problems=error.messages, status=400)
    messages.success(
        request,
        _("Record v%(v)s is in review: the snapshot is frozen. The three owners approve next.") % {"v": record.version},
    )
    return _back(record)


def _comment(request: HttpRequest, selection: Selection, record: DecisionRecord) -> HttpResponse:
    form = CommentForm(request.POST)
    if form.is_valid():
        try:
            comment(record=record, user=request.user, text=form.cleaned_data["text"])
        except ValidationError as error:
            attach_service_errors(form, error)
        else:
            messages.success(request, _("Comment added."))
            return _back(record)
    return _record_page(request, selection, record, comment_form=form, status=400)


def _approve(request: HttpRequest, selection: Selection, record: DecisionRecord) -> HttpResponse:
    role = request.POST.get("role", "")
    try:
        approve(
            record=record,
            user=request.user,
            role=role,
            comment_text=request.POST.get("comment", ""),
            confirm_tie_ground=request.POST.get(tie_domain.CONFIRM_FIELD) in ("1", "on", "true"),
        )
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, _("Approved as %(role)s.") % {"role": role_name(role).lower()})
    return _back(record)


def _archive(request: HttpRequest, selection: Selection, record: DecisionRecord) -> HttpResponse:
    try:
        archive_draft(record=record, user=request.user)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
        return _back(record)
    messages.success(
        request,
        _("Draft v%(v)s archived: it is out of the records list and kept in the audit trail.") % {"v": record.version},
    )
    return redirect("selection:records", pk=selection.pk)


def _restore(request: HttpRequest, selection: Selection, record: DecisionRecord) -> HttpResponse:
    try:
        restore_draft(record=record, user=request.user)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, _("Draft v%(v)s restored.") % {"v": record.version})
    return _back(record)


# the record page's POST actions -> their handler (each checks who may act in its service)
_RECORD_ACTIONS = {
    "start_review": _start_review,
    "comment": _comment,
    "approve": _approve,
    "archive": _archive,
    "restore": _restore,
}


@login_required
@require_POST
def record_open_item(request: HttpRequest, pk: int, record_pk: int, item_pk: int) -> HttpResponse:
    """Resolve (how) or waive (why) an owner's "not ready": the owner who confirms its section."""
    selection = get_selection(request, pk)
    record = _get_record(selection, record_pk)
    item = get_object_or_404(selectors.open_items_for(request.user).filter(record=record), pk=item_pk)
    try:
        close_open_item(
            item=item, user=request.user, status=request.POST.get("status", ""), reason=request.POST.get("reason", "")
        )
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, _("Open item “%(item)s” closed.") % {"item": item_label(item.section, item.item)})
    return redirect("selection:record", pk=selection.pk, record_pk=record.pk)


def _signed_message(request: HttpRequest, record: DecisionRecord, role: str) -> None:
    if record.status == DecisionRecord.Status.SIGNED:
        messages.success(request, _("Signed. All three owners have signed: the record is final; download it below."))
    else:
        messages.success(
            request,
            _("Signed as %(role)s. The %(next)s signs next.")
            % {"role": role_name(role).lower(), "next": role_name(next_signer_role(record) or "").lower()},
        )


def _signing_owner(request: HttpRequest, pk: int, record_pk: int) -> tuple[Selection, DecisionRecord, str]:
    selection = get_selection(request, pk)
    record = _get_record(selection, record_pk)
    role = request.POST.get("role") or request.GET.get("role", "")
    if role not in owner_role(request.user, selection):
        raise PermissionDenied(_("Only the named owner can sign for this role."))
    return selection, record, role


@sensitive_post_parameters("passphrase", "pin")
@login_required
@action_of("selection:record", "pk", "record_pk")
@sensitive_variables("passphrase", "pkcs12", "pin", "form")  # innermost: hides this frame's locals in error reports
def record_sign(request: HttpRequest, pk: int, record_pk: int) -> HttpResponse:
    """Sign with an uploaded PKCS#12 (development CA only) or, with ``pin``, the owner's key in the HSM."""
    selection, record, role = _signing_owner(request, pk, record_pk)
    hsm = "pin" in request.POST
    form = HsmSignForm(request.POST) if hsm else SignForm(request.POST, request.FILES)
    if form.is_valid():
        try:
            if hsm:
                record = sign_with_hsm(record=record, user=request.user, role=role, pin=form.cleaned_data["pin"])
            else:
                pkcs12 = form.cleaned_data["pkcs12"].read()
                passphrase = form.cleaned_data["passphrase"]
                record = sign(record=record, user=request.user, role=role, pkcs12=pkcs12, passphrase=passphrase)
        except ValidationError as error:
            attach_service_errors(form, error)
        else:
            _signed_message(request, record, role)
            return redirect("selection:record", pk=selection.pk, record_pk=record.pk)
    forms_on_page = {"hsm_form": form} if hsm else {"sign_form": form}
    return _record_page(request, selection, record, status=400, **forms_on_page)


@login_required
@action_of("selection:record", "pk", "record_pk")
def record_sign_prepare(request: HttpRequest, pk: int, record_pk: int) -> HttpResponse:
    """Owner-side signing, step 1: prepare the owner's signature; the page then shows what to sign and how."""
    selection, record, role = _signing_owner(request, pk, record_pk)
    try:
        prepare_signature(record=record, user=request.user, role=role)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(
            request, _("Your signature is prepared: sign it on your own machine with kvselect-sign, then upload it.")
        )
    return redirect(reverse("selection:record", kwargs={"pk": selection.pk, "record_pk": record.pk}) + "#sign")


@login_required
def record_sign_request(request: HttpRequest, pk: int, record_pk: int) -> HttpResponse:
    """The prepared signature request as JSON, for ``kvselect-sign --request``."""
    _selection, record, role = _signing_owner(request, pk, record_pk)
    pending = pending_signature_request(record, request.user, role)
    if pending is None:
        raise Http404(_("No signature is being prepared for you on this record."))
    response = JsonResponse(signature_request_document(pending))
    response["Content-Disposition"] = f'attachment; filename="signature-request-{record.pk}-{role}.json"'
    return response


@login_required
@action_of("selection:record", "pk", "record_pk")
def record_sign_upload(request: HttpRequest, pk: int, record_pk: int) -> HttpResponse:
    """Owner-side signing, step 2: the CMS from kvselect-sign, checked and embedded."""
    selection, record, role = _signing_owner(request, pk, record_pk)
    form = SignatureUploadForm(request.POST, request.FILES)
    if form.is_valid():
        try:
            record = complete_signature(
                record=record, user=request.user, role=role, cms=form.cleaned_data["cms"].read()
            )
        except ValidationError as error:
            attach_service_errors(form, error)
        else:
            _signed_message(request, record, role)
            return redirect("selection:record", pk=selection.pk, record_pk=record.pk)
    return _record_page(request, selection, record, upload_form=form, status=400)


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
