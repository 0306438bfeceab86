from __future__ import annotations

from django.urls import path

from agentplatform.api import views

urlpatterns = [
    path("whoami", views.WhoAmI.as_view(), name="api_whoami"),
]
