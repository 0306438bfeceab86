from __future__ import annotations

from django.contrib import admin

from agentplatform.tenancy import rls
from agentplatform.tenancy.access import administered_tenant_ids
from agentplatform.tenancy.sign_in import AdminSignInForm, with_throttle_status


def admin_tenant_ids(request) -> set[int]:
    """Tenants the requesting user administers, computed once per request."""
    if not hasattr(request, "_admin_tenant_ids"):
        request._admin_tenant_ids = administered_tenant_ids(request.user)
    return request._admin_tenant_ids


class PlatformAdminSite(admin.AdminSite):
    """Open to superusers and to staff who are owner/admin of at least one active tenant."""

    site_header = "Agent Platform administration"
    site_title = "Agent Platform admin"
    index_title = "Tenant configuration"
    login_form = AdminSignInForm  # the same attempt limits as /login/

    def login(self, request, extra_context=None):
        return with_throttle_status(super().login(request, extra_context))

    def has_permission(self, request) -> bool:
        user = request.user
        if not (user.is_active and user.is_staff):
            return False
        if user.is_superuser:
            rls.set_request_owner()  # the platform's operator sees every tenant
            return True
        ids = admin_tenant_ids(request)
        # A tenant admin's changelists span the tenants they administer: all of them.
        rls.set_request_tenants(ids)
        return bool(ids)
