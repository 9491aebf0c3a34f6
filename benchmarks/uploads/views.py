"""CI upload pages of a selection: upload tokens (shown once) and the result-file upload form."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from benchmarks.models import BenchmarkRun
from benchmarks.storage import StorageFailure
from benchmarks.uploads.forms import ResultUploadForm, UploadTokenForm
from benchmarks.uploads.quality import confirm_as_evidence
from benchmarks.uploads.tokens import create_upload_token, revoke_upload_token
from selection.i18n import message_html
from selection.models import Selection, UploadToken
from selection.selectors import compared_candidates
from selection.web import action_of, attach_service_errors, get_selection, page_context, page_url, require_edit

UPLOAD_FIELDS = {"file", "test", "format", "label", "candidate"}


def _uploads_page(
    request: HttpRequest,
    selection: Selection,
    *,
    token_form=None,
    upload_form=None,
    new_token=None,
    refusals=None,
    status: int = 200,
) -> HttpResponse:
    candidates = compared_candidates(selection)  # an archived candidate takes no new evidence
    first = candidates.first()
    results_url = request.build_absolute_uri(reverse("candidate-results", args=[first.pk if first else 0]))
    if not first:
        results_url = results_url.replace("/candidates/0/", "/candidates/<CANDIDATE_ID>/")
    context = page_context(
        request,
        selection,
        "evidence",
        candidates=candidates,
        first_candidate=first,
        tokens=selection.upload_tokens.select_related("created_by"),
        token_form=token_form or UploadTokenForm(),
        new_token=new_token,
        results_url=results_url,
        upload_form=upload_form
        or ResultUploadForm(candidates=candidates, initial=_upload_initial(request, candidates)),
        refusals=refusals or {},
        page_url=page_url("selection:uploads", pk=selection.pk),
    )
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
    return _uploads_page(request, get_selection(request, pk))


@login_required
@action_of("selection:uploads", "pk")
def token_create(request: HttpRequest, pk: int) -> HttpResponse:
    """Create a token and show the raw value in this one response only (it is stored hashed)."""
    selection = get_selection(request, pk)
    require_edit(request, selection)
    form = UploadTokenForm(request.POST)
    if not form.is_valid():
        return _uploads_page(request, selection, token_form=form, status=400)
    try:
        token, raw = create_upload_token(selection=selection, user=request.user, name=form.cleaned_data["name"])
    except DjangoValidationError as error:
        attach_service_errors(form, error)
        return _uploads_page(request, selection, token_form=form, status=400)
    response = _uploads_page(request, selection, new_token={"token": token, "raw": raw})
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def token_revoke(request: HttpRequest, pk: int, token_pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    require_edit(request, selection)
    token = get_object_or_404(UploadToken, pk=token_pk, selection=selection)
    revoke_upload_token(token=token, user=request.user)
    messages.success(
        request, _("Token “%(name)s” revoked: uploads with it are refused from now on.") % {"name": token.name}
    )
    return redirect("selection:uploads", pk=selection.pk)


@login_required
@action_of("selection:uploads", "pk")
def result_upload(request: HttpRequest, pk: int) -> HttpResponse:
    selection = get_selection(request, pk)
    require_edit(request, selection)
    form = ResultUploadForm(request.POST, request.FILES, candidates=selection.candidates.select_related("engine"))
    if not form.is_valid():
        return _uploads_page(request, selection, upload_form=form, status=400)
    try:
        run, created, refusals = _ingest_form(form, request.user.get_username())
    except StorageFailure as error:  # the server's disk, not the file: 507, the page says what happened
        form.add_error(
            None,
            _(
                "The file could not be stored (%(error)s). Nothing was recorded; try again, and tell "
                "an administrator if it keeps failing."
            )
            % {"error": error},
        )
        return _uploads_page(request, selection, upload_form=form, status=507)
    if run is None:
        return _uploads_page(request, selection, upload_form=form, refusals=refusals, status=400)
    if not created:
        messages.info(request, _("This upload was already received: showing the first run."))
    elif run.status == BenchmarkRun.Status.PARSING:
        messages.success(request, _("File stored; it is large, so it is parsed in the background."))
    else:
        messages.success(request, _("Result uploaded and parsed."))
    return redirect("selection:run", pk=selection.pk, run_pk=run.pk)


def _ingest_form(form: ResultUploadForm, uploader: str) -> tuple[BenchmarkRun | None, bool, dict | None]:
    """Ingest a valid upload form's file: (run, created, None), or (None, False, the parsers' refusals or
    None) with the reason attached to the form. A storage failure is raised (the caller answers 507)."""
    from benchmarks.formats.base import reason_of  # the parsers (numpy): loaded by an upload
    from benchmarks.uploads.ingest import IngestError, ingest_upload

    data, handle = form.cleaned_data, form.cleaned_data["file"]
    try:
        run, created = ingest_upload(
            candidate=data["candidate"],
            data=handle,
            filename=handle.name,
            test=data["test"],
            fmt=data.get("format") or None,
            label=data.get("label") or "",
            uploader=uploader,
            idempotency_key=data.get("idempotency_key") or "",
        )
    except IngestError as error:
        form.add_error(error.field if error.field in UPLOAD_FIELDS else None, message_html(reason_of(error)))
    except ValueError as error:  # the parsers: UnrecognisedFormat (with .refusals) or FormatError
        # each format's reason in the page's language (a Message where the parser wrote one; walk m11), the
        # key paths and the values quoted from the file as code
        reasons = getattr(error, "reasons", None) or getattr(error, "refusals", None) or {}
        refusals = {name: message_html(reason) for name, reason in reasons.items()}
        if refusals:
            form.add_error(
                "file",
                _(
                    "No parser recognised this file. Each format tried and why it refused is listed "
                    "below; pick the format yourself if you know it, or upload the tool's own "
                    "result file unchanged."
                ),
            )
        else:
            unreadable = _("The file was recognised but could not be read: %(error)s. Nothing was stored.")
            why = message_html(reason_of(error))
            form.add_error("file", mark_safe(conditional_escape(unreadable) % {"error": why}))  # both parts escaped
        return None, False, refusals
    else:
        return run, created, None
    return None, False, None


@login_required
@require_POST
def run_use_as_evidence(request: HttpRequest, pk: int, run_pk: int) -> HttpResponse:
    """Confirm a warned-about upload as evidence: scoring counts it from now on (audited)."""
    selection = get_selection(request, pk)
    require_edit(request, selection)
    run = get_object_or_404(
        BenchmarkRun.objects.select_related("candidate__selection"), pk=run_pk, candidate__selection=selection
    )
    try:
        confirm_as_evidence(run=run, user=request.user)
    except DjangoValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, _("Run #%(run)s is used as evidence despite its warnings.") % {"run": run.pk})
    return redirect("selection:run", pk=selection.pk, run_pk=run.pk)
