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
