"""Fixtures for the MCP tests: a real uvicorn server (lifespan on) on the test database."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def mcp_server(live_server_base):
    """The session's live server (tests/conftest.py), its /mcp URL."""
    return f"{live_server_base}/mcp"
