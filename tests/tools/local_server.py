"""A real HTTP/1.1 server on 127.0.0.1 with queued replies, for tests that need a socket.

`LocalServer` keeps connections alive and always sends Content-Length, so clients reuse
pooled connections as they would against a real API; `connections` counts accepted
TCP connections.
"""

from __future__ import annotations

import contextlib
import json as jsonlib
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    json: Any = None  # if not None, body = json.dumps(...) with content-type application/json
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # sleep before answering
    # If set, json = echo(the request): an answer made from what was sent (its headers).
    echo: Callable[[RecordedRequest], Any] | None = None


@dataclass
class RecordedRequest:
    method: str
    path: str  # path including query string, e.g. "/v1/items/42?units=metric"
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        return jsonlib.loads(self.body)


NOT_FOUND = Reply(status=404, json={"error": "no route"})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.owner._connection_opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._connection_closed(self.connection)

    def _handle(self) -> None:
        body = self._read_body()
        headers = {name.lower(): value for name, value in self.headers.items()}
        recorded = RecordedRequest(self.command, self.path, headers, body)
        reply = self.server.owner._record_and_pick(recorded)
        if reply.delay_s:
            time.sleep(reply.delay_s)
        payload = reply.body
        out_headers = {name.lower(): value for name, value in reply.headers.items()}
        answer = reply.echo(recorded) if reply.echo is not None else reply.json
        if answer is not None:
            payload = jsonlib.dumps(answer).encode()
            out_headers.setdefault("content-type", "application/json")
        out_headers["content-length"] = str(len(payload))
        try:
            self.send_response(reply.status)
            for name, value in out_headers.items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (timeout, size limit)

    def _read_body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output quiet


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # many clients at once: not 5, whose overflow waits seconds
    owner: LocalServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that hang up mid-reply are expected in these tests


class LocalServer:
    """http.server.ThreadingHTTPServer on 127.0.0.1, an ephemeral port, a daemon thread."""

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None) -> None:
        """`ssl_context` (server side) makes it serve HTTPS; `url` then starts https://."""
        self.requests: list[RecordedRequest] = []
        self.connections = 0
        self._routes: dict[tuple[str, str], list[Reply]] = {}
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        if ssl_context is not None:
            self._server.socket = ssl_context.wrap_socket(self._server.socket, server_side=True)
        self.port: int = self._server.server_address[1]
        scheme = "http" if ssl_context is None else "https"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"LocalServer:{self.port}",
            daemon=True,
        )
        self._thread.start()

    def route(self, method: str, path: str, *replies: Reply) -> None:
        """Queue replies for METHOD path (path without query string); each request pops
        the next reply, and the last one repeats. Unrouted requests get 404."""
        if not replies:
            raise ValueError("route() needs at least one Reply")
        with self._lock:
            self._routes[(method.upper(), path)] = list(replies)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            still_open = list(self._open)
        for sock in still_open:  # wake handler threads parked on idle keep-alive reads
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _record_and_pick(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            queue = self._routes.get((request.method, request.path.split("?", 1)[0]))
            if not queue:
                return NOT_FOUND
            return queue.pop(0) if len(queue) > 1 else queue[0]

    def _connection_opened(self, sock: socket.socket) -> None:
        with self._lock:
            self.connections += 1
            self._open.add(sock)

    def _connection_closed(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)
