"""A direct tool call (MCP, REST) that asks a model through the `llm` built-in records what
that cost on its run."""

from __future__ import annotations

from decimal import Decimal

import pytest
from asgiref.sync import async_to_sync

from agents.models import Run
from agents.runs import writer as run_writer
from agents.runs.direct_calls import atool_run
from providers.models import ModelPrice
from tests.factories import make_connection
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)


def call(tenant, name: str, arguments: dict, user):
    async def once():
        try:
            return await atool_run(tenant=tenant, name=name, arguments=arguments, user=user)
        finally:
            await run_writer.aclose()

    return async_to_sync(once)()


def test_a_direct_llm_call_records_its_cost(trio, provider_server, settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    make_connection(
        trio.acme, "Claude", "anthropic", api_key="sk-ant-test-key",
        base_url=provider_server.anthropic_base_url, default_model="claude-test", max_retries=0,
    )  # fmt: skip
    ModelPrice.objects.create(
        tenant=trio.acme, provider_kind="anthropic", model="claude-test", input_price=10,
        output_price=100, cached_input_price=0, cache_write_price=0,
    )  # fmt: skip
    provider_server.script("anthropic", TextReply("hi", input_tokens=1000, output_tokens=20))
    outcome = call(trio.acme, "llm", {"question": "hi", "connection": "Claude"}, trio.alice)
    assert outcome.status == "succeeded", outcome.error
    run = Run.objects.get(pk=outcome.run_id)
    assert run.cost_usd == run.total_cost_usd == Decimal("0.012000")  # 1000x10 + 20x100


def test_a_tool_call_that_asks_no_model_costs_nothing(trio):
    outcome = call(trio.acme, "calculator", {"expression": "6*7"}, trio.alice)
    assert outcome.status == "succeeded", outcome.error
    assert Run.objects.get(pk=outcome.run_id).cost_usd == 0
