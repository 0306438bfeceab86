"""Which tenant an API request acts for, and what it may do there.

API keys carry their tenant and scopes. Browser sessions (the web UI) name the tenant in
the `X-Tenant` header; their role maps onto scopes: viewer reads, member also writes and
runs, admin/owner administers.
"""

from __future__ import annotations

from django.http import Http404
from rest_framework.permissions import BasePermission

from agentplatform.tenancy.access import membership_for
from agentplatform.tenancy.authentication import ApiClient
from agentplatform.tenancy.models import Role, Scope, Tenant

_ROLE_FOR_SCOPE = {
    Scope.READ: Role.VIEWER,
    Scope.WRITE: Role.MEMBER,
    Scope.RUN: Role.MEMBER,
    Scope.ADMIN: Role.ADMIN,
}


def request_tenant(request) -> Tenant:
    """The tenant of the request (cached on it); 404 when a session names none it belongs to."""
    cached = getattr(request, "_api_tenant", None)
    if cached is not None:
        return cached
    user = request.user
    if isinstance(user, ApiClient):
        tenant = user.tenant
    else:
        # A header for fetch/XHR; a query parameter for EventSource, which sets no headers.
        slug = request.headers.get("X-Tenant") or request.GET.get("tenant", "")
        if not slug:
            raise Http404("Name the tenant in the X-Tenant header.")
        membership = membership_for(user, slug)
        request._api_membership = membership
        tenant = membership.tenant
    request._api_tenant = tenant
    return tenant


def request_user_or_key(request):
    """Who acts: the API key (ApiKey) or the session's user; services record it."""
    user = request.user
    return user.api_key if isinstance(user, ApiClient) else user


def scoped(read: str = Scope.READ, write: str | None = None) -> type[BasePermission]:
    """Safe methods need `read`, others `write` (default: the same as read)."""

    class ScopePermission(BasePermission):
        message = "Not allowed."

        def has_permission(self, request, view) -> bool:
            needed = read if request.method in ("GET", "HEAD", "OPTIONS") else (write or read)
            self.message = f"This needs the {str(needed)!r} scope."
            user = request.user
            if isinstance(user, ApiClient):
                return user.api_key.has_scope(needed)
            if not (user and user.is_authenticated):
                return False
            request_tenant(request)
            return request._api_membership.has_role(_ROLE_FOR_SCOPE[needed])

    return ScopePermission
