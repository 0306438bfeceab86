"""People's own accounts at MCP servers a tenant connects per person (OAuth, issue #38):
the list with each one's state, connecting one (a page with a button, then the server's
authorization page), disconnecting (revoked there, deleted here). And what every OAuth
connection shares: the callback the authorization servers send people back to, and the
platform's client ID metadata document.

A run that needed an account links to `mcp_account_connect`; once connected there, it goes
on (tools.mcp_oauth.account_connected)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from tenancy.policy import Action
from tenancy.resolution import tenant_member_required
from tools import selectors
from tools.mcp_connections import mcp_oauth_finish
from tools.mcp_oauth import (
    OAuthProblem,
    client_metadata_document,
    connect_begin,
    token_revoke,
)
from tools.models import McpAuthMode

person_required = tenant_member_required(Action.START_RUN)  # whoever runs agents


def callback_url(request: HttpRequest) -> str:
    return request.build_absolute_uri(reverse("mcp_oauth_callback"))


def client_document_url(request: HttpRequest) -> str:
    return request.build_absolute_uri(reverse("mcp_oauth_client"))


def begin(request: HttpRequest, connection, *, for_tenant: bool, back: str) -> HttpResponse:
    """Send the person to the server's authorization page, or back with why not. Not by a
    redirect: a browser checks a redirect after a form against the page's `form-action`
    (our origin only), so a page takes them there (a refresh, and a link)."""
    try:
        url = connect_begin(
            connection=connection, user=request.user, session=request.session,
            redirect_uri=callback_url(request), client_metadata_url=client_document_url(request),
            for_tenant=for_tenant,
        )  # fmt: skip
    except OAuthProblem as exc:
        messages.error(request, f"{connection.name}: cannot connect: {exc}.")
        return redirect(back)
    context = {"connection": connection, "url": url}
    return render(request, "web/mcp_oauth_continue.html", context)


@person_required
@require_GET
def mcp_accounts(request: HttpRequest) -> HttpResponse:
    rows = selectors.mcp_accounts_of(tenant=request.tenant, user=request.user)
    return render(request, "web/mcp_accounts.html", {"rows": rows})


@person_required
@never_cache
def mcp_account_connect(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: what connecting means, with a button; POST: off to the server."""
    connection = selectors.mcp_oauth_connection_get(
        tenant=request.tenant, connection_id=pk, mode=McpAuthMode.OAUTH_USER
    )
    if request.method == "POST":
        back = reverse("mcp_accounts", kwargs={"tenant_slug": request.tenant.slug})
        return begin(request, connection, for_tenant=False, back=back)
    return render(request, "web/mcp_account_connect.html", {"connection": connection})


mcp_account_connect.policy_methods = ("GET", "POST")


@person_required
@require_POST
def mcp_account_disconnect(request: HttpRequest, pk: int) -> HttpResponse:
    connection = selectors.mcp_oauth_connection_get(
        tenant=request.tenant, connection_id=pk, mode=McpAuthMode.OAUTH_USER
    )
    if token_revoke(connection=connection, user_id=request.user.pk):
        messages.success(request, f"Your {connection.name} account is disconnected.")
    return redirect("mcp_accounts", tenant_slug=request.tenant.slug)


mcp_account_disconnect.policy_methods = ("POST",)


@login_required
@never_cache
@require_GET
def mcp_oauth_callback(request: HttpRequest) -> HttpResponse:
    """Where authorization servers send people back: the session's pending flow decides."""
    try:
        done = mcp_oauth_finish(
            session=request.session, user=request.user, state=request.GET.get("state", ""),
            code=request.GET.get("code", ""), error=request.GET.get("error", ""),
            iss=request.GET.get("iss", ""),
        )  # fmt: skip
    except OAuthProblem as exc:
        return render(request, "web/mcp_oauth_failed.html", {"reason": str(exc)}, status=400)
    except PermissionDenied as exc:
        context = {"reason": str(exc)}
        return render(request, "web/mcp_oauth_failed.html", context, status=403)
    connection = done.connection
    slug = connection.tenant.slug
    if done.for_tenant:
        messages.success(request, f"{connection.name}: the tenant's account is connected.")
        return redirect("config:mcp_connections", tenant_slug=slug)
    messages.success(
        request, f"Your {connection.name} account is connected. Runs waiting for it go on."
    )
    return redirect("mcp_accounts", tenant_slug=slug)


@require_GET
def mcp_oauth_client(request: HttpRequest) -> JsonResponse:
    """The platform's client ID metadata document: its URL is its client ID."""
    document = client_metadata_document(
        client_id=client_document_url(request), redirect_uri=callback_url(request)
    )
    return JsonResponse(document)
