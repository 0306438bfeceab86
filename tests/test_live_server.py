"""The live server the API, MCP and browser tests talk to (tests/live_server.py) is always
the one this session started: its port is held from the moment it is picked until the
server listens, and a server that finds its port taken anyway is started on another."""

from __future__ import annotations

import socket
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx2
import pytest

from tests import live_server

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


class NotOurs(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"another process's server")

    def log_message(self, *args) -> None:
        pass


def test_a_reserved_port_goes_to_no_other_process_and_refuses_connections():
    with live_server.reserved_port() as port:
        others = []
        for _ in range(2000):
            with socket.socket() as other:
                other.bind(("127.0.0.1", 0))
                others.append(other.getsockname()[1])
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=1)
    assert port not in others


def test_a_server_whose_port_another_process_took_starts_on_another(monkeypatch):
    """The race as it happens: a port picked free, then bound by another process (here a
    plain HTTP server answering everything) before the server binds it. The server must
    not be taken for the one answering there."""
    foreign = ThreadingHTTPServer(("127.0.0.1", 0), NotOurs)
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    taken = foreign.server_address[1]
    picks = iter([taken])
    reserve = getattr(live_server, "reserved_port", None)

    @contextmanager
    def first_one_taken():
        port = next(picks, None)
        if port is not None:
            yield port
        else:
            with reserve() as port:
                yield port

    monkeypatch.setattr(live_server, "reserved_port", first_one_taken, raising=False)
    monkeypatch.setattr(live_server, "free_port", lambda: next(picks))  # (how ports were picked)
    try:
        server = live_server.start_asgi_server()
    finally:
        foreign.shutdown()
        foreign.server_close()
    try:
        assert server.base != f"http://127.0.0.1:{taken}"
        login = httpx2.get(f"{server.base}/login/")
        assert login.status_code == 200 and b'name="password"' in login.content
    finally:
        server.stop()
