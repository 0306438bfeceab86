"""Fixtures for the API tests: a real uvicorn server on the test database."""

from __future__ import annotations

import openai
import pytest

from agentplatform.tenancy import services as tenancy
from tests import live_server


@pytest.fixture(scope="module")
def asgi_server(django_db_setup, django_db_blocker):
    """`uvicorn agentplatform.asgi:application` on a free port, on the test database."""
    with live_server.asgi_server() as base:
        yield base


@pytest.fixture
def keys(trio) -> dict[str, str]:
    """Acme's API keys: `run` (scopes read and run) and `read` (read only)."""
    _, run = tenancy.api_key_create(tenant=trio.acme, name="chat", scopes=["read", "run"])
    _, read = tenancy.api_key_create(tenant=trio.acme, name="ro", scopes=["read"])
    return {"run": run, "read": read}


def sdk(asgi_server: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=f"{asgi_server}/v1", max_retries=0, timeout=20)
