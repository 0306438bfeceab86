"""Services for MCP server connections (context providers): save, delete, refresh, test,
and the periodic refresh of connections that are due (which is also their health check).

Refreshing talks to the remote server (bounded by the connection's timeout) with no
database transaction open, then writes the outcome in one UPDATE; the save's signal
invalidates the tenant's registry in every process.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db.models import Q
from django.http import Http404
from django.utils import timezone

from tenancy import rls
from tenancy.models import Tenant
from tenancy.records.saving import delete_recorded, save_validated
from tools.context_providers import OfferedToolRef, ProviderEntry, mcp_failure_reason
from tools.mcp_oauth import Connected, connect_complete, listing_token, oauth_forget_if_moved
from tools.mcp_source import MCP_SERVER
from tools.models import McpAuthMode, McpServerConnection, McpStatus
from tools.runtime.egress import EgressPolicy
from tools.runtime.mcp_client import (
    McpEndpoint,
    McpRemoteTool,
    McpUnavailable,
    auth_headers,
    mcp_snapshot,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class McpTestResult:
    ok: bool
    message: str
    tool_names: list[str]


def mcp_endpoint(connection: McpServerConnection) -> McpEndpoint:
    """How to reach the connection's server now: its URL, its credential header (an OAuth
    connection's: the token `listing_token` picks, refreshed if due) and the egress policy
    of the current settings."""
    if connection.uses_oauth:
        token = listing_token(connection)
        if token is None:
            whose = "the tenant's" if connection.auth_mode == McpAuthMode.OAUTH_TENANT else (
                "an admin's own")  # fmt: skip
            raise McpUnavailable(connection.url, f"no account connected yet: connect {whose}")
        headers = auth_headers(token)
    else:
        headers = auth_headers(connection.auth_header)
    return McpEndpoint(
        url=connection.url,
        policy=EgressPolicy(allowlist=tuple(settings.EGRESS_ALLOWLIST)),
        headers=headers,
        timeout_s=connection.timeout_s,
    )


def mcp_connection_fetch(connection: McpServerConnection) -> tuple[list[McpRemoteTool], str]:
    """The server's tools and the text of the context resource (if one is set).
    McpUnavailable on any failure. No transaction is held over the exchange."""
    endpoint = mcp_endpoint(connection)
    uri = connection.context_resource_uri or None
    if connection.auth_mode == McpAuthMode.OAUTH_USER:
        uri = None  # one person's text, never every run's (the model refuses it too)
    return async_to_sync(mcp_snapshot)(endpoint, uri)


def mcp_connection_refresh(connection: McpServerConnection) -> McpServerConnection:
    """Fetch the server's tools (and context resource) and store them; on failure mark the
    connection unavailable with the error, keeping the previous listing (the registry
    exposes no tools of an unavailable connection). One MCP session, one UPDATE.
    `last_refreshed_at` is the time of this attempt, whatever its outcome."""
    try:
        tools, context_text = mcp_connection_fetch(connection)
    except McpUnavailable as exc:
        logger.info("MCP connection %s (tenant %s) unavailable: %s", connection.name,
                    connection.tenant_id, exc)  # fmt: skip
        connection.status = McpStatus.UNAVAILABLE
        connection.last_error = mcp_failure_reason(exc, secret=connection.auth_header)
        fields = ["status", "last_error", "last_refreshed_at", "updated_at"]
    else:
        connection.status = McpStatus.OK
        connection.last_error = ""
        connection.tools_cache = [tool.as_json() for tool in tools]
        connection.context_text = context_text
        fields = ["status", "last_error", "last_refreshed_at", "tools_cache", "context_text",
                  "updated_at"]  # fmt: skip
    connection.last_refreshed_at = timezone.now()
    connection.save(update_fields=fields)
    return connection


def mcp_connection_test(connection: McpServerConnection) -> tuple[bool, str, list[str]]:
    """Reach the server now and say what it offers: (ok, message, remote tool names).
    Stores nothing (Refresh does)."""
    try:
        tools, context_text = mcp_connection_fetch(connection)
    except McpUnavailable as exc:
        reason = mcp_failure_reason(exc, secret=connection.auth_header)
        return False, f"MCP server {connection.name} is unavailable: {reason}", []
    names = [tool.name for tool in tools]
    message = f"Connected: {len(names)} tool{'s' if len(names) != 1 else ''}"
    if connection.context_resource_uri:
        message += f"; context resource: {len(context_text)} characters"
    return True, message + ".", names


def mcp_connections_due(now: datetime | None = None, every_s: int | None = None):
    """Enabled connections never refreshed, or last refreshed `every_s` (default
    MCP_REFRESH_S) ago or more."""
    every_s = settings.MCP_REFRESH_S if every_s is None else every_s
    cutoff = (now or timezone.now()) - timedelta(seconds=every_s)
    return McpServerConnection.objects.filter(enabled=True).filter(
        Q(last_refreshed_at__isnull=True) | Q(last_refreshed_at__lte=cutoff)
    )


def mcp_connections_refresh_due(
    now: datetime | None = None, every_s: int | None = None
) -> dict[str, int]:
    """Refresh every due connection (see `mcp_connections_due`), one after another (each
    bounded by its timeout). Returns how many ended ok and unavailable."""
    counts = {"ok": 0, "unavailable": 0}
    with rls.owner():  # the due connections of every tenant; each refreshed in its own
        due = list(mcp_connections_due(now, every_s).order_by("last_refreshed_at", "pk"))
    for connection in due:
        with rls.tenant_scope(connection.tenant_id):
            refreshed = mcp_connection_refresh(connection)
        counts["ok" if refreshed.status == McpStatus.OK else "unavailable"] += 1
    return counts


def mcp_connections_check_health(now: datetime, every_s: int) -> dict[str, int]:
    """The context providers' health check for MCP connections: a refresh (connect, list
    the tools, read the context resource) of each enabled one not refreshed for `every_s`.
    Disabled connections are not checked."""
    counts = mcp_connections_refresh_due(now, every_s)
    return {"ok": counts["ok"], "failing": counts["unavailable"]}


def mcp_providers_of(
    tenant_id: int, agent_id: int | None, offered: Sequence[OfferedToolRef]
) -> list[ProviderEntry]:
    """The MCP connections whose tools are among `offered` (by their `context:<name>` tag).
    One query, none when no MCP tool is offered."""
    mcp = [tool for tool in offered if tool.source == MCP_SERVER]
    names = {t.split(":", 1)[1] for tool in mcp for t in tool.tags if t.startswith("context:")}
    if not names:
        return []
    connections = McpServerConnection.objects.filter(tenant_id=tenant_id, name__in=names)
    return [
        ProviderEntry(
            kind="mcp",
            label="MCP server",
            id=connection.pk,
            name=connection.name,
            domains=list(connection.domains or ()),
            health=connection.health,
            tools=[tool.name for tool in mcp if f"context:{connection.name}" in tool.tags],
        )
        for connection in connections.order_by("name")
    ]


def mcp_connection_save(
    *,
    tenant: Tenant,
    connection: McpServerConnection | None = None,
    changes: dict[str, Any],
    graph_checked: bool = False,
) -> McpServerConnection:
    """Create (connection None) or change one of the tenant's MCP server connections
    through its full_clean, which compiles the tenant's whole configuration with it unless
    `graph_checked` (`base.config_checks`). Its tools change on the next refresh. A new
    URL, OAuth mode or client ID forgets its OAuth tokens and client (revoked, audited)."""
    if connection is None:
        connection = McpServerConnection(tenant=tenant)
    elif connection.tenant_id != tenant.pk:
        raise Http404("No such MCP server connection.")
    connection.graph_checked = graph_checked
    return save_validated(connection, changes, before=oauth_forget_if_moved)


def mcp_connection_delete(*, tenant: Tenant, connection: McpServerConnection) -> None:
    """Delete one of the tenant's MCP server connections (its tools leave the registry)."""
    if connection.tenant_id != tenant.pk:
        raise Http404("No such MCP server connection.")
    delete_recorded(connection)


def mcp_oauth_finish(
    *, session: Any, user: Any, state: str, code: str, error: str, iss: str = ""
) -> Connected:
    """The callback of a connection's OAuth flow (tools.mcp_oauth.connect_complete), then
    its tool list refreshed with the new token when it is the tenant's, or when the list was
    never fetched (a per-person connection's first admin to connect). Its connection comes
    back with its tenant loaded. OAuthProblem, PermissionDenied."""
    done = connect_complete(
        session=session, user=user, state=state, code=code, error=error, iss=iss
    )
    with rls.tenant_scope(done.connection.tenant_id):
        connection = McpServerConnection.objects.select_related("tenant").get(pk=done.connection.pk)
        if done.for_tenant or connection.status != McpStatus.OK:
            connection = mcp_connection_refresh(connection)
    return Connected(connection=connection, for_tenant=done.for_tenant)
