"""Fixtures for the API tests: a real uvicorn server on the test database."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx2
import pytest
from django.conf import settings

from tests.conftest import ROOT, subprocess_env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def asgi_server(django_db_setup, django_db_blocker):
    """`uvicorn agentplatform.asgi:application` on a free port, on the test database."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "agentplatform.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--lifespan",
            "off",
            "--timeout-graceful-shutdown",
            "5",
        ],
        env=subprocess_env(settings.DATABASES["default"]["NAME"]),
        cwd=ROOT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx2.get(f"{base}/v1/models", timeout=1)
            break
        except httpx2.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("the test ASGI server did not start") from None
            time.sleep(0.1)
    yield base
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
        raise
