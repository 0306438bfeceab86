"""The invitee's side of an invitation: `/invitations/<token>/`, signed in. GET shows
what is offered; POST accepts (creating the membership) or declines. A link that cannot
be used says why, and nothing of the tenant unless it is addressed to this account."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from tenancy.services import (
    InvitationRefused,
    invitation_accept,
    invitation_decline,
    invitation_for_token,
)

PAGE = "web/invitation.html"


@login_required
def invitation(request: HttpRequest, token: str) -> HttpResponse:
    try:
        offered = invitation_for_token(token, request.user)
        if request.method != "POST":
            return _render(request, {"invitation": offered})
        action = request.POST.get("action")
        if action == "accept":
            membership = invitation_accept(token=token, user=request.user)
            messages.success(request, f"You joined {membership.tenant.name}.")
            return redirect("tenant_home", tenant_slug=membership.tenant.slug)
        if action == "decline":
            invitation_decline(token=token, user=request.user)
            messages.info(request, "You declined the invitation.")
            return redirect("home")
        return _render(request, {"invitation": offered, "refusal": "Accept or decline."}, 400)
    except InvitationRefused as refused:
        return _render(request, {"refusal": refused.messages[0]}, refused.status)
    except ValidationError as error:  # the joining rules (tenancy.services.check_may_join)
        return _render(request, {"refusal": " ".join(error.messages)}, 403)


def _render(request: HttpRequest, context: dict, status: int = 200) -> HttpResponse:
    response = render(request, PAGE, context, status=status)
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"  # the token is in this page's URL
    return response
