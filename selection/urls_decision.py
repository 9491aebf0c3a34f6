"""URL patterns of the comparison, decision-record and verification pages (namespace ``selection``)."""

from django.urls import path

from . import views_decision as views

urlpatterns = [
    path("selections/<int:pk>/comparison/", views.comparison, name="comparison"),
    path("selections/<int:pk>/comparison/recompute/", views.comparison_recompute, name="comparison-recompute"),
    path("selections/<int:pk>/records/", views.record_list, name="records"),
    path("selections/<int:pk>/records/<int:record_pk>/", views.record_detail, name="record"),
    path("selections/<int:pk>/records/<int:record_pk>/action/", views.record_action, name="record-action"),
    path("selections/<int:pk>/records/<int:record_pk>/sign/", views.record_sign, name="record-sign"),
    path("selections/<int:pk>/records/<int:record_pk>/pdf/", views.record_pdf, name="record-pdf"),
    path("records/verify/", views.verify, name="record-verify"),
]
