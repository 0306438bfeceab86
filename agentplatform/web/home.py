"""A workspace's home page: what the user may chat with (one click opens a new chat with it,
the composer focused), their recent conversations, approvals waiting for them, and for an
admin of an empty workspace the first steps. Reads through selectors: ten queries at most
(use grants take three per kind)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from agentplatform.web.chat import access as chat_access
from agents import selectors
from agents.models import Agent, Crew
from tenancy.policy import Action
from tenancy.resolution import tenant_member_required

RECENT = 8


@tenant_member_required(Action.READ_DATA)
@require_GET
def tenant_home(request: HttpRequest) -> HttpResponse:
    principal = request.principal
    agents = list(chat_access.usable(Agent, principal))
    crews = list(chat_access.usable(Crew, principal))
    may_decide = principal.may(Action.DECIDE_APPROVAL)
    context = {
        "agents": agents,
        "crews": crews,
        "recent": list(
            selectors.conversations_found(tenant=request.tenant, owner=request.user, limit=RECENT)
        ),
        "may_send": chat_access.may_send(request.membership),
        "may_build": principal.may(Action.CHANGE_CONFIG),
        "pending_approvals": selectors.approvals_pending_count(principal=principal)
        if may_decide
        else 0,
    }
    return render(request, "web/tenant_home.html", context)
