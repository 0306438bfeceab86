"""The Authorization header of an OAuth connection's tool calls, looked up per call: the
tenant's token, or the token of the person whose run it is (never another's). A person who
has not connected gets the run paused with a "connect your account" step; a run with no
person (an API key's, a trigger's) gets a clear tool error."""

from __future__ import annotations

from collections.abc import Mapping

from asgiref.sync import sync_to_async
from django.urls import reverse

from tenancy import rls
from tools.mcp_oauth.tokens import NotConnected, RefreshFailed, access_token, token_expired
from tools.models import McpAuthMode, McpServerConnection
from tools.runtime.context import RunContext
from tools.runtime.mcp_endpoint import AccountNeeded
from tools.runtime.tool import ToolFailed

CONNECT_EVENT = "account.connect_required"


class OAuthCredentials:
    """For `build_mcp_tool(credentials=...)`: one per OAuth connection in a registry."""

    def __init__(self, connection: McpServerConnection) -> None:
        self.connection_id = connection.pk
        self.tenant_id = connection.tenant_id
        self.name = connection.name
        self.per_user = connection.auth_mode == McpAuthMode.OAUTH_USER

    async def __call__(self, ctx: RunContext) -> Mapping[str, str]:
        if self.per_user and (ctx.user_id is None or ctx.unattended):
            raise ToolFailed(
                f"MCP server {self.name} is reached with each person's own account, and this "
                "run has no person (an API key's, or a trigger's: its run_as member is not "
                "there to act with their own account): it cannot call it"
            )
        user_id = int(ctx.user_id) if self.per_user else None
        return {"Authorization": f"Bearer {await sync_to_async(self._token)(user_id)}"}

    async def rejected(self, ctx: RunContext, headers: Mapping[str, str]) -> None:
        """The server refused the token in `headers` (revoked there, or expired early): it
        is renewed on the next look-up, or, when it cannot be, forgotten (the account is
        asked again); unless another call renewed it meanwhile."""
        if self.per_user and (ctx.user_id is None or ctx.unattended):
            return  # (no person's token was sent)
        user_id = int(ctx.user_id) if self.per_user else None
        refused = headers.get("Authorization", "").removeprefix("Bearer ").strip()
        await sync_to_async(self._expire)(user_id, refused)

    def _expire(self, user_id: int | None, refused: str) -> None:
        with rls.tenant_scope(int(self.tenant_id)):
            token_expired(connection_id=self.connection_id, user_id=user_id, refused=refused)

    def _token(self, user_id: int | None) -> str:
        with rls.tenant_scope(int(self.tenant_id)):
            connection = (
                McpServerConnection.objects.filter(pk=self.connection_id, tenant_id=self.tenant_id)
                .select_related("tenant").first()
            )  # fmt: skip
            if connection is None:
                raise ToolFailed(f"MCP server {self.name} is no longer connected")
            try:
                return access_token(connection=connection, user_id=user_id)
            except RefreshFailed as exc:
                raise ToolFailed(
                    f"MCP server {self.name}: the token could not be renewed: {exc}"
                ) from None
            except NotConnected:
                if user_id is None:
                    raise ToolFailed(
                        f"MCP server {self.name} needs the tenant's account connected: an "
                        "admin connects it on the MCP connections page"
                    ) from None
                url = connect_url(connection)
                message = (
                    f"Connect your {self.name} account to go on: the run continues once "
                    "you have, or cancel it."
                )
                payload = {"connection": self.name, "connection_id": self.connection_id,
                           "connect_url": url, "message": message}  # fmt: skip
                raise AccountNeeded(message, (CONNECT_EVENT, payload)) from None


def connect_url(connection: McpServerConnection) -> str:
    """Where a person connects their own account to `connection` (a path on the platform)."""
    return reverse(
        "mcp_account_connect",
        kwargs={"tenant_slug": connection.tenant.slug, "pk": connection.pk},
    )
