"""Which URL the MCP resource (/mcp) has, for the protected-resource metadata, the 401's
challenge, the authorization server's issuer and the `resource` a client may ask a token for
(RFC 8707, RFC 9728): MCP_RESOURCE_URL when it is set, else /mcp on the scheme, host and port
the request came in on — so a client that reaches the server as http://127.0.0.1:8000 is not
told the resource is http://localhost:8000/mcp, which an OAuth client refuses.

The host is taken only when Django's ALLOWED_HOSTS admits it (as `HttpRequest.get_host`
does), never from an arbitrary Host header; the scheme from the connection, or from
SECURE_PROXY_SSL_HEADER only when the settings trust a proxy's header.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from django.http.request import split_domain_port, validate_host

MCP_PATH = "/mcp"
# RFC 9728 §3.1: the metadata of a resource with a path is at this prefix plus the path.
METADATA_PREFIX = "/.well-known/oauth-protected-resource"


def for_request(request: HttpRequest) -> str:
    """The resource URL for a Django request (a host it does not allow: DisallowedHost,
    which Django answers 400)."""
    return settings.MCP_RESOURCE_URL or f"{request.scheme}://{request.get_host()}{MCP_PATH}"


def for_scope(scope: dict) -> str | None:
    """The resource URL for an ASGI request; None for a host ALLOWED_HOSTS does not admit."""
    if settings.MCP_RESOURCE_URL:
        return settings.MCP_RESOURCE_URL
    headers = dict(scope.get("headers") or [])
    host = headers.get(b"host", b"").decode("latin-1").lower()
    domain, _ = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:  # (Django's own default then)
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    if not domain or not validate_host(domain, allowed):
        return None
    return f"{_scheme(scope, headers)}://{host}{MCP_PATH}"


def _scheme(scope: dict, headers: dict[bytes, bytes]) -> str:
    trusted = settings.SECURE_PROXY_SSL_HEADER  # e.g. ("HTTP_X_FORWARDED_PROTO", "https")
    if trusted:
        name = trusted[0].removeprefix("HTTP_").replace("_", "-").lower().encode()
        sent = headers.get(name)
        if sent is not None:  # (as HttpRequest.scheme reads it)
            return "https" if sent.decode("latin-1").split(",")[0].strip() == trusted[1] else "http"
    return scope.get("scheme", "http")


def issuer(resource: str) -> str:
    """The authorization server for `resource`: this server, on the resource's origin."""
    scheme, rest = resource.split("://", 1)
    return f"{scheme}://{rest.split('/', 1)[0]}"


def metadata_url(resource: str) -> str:
    """Where the protected-resource metadata of `resource` is (RFC 9728 §3.1)."""
    origin = issuer(resource)
    return f"{origin}{METADATA_PREFIX}{resource.removeprefix(origin).rstrip('/')}"
