"""Fixtures for the API tests: a real uvicorn server on the test database."""

from __future__ import annotations

import pytest

from tests import live_server


@pytest.fixture(scope="module")
def asgi_server(django_db_setup, django_db_blocker):
    """`uvicorn agentplatform.asgi:application` on a free port, on the test database."""
    with live_server.asgi_server() as base:
        yield base
