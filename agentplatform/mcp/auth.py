"""Tenant API keys as MCP bearer tokens, through the SDK's token-verifier hook.

A missing, wrong, revoked or expired key gets the SDK's 401 with a WWW-Authenticate
challenge; scopes are checked per method by the server (`read` lists, `run` calls).
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST
from pydantic import ConfigDict, Field

from agentplatform.stream_reads import stream_read
from agentplatform.tenancy.api_keys import find_usable_key, verified_key
from agentplatform.tenancy.models import ApiKey, Scope
from agentplatform.tenancy.policy import Action, Principal


class ApiKeyToken(AccessToken):
    """The SDK's AccessToken carrying the resolved key (with its tenant) for the handlers.
    `scopes` are the key's effective scopes (`admin` implies every other)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    api_key: ApiKey = Field(exclude=True, repr=False)


def _token_for(token: str) -> ApiKeyToken | None:
    key = find_usable_key(token)
    return None if key is None else _token(token, key)


def _token(token: str, key: ApiKey) -> ApiKeyToken:
    return ApiKeyToken(
        token=token,
        client_id=f"api-key:{key.prefix}",
        subject=f"tenant:{key.tenant.slug}",
        scopes=[scope for scope in Scope.values if key.has_scope(scope)],
        expires_at=int(key.expires_at.timestamp()) if key.expires_at else None,
        api_key=key,
    )


class ApiKeyVerifier:
    """`TokenVerifier` for tenant API keys: one Redis read for a key seen before, else one
    query (see `find_usable_key`)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        token = token.strip()
        known = verified_key(token)  # a key seen before: no thread, no query
        if known is not None:
            return _token(token, known)
        return await stream_read(_token_for)(token)


def caller(action: Action) -> Principal:
    """The calling request's API key as a principal the policy allows `action`; a JSON-RPC
    error otherwise."""
    token = get_access_token()
    if not isinstance(token, ApiKeyToken):  # the auth middleware lets nothing else through
        raise MCPError(code=INVALID_REQUEST, message="Not authenticated with a tenant API key.")
    principal = Principal.of_key(token.api_key)
    try:
        principal.require(action)
    except PermissionDenied as exc:
        raise MCPError(code=INVALID_REQUEST, message=str(exc)) from None
    return principal
