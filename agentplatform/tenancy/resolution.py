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

from agentplatform.tenancy.access import membership_for, require_role
from agentplatform.tenancy.models import Role


def tenant_member_required(role: str = Role.VIEWER) -> Callable:
    """Decorate a view taking `tenant_slug`: sets request.tenant and request.membership.

    Anonymous users go to the login page; non-members get 404 (the tenant's existence is
    not disclosed); members below `role` get 403.
    """

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapper(request: HttpRequest, tenant_slug: str, *args, **kwargs) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            membership = membership_for(request.user, tenant_slug)
            require_role(membership, role)
            request.tenant = membership.tenant
            request.membership = membership
            return view(request, *args, **kwargs)

        return wrapper

    return decorator
