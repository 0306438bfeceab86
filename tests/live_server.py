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
import psutil
from django.conf import settings

from tests import processes
from tests.conftest import ROOT, subprocess_env

START_ATTEMPTS = 3  # (each but the last lost its port to another process)


@contextmanager
def reserved_port() -> Iterator[int]:
    """A loopback port held for the caller until the block ends: bound but not listening,
    with SO_REUSEADDR. The kernel gives it to no other `bind(port 0)` meanwhile (a port
    picked and released at once could be picked again by another process before its server
    binds it: tests then talked to another session's server), a connection to it is
    refused, and a server the caller starts on it binds it all the same (uvicorn's and
    asyncio's servers set SO_REUSEADDR too; only one socket may listen)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def free_port() -> int:
    """A port free now, for a server that binds it at once (prefer `reserved_port`)."""
    with reserved_port() as port:
        return port


def listens_on(process: subprocess.Popen | processes.WarmProcess, port: int) -> bool:
    """Whether `process` itself listens on the loopback `port` (not some other process)."""
    try:
        sockets = psutil.Process(process.pid).net_connections(kind="tcp")
    except psutil.NoSuchProcess:
        return False
    return any(s.status == psutil.CONN_LISTEN and s.laddr.port == port for s in sockets)


@dataclass
class AsgiServer:
    """A started server: its process (to kill or stop) and base URL."""

    process: subprocess.Popen | processes.WarmProcess
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
    extra_env: dict[str, str] | None = None, *, timeout_s: float = 90
) -> AsgiServer:
    """The production command on a reserved port, with this session's database, Redis and
    keys (`extra_env` on top); returns once that very process listens there and answers
    HTTP (a RuntimeError if it exits first or takes over `timeout_s`). A process elsewhere
    that picked the same port by its number before it was reserved may still bind it
    first: the server then exits, and is started again on another port."""
    for _ in range(START_ATTEMPTS):
        with reserved_port() as port:
            server = _started(port, extra_env, timeout_s)
        if server is not None:
            return server
    raise RuntimeError(f"the test ASGI server found its port taken {START_ATTEMPTS} times")


def _started(port: int, extra_env: dict[str, str] | None, timeout_s: float) -> AsgiServer | None:
    """The server on `port` (reserved by the caller); None if another process listens there."""
    env = subprocess_env(settings.DATABASES["default"]["NAME"])
    env["MCP_RESOURCE_URL"] = f"http://127.0.0.1:{port}/mcp"
    env.update(extra_env or {})
    process = processes.spawn(
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
        if listens_on(process, port):  # (uvicorn listens once its lifespan startup is over)
            try:
                httpx2.get(f"{base}/login/", timeout=5)  # cheap: no worker round trip
                return AsgiServer(process=process, base=base)
            except httpx2.TransportError:
                pass
        exited = process.poll() is not None
        if exited and _someone_listens(port):
            return None  # it could not bind the port
        if exited or time.monotonic() > deadline:
            process.kill()
            process.wait(5)
            raise RuntimeError("the test ASGI server did not start")
        time.sleep(0.1)


def _someone_listens(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@contextmanager
def asgi_server(extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """Yields the server's base URL (`http://127.0.0.1:<port>`); stops it at the end."""
    server = start_asgi_server(extra_env)
    try:
        yield server.base
    finally:
        server.stop()
