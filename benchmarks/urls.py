"""Evidence pages, mounted inside the `selection` URL namespace (see selection/urls.py)."""

from django.urls import path

from benchmarks import views as run_views
from benchmarks.uploads import views as upload_views
from benchmarks.validation import views as validation_views

urlpatterns = [
    path("selections/<int:pk>/evidence/", run_views.evidence, name="evidence"),
    path(
        "selections/<int:pk>/candidates/<int:candidate_pk>/validation/", validation_views.validation, name="validation"
    ),
    path(
        "selections/<int:pk>/candidates/<int:candidate_pk>/validation/<slug:test>/start/",
        validation_views.validation_start,
        name="validation-start",
    ),
    path("selections/<int:pk>/runs/<int:run_pk>/", run_views.run_detail, name="run"),
    path("selections/<int:pk>/runs/<int:run_pk>/progress/", run_views.run_progress, name="run-progress"),
    path("selections/<int:pk>/runs/<int:run_pk>/cancel/", run_views.run_cancel, name="run-cancel"),
    path(
        "selections/<int:pk>/runs/<int:run_pk>/use-as-evidence/",
        upload_views.run_use_as_evidence,
        name="run-use-as-evidence",
    ),
    path("selections/<int:pk>/uploads/", upload_views.uploads, name="uploads"),
    path("selections/<int:pk>/uploads/file/", upload_views.result_upload, name="result-upload"),
    path("selections/<int:pk>/tokens/", upload_views.token_create, name="token-create"),
    path("selections/<int:pk>/tokens/<int:token_pk>/revoke/", upload_views.token_revoke, name="token-revoke"),
]
