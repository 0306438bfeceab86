"""The MCP Starlette app beside Django in one ASGI application.

`with_mcp(django_app)` sends `/mcp` (and `/mcp/`) to the MCP app, every other request to
Django (the protected-resource metadata too: agentplatform/web/oauth.py), and answers the
`lifespan` scope itself.

The MCP app is made by the first request for it, not when the process starts: the MCP SDK
and Starlette cost a web process about 15 MB (PSS, bench/footprint.py) and 0.7 s of import,
which a process that never serves MCP need not pay; the first MCP request pays the import.
That request also starts the app's lifespan (its session manager, which needs a running task
group), in a task that lasts until the server's lifespan shutdown.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

from django.conf import settings
from starlette.types import ASGIApp, Receive, Scope, Send

from agentplatform import mcp_resource

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.middleware.cors import CORSMiddleware

MCP_PATH = mcp_resource.MCP_PATH
# What the SDK is told the resource is when MCP_RESOURCE_URL is unset: its 401 challenge is
# rewritten to name the metadata of the URL each request came in on (`_challenging`).
_ANY_HOST = "http://localhost/mcp"

INSTRUCTIONS = (
    "This tenant's tools, and its agents and crews as ask_<slug> tools. Calls run "
    "server-side and are recorded as runs; a call that needs a human's approval is not "
    "executed but answered with where to approve it."
)


def mcp_app() -> Starlette:
    """The streamable-HTTP MCP app: stateless, JSON responses, tenant API keys as bearer
    tokens, DNS-rebinding protection from MCP_ALLOWED_HOSTS / MCP_ALLOWED_ORIGINS."""
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.transport_security import TransportSecuritySettings

    from agentplatform.mcp.auth import ApiKeyVerifier
    from agentplatform.mcp.server import TenantMCPServer

    resource = settings.MCP_RESOURCE_URL or _ANY_HOST
    server = TenantMCPServer(
        name="agent-platform",
        instructions=INSTRUCTIONS,
        token_verifier=ApiKeyVerifier(),
        auth=AuthSettings(
            # API keys are issued by the platform itself (admin or REST), not by OAuth.
            issuer_url=mcp_resource.issuer(resource),
            resource_server_url=resource,
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
    from starlette.middleware.cors import CORSMiddleware

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
    """ASGI: /mcp to the MCP app, through `with_cors`; everything else to Django; the
    lifespan here."""

    def __init__(self, django_app: ASGIApp, make_mcp=mcp_app) -> None:
        self.django_app = django_app
        self.make_mcp = make_mcp
        self.mcp: Starlette | None = None
        self.endpoint: CORSMiddleware | None = None
        self._starting = asyncio.Lock()
        self._stop = asyncio.Event()
        self._running: asyncio.Task | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        path = scope.get("path", "")
        if path == MCP_PATH + "/":
            scope = {**scope, "path": MCP_PATH, "raw_path": MCP_PATH.encode()}
            path = MCP_PATH
        if path != MCP_PATH:
            await self.django_app(scope, receive, send)
            return
        await self._started()
        await self.endpoint(scope, receive, _challenging(scope, send))

    async def _started(self) -> Starlette:
        """The MCP app, made and its lifespan entered by the first caller."""
        async with self._starting:
            if self.mcp is None:
                mcp = self.make_mcp()
                entered = asyncio.get_running_loop().create_future()
                self._running = asyncio.create_task(self._run(mcp, entered), name="mcp-lifespan")
                await entered  # (raises what the lifespan's start raised)
                self.endpoint = with_cors(mcp, settings.MCP_ALLOWED_ORIGINS)
                self.mcp = mcp
        return self.mcp

    async def _run(self, mcp: Starlette, entered: asyncio.Future) -> None:
        try:
            async with mcp.router.lifespan_context(mcp):
                entered.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not entered.done():
                entered.set_exception(exc)
            raise

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """The server's lifespan: nothing to start; at shutdown, the MCP app's if it runs."""
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._running is not None:
                    self._stop.set()
                    await asyncio.gather(self._running, return_exceptions=True)
                await send({"type": "lifespan.shutdown.complete"})
                return


_VAGUE = b"Authentication required"
_BAD_TOKEN = (
    b"The bearer token is invalid, revoked or expired: send a current API key or sign in again."
)


_METADATA_PARAM = re.compile(rb', resource_metadata="[^"]*"')


def _challenging(scope: Scope, send: Send) -> Send:
    """The SDK's 401 and 403 challenges name the metadata of the resource this request came
    in on (mcp_resource.for_scope; none for a host ALLOWED_HOSTS does not admit). And the SDK
    answers "Authentication required" for a missing token and a bad one alike; to a request
    that sent one, say it is invalid, revoked or expired."""
    resource = mcp_resource.for_scope(scope)
    metadata = (
        b""
        if resource is None
        else f', resource_metadata="{mcp_resource.metadata_url(resource)}"'.encode()
    )
    sent_token = any(name == b"authorization" for name, _ in scope.get("headers", []))
    vague, why = (_VAGUE, _BAD_TOKEN) if sent_token else (b"", b"")
    rewriting = False

    def challenge(value: bytes) -> bytes:
        if vague:
            value = value.replace(vague, why)
        return _METADATA_PARAM.sub(lambda _: metadata, value)

    async def sending(message) -> None:
        nonlocal rewriting
        if message["type"] == "http.response.start" and message["status"] in (401, 403):
            rewriting = sent_token and message["status"] == 401
            message = {
                **message,
                "headers": [
                    (name, challenge(value) if name.lower() == b"www-authenticate" else value)
                    for name, value in message.get("headers", [])
                    if not (rewriting and name.lower() == b"content-length")  # (body changes)
                ],
            }
        elif rewriting and message["type"] == "http.response.body":
            message = {**message, "body": message.get("body", b"").replace(_VAGUE, _BAD_TOKEN)}
        await send(message)

    return sending


def with_mcp(django_app: ASGIApp) -> McpRouter:
    return McpRouter(django_app)
