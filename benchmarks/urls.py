"""Evidence pages, mounted inside the `selection` URL namespace (see selection/urls.py)."""

from django.urls import path

from . import views

urlpatterns = [
    path("selections/<int:pk>/evidence/", views.evidence, name="evidence"),
    path("selections/<int:pk>/candidates/<int:candidate_pk>/validation/", views.validation, name="validation"),
    path("selections/<int:pk>/candidates/<int:candidate_pk>/validation/<slug:test>/start/", views.validation_start,
         name="validation-start"),
    path("selections/<int:pk>/runs/<int:run_pk>/", views.run_detail, name="run"),
    path("selections/<int:pk>/runs/<int:run_pk>/progress/", views.run_progress, name="run-progress"),
    path("selections/<int:pk>/runs/<int:run_pk>/cancel/", views.run_cancel, name="run-cancel"),
    path("selections/<int:pk>/uploads/", views.uploads, name="uploads"),
    path("selections/<int:pk>/uploads/file/", views.result_upload, name="result-upload"),
    path("selections/<int:pk>/tokens/", views.token_create, name="token-create"),
    path("selections/<int:pk>/tokens/<int:token_pk>/revoke/", views.token_revoke, name="token-revoke"),
]
