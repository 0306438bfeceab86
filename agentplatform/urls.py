from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from agentplatform.api import hooks

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="api_schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api_schema"), name="api_docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api_schema"), name="api_redoc"),
    path("api/v1/", include("agentplatform.api.urls")),
    path("v1/", include("agentplatform.v1.urls")),  # OpenAI-compatible
    path("hooks/<str:public_id>", hooks.hook, name="trigger_hook"),  # signed webhooks
    path("", include("agentplatform.web.urls")),
]

handler403 = "agentplatform.web.views.permission_denied"  # says when single sign-on is needed
