from __future__ import annotations

from django.apps import AppConfig
from django.contrib.admin.apps import AdminConfig


class PlatformConfig(AppConfig):
    name = "agentplatform"
    verbose_name = "Agent Platform"


class PlatformAdminConfig(AdminConfig):
    default_site = "agentplatform.tenancy.admin_site.PlatformAdminSite"
