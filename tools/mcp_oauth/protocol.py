"""The OAuth 2.1 exchanges with an MCP server's authorization server, over guarded egress
only (tools/runtime/egress.py): discovery (RFC 9728 protected-resource metadata, then RFC 8414
or OpenID Connect authorization-server metadata), dynamic client registration (RFC 7591),
PKCE (S256), the token requests (authorization code, refresh) and revocation (RFC 7009).

No Django here. Everything the servers answer is hostile: documents are bounded in size and
parsed with the SDK's schemas (`mcp.shared.auth`); an issuer that is not the one asked, a
resource that is not the server's, or an endpoint on another scheme is refused; every failure
is one `OAuthProblem` whose text is fit to show the person connecting (no server text beyond
the OAuth error code).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from tools.runtime.egress import EgressPolicy, EgressResponse, GuardedHttpClient
from tools.runtime.oauth_http import (
    OAuthHttpError,
    basic_credentials,
    error_code,
    json_object,
    lifetime_s,
    oauth_request,
)

MAX_DOCUMENT_BYTES = 64 * 1024  # metadata, registration and token answers are small
TIMEOUT_S = 10.0


class OAuthProblem(Exception):
    """A step of the OAuth flow failed; `str()` says which and why, for the person."""


class TokenRefused(OAuthProblem):
    """The token endpoint refused the grant (`invalid_grant`: a refresh token revoked or
    expired, a code spent): the account must be connected again."""


@dataclass(frozen=True)
class AuthServer:
    """What discovery found: the resource the tokens are for, its authorization server."""

    resource: str
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str
    revocation_endpoint: str
    scopes: tuple[str, ...]
    client_id_metadata_document_supported: bool
    token_auth_methods: tuple[str, ...]
    # RFC 9207: the server says it names itself (`iss`) in every authorization response.
    iss_parameter_supported: bool = False


@dataclass(frozen=True)
class Tokens:
    access_token: str
    token_type: str
    refresh_token: str | None
    expires_in: int | None
    scope: str


def issuers_match(a: str, b: str) -> bool:
    """RFC 8414 §3.3's simple comparison (a root issuer with or without its slash alike)."""
    from mcp.client.auth.utils import issuers_match as sdk_issuers_match

    return sdk_issuers_match(a, b)


def pkce_pair() -> tuple[str, str]:
    """(verifier, S256 challenge), RFC 7636."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class OAuthHttp:
    """The guarded client for one flow. `http_allowed`: endpoints may be plain http (only
    when the MCP server itself was given as http, e.g. on a loopback host an admin allowed);
    otherwise every endpoint must be https."""

    def __init__(self, policy: EgressPolicy, *, http_allowed: bool) -> None:
        self.client = GuardedHttpClient(policy)
        self.http_allowed = http_allowed

    def check_url(self, url: str, what: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise OAuthProblem(f"the {what} {url!r} is not an http(s) URL")
        if parts.scheme == "http" and not self.http_allowed:
            raise OAuthProblem(f"the {what} {url} is not https")
        if parts.username or parts.password or parts.fragment:
            raise OAuthProblem(f"the {what} {url} carries credentials or a fragment")
        return url

    async def send(self, method: str, url: str, what: str, **kwargs: Any) -> EgressResponse:
        self.check_url(url, what)
        try:
            return await oauth_request(
                self.client, method, url, timeout_s=TIMEOUT_S, max_bytes=MAX_DOCUMENT_BYTES,
                **kwargs,
            )  # fmt: skip
        except OAuthHttpError as exc:
            raise OAuthProblem(f"the {what} at {url} could not be reached: {exc}") from None

    async def document(self, url: str, what: str) -> dict[str, Any] | None:
        """The JSON object at `url`; None when it is not served there (4xx, a redirect)."""
        response = await self.send("GET", url, what)
        if 300 <= response.status_code < 500:
            return None
        if response.status_code != 200:
            raise OAuthProblem(f"the {what} at {url} answered HTTP {response.status_code}")
        return _json_object(response, what)


async def probe(http: OAuthHttp, server_url: str) -> tuple[str | None, str | None]:
    """Ask the MCP server without a token: (resource_metadata URL, scope) from its 401's
    WWW-Authenticate (RFC 9728 §5.1), each None when not given."""
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "agent-platform", "version": "1"}}}  # fmt: skip
    headers = {"Accept": "application/json, text/event-stream"}
    response = await http.send("POST", server_url, "MCP server", json=body, headers=headers)
    if response.status_code != 401:
        return None, None
    challenge = response.headers.get("www-authenticate", "")
    return _auth_param(challenge, "resource_metadata"), _auth_param(challenge, "scope")


async def discover(http: OAuthHttp, server_url: str) -> AuthServer:
    """The server's protected-resource metadata (from its 401, else the well-known URLs),
    then its first authorization server's metadata; checked as the module says."""
    from mcp.client.auth.utils import (
        build_oauth_authorization_server_metadata_discovery_urls,
        build_protected_resource_metadata_discovery_urls,
    )
    from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata
    from pydantic import ValidationError

    metadata_url, challenge_scope = await probe(http, server_url)
    if metadata_url is not None:
        metadata_url = http.check_url(metadata_url, "protected-resource metadata")
        if _origin(metadata_url) != _origin(server_url):
            raise OAuthProblem("the server's resource_metadata is on another origin")
    resource = None
    for url in build_protected_resource_metadata_discovery_urls(metadata_url, server_url):
        document = await http.document(url, "protected-resource metadata")
        if document is None:
            continue
        try:
            resource = ProtectedResourceMetadata.model_validate(document)
        except ValidationError:
            raise OAuthProblem(f"the protected-resource metadata at {url} is not valid") from None
        break
    if resource is None:
        raise OAuthProblem(
            "the server publishes no OAuth protected-resource metadata (RFC 9728): it does "
            "not offer OAuth, or needs a static header"
        )
    resource_url = str(resource.resource)
    if not same_resource(resource_url, server_url):
        raise OAuthProblem(
            f"the protected-resource metadata names another resource ({resource_url})"
        )
    issuer = http.check_url(str(resource.authorization_servers[0]), "authorization server")
    server = None
    for url in build_oauth_authorization_server_metadata_discovery_urls(issuer, server_url):
        document = await http.document(url, "authorization-server metadata")
        if document is None:
            continue
        try:
            server = OAuthMetadata.model_validate(document)
        except ValidationError:
            raise OAuthProblem(f"the authorization-server metadata at {url} is not valid") from None
        break
    if server is None:
        raise OAuthProblem(f"the authorization server {issuer} publishes no metadata")
    if not issuers_match(str(server.issuer), issuer):
        raise OAuthProblem(
            f"the authorization server's metadata names another issuer ({server.issuer}, "
            f"not {issuer})"
        )
    # The MCP specification: a server that does not list S256 is refused (no PKCE, no flow).
    if "S256" not in (server.code_challenge_methods_supported or ()):
        raise OAuthProblem("the authorization server does not support PKCE with S256")
    endpoints = {
        "authorization endpoint": str(server.authorization_endpoint),
        "token endpoint": str(server.token_endpoint),
    }
    for what, url in endpoints.items():
        http.check_url(url, what)
    optional = {
        "registration endpoint": str(server.registration_endpoint or ""),
        "revocation endpoint": str(server.revocation_endpoint or ""),
    }
    for what, url in optional.items():
        if url:
            http.check_url(url, what)
    scopes = challenge_scope.split() if challenge_scope else resource.scopes_supported or ()
    return AuthServer(
        resource=resource_url,
        issuer=issuer,
        authorization_endpoint=endpoints["authorization endpoint"],
        token_endpoint=endpoints["token endpoint"],
        registration_endpoint=optional["registration endpoint"],
        revocation_endpoint=optional["revocation endpoint"],
        scopes=tuple(scopes),
        client_id_metadata_document_supported=bool(server.client_id_metadata_document_supported),
        token_auth_methods=tuple(server.token_endpoint_auth_methods_supported or ()),
        iss_parameter_supported=bool(server.authorization_response_iss_parameter_supported),
    )


async def register(
    http: OAuthHttp, server: AuthServer, *, redirect_uri: str, client_name: str, scope: str
) -> tuple[str, str | None, str]:
    """Dynamic client registration (RFC 7591): (client_id, client_secret, auth method)."""
    if not server.registration_endpoint:
        raise OAuthProblem(
            "the authorization server offers neither registration nor client ID metadata "
            "documents: give a client ID registered with it"
        )
    body = {
        "client_name": client_name,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }
    if scope:
        body["scope"] = scope
    response = await http.send("POST", server.registration_endpoint, "registration endpoint",
                               json=body)  # fmt: skip
    if response.status_code not in (200, 201):
        raise OAuthProblem(
            f"the authorization server refused the registration (HTTP {response.status_code}"
            f"{_error_code(response)})"
        )
    answer = _json_object(response, "registration answer")
    client_id = answer.get("client_id")
    if not isinstance(client_id, str) or not client_id or len(client_id) > 500:
        raise OAuthProblem("the registration answer has no valid client_id")
    secret = answer.get("client_secret")
    method = answer.get("token_endpoint_auth_method") or (
        "client_secret_post" if secret else "none"
    )
    return client_id, secret if isinstance(secret, str) and secret else None, str(method)[:30]


def authorization_url(
    server: AuthServer, *, client_id: str, redirect_uri: str, state: str, challenge: str,
    scope: str,
) -> str:  # fmt: skip
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": server.resource,
    }
    if scope:
        params["scope"] = scope
    separator = "&" if urlsplit(server.authorization_endpoint).query else "?"
    return f"{server.authorization_endpoint}{separator}{urlencode(params)}"


@dataclass(frozen=True)
class Client:
    """Who the platform is at one token endpoint."""

    token_endpoint: str
    client_id: str
    client_secret: str | None
    auth_method: str
    resource: str


async def token_request(http: OAuthHttp, client: Client, grant: dict[str, str]) -> Tokens:
    """POST a grant to the token endpoint (authorization_code or refresh_token)."""
    form = {**grant, "client_id": client.client_id, "resource": client.resource}
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if client.client_secret and client.auth_method == "client_secret_basic":
        headers["Authorization"] = basic_credentials(client.client_id, client.client_secret)
    elif client.client_secret:
        form["client_secret"] = client.client_secret
    response = await http.send("POST", client.token_endpoint, "token endpoint",
                               content=urlencode(form).encode(), headers=headers)  # fmt: skip
    if response.status_code != 200:
        code = _error_code(response)
        message = f"the token endpoint refused the request (HTTP {response.status_code}{code})"
        refused = response.status_code in (400, 401) and "invalid_grant" in code
        raise (TokenRefused if refused else OAuthProblem)(message)
    answer = _json_object(response, "token answer")
    access = answer.get("access_token")
    if not isinstance(access, str) or not access or len(access) > 8000:
        raise OAuthProblem("the token answer has no valid access_token")
    token_type = str(answer.get("token_type") or "Bearer")
    if token_type.lower() != "bearer":
        raise OAuthProblem(f"the token answer's type is {token_type[:20]!r}, not Bearer")
    refresh = answer.get("refresh_token")
    return Tokens(
        access_token=access,
        token_type="Bearer",  # noqa: S106 (a type, not a secret)
        refresh_token=refresh if isinstance(refresh, str) and 0 < len(refresh) <= 8000 else None,
        expires_in=lifetime_s(answer.get("expires_in")),
        scope=str(answer.get("scope") or "")[:500],
    )  # fmt: skip


async def revoke(http: OAuthHttp, client: Client, endpoint: str, token: str, hint: str) -> None:
    """RFC 7009: best effort (the caller deletes its copy whatever the server says).
    OAuthProblem when the server does not answer 200."""
    # A public client sends an empty secret: the mcp SDK's revocation endpoint (2.3)
    # requires the field, and servers ignore an empty one for a client without a secret.
    form = {"token": token, "token_type_hint": hint, "client_id": client.client_id,
            "client_secret": client.client_secret or ""}  # fmt: skip
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    response = await http.send("POST", endpoint, "revocation endpoint",
                               content=urlencode(form).encode(), headers=headers)  # fmt: skip
    if response.status_code != 200:
        raise OAuthProblem(
            f"the revocation endpoint answered HTTP {response.status_code}{_error_code(response)}"
        )


# -- reading answers ------------------------------------------------------------------------
def _json_object(response: EgressResponse, what: str) -> dict[str, Any]:
    value = json_object(response)
    if value is None:
        raise OAuthProblem(f"the {what} is not a JSON object")
    return value


def _error_code(response: EgressResponse) -> str:
    """ ", <error code>" when the answer names a well-formed OAuth error, else ""."""
    code = error_code(response)
    return f", {code}" if code else ""


def _auth_param(challenge: str, name: str) -> str | None:
    import re

    match = re.search(rf'{name}=(?:"([^"]{{1,2000}})"|([^\s,]{{1,2000}}))', challenge)
    return (match.group(1) or match.group(2)) if match else None


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def same_resource(resource: str, server_url: str) -> bool:
    """RFC 9728 §3.3: the metadata's resource is the server's URL (or a prefix of it on the
    same origin, as servers that protect a whole host publish)."""
    if _origin(resource) != _origin(server_url):
        return False
    path = urlsplit(resource).path.rstrip("/")
    server_path = urlsplit(server_url).path.rstrip("/")
    return server_path == path or server_path.startswith(path + "/") or not path
