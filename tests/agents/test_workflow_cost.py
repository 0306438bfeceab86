"""What a workflow run costs: its agent steps' model calls priced at their agent's model, its
tool steps' own model calls (the `llm` built-in) at theirs, as an agent run's are
(agents/runs/costs.py); the quotas that metered them hold what the run records."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agents import quotas, runs
from agents.models import Quota, Run, WorkflowDefinition
from agents.runs.engine import execute_run
from providers.models import ModelPrice
from tests.factories import make_connection
from tests.fakes.provider_server import MODEL_SUFFIX, TextReply

pytestmark = pytest.mark.django_db(transaction=True)  # quotas read committed rules

ASK_THEN_GREET = {
    "input": {"type": "object", "properties": {"city": {"type": "string"}}},
    "steps": [
        {"id": "ask", "tool": "llm", "arguments": {"question": "'6*7?'", "connection": "'Claude'"}},
        {"id": "hello", "agent": "assistant", "prompt": "input.city"},
    ],
}


def _price(tenant, kind: str, model: str, input: str, output: str) -> None:
    ModelPrice.objects.create(
        tenant=tenant, provider_kind=kind, model=model, input_price=Decimal(input),
        output_price=Decimal(output), cached_input_price=Decimal(0), cache_write_price=Decimal(0),
    )  # fmt: skip


def test_a_workflow_run_costs_its_agent_and_tool_steps_model_calls(trio, agent, provider_server):
    make_connection(
        trio.acme, "Claude", "anthropic", api_key="sk-ant-test-key",
        base_url=provider_server.anthropic_base_url, default_model="claude-test", max_retries=0,
    )  # fmt: skip
    _price(trio.acme, "openai", "gpt-test", "1", "2")
    _price(trio.acme, "anthropic", "claude-test", "10", "100")
    tokens = Quota.objects.create(
        tenant=trio.acme, scope="tenant", metric="tokens", period="day", limit=100_000
    )
    dollars = Quota.objects.create(
        tenant=trio.acme,
        scope="agent",
        agent=agent,
        metric="cost",
        period="day",
        limit=Decimal("50"),
    )
    provider_server.script("anthropic", TextReply("42", input_tokens=100, output_tokens=10))
    provider_server.script("openai", TextReply("Bonjour.", input_tokens=2000, output_tokens=50))
    workflow = WorkflowDefinition.objects.create(
        tenant=trio.acme, slug="greet", name="Greet", definition=ASK_THEN_GREET
    )
    run = runs.workflow_start(
        tenant=trio.acme, workflow=workflow, input={"city": "Paris"}, enqueue=False
    )

    assert execute_run(run.pk) == "succeeded"

    run = Run.objects.get(pk=run.pk)
    assert (run.input_tokens, run.output_tokens) == (2100, 60)
    claude = Decimal(100 * 10 + 10 * 100) / 1_000_000
    agent_part = Decimal(2000 * 1 + 50 * 2) / 1_000_000
    assert run.cost_usd == run.total_cost_usd == claude + agent_part
    # The quotas metered every call, the tool step's too: they hold what the run records.
    assert quotas.used(tokens) == run.input_tokens + run.output_tokens
    assert Decimal(str(quotas.used(dollars))) == agent_part  # the agent's own calls only
    assert run.state["workflow"]["spent"] == [
        {"connection": "Claude", "model": "claude-test" + MODEL_SUFFIX, "input_tokens": 100,
         "output_tokens": 10, "cache_read_tokens": 0, "cache_write_tokens": 0},
        {"agent": "assistant", "model": "gpt-test", "input_tokens": 2000, "output_tokens": 50,
         "cache_read_tokens": 0, "cache_write_tokens": 0},
    ]  # fmt: skip


def test_a_resumed_workflow_run_prices_what_its_steps_spent_before_the_crash(
    trio, agent, provider_server
):
    _price(trio.acme, "openai", "gpt-test", "1", "2")
    workflow = WorkflowDefinition.objects.create(
        tenant=trio.acme, slug="greet", name="Greet", definition=ASK_THEN_GREET
    )
    run = runs.workflow_start(
        tenant=trio.acme, workflow=workflow, input={"city": "Paris"}, enqueue=False
    )
    # A worker killed after the `llm` step completed: its output and what it spent recorded.
    spent = {"connection": "Claude", "model": "claude-test", "input_tokens": 100}
    scope = {"input": {"city": "Paris"}, "ask": {"answer": "42"}}
    records = {"outputs": {"1": scope}, "usage": [100, 0, 0, 0], "spent": [spent]}
    Run.objects.filter(pk=run.pk).update(state={"workflow": records})
    make_connection(trio.acme, "Claude", "anthropic", api_key="k", default_model="claude-test")
    _price(trio.acme, "anthropic", "claude-test", "10", "100")
    provider_server.script("openai", TextReply("Bonjour.", input_tokens=1000, output_tokens=0))

    assert execute_run(run.pk) == "succeeded"

    run = Run.objects.get(pk=run.pk)
    assert run.input_tokens == 1100
    assert run.cost_usd == Decimal(100 * 10 + 1000 * 1) / 1_000_000
