"""Connecting an account: the authorization-code flow with PKCE, begun by a person on the
platform and completed at its callback.

`connect_begin` discovers the server's authorization server, settles who the platform is
there (a client ID the admin gave; its client ID metadata document where the server accepts
those; else dynamic registration), and keeps the pending flow in the person's session under
a random `state`: bound to the tenant, the person, the connection and that session, used
once, for ten minutes. `connect_complete` takes it back at the callback and exchanges the
code. The pending flow remembers where it went (the connection's URL, the issuer, the token
endpoint, the client ID): a callback after any of them changed is refused, and so is one
without `iss` from a server that says it always sends one (RFC 9207). Network calls are made
with no transaction open.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied

from tenancy import rls
from tenancy.models import Membership, Role
from tools.mcp_oauth import protocol
from tools.mcp_oauth.models import ClientSource, McpOAuthClient
from tools.mcp_oauth.protocol import AuthServer, OAuthHttp, OAuthProblem, issuers_match
from tools.mcp_oauth.tokens import client_of, oauth_http, store_tokens
from tools.models import McpAuthMode, McpServerConnection

SESSION_KEY = "mcp_oauth_flows"
FLOW_TTL_S = 600
MAX_PENDING = 5  # per session: older pending flows are dropped
CLIENT_NAME = "Agent platform"


@dataclass(frozen=True)
class Connected:
    connection: McpServerConnection
    for_tenant: bool


def connect_begin(
    *,
    connection: McpServerConnection,
    user: AbstractBaseUser,
    session: Any,
    redirect_uri: str,
    client_metadata_url: str,
    for_tenant: bool,
) -> str:
    """The authorization URL to send the person to. `for_tenant`: the tenant's one account
    (an admin, on an `oauth_tenant` connection); else the person's own (`oauth_user`).
    OAuthProblem when discovery or registration fails; PermissionDenied for a mode the
    connection does not have."""
    if connection.auth_mode != _mode(for_tenant):
        raise PermissionDenied("This connection does not take that kind of account.")
    http = oauth_http(connection)
    server = async_to_sync(protocol.discover)(http, connection.url)
    scope = connection.oauth_scope.strip() or " ".join(server.scopes)
    client = _client_for(connection, server, http, redirect_uri, client_metadata_url, scope)
    verifier, challenge = protocol.pkce_pair()
    state = secrets.token_urlsafe(32)
    flows = {
        key: flow
        for key, flow in (session.get(SESSION_KEY) or {}).items()
        if time.time() - flow.get("at", 0) < FLOW_TTL_S
    }
    flows = dict(sorted(flows.items(), key=lambda kv: kv[1]["at"])[-(MAX_PENDING - 1) :])
    flows[state] = {
        "tenant": connection.tenant_id,
        "user": user.pk,
        "connection": connection.pk,
        "client": client.pk,
        # Who the flow went to: the callback refuses it when the connection's client is no
        # longer this one (its URL, mode or client ID changed meanwhile; a new discovery).
        "url": connection.url,
        "issuer": client.issuer,
        "token_endpoint": client.token_endpoint,
        "client_id": client.client_id,
        "iss_required": server.iss_parameter_supported,
        "verifier": verifier,
        "for_tenant": for_tenant,
        "at": time.time(),
    }
    session[SESSION_KEY] = flows
    return protocol.authorization_url(
        server, client_id=client.client_id, redirect_uri=client.redirect_uri, state=state,
        challenge=challenge, scope=client.scope,
    )  # fmt: skip


def connect_complete(
    *, session: Any, user: AbstractBaseUser, state: str, code: str, error: str = "",
    iss: str = "",
) -> Connected:  # fmt: skip
    """Take the pending flow named by `state` (once: it leaves the session whatever
    happens) and exchange `code` for tokens, stored for the tenant or the person. An `iss`
    (RFC 9207) must name the authorization server the flow went to (a mix-up otherwise).
    OAuthProblem, with why, for anything amiss; PermissionDenied when the flow is another
    person's or the person has left the tenant."""
    flows = dict(session.get(SESSION_KEY) or {})
    flow = flows.pop(state, None) if state else None
    session[SESSION_KEY] = flows
    if not isinstance(flow, dict) or time.time() - flow.get("at", 0) >= FLOW_TTL_S:
        raise OAuthProblem("this connection attempt is unknown or expired: start it again")
    if flow["user"] != user.pk:
        raise PermissionDenied("This connection attempt was started by someone else.")
    if error:
        reason = error if error.replace("_", "").isalpha() and len(error) <= 40 else "error"
        raise OAuthProblem(f"the authorization server did not grant access ({reason})")
    if not code or len(code) > 2000:
        raise OAuthProblem("the authorization server sent no code")
    with rls.tenant_scope(flow["tenant"]):
        membership = Membership.objects.filter(tenant_id=flow["tenant"], user=user).first()
        connection = McpServerConnection.objects.filter(
            pk=flow["connection"], tenant_id=flow["tenant"]
        ).first()
        client = McpOAuthClient.objects.filter(
            pk=flow["client"], connection_id=flow["connection"]
        ).first()
    if membership is None or connection is None or client is None:
        raise PermissionDenied("This connection is no longer yours to connect.")
    bound = (flow.get("url"), flow.get("issuer"), flow.get("token_endpoint"),
             flow.get("client_id"))  # fmt: skip
    current = (connection.url, client.issuer, client.token_endpoint, client.client_id)
    if bound != current or connection.auth_mode != _mode(flow["for_tenant"]):
        raise OAuthProblem(
            "the connection's server or client changed since this attempt began: start again"
        )
    if not iss and flow.get("iss_required"):
        raise OAuthProblem(
            "the authorization server did not name itself in its answer (iss), as it says "
            "it always does"
        )
    if iss and not issuers_match(iss, flow["issuer"]):
        raise OAuthProblem("the answer came from another authorization server than asked")
    if flow["for_tenant"] and membership.role not in (Role.OWNER, Role.ADMIN):
        raise PermissionDenied("Only an admin connects the tenant's account.")
    grant = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": client.redirect_uri,
        "code_verifier": flow["verifier"],
    }
    tokens = async_to_sync(protocol.token_request)(oauth_http(connection), client_of(client), grant)
    with rls.tenant_scope(connection.tenant_id):
        store_tokens(
            connection=connection, client=client, tokens=tokens,
            user_id=None if flow["for_tenant"] else user.pk, connected_by=user.pk,
        )  # fmt: skip
    return Connected(connection=connection, for_tenant=flow["for_tenant"])


def _mode(for_tenant: bool) -> str:
    return McpAuthMode.OAUTH_TENANT if for_tenant else McpAuthMode.OAUTH_USER


def client_metadata_document(*, client_id: str, redirect_uri: str) -> dict[str, Any]:
    """The platform's client ID metadata document: served at `client_id` itself."""
    return {
        "client_id": client_id,
        "client_name": CLIENT_NAME,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }


def client_source(server: AuthServer, *, configured_id: str, metadata_url: str) -> ClientSource:
    """How the platform identifies itself to `server`: the admin's client ID, else its
    metadata document (an https URL, where the server accepts those), else registration."""
    if configured_id:
        return ClientSource.CONFIGURED
    if server.client_id_metadata_document_supported and metadata_url.startswith("https://"):
        return ClientSource.METADATA_DOCUMENT
    return ClientSource.REGISTERED


def _client_for(
    connection: McpServerConnection,
    server: AuthServer,
    http: OAuthHttp,
    redirect_uri: str,
    metadata_url: str,
    scope: str,
) -> McpOAuthClient:
    """The connection's client at `server`: the one kept when it still fits, else a new
    one (registering costs one request)."""
    source = client_source(server, configured_id=connection.oauth_client_id,
                           metadata_url=metadata_url)  # fmt: skip
    kept = McpOAuthClient.objects.filter(connection=connection).first()
    same = kept is not None and (
        kept.issuer, kept.token_endpoint, kept.redirect_uri, kept.source, kept.resource,
    ) == (server.issuer, server.token_endpoint, redirect_uri, source, server.resource)  # fmt: skip
    if same and (source != ClientSource.CONFIGURED or kept.client_id == connection.oauth_client_id):
        fields = {"authorization_endpoint": server.authorization_endpoint,
                  "revocation_endpoint": server.revocation_endpoint, "scope": scope}  # fmt: skip
        McpOAuthClient.objects.filter(pk=kept.pk).update(**fields)
        for name, value in fields.items():
            setattr(kept, name, value)
        return kept
    secret, method = None, "none"
    if source == ClientSource.CONFIGURED:
        client_id = connection.oauth_client_id
    elif source == ClientSource.METADATA_DOCUMENT:
        client_id = metadata_url
    else:
        client_id, secret, method = async_to_sync(protocol.register)(
            http, server, redirect_uri=redirect_uri, client_name=CLIENT_NAME, scope=scope
        )
    values = {
        "tenant_id": connection.tenant_id,
        "issuer": server.issuer,
        "authorization_endpoint": server.authorization_endpoint,
        "token_endpoint": server.token_endpoint,
        "revocation_endpoint": server.revocation_endpoint,
        "resource": server.resource,
        "scope": scope,
        "redirect_uri": redirect_uri,
        "source": source,
        "client_id": client_id,
        "client_secret": secret,
        "auth_method": method,
    }
    client, _ = McpOAuthClient.objects.update_or_create(connection=connection, defaults=values)
    return client
