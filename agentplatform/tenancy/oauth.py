"""OAuth 2.1 for MCP clients, as the MCP authorization spec asks: dynamic client
registration (RFC 7591), the authorization code flow with PKCE (S256 only), refresh with
rotation, and the tokens checked when a client calls `/mcp` as a person.

A token acts for one member in one tenant (picked on the consent page) with that member's
role: the same policy as their browser session. Codes live a minute and are used once;
codes and tokens are stored only as SHA-256 hashes (they are 256-bit random). Redirect URIs
must be https, or http on a loopback address (native clients), and must match exactly.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from agentplatform.tenancy import rls
from agentplatform.tenancy.models import Membership, OAuthClient, OAuthGrant, OAuthToken, Tenant

CODE_TTL = timedelta(seconds=60)
ACCESS_TTL = timedelta(hours=1)
REFRESH_TTL = timedelta(days=30)
ACCESS_MARK = "mcpat_"  # what a bearer token looks like, beside API keys (`ap_`)
MAX_REDIRECT_URIS = 10
LOOPBACK = {"localhost", "127.0.0.1", "[::1]", "::1"}


class OAuthError(Exception):
    """An OAuth error: its `code` (RFC 6749 §5.2 / RFC 7591 §3.2.2) and a description."""

    def __init__(self, code: str, description: str) -> None:
        super().__init__(description)
        self.code, self.description = code, description


def _hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


# -- registration ------------------------------------------------------------------------
def register_client(*, name: str, redirect_uris: list[str]) -> OAuthClient:
    if not isinstance(name, str) or len(name) > 200 or "\x00" in name:
        raise OAuthError("invalid_client_metadata", "`client_name` must be a short string.")
    if (
        not isinstance(redirect_uris, list)
        or not redirect_uris
        or len(redirect_uris) > MAX_REDIRECT_URIS
    ):
        raise OAuthError(
            "invalid_redirect_uri",
            f"Give 1 to {MAX_REDIRECT_URIS} `redirect_uris`.",
        )
    for uri in redirect_uris:
        if not _acceptable_redirect(uri):
            raise OAuthError(
                "invalid_redirect_uri",
                "Each redirect URI must be https, or http on a loopback address, without a "
                "fragment.",
            )
    return OAuthClient.objects.create(
        client_id=secrets.token_urlsafe(24), name=name, redirect_uris=redirect_uris
    )


def _acceptable_redirect(uri: object) -> bool:
    if not isinstance(uri, str) or len(uri) > 2000 or "\x00" in uri:
        return False
    try:
        parts = urlsplit(uri)
    except ValueError:
        return False
    if parts.fragment or not parts.hostname:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOOPBACK)


def client_for(client_id: object, redirect_uri: object) -> OAuthClient:
    """The registered client, if `redirect_uri` is one of its own (exactly)."""
    client = None
    if isinstance(client_id, str) and len(client_id) <= 64:
        client = OAuthClient.objects.filter(client_id=client_id).first()
    if client is None:
        raise OAuthError("invalid_client", "Unknown client_id: register the client first.")
    if redirect_uri not in client.redirect_uris:
        raise OAuthError("invalid_request", "The redirect_uri is not one this client registered.")
    return client


# -- authorization -----------------------------------------------------------------------
def check_challenge(challenge: object, method: object) -> str:
    if method != "S256":
        raise OAuthError("invalid_request", "PKCE is required: code_challenge_method=S256.")
    if not isinstance(challenge, str) or not 43 <= len(challenge) <= 128:
        raise OAuthError("invalid_request", "code_challenge must be 43 to 128 characters.")
    return challenge


def grant(
    *,
    client: OAuthClient,
    user: AbstractBaseUser,
    tenant: Tenant,
    redirect_uri: str,
    code_challenge: str,
) -> str:
    """A code for `user` acting in `tenant` (they must be its member); its secret."""
    code = secrets.token_urlsafe(32)
    with rls.tenant_scope(tenant.pk):
        if not Membership.objects.filter(tenant=tenant, user=user).exists():
            raise OAuthError("access_denied", "You are not a member of that tenant.")
        OAuthGrant.objects.create(
            code_hash=_hash(code),
            client=client,
            user=user,
            tenant=tenant,
            redirect_uri=redirect_uri,
            code_challenge=code_challenge,
            expires_at=timezone.now() + CODE_TTL,
        )
    return code


# -- tokens --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Issued:
    access_token: str
    refresh_token: str
    expires_in: int


def exchange_code(
    *, code: object, client_id: object, redirect_uri: object, code_verifier: object
) -> Issued:
    if not all(isinstance(v, str) and v for v in (code, client_id, redirect_uri, code_verifier)):
        raise OAuthError("invalid_request", "Send code, client_id, redirect_uri and code_verifier.")
    now = timezone.now()
    with rls.owner(), transaction.atomic():  # (the code names its tenant)
        found = (
            OAuthGrant.objects.select_for_update()
            .select_related("client")
            .filter(code_hash=_hash(code))  # type: ignore[arg-type]
            .first()
        )
        if found is None or found.used_at is not None or found.expires_at <= now:
            raise OAuthError("invalid_grant", "The code is unknown, used or expired.")
        found.used_at = now
        found.save(update_fields=["used_at"])
        if found.client.client_id != client_id or found.redirect_uri != redirect_uri:
            raise OAuthError("invalid_grant", "The code was given to another client or URI.")
        if not _verifier_matches(code_verifier, found.code_challenge):  # type: ignore[arg-type]
            raise OAuthError("invalid_grant", "The code_verifier does not match the challenge.")
        return _issue(found.client, found.user_id, found.tenant_id)


def _verifier_matches(verifier: str, challenge: str) -> bool:
    if not 43 <= len(verifier) <= 128:
        return False
    digest = hashlib.sha256(verifier.encode("ascii", "replace")).digest()
    computed = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    return hmac.compare_digest(computed, challenge)


def refresh(*, refresh_token: object, client_id: object) -> Issued:
    if not isinstance(refresh_token, str) or not isinstance(client_id, str):
        raise OAuthError("invalid_request", "Send refresh_token and client_id.")
    now = timezone.now()
    with rls.owner(), transaction.atomic():  # (the token names its tenant)
        token = (
            OAuthToken.objects.select_for_update()
            .select_related("client")
            .filter(refresh_hash=_hash(refresh_token))
            .first()
        )
        if (
            token is None
            or token.revoked_at is not None
            or token.refresh_expires_at <= now
            or token.client.client_id != client_id
        ):
            raise OAuthError("invalid_grant", "The refresh token is unknown, used or expired.")
        token.revoked_at = now  # rotation: the old pair ends here
        token.save(update_fields=["revoked_at"])
        return _issue(token.client, token.user_id, token.tenant_id)


def _issue(client: OAuthClient, user_id: int, tenant_id: int) -> Issued:
    access = ACCESS_MARK + secrets.token_urlsafe(32)
    refresh_token = "mcprt_" + secrets.token_urlsafe(32)
    now = timezone.now()
    OAuthToken.objects.create(
        access_hash=_hash(access),
        refresh_hash=_hash(refresh_token),
        client=client,
        user_id=user_id,
        tenant_id=tenant_id,
        expires_at=now + ACCESS_TTL,
        refresh_expires_at=now + REFRESH_TTL,
    )
    return Issued(access, refresh_token, int(ACCESS_TTL.total_seconds()))


@dataclass(frozen=True)
class TokenHolder:
    membership: Membership
    expires_at: int


def token_holder(access_token: str) -> TokenHolder | None:
    """The membership an access token acts as, if it is current and they still are a
    member (an active user); else None. One query."""
    if not access_token.startswith(ACCESS_MARK):
        return None
    now = timezone.now()
    with rls.owner():  # (the token names its tenant)
        token = (
            OAuthToken.objects.filter(
                access_hash=_hash(access_token), revoked_at__isnull=True, expires_at__gt=now
            )
            .select_related("user", "tenant")
            .first()
        )
        if token is None or not token.user.is_active or not token.tenant.active:
            return None
        membership = Membership.objects.filter(user=token.user, tenant=token.tenant).first()
    if membership is None:
        return None
    membership.user, membership.tenant = token.user, token.tenant
    return TokenHolder(membership, int(token.expires_at.timestamp()))
