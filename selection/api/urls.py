"""The selection app's REST routes (collected under /api/v1/ by config.api_urls)."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from selection.api import views
from selection.capacity.api import CapacityView
from selection.certificates.api import MyCertificateView
from selection.records import api as record_views

router = DefaultRouter()
router.register("selections", views.SelectionViewSet, basename="selection")
router.register("candidates", views.CandidateViewSet, basename="candidate")
router.register("engines", views.EngineViewSet, basename="engine")

urlpatterns = [
    path("capacity/", CapacityView.as_view(), name="capacity"),
    path("me/certificate/", MyCertificateView.as_view(), name="my-certificate"),
    path(
        "selections/<int:selection_id>/records/", record_views.SelectionRecordsView.as_view(), name="selection-records"
    ),
    path("records/verify/", record_views.RecordVerifyView.as_view(), name="record-verify"),
    path("records/<int:record_id>/", record_views.RecordDetailView.as_view(), name="record-detail"),
    path("records/<int:record_id>/sign/", record_views.RecordSignView.as_view(), name="record-sign"),
    path(
        "records/<int:record_id>/signature-request/",
        record_views.RecordSignatureRequestView.as_view(),
        name="record-signature-request",
    ),
    path("records/<int:record_id>/signature/", record_views.RecordSignatureView.as_view(), name="record-signature"),
    path("records/<int:record_id>/pdf/", record_views.RecordPdfView.as_view(), name="record-pdf"),
    path("records/<int:record_id>/open-items/", record_views.RecordOpenItemsView.as_view(), name="record-open-items"),
    path("open-items/<int:item_id>/", record_views.OpenItemView.as_view(), name="open-item"),
    *router.urls,
]
