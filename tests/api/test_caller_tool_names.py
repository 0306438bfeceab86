"""A caller's tool may take the name of one of the platform's synthetic tools (a framework
that always offers `final_answer`, say): the caller's keeps its name, the platform's is
offered to the model as `<name>_2`, and both work. Driven by the real `openai` SDK."""

from __future__ import annotations

import json

import openai
import pytest

from agents.models import Fact, Run, RunEvent
from tenancy import services as tenancy
from tests.api.conftest import sdk
from tests.api.test_openai_compat import run_of
from tests.fakes.provider_server import ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)

CITY = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["name", "population"],
}
ASK = [{"role": "user", "content": "Which city is the capital of France?"}]


def _function(name: str, description: str) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"answer": {"type": "string"}},
                "required": ["answer"],
            },
        },
    }


def _sent(provider_server) -> dict:
    return provider_server.requests_to("/v1/chat/completions")[-1].body


def _tools(body: dict) -> dict[str, dict]:
    return {t["function"]["name"]: t["function"] for t in body.get("tools") or []}


def test_a_callers_final_answer_and_the_agents_structured_output_both_work(
    trio, agent, asgi_server, keys, celery_worker_process, provider_server
):
    agent.output_schema = CITY
    agent.save()
    client = sdk(asgi_server, keys["run"])
    theirs = _function("final_answer", "The framework's way to give the answer.")
    provider_server.script(
        "openai", ToolCallReply([ToolCall("c1", "final_answer", '{"answer": "Paris"}')])
    )
    completion = client.chat.completions.create(model="assistant", messages=ASK, tools=[theirs])

    # The model was offered both, each under a name of its own, and told which is the answer.
    sent = _sent(provider_server)
    offered = _tools(sent)
    assert offered["final_answer"]["description"] == "The framework's way to give the answer."
    assert set(offered["final_answer_2"]["parameters"]["properties"]) == {"name", "population"}
    assert "Finish by calling final_answer_2" in sent["messages"][0]["content"]
    # Its call to the caller's tool comes back to the caller, under the caller's name.
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "final_answer",
        {"answer": "Paris"},
    )
    run = run_of(completion.id)
    assert run.status == "awaiting_client" and run.structured_output is None
    assert not RunEvent.objects.filter(run=run, type="tool.started").exists()

    # With the caller's result, the platform's structured output gives the answer.
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("f1", "final_answer_2", '{"name": "Paris", "population": 2}')]),
    )
    follow = client.chat.completions.create(
        model="assistant",
        messages=[
            *ASK,
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "noted"},
        ],
        tools=[theirs],
    )
    assert follow.choices[0].finish_reason == "stop"
    assert json.loads(follow.choices[0].message.content) == {"name": "Paris", "population": 2}
    run = run_of(follow.id)
    assert run.status == "succeeded" and run.structured_output == {
        "name": "Paris",
        "population": 2,
    }
    history = _sent(provider_server)["messages"]
    assert history[2]["tool_calls"][0]["function"]["name"] == "final_answer"  # (as sent)


def test_a_callers_memory_named_tool_and_the_agents_memory_both_work(
    trio, agent, asgi_server, celery_worker_process, provider_server
):
    agent.memory = True
    agent.save()
    _, acting = tenancy.api_key_create(
        tenant=trio.acme, name="portal", scopes=["read", "run"], acts_for_members=True
    )
    theirs = _function("remember_fact", "Keep a note in the framework's own store.")
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("m1", "remember_fact_2", '{"fact": "Alice likes tea."}')]),
        ToolCallReply([ToolCall("c1", "remember_fact", '{"answer": "tea"}')]),
    )
    completion = sdk(asgi_server, acting).chat.completions.create(
        model="assistant",
        messages=[{"role": "user", "content": "I like tea."}],
        tools=[theirs],
        user="alice",
    )
    # The platform's memory tool ran under its new name and kept the fact.
    assert list(Fact.objects.filter(user=trio.alice).values_list("text", flat=True)) == [
        "Alice likes tea."
    ]
    sent = _sent(provider_server)
    offered = _tools(sent)
    assert {"remember_fact", "remember_fact_2", "recall_facts", "forget_fact"} <= set(offered)
    assert offered["remember_fact"]["description"] == "Keep a note in the framework's own store."
    assert "with remember_fact_2" in sent["messages"][0]["content"]
    # The caller's own tool call came back to it.
    (call,) = completion.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "remember_fact",
        {"answer": "tea"},
    )
    run = run_of(completion.id)
    assert run.status == "awaiting_client"
    started = RunEvent.objects.filter(run=run, type="tool.started")
    assert [e.payload["name"] for e in started] == ["remember_fact_2"]


def test_a_callers_tool_named_like_the_agents_own_is_still_refused(
    trio, agent, asgi_server, keys, provider_server
):
    client = sdk(asgi_server, keys["run"])
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="assistant", messages=ASK, tools=[_function("calculator", "Mine.")]
        )
    assert "own tool named `calculator`" in refused.value.message
    assert Run.objects.count() == 0
