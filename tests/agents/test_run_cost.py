"""Cost recorded on runs driven through the real agent loop (the OpenAI SDK against the
local provider server): built-in and tenant prices, crews' child runs and totals, judges."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from agents.models import Run
from agents.runs import run_inline
from providers.models import ModelPrice
from tests.factories import make_agent, make_connection, make_crew
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db


def price(tenant, model: str, input: str, output: str, kind: str = "openai") -> ModelPrice:
    return ModelPrice.objects.create(
        tenant=tenant, provider_kind=kind, model=model, input_price=Decimal(input),
        output_price=Decimal(output), cached_input_price=Decimal(0), cache_write_price=Decimal(0),
    )  # fmt: skip


def test_a_run_costs_its_models_built_in_price(trio, connection, provider_server):
    agent = make_agent(trio.acme, "mini", model="gpt-4o-mini")
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "calculator", '{"expression": "6*7"}')], input_tokens=600),
        TextReply("42", input_tokens=2400, output_tokens=495, cache_read_tokens=2000),
    )
    run = run_inline(tenant=trio.acme, agent=agent, input="6*7?")
    assert run.status == "succeeded", run.error
    assert (run.provider, run.model) == ("openai", "gpt-4o-mini")
    assert (run.input_tokens, run.output_tokens, run.cache_read_tokens) == (1000, 500, 2000)
    # 1000 x 0.15 + 500 x 0.60 + 2000 x 0.075 per million
    assert run.cost_usd == run.total_cost_usd == Decimal("0.000600")


def test_a_tenants_price_applies_to_its_runs_only(trio, connection, provider_server):
    price(trio.acme, "gpt-test", "2", "10")
    agent = make_agent(trio.acme, "assistant")
    provider_server.script("openai", TextReply("Hi", input_tokens=1000, output_tokens=100))
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert run.model == "gpt-test" and run.cost_usd == Decimal("0.003000")


def test_a_model_without_a_price_costs_nothing(trio, agent, provider_server):
    provider_server.script("openai", TextReply("Hi", input_tokens=1000, output_tokens=100))
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert run.status == "succeeded" and run.cost_usd == Decimal(0)


def test_a_crews_run_shows_its_own_cost_and_the_total_with_its_children(
    trio, connection, provider_server
):
    price(trio.acme, "gpt-test", "1", "2")
    boss, writer = make_agent(trio.acme, "boss"), make_agent(trio.acme, "writer")
    crew = make_crew(trio.acme, "team", [writer], mode="hierarchical", manager=boss)
    provider_server.script(
        "openai",
        ToolCallReply(
            [ToolCall("d1", "delegate_to_writer", '{"task": "write"}')],
            input_tokens=1000,
            output_tokens=1000,
        ),
        TextReply("Written.", input_tokens=3000, output_tokens=500),  # the writer
        TextReply("Done.", input_tokens=2000, output_tokens=0),
    )
    parent = run_inline(tenant=trio.acme, crew=crew, input="Write it.")
    assert parent.status == "succeeded", parent.error
    child = Run.objects.get(parent=parent)
    assert child.cost_usd == child.total_cost_usd == Decimal("0.004000")  # 3000x1 + 500x2
    assert parent.cost_usd == Decimal("0.005000")  # the manager's: 3000x1 + 1000x2
    assert parent.total_cost_usd == Decimal("0.009000")
    assert sum(r.cost_usd for r in Run.objects.all()) == parent.total_cost_usd  # none twice


def test_a_sequential_crews_run_costs_only_its_members(trio, connection, provider_server):
    price(trio.acme, "gpt-test", "1", "1")
    a, b = make_agent(trio.acme, "a"), make_agent(trio.acme, "b")
    crew = make_crew(trio.acme, "pair", [a, b], mode="sequential")
    provider_server.script(
        "openai",
        TextReply("one", input_tokens=100, output_tokens=0),
        TextReply("two", input_tokens=200, output_tokens=0),
    )
    parent = run_inline(tenant=trio.acme, crew=crew, input="go")
    assert parent.status == "succeeded", parent.error
    assert parent.cost_usd == 0 and parent.total_cost_usd == Decimal("0.000300")


def test_tokens_a_tool_spent_on_another_model_take_that_models_price(trio, agent, provider_server):
    """The `llm` built-in asks Claude: those tokens are priced as Claude's, the rest as the
    agent's model."""
    make_connection(
        trio.acme, "Claude", "anthropic", api_key="sk-ant-test-key",
        base_url=provider_server.anthropic_base_url, default_model="claude-test", max_retries=0,
    )  # fmt: skip
    price(trio.acme, "gpt-test", "1", "1")
    price(trio.acme, "claude-test", "10", "100", kind="anthropic")
    question = json.dumps({"question": "6*7?", "connection": "Claude"})
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("l1", "llm", question)], input_tokens=1000, output_tokens=0),
        TextReply("42", input_tokens=2000, output_tokens=0),
    )
    provider_server.script("anthropic", TextReply("42", input_tokens=100, output_tokens=10))
    run = run_inline(tenant=trio.acme, agent=agent, input="Ask Claude")
    assert run.status == "succeeded", run.error
    assert run.input_tokens == 3100
    # gpt-test: 3000 x 1; Claude: 100 x 10 + 10 x 100 (per million)
    assert run.cost_usd == Decimal("0.005000")
