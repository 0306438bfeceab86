from __future__ import annotations

import pytest

from agents.models import Agent
from providers.models import ProviderConnection


@pytest.fixture
def connection(trio, provider_server, settings):
    """acme's default connection: OpenAI pointed at the local provider server."""
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    return ProviderConnection.objects.create(
        tenant=trio.acme,
        name="Local OpenAI",
        kind="openai",
        api_key="sk-test-key",
        base_url=provider_server.openai_base_url,
        default_model="gpt-test",
        is_default=True,
        max_retries=0,
    )


@pytest.fixture
def agent(trio, connection) -> Agent:
    return Agent.objects.create(
        tenant=trio.acme, slug="assistant", name="Assistant", instructions="Be brief."
    )


@pytest.fixture(autouse=True)
def _close_async_connections():
    """Code run through sync_to_async from asyncio.run uses asgiref's one executor thread;
    close its database connection so test databases can be dropped at the end."""
    yield
    import asyncio

    from asgiref.sync import sync_to_async
    from django.db import connections

    asyncio.run(sync_to_async(connections.close_all)())
