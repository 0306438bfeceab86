"""Tenant API keys, and OAuth access tokens of members (tenancy/sign_on/oauth.py), as
MCP bearer tokens, through the SDK's token-verifier hook.

A missing, wrong, revoked or expired key or token gets the SDK's 401 with a
WWW-Authenticate challenge; the policy is checked per method by the server (a key's scopes,
a member's role: `read` lists, `run` calls).
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST
from pydantic import ConfigDict, Field

from base.stream_reads import stream_read
from tenancy.api_keys import find_usable_key, verified_key
from tenancy.models import ApiKey, Membership, Scope
from tenancy.policy import Action, Principal
from tenancy.sign_on.oauth import ACCESS_MARK, token_holder


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


class MemberToken(AccessToken):
    """An OAuth access token: a member acting in one tenant, with their role (`refusal`: why
    it may not act there now, see oauth.TokenHolder)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    membership: Membership = Field(exclude=True, repr=False)
    refusal: str | None = Field(default=None, exclude=True)


class SignInRefused(MCPError):
    """The token's tenant refuses how its grant signed in (password sign-in turned off)."""


def _member_token(token: str) -> MemberToken | None:
    holder = token_holder(token)
    if holder is None:
        return None
    return MemberToken(
        token=token,
        client_id="oauth",
        subject=f"user:{holder.membership.user_id}",
        scopes=["mcp"],
        expires_at=holder.expires_at,
        membership=holder.membership,
        refusal=holder.refusal,
    )


class ApiKeyVerifier:
    """`TokenVerifier` for tenant API keys: one Redis read for a key seen before, else one
    query (see `find_usable_key`)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        token = token.strip()
        if token.startswith(ACCESS_MARK):
            return await stream_read(_member_token)(token)
        known = verified_key(token)  # a key seen before: no thread, no query
        if known is not None:
            return _token(token, known)
        return await stream_read(_token_for)(token)


def caller(action: Action) -> Principal:
    """The calling request's API key or member token as a principal the policy allows
    `action`; a JSON-RPC error otherwise (SignInRefused for a member token its tenant's
    sign-in rule refuses)."""
    token = get_access_token()
    if isinstance(token, ApiKeyToken):
        principal = Principal.of_key(token.api_key)
    elif isinstance(token, MemberToken):
        if token.refusal is not None:
            raise SignInRefused(code=INVALID_REQUEST, message=token.refusal)
        principal = Principal.of_membership(token.membership)
    else:  # the auth middleware lets nothing else through
        raise MCPError(code=INVALID_REQUEST, message="Not authenticated.")
    try:
        principal.require(action)
    except PermissionDenied as exc:
        raise MCPError(code=INVALID_REQUEST, message=str(exc)) from None
    return principal
