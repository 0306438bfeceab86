from __future__ import annotations

from django.contrib import admin, messages

from tenancy import rls
from tenancy.access import (
    administered_tenant_ids,
    administered_tenant_refusing_password,
)
from tenancy.sign_in import (
    AdminSignInForm,
    session_needs_password_sign_in,
    with_throttle_status,
)
from tenancy.sign_on.sso import PASSWORD_OFF


def admin_tenant_ids(request) -> set[int]:
    """Tenants the requesting user administers, computed once per request; for a session a
    password began, only those that allow password sign-in (docs/sso.md)."""
    if not hasattr(request, "_admin_tenant_ids"):
        request._admin_tenant_ids = administered_tenant_ids(
            request.user, password_session=session_needs_password_sign_in(request)
        )
    return request._admin_tenant_ids


class PlatformAdminSite(admin.AdminSite):
    """Open to superusers and to staff who are owner/admin of at least one active tenant."""

    site_header = "Agent Platform administration"
    site_title = "Agent Platform admin"
    index_title = "Tenant configuration"
    login_form = AdminSignInForm  # the same attempt limits as /login/

    def login(self, request, extra_context=None):
        user = request.user
        if (
            request.method == "GET"
            and user.is_active
            and user.is_staff
            and not self.has_permission(request)
            and session_needs_password_sign_in(request)
        ):  # signed in, but every tenant they administer turned passwords off: say so
            tenant = administered_tenant_refusing_password(user)
            if tenant is not None:
                messages.warning(request, PASSWORD_OFF.format(tenant=tenant.name))
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
