"""The tokens a connection holds: stored (encrypted), read for a call, refreshed before
they expire, revoked.

A token is refreshed when it expires within `REFRESH_MARGIN_S` (or half its lifetime, for
a token that lives less than two minutes), under its row's lock: two
processes needing it at once make one refresh, the second reads the first's result. The
refresh request is made with that one row locked (bounded by the request's timeout), the
only network call this project makes inside a transaction, because a refresh token is
often single-use: two refreshes at once would leave one process holding a spent token.

A token is used only for the client it was issued to: a token whose issuer or resource is
not the connection's current client's (its URL, mode or client ID changed: see
forgetting.py) is refused and forgotten.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from tenancy.models import AuditAction, Membership, Role
from tenancy.records import audit
from tools.mcp_oauth import protocol
from tools.mcp_oauth.models import McpOAuthClient, McpOAuthToken
from tools.mcp_oauth.protocol import OAuthHttp, OAuthProblem, TokenRefused, Tokens
from tools.models import McpAuthMode, McpServerConnection
from tools.runtime.egress import EgressPolicy

logger = logging.getLogger(__name__)
REFRESH_MARGIN_S = 60

# Sent once a person's token is stored (tenant_id, user_id, connection_id): runs waiting
# for that person to connect go on (agents/signals.py).
account_connected = Signal()


class NotConnected(Exception):
    """No usable token for that account: never connected, revoked, or its refresh was
    refused. The person (or, for the tenant's, an admin) must connect again."""


class RefreshFailed(Exception):
    """The token expired and the authorization server could not refresh it now; `str()`
    says why."""


def store_tokens(
    *,
    connection: McpServerConnection,
    client: McpOAuthClient,
    tokens: Tokens,
    user_id: int | None,
    connected_by: int | None,
) -> McpOAuthToken:
    """Keep the tokens of the tenant's account (user_id None) or a person's, replacing any
    before; a person's wakes their runs waiting for it (on commit)."""
    values = {
        "tenant_id": connection.tenant_id,
        "connected_by_id": connected_by,
        "issuer": client.issuer,
        "resource": client.resource,
        "access_token": tokens.access_token,
        "refresh_token": tokens.refresh_token,
        "token_type": tokens.token_type,
        "scope": tokens.scope,
        "expires_at": _expiry(tokens),
        "refreshed_at": None,
        "created_at": timezone.now(),  # a connected account's lifetime starts again
    }
    with transaction.atomic():
        row, _ = McpOAuthToken.objects.update_or_create(
            connection=connection, user_id=user_id, defaults=values
        )
        _audit(connection, user_id, AuditAction.MCP_ACCOUNT_CONNECTED)
        if user_id is not None:
            transaction.on_commit(lambda: account_connected.send(
                sender=McpOAuthToken, tenant_id=connection.tenant_id, user_id=user_id,
                connection_id=connection.pk,
            ))  # fmt: skip
    return row


def access_token(*, connection: McpServerConnection, user_id: int | None) -> str:
    """The access token to call `connection`'s server with, for the tenant (user_id None) or
    that person: refreshed first when it expires soon. NotConnected, RefreshFailed. One
    query when fresh; a locked refresh otherwise."""
    row = _row(connection, user_id, with_client=True)
    if row is None:
        raise NotConnected
    if not _issued_to_current_client(row, connection):
        with transaction.atomic():
            if McpOAuthToken.objects.filter(pk=row.pk).delete()[0]:
                _audit(connection, row.user_id, AuditAction.MCP_ACCOUNT_DISCONNECTED,
                       reason="issued for another server or client")  # fmt: skip
        raise NotConnected
    if not row.expires_within(refresh_margin_s(row)):
        return row.access_token
    return _refresh(row, connection)


def refresh_margin_s(row: McpOAuthToken) -> float:
    """How long before its expiry a token is renewed: REFRESH_MARGIN_S, or half its
    lifetime when that is shorter (a 60 s token is not renewed at every call)."""
    issued = row.refreshed_at or row.created_at
    if row.expires_at is None or issued is None:
        return REFRESH_MARGIN_S
    lifetime = (row.expires_at - issued).total_seconds()
    return max(0.0, min(REFRESH_MARGIN_S, lifetime / 2))


def _issued_to_current_client(row: McpOAuthToken, connection: McpServerConnection) -> bool:
    """Was `row` issued for the connection's current client: its issuer, its resource, and
    that resource still the connection's server?"""
    client = getattr(row.connection, "oauth_client", None)
    return (
        client is not None
        and protocol.issuers_match(row.issuer, client.issuer)
        and row.resource == client.resource
        and protocol.same_resource(client.resource, connection.url)
    )


def listing_token(connection: McpServerConnection) -> str | None:
    """The token a refresh of the tool list uses: the tenant's, or for a per-person
    connection the latest admin's who connected their own account; None when there is none
    (the refresh then goes without, and says the server refused)."""
    if connection.auth_mode == McpAuthMode.OAUTH_TENANT:
        user_id = None
    else:
        admins = Membership.objects.filter(
            tenant_id=connection.tenant_id, role__in=(Role.OWNER, Role.ADMIN)
        ).values("user_id")
        row = (
            McpOAuthToken.objects.filter(connection=connection, user_id__in=admins)
            .order_by("-created_at").only("user_id").first()
        )  # fmt: skip
        if row is None:
            return None
        user_id = row.user_id
    try:
        return access_token(connection=connection, user_id=user_id)
    except (NotConnected, RefreshFailed):
        return None


def token_expired(*, connection_id: int, user_id: int | None, refused: str) -> None:
    """The server refused the account's access token `refused`: mark it expired, so the
    next look-up refreshes it (or, without a refresh token, forgets it). Unless the token
    stored is another by now: calls made at once with the old token are all refused, and
    the first to renew it must not see its new token expired by the others' late word
    (each would refresh again). Under the row's lock, which a refresh holds; one SELECT
    and, when it is still that token, one UPDATE."""
    rows = McpOAuthToken.objects.filter(connection_id=connection_id)
    rows = rows.filter(user__isnull=True) if user_id is None else rows.filter(user_id=user_id)
    with transaction.atomic():
        row = rows.select_for_update().only("pk", "access_token").first()
        if row is not None and row.access_token == refused:
            McpOAuthToken.objects.filter(pk=row.pk).update(
                expires_at=timezone.now() - timedelta(seconds=1)
            )


def token_revoke(*, connection: McpServerConnection, user_id: int | None) -> bool:
    """Revoke the account's tokens at the authorization server (RFC 7009, when it offers
    revocation; best effort) and delete them here. False when there were none."""
    row = _row(connection, user_id)
    if row is None:
        return False
    client = McpOAuthClient.objects.filter(connection=connection).first()
    if client is not None:
        revoke_best_effort(client, [(row.access_token, row.refresh_token)], url=connection.url)
    with transaction.atomic():
        McpOAuthToken.objects.filter(pk=row.pk).delete()
        _audit(connection, user_id, AuditAction.MCP_ACCOUNT_DISCONNECTED, reason="revoked")
    return True


def revoke_best_effort(
    client: McpOAuthClient, tokens: list[tuple[str, str | None]], *, url: str
) -> None:
    """Revoke each (access, refresh) pair at `client`'s authorization server (RFC 7009),
    when it offers revocation; failures are logged, never raised. `url`: the MCP server's
    URL the tokens were for (it says whether its endpoints may be plain http)."""
    if not client.revocation_endpoint:
        return
    http = oauth_http_for(url)
    for access, refresh in tokens:
        for token, hint in ((refresh, "refresh_token"), (access, "access_token")):
            if not token:
                continue
            try:
                async_to_sync(protocol.revoke)(http, client_of(client), client.revocation_endpoint,
                                               token, hint)  # fmt: skip
            except OAuthProblem as exc:
                logger.info("revoking a token of MCP connection %s failed: %s",
                            client.connection_id, exc)  # fmt: skip


def connected_account(
    *, connection: McpServerConnection, user_id: int | None
) -> McpOAuthToken | None:
    """The account's token row (for status pages: connected since, expiry), or None."""
    return _row(connection, user_id)


def _row(
    connection: McpServerConnection, user_id: int | None, *, with_client: bool = False
) -> McpOAuthToken | None:
    rows = McpOAuthToken.objects.filter(connection=connection, tenant_id=connection.tenant_id)
    if with_client:  # (one query: the token, its connection and that one's client)
        rows = rows.select_related("connection__oauth_client")
    if user_id is None:
        return rows.filter(user__isnull=True).first()
    return rows.filter(user_id=user_id).first()


def _refresh(row: McpOAuthToken, connection: McpServerConnection) -> str:
    refused = False
    with transaction.atomic():
        locked = McpOAuthToken.objects.select_for_update().filter(pk=row.pk).first()
        if locked is None:
            raise NotConnected
        if not locked.expires_within(refresh_margin_s(locked)):
            return locked.access_token  # another process refreshed it meanwhile
        client = McpOAuthClient.objects.filter(connection_id=locked.connection_id).first()
        if not locked.refresh_token or client is None:
            if not locked.expires_within(0):
                return locked.access_token
            refused = True
        else:
            grant = {"grant_type": "refresh_token", "refresh_token": locked.refresh_token}
            try:
                tokens = async_to_sync(protocol.token_request)(
                    oauth_http(connection), client_of(client), grant
                )
            except TokenRefused:
                refused = True
            except OAuthProblem as exc:
                raise RefreshFailed(str(exc)) from None
            else:
                locked.access_token = tokens.access_token
                locked.refresh_token = tokens.refresh_token or locked.refresh_token
                locked.expires_at = _expiry(tokens)
                locked.scope = tokens.scope or locked.scope
                locked.refreshed_at = timezone.now()
                locked.save(update_fields=["access_token", "refresh_token", "expires_at",
                                           "scope", "refreshed_at"])  # fmt: skip
                return locked.access_token
    if refused:  # the grant is gone: so is the token; the account must be connected again
        with transaction.atomic():
            if McpOAuthToken.objects.filter(pk=row.pk).delete()[0]:
                _audit(connection, row.user_id, AuditAction.MCP_ACCOUNT_DISCONNECTED,
                       reason="the server refused to renew it")  # fmt: skip
    raise NotConnected


def _audit(
    connection: McpServerConnection, user_id: int | None, action: str, *, reason: str = ""
) -> None:
    """One audit entry; the actor is the request's person (docs/audit-log.md)."""
    details = {"connection": connection.name, "account": user_id or "tenant"}
    if reason:
        details["reason"] = reason
    audit.record(tenant=connection.tenant_id, action=action, obj=connection,
                 details=details)  # fmt: skip


def _expiry(tokens: Tokens):
    return timezone.now() + timedelta(seconds=tokens.expires_in) if tokens.expires_in else None


def oauth_http(connection: McpServerConnection) -> OAuthHttp:
    return oauth_http_for(connection.url)


def oauth_http_for(url: str) -> OAuthHttp:
    policy = EgressPolicy(allowlist=tuple(settings.EGRESS_ALLOWLIST))
    return OAuthHttp(policy, http_allowed=url.startswith("http://"))


def client_of(client: McpOAuthClient) -> protocol.Client:
    return protocol.Client(
        token_endpoint=client.token_endpoint,
        client_id=client.client_id,
        client_secret=client.client_secret,
        auth_method=client.auth_method,
        resource=client.resource,
    )
