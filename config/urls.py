from pathlib import Path

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import FileResponse
from django.urls import include, path
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

FAVICON = Path(settings.BASE_DIR) / "static" / "img" / "favicon.ico"


@require_GET
@cache_control(max_age=86400, public=True)
def favicon(request):
    """/favicon.ico, which browsers and tools ask for whatever the page links (the pages link the SVG)."""
    return FileResponse(FAVICON.open("rb"), content_type="image/x-icon")


urlpatterns = [
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # Swagger UI from the sidecar package (no CDN); its bootstrap script is a file, not inline, so the
    # page keeps the site's Content-Security-Policy.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/", include("config.api_urls")),
    path("", include("selection.urls")),
]

handler500 = "config.errors.server_error"
