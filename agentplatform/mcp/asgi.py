"""The MCP Starlette app beside Django in one ASGI application.

`with_mcp(django_app)` sends `/mcp` (and `/mcp/`), the protected-resource metadata path and
the `lifespan` scope to the MCP app — its session manager runs inside lifespan, so uvicorn
must run with `--lifespan on` — and every other request to Django, which never sees lifespan.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.conf import settings
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agentplatform.mcp.auth import ApiKeyVerifier
from agentplatform.mcp.server import TenantMCPServer

MCP_PATH = "/mcp"

INSTRUCTIONS = (
    "This tenant's tools, and its agents and crews as ask_<slug> tools. Calls run "
    "server-side and are recorded as runs; a call that needs a human's approval is not "
    "executed but answered with where to approve it."
)


def mcp_app() -> Starlette:
    """The streamable-HTTP MCP app: stateless, JSON responses, tenant API keys as bearer
    tokens, DNS-rebinding protection from MCP_ALLOWED_HOSTS / MCP_ALLOWED_ORIGINS."""
    resource = urlsplit(settings.MCP_RESOURCE_URL)
    server = TenantMCPServer(
        name="agent-platform",
        instructions=INSTRUCTIONS,
        token_verifier=ApiKeyVerifier(),
        auth=AuthSettings(
            # API keys are issued by the platform itself (admin or REST), not by OAuth.
            issuer_url=f"{resource.scheme}://{resource.netloc}",
            resource_server_url=settings.MCP_RESOURCE_URL,
            validate_token_resource=False,  # a key belongs to a tenant, not to a resource URL
        ),
    )
    return server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=settings.MCP_ALLOWED_HOSTS,
            allowed_origins=settings.MCP_ALLOWED_ORIGINS,
        ),
    )


def with_cors(mcp: ASGIApp, allowed_origins: list[str]) -> CORSMiddleware:
    """CORS for /mcp, for the origins its Origin check admits (MCP_ALLOWED_ORIGINS, `name:*`
    for any port): a web page there may call it with a bearer token — no cookies, so no
    credentials — and read the 401's WWW-Authenticate, which leads to the OAuth metadata.
    Preflights are answered here, before the token check; another origin's is refused (400),
    and its requests get the Origin check's 403."""
    patterns = [
        re.escape(origin[:-2]) + r":[0-9]{1,5}" if origin.endswith(":*") else re.escape(origin)
        for origin in allowed_origins
    ]
    return CORSMiddleware(
        mcp,
        allow_origin_regex="|".join(patterns) or "(?!)",
        allow_methods=["GET", "POST", "DELETE"],
        allow_headers=["Authorization", "Mcp-Protocol-Version", "Mcp-Session-Id", "Last-Event-ID"],
        expose_headers=["WWW-Authenticate", "Mcp-Session-Id", "Mcp-Protocol-Version"],
        max_age=86400,
    )


class McpRouter:
    """ASGI: the MCP app's own paths and lifespan to it, everything else to Django. /mcp
    goes through `with_cors`; the protected-resource metadata has the SDK's own CORS (any
    origin)."""

    def __init__(self, django_app: ASGIApp, mcp: Starlette) -> None:
        self.django_app = django_app
        self.mcp = mcp
        self.endpoint = with_cors(mcp, settings.MCP_ALLOWED_ORIGINS)
        self.paths = frozenset(r.path for r in mcp.routes if isinstance(r, Route))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.mcp(scope, receive, send)
            return
        path = scope.get("path", "")
        if path == MCP_PATH + "/":
            scope = {**scope, "path": MCP_PATH, "raw_path": MCP_PATH.encode()}
            path = MCP_PATH
        if path == MCP_PATH:
            await self.endpoint(scope, receive, _saying_why(scope, send))
        elif path in self.paths:
            await self.mcp(scope, receive, send)
        else:
            await self.django_app(scope, receive, send)


_VAGUE = b"Authentication required"
_BAD_TOKEN = (
    b"The bearer token is invalid, revoked or expired: send a current API key or sign in again."
)


def _saying_why(scope: Scope, send: Send) -> Send:
    """The SDK answers "Authentication required" for a missing token and a bad one alike;
    to a request that sent one, say it is invalid, revoked or expired."""
    if not any(name == b"authorization" for name, _ in scope.get("headers", [])):
        return send
    rewriting = False

    async def sending(message) -> None:
        nonlocal rewriting
        if message["type"] == "http.response.start" and message["status"] == 401:
            rewriting = True
            message = {
                **message,
                "headers": [
                    (name, value.replace(_VAGUE, _BAD_TOKEN))
                    for name, value in message.get("headers", [])
                    if name.lower() != b"content-length"  # (the body's length changes)
                ],
            }
        elif rewriting and message["type"] == "http.response.body":
            message = {**message, "body": message.get("body", b"").replace(_VAGUE, _BAD_TOKEN)}
        await send(message)

    return sending


def with_mcp(django_app: ASGIApp) -> McpRouter:
    return McpRouter(django_app, mcp_app())
