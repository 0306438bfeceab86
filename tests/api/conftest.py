"""Fixtures for the API tests: the session's real uvicorn server on the test database."""

from __future__ import annotations

import openai
import pytest

from tenancy import services as tenancy
from tests import live_server
from tests.fakes.otlp_collector import OtlpCollector


@pytest.fixture(scope="session")
def asgi_server(live_server_base):
    """The session's live server (tests/conftest.py), its base URL."""
    return live_server_base


@pytest.fixture
def keys(trio) -> dict[str, str]:
    """Acme's API keys: `run` (scopes read and run) and `read` (read only)."""
    _, run = tenancy.api_key_create(tenant=trio.acme, name="chat", scopes=["read", "run"])
    _, read = tenancy.api_key_create(tenant=trio.acme, name="ro", scopes=["read"])
    return {"run": run, "read": read}


def sdk(asgi_server: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=f"{asgi_server}/v1", max_retries=0, timeout=20)


@pytest.fixture
def collector():
    """An OTLP/HTTP collector stand-in on loopback."""
    collector = OtlpCollector()
    yield collector
    collector.close()


@pytest.fixture
def traced_server(django_db_setup, django_db_blocker, collector):
    """A server process of its own, exporting its spans to `collector` every 50 ms."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    with live_server.asgi_server(env) as base:
        yield base
