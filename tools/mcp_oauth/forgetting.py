"""Forgetting OAuth that no longer holds: a connection whose URL, mode or client ID changed
keeps no token and no client registration (its tokens would go to the new server, its
refresh tokens to a new token endpoint); a member who leaves the tenant keeps no token for
its connections.

What is forgotten is deleted at once (audited, in the caller's transaction) and revoked at
its authorization server once that transaction commits: best effort, with no transaction
open (a rolled-back change revokes nothing).
"""

from __future__ import annotations

from django.db import transaction

from tenancy import rls
from tenancy.models import AuditAction
from tenancy.records import audit
from tools.mcp_oauth.models import McpOAuthClient, McpOAuthToken
from tools.mcp_oauth.tokens import revoke_best_effort
from tools.models import McpServerConnection

# What says who the platform is at which server: a change to one forgets the rest.
OAUTH_IDENTITY = ("url", "auth_mode", "oauth_client_id")


def oauth_forget_if_moved(connection: McpServerConnection) -> list[str]:
    """Before `connection` is saved with its changes set (in the save's transaction): when
    its URL, mode or client ID differs from the stored one, forget its tokens and its client
    registration. Every face saves through here (tools.mcp_connections.mcp_connection_save,
    the admin). The fields that changed, [] when none did."""
    if connection.pk is None:
        return []
    stored = McpServerConnection.objects.filter(pk=connection.pk).values(*OAUTH_IDENTITY).first()
    if stored is None:
        return []
    changed = [name for name in OAUTH_IDENTITY if stored[name] != getattr(connection, name)]
    if changed:
        _forget(
            connection,
            McpOAuthToken.objects.filter(connection_id=connection.pk),
            with_client=True,
            server_url=stored["url"],
            reason=f"the connection's {', '.join(changed)} changed",
        )
    return changed


def oauth_forget_member(*, tenant_id: int, user_id: int) -> None:
    """A member left the tenant: their own accounts on its connections are forgotten."""
    with rls.tenant_scope(tenant_id):
        rows = McpOAuthToken.objects.filter(tenant_id=tenant_id, user_id=user_id)
        for connection in McpServerConnection.objects.filter(pk__in=rows.values("connection_id")):
            _forget(
                connection,
                rows.filter(connection_id=connection.pk),
                with_client=False,
                server_url=connection.url,
                reason="the member left the tenant",
            )


def _forget(
    connection: McpServerConnection,
    rows,
    *,
    with_client: bool,
    server_url: str,
    reason: str,
) -> None:
    client = McpOAuthClient.objects.filter(connection_id=connection.pk).first()
    tokens = list(rows.values_list("user_id", "access_token", "refresh_token"))
    with transaction.atomic():
        rows.delete()
        for user_id, _, _ in tokens:
            _record(connection, account=user_id or "tenant", reason=reason)
        if with_client and client is not None:
            McpOAuthClient.objects.filter(pk=client.pk).delete()
            _record(connection, account="client registration", reason=reason)
    if client is not None and tokens:
        pairs = [(access, refresh) for _, access, refresh in tokens]
        transaction.on_commit(lambda: revoke_best_effort(client, pairs, url=server_url))


def _record(connection: McpServerConnection, *, account: object, reason: str) -> None:
    audit.record(
        tenant=connection.tenant_id,
        action=AuditAction.MCP_ACCOUNT_DISCONNECTED,
        obj=connection,
        details={"connection": connection.name, "account": account, "reason": reason},
    )
