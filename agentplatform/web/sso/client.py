"""The identity provider's endpoints, reached like any address an admin typed: through the
guarded egress (http(s) only, private and local addresses refused unless allow-listed in
EGRESS_ALLOWLIST or SSO_EGRESS_ALLOWLIST, bounded time and size). Every failure is an
SSOError whose text is ours, fit for the sign-in page: never a library's or the
provider's own words, never a secret.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.cache import cache

from tenancy.sign_on.sso_settings import url_schemes
from tools.runtime.egress import EgressPolicy, GuardedHttpClient
from tools.runtime.oauth_http import OAuthHttpError, basic_credentials, json_object, oauth_request

TIMEOUT_S = 10.0
MAX_BYTES = 512_000
DISCOVERY_TTL_S = 300


class SSOError(Exception):
    """Single sign-on could not go on; `str()` is the message for the person signing in."""


@dataclass(frozen=True)
class Discovery:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str  # "" when the provider has none


def _client() -> GuardedHttpClient:
    allowlist = (*settings.EGRESS_ALLOWLIST, *settings.SSO_EGRESS_ALLOWLIST)
    return GuardedHttpClient(EgressPolicy(allowlist=tuple(allowlist)), connect_timeout_s=5.0)


def check_url(url: str, what: str) -> None:
    """SSOError unless `url` is an http(s) URL with a host (https only when required)."""
    parts = urlsplit(url) if isinstance(url, str) else None
    schemes = url_schemes()
    if parts is None or parts.scheme not in schemes or not parts.hostname:
        needed = "an https" if schemes == ("https",) else "an http(s)"
        raise SSOError(f"The identity provider's {what} is not {needed} URL.")


def _request(method: str, url: str, what: str, **kwargs: Any) -> Any:
    """One exchange (tools.runtime.oauth_http), answered with its JSON object; SSOError for
    everything else."""
    check_url(url, what)
    kwargs.setdefault("follow_redirects", True)  # discovery and keys may move; not the token
    try:
        response = async_to_sync(oauth_request)(
            _client(), method, url, timeout_s=TIMEOUT_S, max_bytes=MAX_BYTES, **kwargs
        )
    except OAuthHttpError as exc:
        raise SSOError(_FAILURES[exc.kind].format(what=what)) from None
    if response.status_code != 200:
        raise SSOError(f"The identity provider answered HTTP {response.status_code} ({what}).")
    data = json_object(response)
    if data is None:
        raise SSOError(f"The identity provider's answer is not a JSON object ({what}).")
    return data


_FAILURES = {
    "refused": "The identity provider's {what} is at an address this platform may not reach "
    "(a private or local one; the operator may allow it with SSO_EGRESS_ALLOWLIST).",
    "timeout": "The identity provider did not answer in time ({what}).",
    "too_large": "The identity provider's answer was too large ({what}).",
    "unreachable": "The identity provider cannot be reached ({what}).",
}


def discover(issuer: str) -> Discovery:
    """`<issuer>/.well-known/openid-configuration`, checked (its issuer is the one asked
    for; endpoints are http(s) URLs). Cached for a few minutes per issuer."""
    issuer = issuer.rstrip("/")
    key = f"sso:discovery:{base64.urlsafe_b64encode(issuer.encode()).decode()[:200]}"
    cached = cache.get(key)
    if isinstance(cached, dict):
        return Discovery(**cached)
    check_url(issuer, "issuer")
    data = _request("GET", f"{issuer}/.well-known/openid-configuration", "discovery document")
    if not isinstance(data.get("issuer"), str) or data["issuer"].rstrip("/") != issuer:
        raise SSOError("The identity provider's discovery document names another issuer.")
    found = {}
    for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        value = data.get(name)
        if not isinstance(value, str):
            raise SSOError(f"The identity provider's discovery document has no {name}.")
        check_url(value, name)
        found[name] = value
    userinfo = data.get("userinfo_endpoint")
    if isinstance(userinfo, str):
        check_url(userinfo, "userinfo_endpoint")
    discovery = Discovery(
        issuer=data["issuer"],
        userinfo_endpoint=userinfo if isinstance(userinfo, str) else "",
        **found,
    )
    cache.set(key, discovery.__dict__, DISCOVERY_TTL_S)
    return discovery


def token(url: str, form: dict[str, str], *, client_id: str, client_secret: str) -> dict:
    """The code exchanged at the token endpoint (client_secret_basic when there is a
    secret; a public client sends its id in the form)."""
    headers = {"content-type": "application/x-www-form-urlencoded", "accept": "application/json"}
    if client_secret:
        headers["authorization"] = basic_credentials(client_id, client_secret)
    else:
        form = {**form, "client_id": client_id}
    return _request(
        "POST",
        url,
        "token endpoint",
        content=urlencode(form).encode(),
        headers=headers,
        follow_redirects=False,
    )


def jwks(url: str) -> list[dict]:
    keys = _request("GET", url, "signing keys").get("keys")
    if not isinstance(keys, list):
        raise SSOError("The identity provider's signing keys are malformed.")
    return [key for key in keys if isinstance(key, dict)]


def userinfo(url: str, access_token: str) -> dict:
    return _request(
        "GET", url, "userinfo endpoint", headers={"authorization": f"Bearer {access_token}"}
    )
