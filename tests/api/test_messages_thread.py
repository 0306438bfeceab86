"""`/v1/messages` continued by reference: a body whose `thread` is an earlier message's id
(`msg_<run id>`) sends only the new turn, as `previous_response_id` does on
`/v1/responses`. Driven by the real `anthropic` SDK in-process (the /v1 ASGI handler as its
transport), the agent's model the scripted fake provider."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import httpx2
import pytest
from django.conf import settings

from agentplatform.asgi_handler import StreamingASGIHandler
from tenancy import services as tenancy
from tests.factories import make_agent
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@asynccontextmanager
async def claude(key: str) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """The real SDK, the /v1 handler its transport."""
    app = StreamingASGIHandler(settings.API_MIDDLEWARE, views_release_connections=True)
    async with (
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)) as http,
        anthropic.AsyncAnthropic(
            api_key=key, base_url="http://127.0.0.1", http_client=http, max_retries=0
        ) as client,
    ):
        yield client


def create(key: str, **body: Any) -> anthropic.types.Message:
    async def call() -> anthropic.types.Message:
        async with claude(key) as client:
            return await client.messages.create(max_tokens=100, **body)

    return asyncio.run(call())


@pytest.fixture
def key(trio) -> str:
    return tenancy.api_key_create(tenant=trio.acme, name="chat", scopes=["read", "run"])[1]


def sent_messages(provider_server) -> list[dict[str, Any]]:
    return provider_server.requests_to("/v1/chat/completions")[-1].body["messages"]


def test_a_lone_tool_result_continues_the_thread(agent, key, provider_server):
    provider_server.script(
        "openai", ToolCallReply([ToolCall("w1", "get_weather", '{"city": "Paris"}')])
    )
    first = create(
        key,
        model="assistant",
        tools=[WEATHER],
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    )
    (use,) = [b for b in first.content if b.type == "tool_use"]
    provider_server.script("openai", TextReply("Sunny in Paris."))
    second = create(
        key,
        model="assistant",
        tools=[WEATHER],
        messages=[
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}],
            }
        ],
        extra_body={"thread": first.id},
    )
    assert [b.text for b in second.content] == ["Sunny in Paris."]
    assert second.id != first.id
    sent = sent_messages(provider_server)
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[1]["content"] == "Weather in Paris?"
    assert sent[2]["tool_calls"][0]["id"] == use.id
    assert sent[-1] == {"role": "tool", "tool_call_id": use.id, "content": "sunny"}


def test_a_text_turn_continues_the_thread_and_so_on(agent, key, provider_server):
    provider_server.script("openai", TextReply("Hello Ada."), TextReply("You are Ada."))
    first = create(key, model="assistant", messages=[{"role": "user", "content": "I am Ada."}])
    second = create(
        key,
        model="assistant",
        system="Answer in English.",
        messages=[{"role": "user", "content": "Who am I?"}],
        extra_body={"thread": first.id},
    )
    assert second.content[0].text == "You are Ada."
    sent = sent_messages(provider_server)
    assert [(m["role"], m["content"]) for m in sent[1:]] == [
        ("user", "I am Ada."),
        ("assistant", "Hello Ada."),
        ("user", "Who am I?"),
    ]
    assert "Answer in English." in sent[0]["content"]
    provider_server.script("openai", TextReply("Yes."))
    create(  # a thread of a thread: the whole conversation
        key,
        model="assistant",
        messages=[{"role": "user", "content": "Sure?"}],
        extra_body={"thread": second.id},
    )
    assert [m["content"] for m in sent_messages(provider_server)[1:]] == [
        "I am Ada.", "Hello Ada.", "Who am I?", "You are Ada.", "Sure?"
    ]  # fmt: skip


def test_another_tenants_or_members_thread_is_not_found(trio, agent, key, provider_server):
    provider_server.script("openai", TextReply("Secret plans."))
    first = create(key, model="assistant", messages=[{"role": "user", "content": "Plans?"}])
    make_agent(trio.globex, "assistant", instructions="Be brief.")
    others = {
        "globex": tenancy.api_key_create(tenant=trio.globex, name="g", scopes=["read", "run"]),
        "member": tenancy.api_key_create(
            tenant=trio.acme, name="m", scopes=["read", "run"], role="member"
        ),
    }
    calls = len(provider_server.requests_to("/v1/chat/completions"))
    for _, other in others.values():
        with pytest.raises(anthropic.NotFoundError) as refused:
            create(
                other,
                model="assistant",
                messages=[{"role": "user", "content": "Go on."}],
                extra_body={"thread": first.id},
            )
        assert refused.value.body["error"] == {
            "type": "not_found_error",
            "message": f"`thread`: there is no message {first.id} to continue.",
        }
        assert "Secret" not in refused.value.message
    assert len(provider_server.requests_to("/v1/chat/completions")) == calls  # no run


@pytest.mark.parametrize(
    "thread",
    ["resp_1", "msg_", "msg_1x", "msg_\u0661", "msg_" + "9" * 19, 7, ["msg_1"], {"id": "msg_1"}],
)
def test_a_malformed_thread_is_refused_naming_the_field(agent, key, thread):
    with pytest.raises(anthropic.BadRequestError) as refused:
        create(
            key,
            model="assistant",
            messages=[{"role": "user", "content": "Hi"}],
            extra_body={"thread": thread},
        )
    assert refused.value.body["error"] == {
        "type": "invalid_request_error",
        "message": "`thread` must be the `id` of an earlier message: `msg_` and its digits.",
    }


def test_a_gateway_model_refuses_a_thread(agent, key):
    with pytest.raises(anthropic.BadRequestError) as refused:
        create(
            key,
            model="local-openai/gpt-test",
            messages=[{"role": "user", "content": "Hi"}],
            extra_body={"thread": "msg_1"},
        )
    message = refused.value.body["error"]["message"]
    assert message.startswith("`thread` is not supported for gateway models")


def test_count_tokens_counts_the_threads_turns_too(agent, key, provider_server):
    provider_server.script("openai", TextReply("y" * 400))
    first = create(key, model="assistant", messages=[{"role": "user", "content": "x" * 400}])

    async def count(**extra: Any) -> int:
        async with claude(key) as client:
            counted = await client.messages.count_tokens(
                model="assistant", messages=[{"role": "user", "content": "z" * 400}], **extra
            )
            return counted.input_tokens

    assert asyncio.run(count()) == 100
    assert asyncio.run(count(extra_body={"thread": first.id})) == 300
