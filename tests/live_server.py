"""A real uvicorn server (`agentplatform.asgi:application`, lifespan on) on the test
database, in a subprocess: what the API, MCP and browser tests talk to over loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx2
from django.conf import settings

from tests.conftest import ROOT, subprocess_env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class AsgiServer:
    """A started server: its process (to kill or stop) and base URL."""

    process: subprocess.Popen
    base: str

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 15 s."""
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


def start_asgi_server(
    extra_env: dict[str, str] | None = None, *, timeout_s: float = 30
) -> AsgiServer:
    """The production command on a free port, with this session's database, Redis and keys
    (`extra_env` on top); returns once it answers HTTP (a RuntimeError if it exits first
    or takes over `timeout_s`)."""
    port = free_port()
    env = subprocess_env(settings.DATABASES["default"]["NAME"])
    env["MCP_RESOURCE_URL"] = f"http://127.0.0.1:{port}/mcp"
    env.update(extra_env or {})
    process = subprocess.Popen(
        [
            sys.executable, "-m", "uvicorn", "agentplatform.asgi:application",
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
            "--lifespan", "on", "--timeout-graceful-shutdown", "5",
        ],
        env=env,
        cwd=ROOT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            httpx2.get(f"{base}/login/", timeout=1)  # cheap: no worker round trip
            return AsgiServer(process=process, base=base)
        except httpx2.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                process.wait(5)
                raise RuntimeError("the test ASGI server did not start") from None
            time.sleep(0.1)


@contextmanager
def asgi_server(extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """Yields the server's base URL (`http://127.0.0.1:<port>`); stops it at the end."""
    server = start_asgi_server(extra_env)
    try:
        yield server.base
    finally:
        server.stop()
