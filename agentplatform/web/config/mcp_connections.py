"""MCP server connections (context providers): list with health, create and edit (the auth
header is write-only), test (connect and list the tools now, storing nothing), refresh
(list them again and store them), delete. Saving an enabled connection refreshes it, as
the admin does."""

from __future__ import annotations

from copy import copy
from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from agentplatform.web.config.common import (
    JsonTextarea,
    PlainLabels,
    PrettyJSONField,
    SecretField,
    StoredSecretForm,
    admin_required,
    confirm_delete,
    render_form,
    render_page,
    try_save,
    unique_in_tenant,
)
from agentplatform.web.mcp_accounts import begin
from tools import selectors
from tools.context_providers import Domain
from tools.mcp_connections import (
    mcp_connection_delete,
    mcp_connection_refresh,
    mcp_connection_save,
    mcp_connection_test,
)
from tools.mcp_oauth import token_revoke
from tools.models import McpAuthMode, McpServerConnection, McpStatus

LIST = "web/config/mcp_connection_list.html"


class McpConnectionForm(StoredSecretForm, PlainLabels, forms.ModelForm):
    write_only_field = "auth_header"

    url = forms.URLField(
        max_length=500,
        assume_scheme="https",
        label="URL",
        help_text="The server's streamable HTTP endpoint, e.g. https://host/mcp. No credentials.",
    )
    auth_header = SecretField(
        label="Auth header",
        help_text="Sent as the Authorization header: a token (sent as Bearer) or a full value "
        "such as 'Bearer …'. Write-only: never shown again. Leave blank to keep the stored one.",
    )
    clear_auth_header = forms.BooleanField(required=False, label="Remove the stored auth header")
    allowed_tool_names = PrettyJSONField(
        required=False,
        widget=JsonTextarea({"rows": 2}),
        label="Tools to import",
        help_text='JSON list of remote tool names, e.g. ["search"]. Empty: all.',
    )
    tool_examples = PrettyJSONField(
        required=False,
        widget=JsonTextarea({"rows": 4}),
        label="Tool self-tests",
        help_text='JSON: remote tool name -> examples, e.g. {"search": [{"arguments": {"q": '
        '"x"}, "expect": {"contains": "x"}}]}. They run from each tool\'s Test page.',
    )
    domains = forms.MultipleChoiceField(
        choices=Domain.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Capability domains",
        help_text="What this server covers; shown where agents are configured.",
    )

    class Meta:
        model = McpServerConnection
        fields = [
            "name", "url", "enabled", "auth_mode", "oauth_scope", "oauth_client_id",
            "tool_prefix", "allowed_tool_names", "context_resource_uri", "tool_examples",
            "timeout_s", "domains",
        ]  # fmt: skip
        labels = {
            "timeout_s": "Timeout (seconds)",
            "context_resource_uri": "Context resource",
            "tool_prefix": "Tool prefix",
            "auth_mode": "Authorisation",
            "oauth_scope": "OAuth scopes",
            "oauth_client_id": "OAuth client ID",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.has_stored_header = bool(self.instance.pk and self.instance.auth_header)
        if not self.has_stored_header:
            del self.fields["clear_auth_header"]
        self.fields["auth_mode"].required = False  # none (header, when one is given)

    def clean_auth_mode(self) -> str:
        return self.cleaned_data.get("auth_mode") or McpAuthMode.NONE

    def clean_allowed_tool_names(self) -> Any:
        value = self.cleaned_data.get("allowed_tool_names")
        return [] if value is None else value

    def clean_tool_examples(self) -> Any:
        value = self.cleaned_data.get("tool_examples")
        return {} if value is None else value

    def clean_name(self) -> str:
        return unique_in_tenant(self, "name", "MCP connection")


@admin_required
def mcp_connection_list(request: HttpRequest) -> HttpResponse:
    rows = selectors.mcp_connections_of(tenant=request.tenant)
    connected = selectors.mcp_tenant_accounts(tenant=request.tenant)
    return render_page(request, LIST, {"connections": rows, "connected": connected})


@admin_required
def mcp_connection_create(request: HttpRequest) -> HttpResponse:
    return _form(request, McpServerConnection(tenant=request.tenant))


@admin_required
def mcp_connection_edit(request: HttpRequest, pk: int) -> HttpResponse:
    return _form(request, selectors.mcp_connection_get(tenant=request.tenant, connection_id=pk))


def _form(request: HttpRequest, connection: McpServerConnection) -> HttpResponse:
    tenant = request.tenant
    existing = connection.pk is not None
    form = McpConnectionForm(request.POST or None, instance=copy(connection))
    save = lambda: mcp_connection_save(  # noqa: E731
        tenant=tenant, connection=connection if existing else None, changes=form.changes()
    )
    saved = try_save(request, form, save, "MCP connection")
    if saved is not None:
        if saved.enabled:  # a network call, with the save committed
            _say_refreshed(request, mcp_connection_refresh(saved))
        return redirect("config:mcp_connections", tenant_slug=tenant.slug)
    context = {"form": form, "connection": connection if existing else None}
    return render_form(request, "web/config/mcp_connection_form.html", context)


def _say_refreshed(request: HttpRequest, connection: McpServerConnection) -> None:
    if connection.status == McpStatus.OK:
        count = connection.tool_count
        messages.success(
            request, f"{connection.name}: {count} tool{'s' if count != 1 else ''} listed."
        )
    else:
        messages.error(request, f"{connection.name}: tools unavailable: {connection.last_error}")


@admin_required
@require_POST
def mcp_connection_check(request: HttpRequest, pk: int) -> HttpResponse:
    """Test: reach the server now and list its tools (bounded by the connection's timeout);
    stores nothing. htmx: the row's result cell; otherwise a message on the list."""
    connection = selectors.mcp_connection_get(tenant=request.tenant, connection_id=pk)
    ok, message, names = mcp_connection_test(connection)
    if not request.htmx:
        (messages.success if ok else messages.error)(request, f"{connection.name}: {message}")
        return redirect("config:mcp_connections", tenant_slug=request.tenant.slug)
    context = {"connection": connection, "ok": ok, "message": message, "names": names}
    return render_page(request, LIST, context, partial="check-result")


@admin_required
@require_POST
def mcp_connection_reload(request: HttpRequest, pk: int) -> HttpResponse:
    """Refresh: list the server's tools again and store them, with the outcome as its
    health. htmx: the row's health cell; otherwise a message on the list."""
    connection = mcp_connection_refresh(
        selectors.mcp_connection_get(tenant=request.tenant, connection_id=pk)
    )
    if not request.htmx:
        _say_refreshed(request, connection)
        return redirect("config:mcp_connections", tenant_slug=request.tenant.slug)
    return render_page(request, LIST, {"connection": connection}, partial="health")


@admin_required
@require_POST
def mcp_connection_connect(request: HttpRequest, pk: int) -> HttpResponse:
    """Connect the tenant's one account (an `oauth_tenant` connection) or the admin's own
    (`oauth_user`: its tool list is fetched with it): off to the server's authorization
    page, back at the callback."""
    connection = selectors.mcp_connection_get(tenant=request.tenant, connection_id=pk)
    if not connection.uses_oauth:
        raise Http404("This connection does not use OAuth.")
    back = reverse("config:mcp_connections", kwargs={"tenant_slug": request.tenant.slug})
    for_tenant = connection.auth_mode == McpAuthMode.OAUTH_TENANT
    return begin(request, connection, for_tenant=for_tenant, back=back)


@admin_required
@require_POST
def mcp_connection_disconnect(request: HttpRequest, pk: int) -> HttpResponse:
    """Revoke the tenant's account (at the server where it offers revocation) and forget
    it: the connection's tools fail until an admin connects again."""
    connection = selectors.mcp_oauth_connection_get(
        tenant=request.tenant, connection_id=pk, mode=McpAuthMode.OAUTH_TENANT
    )
    if token_revoke(connection=connection, user_id=None):
        messages.success(request, f"{connection.name}: the tenant's account is disconnected.")
    return redirect("config:mcp_connections", tenant_slug=request.tenant.slug)


@admin_required
def mcp_connection_remove(request: HttpRequest, pk: int) -> HttpResponse:
    connection = selectors.mcp_connection_get(tenant=request.tenant, connection_id=pk)
    return confirm_delete(
        request, connection, what="MCP connection", cancel="config:mcp_connections",
        delete=lambda: mcp_connection_delete(tenant=request.tenant, connection=connection),
    )  # fmt: skip
