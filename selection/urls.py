"""Every page of the workspace, in the order an architect meets them (namespace ``selection``).

The evidence pages (validation, runs, CI uploads) are the benchmarks app's, mounted here so that
one namespace covers the whole flow.
"""

from django.urls import path

from benchmarks import urls as evidence_urls
from selection.candidates import views as candidate_views
from selection.capacity import views as capacity_views
from selection.certificates import views as certificate_views
from selection.records import views as record_views
from selection.scoring import views as scoring_views
from selection.setup import views as setup_views
from selection.traces import views as trace_views

app_name = "selection"

urlpatterns = [
    # 1-2: the selection, its constraints, scenario, weights and gates
    path("", setup_views.dashboard, name="dashboard"),
    path("selections/new/", setup_views.selection_create, name="create"),
    path("selections/<int:pk>/", setup_views.selection_detail, name="detail"),
    path("selections/<int:pk>/archive/", setup_views.selection_archive, name="archive"),
    path("selections/<int:pk>/restore/", setup_views.selection_restore, name="restore"),
    path("selections/<int:pk>/owners/", setup_views.selection_owners, name="owners"),
    path("selections/<int:pk>/constraints/", setup_views.constraints_edit, name="constraints"),
    path("selections/<int:pk>/procurement/", setup_views.selection_procurement, name="procurement"),
    path("selections/<int:pk>/traces/", trace_views.traces, name="traces"),
    path("selections/<int:pk>/traces/<int:trace_pk>/", trace_views.trace_detail, name="trace"),
    path("selections/<int:pk>/traces/<int:trace_pk>/accept/", trace_views.trace_accept, name="trace-accept"),
    path("selections/<int:pk>/scenario/", setup_views.scenario, name="scenario"),
    path("selections/<int:pk>/scenario/accept/", setup_views.scenario_accept, name="scenario-accept"),
    path("selections/<int:pk>/gates/", setup_views.gates, name="gates"),
    # 3: candidates and their capacity
    path("selections/<int:pk>/candidates/", candidate_views.candidates, name="candidates"),
    path("selections/<int:pk>/candidates/<int:candidate_pk>/", candidate_views.candidate_edit, name="candidate-edit"),
    path(
        "selections/<int:pk>/candidates/<int:candidate_pk>/archive/",
        candidate_views.candidate_archive,
        name="candidate-archive",
    ),
    path(
        "selections/<int:pk>/candidates/<int:candidate_pk>/restore/",
        candidate_views.candidate_restore,
        name="candidate-restore",
    ),
    path(
        "selections/<int:pk>/candidates/<int:candidate_pk>/screen-override/",
        candidate_views.candidate_screen_override,
        name="candidate-screen-override",
    ),
    path("selections/<int:pk>/candidates/<int:candidate_pk>/capacity/", capacity_views.capacity_page, name="capacity"),
    path(
        "selections/<int:pk>/candidates/<int:candidate_pk>/capacity/log/",
        capacity_views.capacity_log,
        name="capacity-log",
    ),
    # 4: evidence (validation runs, CI uploads)
    *evidence_urls.urlpatterns,
    # 5: comparison and the decision record
    path("selections/<int:pk>/comparison/", scoring_views.comparison, name="comparison"),
    path("selections/<int:pk>/comparison/recompute/", scoring_views.comparison_recompute, name="comparison-recompute"),
    path("selections/<int:pk>/comparison/status/", scoring_views.comparison_status, name="comparison-status"),
    path("selections/<int:pk>/records/", record_views.record_list, name="records"),
    path("selections/<int:pk>/records/<int:record_pk>/", record_views.record_detail, name="record"),
    path("selections/<int:pk>/records/<int:record_pk>/action/", record_views.record_action, name="record-action"),
    path("selections/<int:pk>/records/<int:record_pk>/sign/", record_views.record_sign, name="record-sign"),
    path(
        "selections/<int:pk>/records/<int:record_pk>/sign/prepare/",
        record_views.record_sign_prepare,
        name="record-sign-prepare",
    ),
    path(
        "selections/<int:pk>/records/<int:record_pk>/sign/request.json",
        record_views.record_sign_request,
        name="record-sign-request",
    ),
    path(
        "selections/<int:pk>/records/<int:record_pk>/sign/upload/",
        record_views.record_sign_upload,
        name="record-sign-upload",
    ),
    path(
        "selections/<int:pk>/records/<int:record_pk>/open-items/<int:item_pk>/",
        record_views.record_open_item,
        name="record-open-item",
    ),
    path("selections/<int:pk>/records/<int:record_pk>/pdf/", record_views.record_pdf, name="record-pdf"),
    path(
        "selections/<int:pk>/records/<int:record_pk>/alerts.yml",
        record_views.record_monitoring,
        {"kind": "alerts"},
        name="record-alerts",
    ),
    path(
        "selections/<int:pk>/records/<int:record_pk>/dashboard.json",
        record_views.record_monitoring,
        {"kind": "dashboard"},
        name="record-dashboard",
    ),
    path(
        "selections/<int:pk>/records/<int:record_pk>/reevaluate/",
        record_views.record_reevaluate,
        name="record-reevaluate",
    ),
    path("records/verify/", record_views.verify, name="record-verify"),
    # the owners' signing command, as a wheel pip installs from this URL
    path("clients/<str:filename>", record_views.signing_client_wheel, name="signing-client"),
    # the owner's signing certificate
    path("profile/", certificate_views.profile, name="profile"),
    path("profile/certificate/issue/", certificate_views.certificate_issue, name="certificate-issue"),
]
