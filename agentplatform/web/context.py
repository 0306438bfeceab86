"""What every page's navigation needs: the user's workspaces (the tenant switcher) and
whether they may configure the current one (configuration links are shown to owners and
admins only; their URLs answer 403 to others anyway)."""

from __future__ import annotations

from django.http import HttpRequest

from tenancy.access import tenants_for
from tenancy.models import Role


def navigation(request: HttpRequest) -> dict:
    membership = getattr(request, "membership", None)
    user = getattr(request, "user", None)  # None on pages rendered outside the middleware
    return {
        "nav_tenants": tenants_for(user) if user is not None and user.is_authenticated else (),
        "is_tenant_admin": membership is not None and membership.has_role(Role.ADMIN),
    }
