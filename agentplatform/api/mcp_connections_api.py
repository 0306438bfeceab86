"""MCP server connections (context providers): CRUD with a write-only auth header, and the
`test` (reach the server now, store nothing) and `refresh` (list its tools again and store
them) actions. Saving makes no network call; `refresh` (or the periodic refresh) does."""

from __future__ import annotations

from typing import Any

from django.db import models
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    extend_schema,
    extend_schema_view,
)
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.resources import (
    ID,
    TenantCrudViewSet,
    crud_schema,
    path_id,
    query_bool,
    query_text,
)
from agentplatform.api.schema import ERRORS
from agentplatform.api.serializers import (
    McpAccountSerializer,
    McpConnectionCheckSerializer,
    McpConnectionSerializer,
)
from tenancy.policy import Action
from tools import selectors
from tools.mcp_connections import (
    mcp_connection_delete,
    mcp_connection_refresh,
    mcp_connection_test,
)
from tools.mcp_oauth import connected_account, token_revoke
from tools.models import McpAuthMode, McpServerConnection, McpStatus

CONNECTION_REQUEST = {
    "name": "crm",
    "url": "https://crm.example.com/mcp",
    "auth_header": "the-crm-token",
    "enabled": True,
    "allowed_tool_names": [],
    "context_resource_uri": "context://handbook",
    "timeout_s": 30.0,
    "domains": ["people", "organizations"],
}
CONNECTION_RESPONSE = {
    "id": 3,
    **{k: v for k, v in CONNECTION_REQUEST.items() if k != "auth_header"},
    "has_auth_header": True,
    "tool_prefix": "crm",
    "status": "ok",
    "last_error": "",
    "last_refreshed_at": "2025-01-01T12:00:00Z",
    "health": {"status": "ok", "reason": "", "checked_at": "2025-01-01T12:00:00Z"},
    "tools": ["find_contact", "add_note"],
    "created_at": "2025-01-01T12:00:00Z",
    "updated_at": "2025-01-01T12:00:00Z",
}
CHECK_EXAMPLE = {
    "ok": False,
    "message": "MCP server crm is unavailable: https://crm.example.com/mcp: the server "
    "refused the credentials (HTTP 401)",
    "tools": [],
    "connection": {
        **CONNECTION_RESPONSE,
        "status": "unavailable",
        "last_error": "https://crm.example.com/mcp: the server refused the credentials (HTTP 401)",
        "health": {
            "status": "failing",
            "reason": "https://crm.example.com/mcp: the server refused the credentials (HTTP 401)",
            "checked_at": "2025-01-01T12:00:00Z",
        },
    },
}

ACCOUNT_EXAMPLE = {
    "connected": True,
    "connected_at": "2025-01-01T12:00:00Z",
    "expires_at": "2025-01-01T13:00:00Z",
}


@extend_schema_view(
    **crud_schema(
        "MCP server connection",
        "MCP server connections",
        McpConnectionSerializer,
        lookup=ID,
        filters=[
            OpenApiParameter("enabled", OpenApiTypes.BOOL),
            OpenApiParameter("domain", OpenApiTypes.STR, description="Only those covering it."),
        ],
        request_example=CONNECTION_REQUEST,
        response_example=CONNECTION_RESPONSE,
    )
)
class McpConnectionViewSet(TenantCrudViewSet):
    """The tenant's remote MCP servers, whose tools join its registry. `auth_header` is
    write-only: send it to set it, null or "" to clear it, omit it to keep it; moving `url`
    to another origin needs it sent again (or cleared). Responses carry `has_auth_header`."""

    model = McpServerConnection
    serializer_class = McpConnectionSerializer
    action_policy = {
        "test": Action.CHANGE_CONFIG,
        "refresh": Action.CHANGE_CONFIG,
        "account": Action.CHANGE_CONFIG,
    }

    def select(self, **filters: Any) -> models.QuerySet:
        return selectors.mcp_connections_of(tenant=self.tenant, **filters)

    def list_filters(self) -> dict[str, Any]:
        return {
            "enabled": query_bool(self.request, "enabled"),
            "domain": query_text(self.request, "domain", max_length=40),
        }

    def get_object(self) -> McpServerConnection:
        pk = path_id(self.kwargs["pk"], "MCP server connection")
        return selectors.mcp_connection_get(tenant=self.tenant, connection_id=pk)

    def delete_with_service(self, instance: McpServerConnection) -> None:
        mcp_connection_delete(tenant=self.tenant, connection=instance)

    def _answer(self, connection: McpServerConnection, ok: bool, message: str, tools: list[str]):
        data = {"ok": ok, "message": message, "tools": tools, "connection": connection}
        return Response(McpConnectionCheckSerializer(data).data)

    @extend_schema(
        summary="Test an MCP server connection",
        description="Connects to the server now and lists its tools (and reads the context "
        "resource, if one is set). Stores nothing: `refresh` does. A failing server is "
        "`ok: false` with status 200; the message never holds the auth header.",
        parameters=[ID],
        request=None,
        responses={200: McpConnectionCheckSerializer, **ERRORS},
        examples=[OpenApiExample("Refused", CHECK_EXAMPLE, response_only=True)],
    )
    @action(detail=True, methods=["post"])
    def test(self, request: Request, pk: str) -> Response:
        connection = self.get_object()
        ok, message, names = mcp_connection_test(connection)
        return self._answer(connection, ok, message, names)

    @extend_schema(
        summary="Refresh an MCP server connection",
        description="Lists the server's tools again and stores them (and the context "
        "resource's text); records the outcome in `status`, `last_error` and `health`. A "
        "failing server is `ok: false` with status 200: its tools leave the registry until a "
        "refresh succeeds.",
        parameters=[ID],
        request=None,
        responses={200: McpConnectionCheckSerializer, **ERRORS},
        examples=[OpenApiExample("Refused", CHECK_EXAMPLE, response_only=True)],
    )
    @action(detail=True, methods=["post"])
    def refresh(self, request: Request, pk: str) -> Response:
        connection = mcp_connection_refresh(self.get_object())
        ok = connection.status == McpStatus.OK
        names = [str(t.get("name")) for t in connection.tools_cache or [] if isinstance(t, dict)]
        message = (
            f"Refreshed: {len(names)} tool{'s' if len(names) != 1 else ''} listed."
            if ok
            else f"MCP server {connection.name} is unavailable: {connection.last_error}"
        )
        return self._answer(connection, ok, message, names if ok else [])

    @extend_schema(
        summary="The tenant's OAuth account at an MCP server",
        description="For an `oauth_tenant` connection: whether the tenant's account is "
        "connected (never the token). An admin connects it in a browser, on the MCP servers "
        "page (the authorization-code flow needs a person at the server). DELETE revokes it "
        "at the server (RFC 7009, where offered) and forgets it: the connection's tools fail "
        "until an admin connects again. 404 for a connection not in that mode.",
        parameters=[ID],
        request=None,
        responses={200: McpAccountSerializer, 204: None, **ERRORS},
        examples=[OpenApiExample("Connected", ACCOUNT_EXAMPLE, response_only=True)],
    )
    @action(detail=True, methods=["get", "delete"])
    def account(self, request: Request, pk: str) -> Response:
        connection = selectors.mcp_oauth_connection_get(
            tenant=self.tenant, connection_id=path_id(pk, "MCP server connection"),
            mode=McpAuthMode.OAUTH_TENANT,
        )  # fmt: skip
        if request.method == "DELETE":
            token_revoke(connection=connection, user_id=None)
            return Response(status=204)
        token = connected_account(connection=connection, user_id=None)
        data = {
            "connected": token is not None,
            "connected_at": token.created_at if token else None,
            "expires_at": token.expires_at if token else None,
        }
        return Response(McpAccountSerializer(data).data)
