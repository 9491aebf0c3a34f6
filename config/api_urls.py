"""Every REST route under /api/v1/, collected from the apps."""

from django.urls import include, path

urlpatterns = [
    path("", include("benchmarks.api.urls")),
    path("", include("selection.api.urls")),
]
