"""OAuth 2.1 for MCP clients, as the MCP authorization spec asks: dynamic client
registration (RFC 7591), the authorization code flow with PKCE (S256 only), refresh with
rotation, and the tokens checked when a client calls `/mcp` as a person.

A token acts for one member in one tenant (picked on the consent page) with that member's
role: the same policy as their browser session, including its sign-in (a client authorised
in a session a password began acts only while its tenant allows passwords). Codes live a
minute and are spent by their first exchange, whatever its outcome; codes and tokens are
stored only as SHA-256 hashes (they are 256-bit random). Redirect URIs
must be absolute https URIs, or http on a loopback host (native clients), with a valid host
and port, and must match exactly.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import re
import secrets
import unicodedata
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from tenancy import rls
from tenancy.models import Membership, OAuthClient, OAuthGrant, OAuthToken, Tenant
from tenancy.sign_on.sso import (
    PasswordSignInOff,
    needs_password_sign_in,
    refuse_password_session,
)

CODE_TTL = timedelta(seconds=60)
ACCESS_TTL = timedelta(hours=1)
REFRESH_TTL = timedelta(days=30)
ACCESS_MARK = "mcpat_"  # what a bearer token looks like, beside API keys (`ap_`)
MAX_REDIRECT_URIS = 10
MAX_REDIRECT_LENGTH = 2000  # (OAuthClient.redirect_uris holds up to this)
MAX_NAME = 200
_URI_CHARACTERS = re.compile(r"(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})+")
_DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
# Not in a name shown to members: control characters, unpaired surrogates (the database
# refuses them), line and paragraph separators, and the bidirectional overrides and
# isolates that make a name read as another.
_UNPRINTABLE = {"Cc", "Cs", "Zl", "Zp"}
_BIDI_CONTROLS = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


class OAuthError(Exception):
    """An OAuth error: its `code` (RFC 6749 §5.2 / RFC 7591 §3.2.2) and a description."""

    def __init__(self, code: str, description: str) -> None:
        super().__init__(description)
        self.code, self.description = code, description


def _hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


# -- registration ------------------------------------------------------------------------
def register_client(*, name: object, redirect_uris: object) -> OAuthClient:
    """Everything registered comes from anyone on the network (registration needs no account)
    and later reaches a consent page, a Location header and a CSP header: it is checked
    here, before anything is stored."""
    problem = _name_problem(name)
    if problem:
        raise OAuthError("invalid_client_metadata", problem)
    if (
        not isinstance(redirect_uris, list)
        or not redirect_uris
        or len(redirect_uris) > MAX_REDIRECT_URIS
    ):
        raise OAuthError(
            "invalid_redirect_uri", f"Give 1 to {MAX_REDIRECT_URIS} `redirect_uris` (a list)."
        )
    for index, uri in enumerate(redirect_uris):
        problem = redirect_problem(uri)
        if problem:
            raise OAuthError("invalid_redirect_uri", f"redirect_uris[{index}]: {problem}")
    return OAuthClient.objects.create(
        client_id=secrets.token_urlsafe(24), name=name, redirect_uris=redirect_uris
    )


def _name_problem(name: object) -> str | None:
    if not isinstance(name, str):
        return "`client_name` must be a string."
    if len(name) > MAX_NAME:
        return f"`client_name` must be at most {MAX_NAME} characters."
    if any(unicodedata.category(c) in _UNPRINTABLE or c in _BIDI_CONTROLS for c in name):
        return "`client_name` must not contain control characters (nor bidirectional ones)."
    return None


def redirect_problem(uri: object) -> str | None:
    """Why `uri` may not be a redirect URI, or None: an absolute https URI, or http on a
    loopback host (OAuth 2.1 §8.4.2), with a valid host (a DNS name, an IPv4 address or a
    bracketed IPv6 address) and port, no userinfo and no fragment, in URI characters only."""
    if not isinstance(uri, str):
        return "a redirect URI must be a string."
    if len(uri) > MAX_REDIRECT_LENGTH:
        return f"a redirect URI must be at most {MAX_REDIRECT_LENGTH} characters."
    if not _URI_CHARACTERS.fullmatch(uri):
        return "a redirect URI may hold only URI characters (RFC 3986; percent-encode others)."
    if "#" in uri:
        return "a redirect URI must not have a fragment."
    scheme, _, rest = uri.partition("://")
    if scheme not in ("https", "http") or not rest:
        return "a redirect URI must be an absolute https URI (http only on a loopback host)."
    netloc = re.split(r"[/?]", rest, maxsplit=1)[0]
    if "@" in netloc:
        return "a redirect URI must not hold userinfo (`user@`)."
    host, port = _host_and_port(netloc)
    if host is None:
        return "its host must be a DNS name, an IPv4 address or a bracketed IPv6 address."
    if port is None:
        return "its port must be a number from 1 to 65535."
    if scheme == "http" and not _is_loopback(host):
        return "plain http is allowed only on a loopback host (127.0.0.1, [::1], localhost)."
    return None


def _host_and_port(netloc: str) -> tuple[str | None, int | str | None]:
    """The host (lowercase; an IPv6 address without brackets) and port ("" for none) of
    `netloc`; None for either that is not valid."""
    host: str | None
    if netloc.startswith("["):
        inside, bracket, after = netloc[1:].partition("]")
        host = _ipv6(inside) if bracket else None
    else:
        name, colon, port = netloc.partition(":")
        after = colon + port
        host = name.lower() if _is_host_name_or_ipv4(name.lower()) else None
    if not after:
        return host, ""
    digits = after.removeprefix(":")
    if digits == after or not (digits.isascii() and digits.isdigit()) or len(digits) > 5:
        return host, None
    return host, int(digits) if 1 <= int(digits) <= 65535 else None


def _ipv6(text: str) -> str | None:
    if "%" in text:  # a zone id names an interface of the client's machine, not a host
        return None
    try:
        return str(ipaddress.IPv6Address(text))
    except ValueError:
        return None


def _is_host_name_or_ipv4(host: str) -> bool:
    if len(host) > 253 or not host:
        return False
    labels = host.split(".")
    if labels[-1].isdigit():  # as browsers read it: an IPv4 address, or invalid
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return False
        return True
    return all(_DNS_LABEL.fullmatch(label) for label in labels)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def client_for(client_id: object, redirect_uri: object) -> OAuthClient:
    """The registered client, if `redirect_uri` is one of its own (exactly) and still
    acceptable (a client registered before the checks were as strict must register again)."""
    client = None
    if isinstance(client_id, str) and len(client_id) <= 64:
        client = OAuthClient.objects.filter(client_id=client_id).first()
    if client is None:
        raise OAuthError("invalid_client", "Unknown client_id: register the client first.")
    if redirect_uri not in client.redirect_uris:
        raise OAuthError("invalid_request", "The redirect_uri is not one this client registered.")
    if redirect_problem(redirect_uri):
        raise OAuthError("invalid_request", "The redirect_uri is not acceptable: register again.")
    return client


# -- authorization -----------------------------------------------------------------------
def check_resource(requested: list[str], *, served: str) -> None:
    """RFC 8707: every `resource` a client names must be `served`, the MCP resource this
    server protects (the one its protected-resource metadata names), up to the case of the
    scheme and host, a default port and a trailing slash. Naming none is taken as naming it
    (clients from before the MCP spec asked for resource indicators)."""
    wanted = _resource_key(served)
    for value in requested:
        if _resource_key(value) != wanted:
            raise OAuthError(
                "invalid_target",
                f"This server issues tokens only for its MCP endpoint: resource={served}.",
            )


def _resource_key(uri: str) -> tuple[str, str, int | None, str, str] | None:
    """What two spellings of one resource URI share; None for what is not an absolute
    http(s) URI without a fragment (RFC 8707 §2)."""
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or "#" in uri:
        return None
    scheme = parts.scheme.lower()
    default = {"http": 80, "https": 443}[scheme]
    path = parts.path.rstrip("/")
    return scheme, parts.hostname, None if port == default else port, path, parts.query


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
    sign_in_method: str,
) -> str:
    """A code for `user` acting in `tenant` (they must be its member, and a session signed in
    by `sign_in_method` must be one that may act there); its secret."""
    code = secrets.token_urlsafe(32)
    with rls.tenant_scope(tenant.pk):
        if not Membership.objects.filter(tenant=tenant, user=user).exists():
            raise OAuthError("access_denied", "You are not a member of that tenant.")
        if needs_password_sign_in(user=user, method=sign_in_method):
            try:
                refuse_password_session(tenant)
            except PasswordSignInOff as refused:
                raise OAuthError("access_denied", str(refused)) from None
        OAuthGrant.objects.create(
            code_hash=_hash(code),
            client=client,
            user=user,
            tenant=tenant,
            redirect_uri=redirect_uri,
            code_challenge=code_challenge,
            sign_in_method=sign_in_method,
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
    *,
    code: object,
    client_id: object,
    redirect_uri: object,
    code_verifier: object,
    resource: list[str],
    served: str,
) -> Issued:
    """Tokens for a code. The code is spent first, in a step of its own that commits, and
    only then are the client, redirect URI, PKCE verifier and `resource` (check_resource)
    checked: a failed exchange leaves no code to try again (OAuth 2.1 §4.1.3)."""
    if not isinstance(code, str) or not code:
        raise OAuthError("invalid_request", "Send code, client_id, redirect_uri and code_verifier.")
    found = _spend(code)
    if found is None:
        raise OAuthError("invalid_grant", "The code is unknown, used or expired.")
    if not all(isinstance(v, str) and v for v in (client_id, redirect_uri, code_verifier)):
        raise OAuthError("invalid_request", "Send code, client_id, redirect_uri and code_verifier.")
    if found.client.client_id != client_id or found.redirect_uri != redirect_uri:
        raise OAuthError("invalid_grant", "The code was given to another client or URI.")
    if not _verifier_matches(code_verifier, found.code_challenge):  # type: ignore[arg-type]
        raise OAuthError("invalid_grant", "The code_verifier does not match the challenge.")
    check_resource(resource, served=served)
    with rls.owner(), transaction.atomic():  # (the code names its tenant)
        return _issue(found.client, found.user_id, found.tenant_id, found.sign_in_method)


def _spend(code: str) -> OAuthGrant | None:
    """The grant behind `code`, marked used now if it was unused and unexpired; else None.
    One conditional UPDATE in a transaction of its own (committed before the exchange's
    checks can fail and roll anything back; two exchanges at once: one wins), then a read."""
    now = timezone.now()
    with rls.owner():  # (the code names its tenant)
        with transaction.atomic():
            spent = OAuthGrant.objects.filter(
                code_hash=_hash(code), used_at__isnull=True, expires_at__gt=now
            ).update(used_at=now)
        if not spent:
            return None
        return OAuthGrant.objects.select_related("client").get(code_hash=_hash(code))


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
        return _issue(token.client, token.user_id, token.tenant_id, token.sign_in_method)


def _issue(client: OAuthClient, user_id: int, tenant_id: int, sign_in_method: str) -> Issued:
    access = ACCESS_MARK + secrets.token_urlsafe(32)
    refresh_token = "mcprt_" + secrets.token_urlsafe(32)
    now = timezone.now()
    OAuthToken.objects.create(
        access_hash=_hash(access),
        refresh_hash=_hash(refresh_token),
        client=client,
        user_id=user_id,
        tenant_id=tenant_id,
        sign_in_method=sign_in_method,
        expires_at=now + ACCESS_TTL,
        refresh_expires_at=now + REFRESH_TTL,
    )
    return Issued(access, refresh_token, int(ACCESS_TTL.total_seconds()))


@dataclass(frozen=True)
class TokenHolder:
    membership: Membership
    expires_at: int
    refusal: str | None = None  # why it may not act: authorised in a password session, and
    # its tenant turned password sign-in off since (sso.refuse_password_session)


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
    refusal = None
    if needs_password_sign_in(user=token.user, method=token.sign_in_method):
        try:
            refuse_password_session(token.tenant)
        except PasswordSignInOff as refused:
            refusal = f"{refused} Then authorise this client again."
    return TokenHolder(membership, int(token.expires_at.timestamp()), refusal)
