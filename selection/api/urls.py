from rest_framework.routers import DefaultRouter

from . import views

router = DefaultRouter()
router.register("selections", views.SelectionViewSet, basename="selection")
router.register("candidates", views.CandidateViewSet, basename="candidate")
router.register("engines", views.EngineViewSet, basename="engine")
urlpatterns = router.urls
