"""A real uvicorn server (`agentplatform.asgi:application`, lifespan on) on the test
database, in a subprocess: what the API, MCP and browser tests talk to over loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx2
from django.conf import settings

from tests.conftest import ROOT, subprocess_env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def asgi_server(extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """Yields the server's base URL (`http://127.0.0.1:<port>`); stops it at the end."""
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
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx2.get(f"{base}/login/", timeout=1)  # cheap: no worker round trip
            break
        except httpx2.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("the test ASGI server did not start") from None
            time.sleep(0.1)
    try:
        yield base
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
