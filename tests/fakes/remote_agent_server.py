"""A local HTTP server that speaks the remote agent protocol (docs/remote-agents.md).

    server = RemoteAgentServer(tool_call([call("c1", "calculator", {"expression": "2+2"})],
                                         state={"step": 1}),
                               response("4"))
    spec = AgentSpec(..., kind="remote", remote_url=server.url)
    ...
    server.queries  # the JSON bodies POSTed to the agent, in order
    server.close()

Behaviour per test: queued replies (`script`, popped one per POST; an empty queue answers
`response("ok")`), or a `handler` taking the request JSON and returning a reply. A reply
is a dict (sent as 200 JSON) or a `Reply` for another status, a raw body or a delay.
`GET /health` serves `health` ({"status": "ok"} unless changed). With `expect_token`, a
request without `Authorization: Bearer <token>` gets 401. Every request is recorded in
`received`. HTTP/1.1 keep-alive, Content-Length always set; a daemon thread serves it.
"""

from __future__ import annotations

import contextlib
import json as jsonlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "AGENT_PATH",
    "Received",
    "RemoteAgentServer",
    "Reply",
    "call",
    "error",
    "response",
    "tool_call",
]

AGENT_PATH = "/agent"


@dataclass
class Reply:
    json: Any = None  # sent as JSON unless `body` is given
    status: int = 200
    body: bytes | None = None
    content_type: str = "application/json"
    delay_s: float = 0.0  # sleep before answering


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        return jsonlib.loads(self.body)


Handler = Callable[[Any], "Reply | dict[str, Any]"]


def response(text: str, *, usage: dict[str, int] | None = None, **extra: Any) -> dict[str, Any]:
    reply: dict[str, Any] = {"type": "response", "text": text, **extra}
    if usage is not None:
        reply["usage"] = usage
    return reply


def tool_call(calls: list[dict[str, Any]], *, state: Any = None, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_call", "calls": calls, "state": state, **extra}


def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def error(message: str) -> dict[str, Any]:
    return {"type": "error", "message": message}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.owner._opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._closed(self.connection)

    def _handle(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        reply = self.server.owner._reply_to(Received(self.command, self.path, headers, body))
        if reply.delay_s:
            time.sleep(reply.delay_s)
        payload = reply.body if reply.body is not None else jsonlib.dumps(reply.json).encode()
        try:
            self.send_response(reply.status)
            self.send_header("content-type", reply.content_type)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (timeout, size cap)

    do_GET = do_POST = _handle

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: RemoteAgentServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients hanging up mid-reply are expected


class RemoteAgentServer:
    """A scripted remote agent on 127.0.0.1 (ephemeral port); `url` is its agent endpoint."""

    def __init__(
        self,
        *replies: Reply | dict[str, Any],
        handler: Handler | None = None,
        expect_token: str | None = None,
    ) -> None:
        self.handler = handler
        self.expect_token = expect_token
        self.health: Reply | dict[str, Any] = {"status": "ok"}
        self.received: list[Received] = []
        self._queue: list[Reply | dict[str, Any]] = list(replies)
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self.port: int = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.url = self.base_url + AGENT_PATH
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"RemoteAgentServer:{self.port}",
            daemon=True,
        )
        self._thread.start()

    def script(self, *replies: Reply | dict[str, Any]) -> None:
        """Queue replies for the next POSTs to the agent endpoint."""
        with self._lock:
            self._queue.extend(replies)

    @property
    def queries(self) -> list[Any]:
        """The JSON bodies POSTed to the agent endpoint, in order."""
        with self._lock:
            posted = [r for r in self.received if r.method == "POST" and r.path == AGENT_PATH]
        return [r.json() for r in posted]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            still_open = list(self._open)
        for sock in still_open:  # wake handler threads parked on idle keep-alive reads
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def __enter__(self) -> RemoteAgentServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reply_to(self, request: Received) -> Reply:
        with self._lock:
            self.received.append(request)
        path = request.path.split("?", 1)[0]
        expected = f"Bearer {self.expect_token}"
        if self.expect_token is not None and request.headers.get("authorization") != expected:
            return Reply(error("unauthorized"), status=401)
        if request.method == "GET" and path == AGENT_PATH + "/health":
            return _as_reply(self.health)
        if request.method != "POST" or path != AGENT_PATH:
            return Reply(error(f"no route for {request.method} {path}"), status=404)
        try:
            body = request.json()
        except ValueError:
            return Reply(error("the request body is not JSON"), status=400)
        if self.handler is not None:
            try:
                return _as_reply(self.handler(body))
            except Exception as exc:  # a broken test handler shows up as a 500, not a hang-up
                return Reply(error(f"handler failed: {type(exc).__name__}: {exc}"), status=500)
        with self._lock:
            reply = self._queue.pop(0) if self._queue else response("ok")
        return _as_reply(reply)

    def _opened(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.add(sock)

    def _closed(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)


def _as_reply(reply: Reply | dict[str, Any]) -> Reply:
    return reply if isinstance(reply, Reply) else Reply(json=reply)
