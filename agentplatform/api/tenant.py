"""Which tenant an API request acts for, who acts, and whether the policy lets them.

API keys carry their tenant and scopes. Browser sessions (the web UI) name the tenant in
the `X-Tenant` header and act with their membership's role (a session a password began,
only in tenants that allow password sign-in). Both become a `Principal`
that the access policy (`tenancy.policy`) judges, as on every entry point.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework.permissions import BasePermission

from tenancy import rls
from tenancy.access import membership_to_act
from tenancy.authentication import ApiClient
from tenancy.models import Tenant
from tenancy.policy import Action, Principal
from tenancy.sign_in import session_needs_password_sign_in


def request_tenant(request) -> Tenant:
    """The tenant of the request (cached on it); 404 when a session names none it belongs to,
    403 (sso.PasswordSignInOff) when a password session names one with passwords off."""
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
        membership = membership_to_act(
            user, slug, password_session=session_needs_password_sign_in(request)
        )
        request._api_membership = membership
        tenant = membership.tenant
    rls.set_request_tenants([tenant.pk])
    request._api_tenant = tenant
    return tenant


def request_user_or_key(request):
    """Who acts: the API key (ApiKey) or the session's user; services record it."""
    user = request.user
    return user.api_key if isinstance(user, ApiClient) else user


def request_principal(request) -> Principal:
    """Who acts, in the request's tenant (cached on the request); 404 as request_tenant."""
    cached = getattr(request, "_api_principal", None)
    if cached is not None:
        return cached
    request_tenant(request)
    user = request.user
    if isinstance(user, ApiClient):
        principal = Principal.of_key(user.api_key)
    else:
        principal = Principal.of_membership(request._api_membership, user)
    request._api_principal = principal
    return principal


SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def allowed(read: Action, write: Action | None = None) -> type[BasePermission]:
    """A permission class asking the policy: safe methods need `read`, others `write`."""

    class PolicyPermission(BasePermission):
        def has_permission(self, request, view) -> bool:
            if not (request.user and request.user.is_authenticated):
                return False
            action = read if request.method in SAFE_METHODS else (write or read)
            try:
                request_principal(request).require(action)
            except PermissionDenied as exc:
                self.message = str(exc)
                return False
            return True

    return PolicyPermission


class TenantPolicyView:
    """What every tenant API view shares (mixed in before a DRF view): the policy asked
    with `read_action` for safe methods and `write_action` for the rest, and the request's
    tenant and principal."""

    read_action: Action = Action.READ_CONFIG
    write_action: Action | None = Action.CHANGE_CONFIG

    def get_permissions(self):
        return [allowed(self.read_action, self.write_action)()]

    @property
    def tenant(self) -> Tenant:
        return request_tenant(self.request)

    @property
    def principal(self) -> Principal:
        return request_principal(self.request)
