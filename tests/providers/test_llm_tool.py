"""The `llm` built-in: another model of the tenant's connections answers one question,
through the same adapters as the agent loop (the real SDKs against the local provider
server), and its tokens count in the run."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync

from agentplatform.web.activity.timeline import run_timeline
from agents.models import Run, RunEvent
from agents.runs import run_inline
from agents.runs import writer as run_writer
from agents.runs.direct_calls import atool_run
from providers.runtime.llm_tool import ModelConnection, llm_tool
from providers.runtime.types import ModelResponse
from tests.factories import make_connection
from tests.fakes.provider_server import (
    ErrorReply,
    TextReply,
    ToolCall,
    ToolCallReply,
    resolved_model,
)
from tools.runtime.builtins import BUILTINS
from tools.runtime.context import RunContext
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import ToolCall as Call

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def claude(trio, provider_server, connection):
    """acme's second connection: Anthropic on the local provider server, two models."""
    return make_connection(
        trio.acme,
        "Claude",
        "anthropic",
        api_key="sk-ant-test-key",
        base_url=provider_server.anthropic_base_url,
        default_model="claude-test",
        allowed_models=["claude-test", "claude-big"],
        max_retries=0,
    )


def ask(tenant, **arguments):
    """One call of the `llm` built-in for `tenant`, as any run's registry executes it."""
    ctx = RunContext(tenant_id=tenant.pk)
    result = async_to_sync(BUILTINS.execute)(Call("c1", "llm", arguments), ctx)
    return result, ctx.usage.take("c1")


def test_a_run_counts_the_tokens_of_the_model_it_asked(trio, agent, claude, provider_server):
    question = {
        "question": "What is six times seven?",
        "connection": "Claude",
        "system": "Answer with a number.",
        "max_tokens": 50,
    }
    provider_server.script(
        "openai",
        ToolCallReply(
            [ToolCall("l1", "llm", json.dumps(question))], input_tokens=11, output_tokens=4
        ),
        TextReply("Claude says 42.", input_tokens=30, output_tokens=6),
    )
    provider_server.script("anthropic", TextReply("42", input_tokens=100, output_tokens=7))

    run = run_inline(tenant=trio.acme, agent=agent, input="Ask Claude: 6*7?")

    assert run.status == "succeeded", run.error
    assert (run.input_tokens, run.output_tokens) == (11 + 30 + 100, 4 + 6 + 7)
    [asked] = provider_server.requests_to("/v1/messages")
    assert asked.body["model"] == "claude-test"  # the connection's default model
    assert asked.body["max_tokens"] == 50
    assert "Answer with a number." in json.dumps(asked.body["system"])
    assert "What is six times seven?" in json.dumps(asked.body["messages"])
    assert asked.headers.get("x-api-key") == "sk-ant-test-key" or "sk-ant-test-key" in (
        asked.headers.get("authorization", "")
    )
    [usage] = RunEvent.objects.filter(run=run, type="tool.usage")
    assert usage.payload == {
        "call_id": "l1",
        "name": "llm",
        "models": [
            {
                "connection": "Claude",
                "model": resolved_model("claude-test"),
                "input_tokens": 100,
                "output_tokens": 7,
                "cache_read_tokens": 0,
                "cache_write_tokens": 0,
            }
        ],
    }
    told = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
    answer = json.loads(told["content"])
    assert answer["answer"] == "42" and answer["connection"] == "Claude"
    # Its event comes before the call's tool.completed, saved with the usage it added.
    types = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert types.index("tool.usage") == types.index("tool.completed") - 1
    # The run's timeline shows them on the tool's call.
    [call] = [entry for entry in run_timeline(run)[0] if entry.kind == "tool"]
    assert (call.name, call.input_tokens, call.output_tokens) == ("llm", 100, 7)


def test_the_default_connection_and_a_chosen_allowed_model(trio, claude, provider_server):
    provider_server.script("openai", TextReply("from the default", input_tokens=3))
    result, spent = ask(trio.acme, question="hello")
    assert result.error is None, result.error
    assert result.result["connection"] == "Local OpenAI" and result.result["answer"] == (
        "from the default"
    )
    assert provider_server.requests_to("/v1/chat/completions")[0].body["model"] == "gpt-test"
    assert [(t.connection, t.input_tokens) for t in spent] == [("Local OpenAI", 3)]

    provider_server.script("anthropic", TextReply("big"))
    result, _ = ask(trio.acme, question="hello", connection="claude", model="claude-big")
    assert result.result["model"] == resolved_model("claude-big")


def test_an_unknown_and_another_tenants_connection_answer_alike(trio, claude, provider_server):
    theirs = make_connection(
        trio.globex,
        "Globex Secret",
        "openai",
        api_key="sk-globex",
        base_url=provider_server.openai_base_url,
        default_model="gpt-test",
    )
    unknown, _ = ask(trio.acme, question="hi", connection="Nope")
    foreign, _ = ask(trio.acme, question="hi", connection=theirs.name)
    assert unknown.error == (
        "no provider connection named 'Nope'; this organisation's connections: "
        "'Claude', 'Local OpenAI'"
    )
    assert foreign.error == unknown.error.replace("'Nope'", "'Globex Secret'")
    assert provider_server.received == []  # nothing was sent anywhere


def test_a_model_the_connection_does_not_allow_is_refused(trio, claude, provider_server):
    result, spent = ask(trio.acme, question="hi", connection="Claude", model="claude-other")
    assert result.error == (
        "model 'claude-other' is not allowed on connection 'Claude'; "
        "allowed: claude-test, claude-big"
    )
    assert spent == [] and provider_server.received == []


def test_provider_errors_are_told_in_our_words_never_theirs(trio, claude, provider_server):
    provider_server.script(
        "anthropic", ErrorReply(401, "invalid x-api-key sk-ant-test-key for org-secret-123")
    )
    result, spent = ask(trio.acme, question="hi", connection="Claude")
    assert result.error == (
        "connection 'Claude' was refused by its provider (API key or permission): "
        "an admin must fix it"
    )
    provider_server.script("anthropic", ErrorReply(404, "model claude-test: no such thing xyz"))
    result, _ = ask(trio.acme, question="hi", connection="Claude")
    assert result.error == "model 'claude-test' is not known to connection 'Claude'"
    assert spent == []


def test_max_tokens_is_bounded_by_the_schema(trio, claude):
    result, _ = ask(trio.acme, question="hi", max_tokens=1_000_000)
    assert result.error and "max_tokens" in result.error


class SlowAdapter:
    provider = "slow"  # (a ModelAdapter names its provider)

    async def complete(self, request):
        await asyncio.sleep(5)
        return ModelResponse(text="late")


def test_a_model_that_does_not_answer_in_time_is_a_clear_error():
    async def lookup(tenant_id, name):
        return ModelConnection(name="Slow", adapter=SlowAdapter(), default_model="m")

    registry = ToolRegistry([llm_tool(lookup, timeout_s=0.2)])
    result = async_to_sync(registry.execute)(Call("c1", "llm", {"question": "hi"}), RunContext(1))
    assert result.error == "model 'm' of connection 'Slow' did not answer within 0.2 s"


def test_a_direct_call_records_the_tokens_on_its_run(trio, claude, provider_server):
    provider_server.script("anthropic", TextReply("hi", input_tokens=21, output_tokens=2))

    async def once():
        try:
            arguments = {"question": "hi", "connection": "Claude"}
            return await atool_run(
                tenant=trio.acme, name="llm", arguments=arguments, user=trio.alice
            )
        finally:
            await run_writer.aclose()

    outcome = async_to_sync(once)()
    assert outcome.status == "succeeded", outcome.error
    run = Run.objects.get(pk=outcome.run_id)
    assert (run.input_tokens, run.output_tokens) == (21, 2)
    assert RunEvent.objects.get(run=run, type="tool.usage").payload["models"][0]["model"] == (
        resolved_model("claude-test")
    )


def test_the_agents_token_budget_counts_what_it_asked(trio, agent, claude, provider_server):
    agent.max_tokens_per_run = 100
    agent.save()
    asking = json.dumps({"question": "a long one", "connection": "Claude"})
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("l1", "llm", asking)], input_tokens=10, output_tokens=5),
        TextReply("done", input_tokens=10, output_tokens=5),
    )
    provider_server.script("anthropic", TextReply("sure", input_tokens=200, output_tokens=5))
    run = run_inline(tenant=trio.acme, agent=agent, input="ask")
    assert run.status == "failed"
    assert run.error == "token budget of 100 exceeded (235)"
