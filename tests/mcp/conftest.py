"""Fixtures for the MCP tests: a real uvicorn server (lifespan on) on the test database."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def mcp_server(live_asgi_server) -> str:
    """`uvicorn agentplatform.asgi:application` on a free port (the session's:
    tests/conftest.py); its /mcp URL."""
    return f"{live_asgi_server}/mcp"
