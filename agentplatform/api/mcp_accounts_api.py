"""`GET /api/v1/mcp-accounts`, `DELETE /api/v1/mcp-accounts/{id}`: the signed-in person's own
accounts at the tenant's per-person OAuth MCP servers (docs/mcp.md): which are connected,
where to connect one (a page: the authorization-code flow needs a browser), and
disconnecting (revoked at the server, forgotten here). An API key has no account of its
own: it lists none, and may disconnect none (403)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentplatform.api.resources import ID, NOT_FOUND_EXAMPLE, path_id
from agentplatform.api.schema import ERRORS
from agentplatform.api.tenant import allowed, request_tenant
from tenancy.authentication import ApiClient
from tenancy.policy import Action
from tools import selectors
from tools.mcp_oauth import connect_url, token_revoke
from tools.models import McpAuthMode


class McpPersonalAccountSerializer(serializers.Serializer):
    connection_id = serializers.IntegerField()
    connection = serializers.CharField(help_text="The MCP server connection's name.")
    url = serializers.CharField()
    connected = serializers.BooleanField()
    connected_at = serializers.DateTimeField(allow_null=True)
    connect_url = serializers.CharField(help_text="The page where the person connects it.")


EXAMPLE = OpenApiExample(
    "Not connected yet",
    [
        {
            "connection_id": 4,
            "connection": "crm",
            "url": "https://crm.example.com/mcp",
            "connected": False,
            "connected_at": None,
            "connect_url": "/t/acme/mcp-accounts/4/connect/",
        }
    ],
    response_only=True,
)


def _person(request: Request):
    if isinstance(request.user, ApiClient):
        raise PermissionDenied("An API key has no account of its own: sign in as the person.")
    return request.user


def _is_key(request: Request) -> bool:
    return isinstance(request.user, ApiClient)


class McpAccountsView(APIView):
    read_action = Action.START_RUN
    write_action = Action.START_RUN

    def get_permissions(self):
        return [allowed(self.read_action, self.write_action)()]

    @extend_schema(
        summary="Your accounts at per-person MCP servers",
        description="The tenant's enabled `oauth_user` MCP connections, each with whether the "
        "signed-in person has connected their own account (never a token) and the page "
        "where they connect it. An API key has none: [].",
        responses={200: McpPersonalAccountSerializer(many=True), **ERRORS},
        examples=[EXAMPLE],
    )
    def get(self, request: Request) -> Response:
        tenant = request_tenant(request)
        if _is_key(request):
            return Response([])
        rows = [
            {
                "connection_id": connection.pk,
                "connection": connection.name,
                "url": connection.url,
                "connected": token is not None,
                "connected_at": token.created_at if token else None,
                "connect_url": connect_url(connection),
            }
            for connection, token in selectors.mcp_accounts_of(tenant=tenant, user=request.user)
        ]
        return Response(McpPersonalAccountSerializer(rows, many=True).data)


class McpAccountView(APIView):
    read_action = Action.START_RUN
    write_action = Action.START_RUN

    def get_permissions(self):
        return [allowed(self.read_action, self.write_action)()]

    @extend_schema(
        summary="Disconnect your account at an MCP server",
        description="Revokes the signed-in person's tokens at the server (RFC 7009, where it "
        "offers revocation) and forgets them: their runs ask them to connect again. 204, "
        "also when it was not connected; 404 for a connection that is not per person.",
        parameters=[ID],
        request=None,
        responses={204: None, **ERRORS},
        examples=[NOT_FOUND_EXAMPLE],
    )
    def delete(self, request: Request, pk: int) -> Response:
        connection = selectors.mcp_oauth_connection_get(
            tenant=request_tenant(request), connection_id=path_id(pk, "MCP server connection"),
            mode=McpAuthMode.OAUTH_USER,
        )  # fmt: skip
        token_revoke(connection=connection, user_id=_person(request).pk)
        return Response(status=204)
