"""The profile page: the signing certificate an owner signs with, its history, and enrolment."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from django.views.decorators.http import require_http_methods, require_POST

from selection.certificates.forms import CertificateIssueForm, CertificateUploadForm
from selection.certificates.services import current_certificate, enrol_certificate, issue_certificate
from selection.certificates.trust import issuing_ca_dir
from selection.domain.records import OWNER_ROLES
from selection.i18n import role_name
from selection.models import Selection
from selection.web import attach_service_errors


def _owned_roles(user) -> list[dict]:
    rows = []
    for role in OWNER_ROLES:
        for selection in Selection.objects.filter(**{f"{role}_owner": user}).order_by("name"):
            rows.append({"selection": selection, "role": role_name(role)})
    return rows


def _page(request: HttpRequest, *, upload_form=None, issue_form=None, status: int = 200) -> HttpResponse:
    context = {
        "current": current_certificate(request.user),
        "history": request.user.signing_certificates.exclude(replaced_at__isnull=True),
        "upload_form": upload_form or CertificateUploadForm(),
        "issue_form": issue_form or CertificateIssueForm(),
        "can_issue": issuing_ca_dir() is not None,
        "roles": _owned_roles(request.user),
    }
    return render(request, "selection/profile.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def profile(request: HttpRequest) -> HttpResponse:
    """GET: the current signing certificate; POST: enrol an uploaded one."""
    if request.method == "GET":
        return _page(request)
    form = CertificateUploadForm(request.POST, request.FILES)
    if form.is_valid():
        try:
            enrolled = enrol_certificate(user=request.user, certificate=form.cleaned_data["certificate"])
        except ValidationError as error:
            attach_service_errors(form, error)
        else:
            messages.success(
                request,
                _("Certificate enrolled: SHA-256 %(sha)s…. You sign with it from now on.")
                % {"sha": enrolled.sha256[:16]},
            )
            return redirect("selection:profile")
    return _page(request, upload_form=form, status=400)


@sensitive_post_parameters("passphrase", "confirm")
@login_required
@require_POST
@sensitive_variables("form", "blob")
def certificate_issue(request: HttpRequest) -> HttpResponse:
    """Issue a key and certificate from the configured CA: the PKCS#12 downloads once, nothing of it is kept."""
    form = CertificateIssueForm(request.POST)
    if form.is_valid():
        try:
            blob, enrolled = issue_certificate(user=request.user, passphrase=form.cleaned_data["passphrase"])
        except ValidationError as error:
            attach_service_errors(form, error)
        else:
            response = HttpResponse(blob, content_type="application/x-pkcs12")
            response["Content-Disposition"] = f'attachment; filename="kvselect-{request.user.get_username()}.p12"'
            response["Cache-Control"] = "no-store"
            return response
    return _page(request, issue_form=form, status=400)
