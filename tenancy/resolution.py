"""Request -> tenant.

Browser pages live under /t/<tenant_slug>/ and need a membership; API requests carry an
API key that names its tenant. Either way the tenant comes from the server, never from
anything the client can pick freely.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse

from tenancy import rls
from tenancy.access import membership_to_act
from tenancy.policy import Action, Principal
from tenancy.sign_in import session_needs_password_sign_in


def tenant_member_required(action: Action = Action.READ_DATA) -> Callable:
    """Decorate a view taking `tenant_slug`: sets request.tenant, request.membership and
    request.principal, and lets through only principals the policy allows `action`.

    Anonymous users go to the login page; non-members get 404 (the tenant's existence is
    not disclosed); members whose role does not allow `action` get 403, and so does a
    session a password began in a tenant that turned passwords off (sso.PasswordSignInOff:
    the web's 403 page offers its single sign-on). The view carries its action as
    `policy_action` (the route-by-role test reads it).
    """

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapper(request: HttpRequest, tenant_slug: str, *args, **kwargs) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            membership = membership_to_act(
                request.user,
                tenant_slug,
                password_session=session_needs_password_sign_in(request),
            )
            rls.set_request_tenants([membership.tenant_id])
            principal = Principal.of_membership(membership, request.user)
            principal.require(action)
            request.tenant = membership.tenant
            request.membership = membership
            request.principal = principal
            return view(request, *args, **kwargs)

        wrapper.policy_action = action
        return wrapper

    return decorator
