from __future__ import annotations

from django.apps import AppConfig
from django.contrib.admin.apps import AdminConfig


class PlatformConfig(AppConfig):
    name = "agentplatform"
    verbose_name = "Agent Platform"

    def ready(self) -> None:
        # Every Django process sends its tasks through this app (shared_task binds to it), so
        # it is made before any request or task.
        from agentplatform import celery  # noqa: F401


class PlatformAdminConfig(AdminConfig):
    default_site = "tenancy.admin_site.PlatformAdminSite"
