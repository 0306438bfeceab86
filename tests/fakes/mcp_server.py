"""A real MCP server (the official SDK's `MCPServer`) on 127.0.0.1, for tests of our client.

Stateless streamable HTTP with JSON responses, served by uvicorn in a thread on a free
port. When `token` is set, a small ASGI middleware answers 401 unless the request carries
`Authorization: Bearer <token>`; every request's headers are recorded either way.

Tools: `add` (read-only), `echo`, `fail` (answers is_error), `wipe` (destructive),
and `nap` (sleeps: a hung server).
Resource: `context://handbook` (text).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations

HANDBOOK = "Acme ships on Tuesdays. Refunds take 5 days."


def build_server() -> MCPServer:
    server = MCPServer("fake-mcp")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """Repeat the text."""
        return text

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails with the reason."""
        raise ToolError(f"refused: {reason}")

    @server.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True))
    def wipe(table: str) -> str:
        """Delete every row of a table."""
        return f"wiped {table}"

    @server.tool()
    async def nap(seconds: float) -> str:
        """Sleep, then answer."""
        await asyncio.sleep(seconds)
        return "rested"

    @server.resource("context://handbook", mime_type="text/plain")
    def handbook() -> str:
        return HANDBOOK

    return server


class _BearerGate:
    def __init__(self, app: Any, owner: FakeMcpServer) -> None:
        self.app = app
        self.owner = owner

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            self.owner.requests.append(headers)
            if self.owner.token and headers.get("authorization") != f"Bearer {self.owner.token}":
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"text/plain")],
                    }
                )
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await self.app(scope, receive, send)


class FakeMcpServer:
    """Start with `FakeMcpServer(token=...)`; `url` is the MCP endpoint; `close()` stops it."""

    def __init__(self, *, token: str | None = None) -> None:
        self.token = token
        self.requests: list[dict[str, str]] = []
        self.mcp = build_server()
        app = self.mcp.streamable_http_app(
            streamable_http_path="/mcp",
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(
                allowed_hosts=["127.0.0.1:*", "localhost:*"],
                allowed_origins=["http://127.0.0.1:*"],
            ),
        )
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        config = uvicorn.Config(
            _BearerGate(app, self),
            log_level="warning",
            lifespan="on",
            access_log=False,
            # close() cancels a call still in flight (a `nap` past its caller's timeout)
            # after 1 s instead of waiting the nap out.
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fake MCP server did not start")
            time.sleep(0.01)

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()

    def __enter__(self) -> FakeMcpServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
