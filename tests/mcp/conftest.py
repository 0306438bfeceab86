"""Fixtures for the MCP tests: a real uvicorn server (lifespan on) on the test database."""

from __future__ import annotations

import pytest

from tests import live_server


@pytest.fixture(scope="module")
def mcp_server(django_db_setup, django_db_blocker):
    """`uvicorn agentplatform.asgi:application` on a free port; yields its /mcp URL."""
    with live_server.asgi_server() as base:
        yield f"{base}/mcp"
