"""What every page's navigation needs: the user's workspaces (the tenant switcher), the
workspace's pages grouped and filtered by what the user may open (`navigation`), and
whether they may configure it (configuration links in pages are shown to owners and
admins only; their URLs answer 403 to others anyway)."""

from __future__ import annotations

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from agentplatform.web.navigation import groups_for
from tenancy.access import tenants_for
from tenancy.models import Role


def navigation(request: HttpRequest) -> dict:
    membership = getattr(request, "membership", None)
    principal = getattr(request, "principal", None)  # set with the membership, on tenant pages
    user = getattr(request, "user", None)  # None on pages rendered outside the middleware
    return {
        "nav_tenants": tenants_for(user) if user is not None and user.is_authenticated else (),
        # Lazy: an htmx fragment rendered with the request never builds it.
        "nav_groups": SimpleLazyObject(lambda: groups_for(principal, request.path))
        if principal is not None
        else (),
        "is_tenant_admin": membership is not None and membership.has_role(Role.ADMIN),
    }
