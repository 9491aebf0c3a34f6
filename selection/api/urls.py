from rest_framework.routers import DefaultRouter

from . import views

router = DefaultRouter()
router.register("selections", views.SelectionViewSet, basename="selection")
router.register("candidates", views.CandidateViewSet, basename="candidate")
router.register("engines", views.EngineViewSet, basename="engine")
from django.urls import path

from .capacity import CapacityView

urlpatterns = [path("capacity/", CapacityView.as_view(), name="capacity"), *router.urls]
