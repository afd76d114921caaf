from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from traces.api.receiver import otlp_receiver

urlpatterns = [
    path("api/v1/", include("hub.urls")),
    path("api/v1/", include("evaluations.urls")),
    path("api/v1/", include("traces.urls")),
    # OpenTelemetry clients export spans here (OTLP/HTTP's standard path).
    path("v1/traces", otlp_receiver, name="otlp-traces"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path(
        "api/redoc/",
        # Served from this hub alone: no web fonts from another host.
        SpectacularRedocView.as_view(url_name="api-schema", template_name="frontend/redoc.html"),
        name="api-redoc",
    ),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("", include("frontend.urls")),
]

# Under /api/ and /v1/ a malformed request and a URL that names nothing answer in the API's JSON
# error format.
handler400 = "hub.api.errors.bad_request"
handler404 = "hub.api.errors.not_found"
handler500 = "hub.api.errors.server_error"
