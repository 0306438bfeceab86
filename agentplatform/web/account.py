"""The signed-in person's own page, `/account/`: how this session signed in, their
workspaces (and whether this session may act in each), and leaving one.

Leaving needs no session that may act in the workspace: a member whose session a password
began can leave a workspace that turned password sign-in off (docs/sso.md), here or from
the page that refuses them. It goes through `tenancy.services.membership_remove`, with
the member's own authority (the last owner stays)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from tenancy import rls
from tenancy.access import membership_for, memberships_of
from tenancy.policy import Principal
from tenancy.services import membership_remove
from tenancy.sign_in import session_needs_password_sign_in, session_sign_in_method


@login_required
def account(request: HttpRequest) -> HttpResponse:
    password_session = session_needs_password_sign_in(request)
    rows = [
        {
            "membership": membership,
            "refused": password_session and not membership.tenant.password_sign_in,
        }
        for membership in memberships_of(request.user)
    ]
    method = session_sign_in_method(request)
    context = {
        "rows": rows,
        "single_sign_on": method.removeprefix("sso:") if method.startswith("sso:") else "",
    }
    return render(request, "web/account.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def leave(request: HttpRequest, tenant_slug: str) -> HttpResponse:
    """GET asks to confirm; POST leaves. 404 for a workspace the user is not a member of."""
    membership = membership_for(request.user, tenant_slug)
    rls.set_request_tenants([membership.tenant_id])  # the removal and its audit entry
    if request.method != "POST":
        return render(request, "web/leave.html", {"membership": membership})
    try:
        membership_remove(
            membership=membership, by=Principal.of_membership(membership, request.user)
        )
    except ValidationError as error:  # the last owner
        refusal = " ".join(error.messages) + " Make someone else an owner first."
        context = {"membership": membership, "refusal": refusal}
        return render(request, "web/leave.html", context, status=400)
    messages.success(request, f"You left {membership.tenant.name}.")
    return redirect("account")
