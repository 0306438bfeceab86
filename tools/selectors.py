"""The tools app's reads that the faces list and show: tool definitions, their health, MCP
server connections. Services (services.py, mcp_connections.py) write; these only read.
Each takes the tenant and never returns another tenant's rows; one asked for by id or name
answers 404.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from tenancy.access import filter_given, get_for_tenant
from tenancy.models import Tenant
from tools.models import McpAuthMode, McpOAuthToken, McpServerConnection, ToolDefinition, ToolHealth


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1  # matches nothing: a 404 like any unknown id


# -- tool definitions ---------------------------------------------------------------------
def definitions_of(*, tenant: Tenant) -> dict[str, ToolDefinition]:
    """The tenant's tool definitions by name. One query."""
    return {d.name: d for d in ToolDefinition.objects.filter(tenant=tenant)}


def definition_get(*, tenant: Tenant, name: str) -> ToolDefinition:
    return get_for_tenant(ToolDefinition, tenant, name=name)


def definition_named(*, tenant: Tenant, name: str) -> ToolDefinition | None:
    """The tenant's definition `name`, or None (a built-in or plug-in tool has none)."""
    return ToolDefinition.objects.filter(tenant=tenant, name=name).first()


def tool_health(*, tenant: Tenant, name: str) -> ToolHealth | None:
    """The tool's last self-test result in the tenant, or None."""
    return ToolHealth.objects.filter(tenant=tenant, tool_name=name).first()


# -- MCP server connections -----------------------------------------------------------------
def mcp_connections_of(
    *, tenant: Tenant, enabled: bool | None = None, domain: str | None = None
) -> QuerySet:
    """The tenant's MCP server connections; only enabled (or disabled) ones, or those
    serving `domain`, when given."""
    return filter_given(
        McpServerConnection.objects.filter(tenant=tenant),
        enabled=enabled,
        domains__contains=None if domain is None else [domain],
    )


def mcp_connection_get(*, tenant: Tenant, connection_id: Any) -> McpServerConnection:
    return get_for_tenant(McpServerConnection, tenant, pk=_int(connection_id))


def mcp_connection_names(*, tenant_id: int) -> list[McpServerConnection]:
    """The tenant's MCP connections with only their id, name and domains. One query."""
    return list(
        McpServerConnection.objects.filter(tenant_id=tenant_id).only("pk", "name", "domains")
    )


def definition_by_id(*, tenant: Tenant, definition_id: Any) -> ToolDefinition:
    return get_for_tenant(ToolDefinition, tenant, pk=_int(definition_id))


def mcp_accounts_of(*, tenant: Tenant, user: Any) -> list[tuple[McpServerConnection, Any]]:
    """The tenant's enabled per-person OAuth connections, each with `user`'s token row (or
    None when not connected). Two queries."""
    connections = list(
        McpServerConnection.objects.filter(
            tenant=tenant, enabled=True, auth_mode=McpAuthMode.OAUTH_USER
        )
    )
    tokens = {
        token.connection_id: token
        for token in McpOAuthToken.objects.filter(
            tenant=tenant, user=user, connection__in=connections
        ).defer("access_token", "refresh_token")
    }
    return [(connection, tokens.get(connection.pk)) for connection in connections]


def mcp_tenant_accounts(*, tenant: Tenant) -> set[int]:
    """The ids of the tenant's connections whose tenant-wide account is connected."""
    return set(
        McpOAuthToken.objects.filter(tenant=tenant, user__isnull=True).values_list(
            "connection_id", flat=True
        )
    )


def mcp_oauth_connection_get(
    *, tenant: Tenant, connection_id: Any, mode: str
) -> McpServerConnection:
    """One of the tenant's connections in the OAuth `mode`; 404 otherwise."""
    return get_for_tenant(
        McpServerConnection.objects.filter(auth_mode=mode), tenant, pk=_int(connection_id)
    )
