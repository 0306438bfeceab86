"""Services for MCP server connections (context providers): refresh, test, and the
periodic refresh of connections that are due.

Refreshing talks to the remote server (bounded by the connection's timeout) with no
database transaction open, then writes the outcome in one UPDATE; the save's signal
invalidates the tenant's registry in every process.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db.models import Q
from django.http import Http404
from django.utils import timezone

from agentplatform.saving import delete_recorded, save_validated
from agentplatform.tenancy import rls
from agentplatform.tenancy.models import Tenant
from tools.models import McpServerConnection, McpStatus
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
    """How to reach the connection's server now: its URL, its credential header and the
    egress policy of the current settings."""
    return McpEndpoint(
        url=connection.url,
        policy=EgressPolicy(allowlist=tuple(settings.EGRESS_ALLOWLIST)),
        headers=auth_headers(connection.auth_header),
        timeout_s=connection.timeout_s,
    )


async def mcp_connection_fetch(
    connection: McpServerConnection,
) -> tuple[list[McpRemoteTool], str]:
    """The server's tools and the text of the context resource (if one is set). No
    database access; McpUnavailable on any failure."""
    return await mcp_snapshot(mcp_endpoint(connection), connection.context_resource_uri or None)


def mcp_connection_refresh(connection: McpServerConnection) -> McpServerConnection:
    """Fetch the server's tools (and context resource) and store them; on failure mark the
    connection unavailable with the error, keeping the previous listing (the registry
    exposes no tools of an unavailable connection). One MCP session, one UPDATE.
    `last_refreshed_at` is the time of this attempt, whatever its outcome."""
    try:
        tools, context_text = async_to_sync(mcp_connection_fetch)(connection)
    except McpUnavailable as exc:
        logger.info("MCP connection %s (tenant %s) unavailable: %s", connection.name,
                    connection.tenant_id, exc)  # fmt: skip
        connection.status = McpStatus.UNAVAILABLE
        connection.last_error = str(exc)
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
        tools, context_text = async_to_sync(mcp_connection_fetch)(connection)
    except McpUnavailable as exc:
        return False, f"MCP server {connection.name} is unavailable: {exc}", []
    names = [tool.name for tool in tools]
    message = f"Connected: {len(names)} tool{'s' if len(names) != 1 else ''}"
    if connection.context_resource_uri:
        message += f"; context resource: {len(context_text)} characters"
    return True, message + ".", names


def mcp_connections_due(now: datetime | None = None):
    """Enabled connections never refreshed, or last refreshed MCP_REFRESH_S ago or more."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.MCP_REFRESH_S)
    return McpServerConnection.objects.filter(enabled=True).filter(
        Q(last_refreshed_at__isnull=True) | Q(last_refreshed_at__lte=cutoff)
    )


def mcp_connections_refresh_due(now: datetime | None = None) -> dict[str, int]:
    """Refresh every due connection, one after another (each bounded by its timeout).
    Returns how many ended ok and unavailable."""
    counts = {"ok": 0, "unavailable": 0}
    with rls.owner():  # the due connections of every tenant; each refreshed in its own
        due = list(mcp_connections_due(now).order_by("last_refreshed_at", "pk"))
    for connection in due:
        with rls.tenant_scope(connection.tenant_id):
            refreshed = mcp_connection_refresh(connection)
        counts["ok" if refreshed.status == McpStatus.OK else "unavailable"] += 1
    return counts


def mcp_connection_save(
    *,
    tenant: Tenant,
    connection: McpServerConnection | None = None,
    changes: dict[str, Any],
    graph_checked: bool = False,
) -> McpServerConnection:
    """Create (connection None) or change one of the tenant's MCP server connections
    through its full_clean, which compiles the tenant's whole configuration with it unless
    `graph_checked` (`agentplatform.config_checks`). Its tools change on the next refresh."""
    if connection is None:
        connection = McpServerConnection(tenant=tenant)
    elif connection.tenant_id != tenant.pk:
        raise Http404("No such MCP server connection.")
    connection.graph_checked = graph_checked
    return save_validated(connection, changes)


def mcp_connection_delete(*, tenant: Tenant, connection: McpServerConnection) -> None:
    """Delete one of the tenant's MCP server connections (its tools leave the registry)."""
    if connection.tenant_id != tenant.pk:
        raise Http404("No such MCP server connection.")
    delete_recorded(connection)
