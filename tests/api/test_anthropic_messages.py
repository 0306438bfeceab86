"""`/v1/messages`, driven by the real `anthropic` SDK against a live server whose agent's
model is the scripted fake provider (an OpenAI connection: the face is Anthropic's, the
agent's model whatever its connection is)."""

from __future__ import annotations

import anthropic
import pytest

from agents.models import Run
from tests.fakes.provider_server import ErrorReply, TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture
def claude(asgi_server, keys, celery_worker_process) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=keys["run"], base_url=asgi_server, max_retries=0, timeout=20)


def test_a_message_answers_in_anthropics_shape(trio, agent, claude, provider_server):
    provider_server.script("openai", TextReply("Hello there.", input_tokens=12, output_tokens=3))
    message = claude.messages.create(
        model="assistant",
        max_tokens=200,
        system="Answer in English.",
        messages=[
            {"role": "user", "content": "Hi, I am Ada."},
            {"role": "assistant", "content": "Hello Ada."},
            {"role": "user", "content": [{"type": "text", "text": "Who am I?"}]},
        ],
    )
    assert message.type == "message" and message.role == "assistant"
    assert [b.text for b in message.content] == ["Hello there."]
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (12, 3)
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body
    assert "Answer in English." in sent["messages"][0]["content"]
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "user"]
    assert Run.objects.get(pk=int(message.id.removeprefix("msg_"))).input == "Who am I?"


def test_tool_use_and_tool_result_round_trip(trio, agent, claude, provider_server):
    provider_server.script(
        "openai", ToolCallReply([ToolCall("w1", "get_weather", '{"city": "Paris"}')])
    )
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    first = claude.messages.create(model="assistant", max_tokens=100, messages=ask, tools=[WEATHER])
    assert first.stop_reason == "tool_use"
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert (use.name, use.input) == ("get_weather", {"city": "Paris"})
    provider_server.script("openai", TextReply("Sunny in Paris."))
    second = claude.messages.create(
        model="assistant",
        max_tokens=100,
        tools=[WEATHER],
        messages=[
            *ask,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}],
            },
        ],
    )
    assert second.content[0].text == "Sunny in Paris."
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": use.id, "content": "sunny"}


def test_streaming_as_anthropic_streams(trio, agent, claude, provider_server):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("w1", "get_weather", '{"city": "Oslo"}')], text="Checking."),
    )
    with claude.messages.stream(
        model="assistant",
        max_tokens=100,
        tools=[WEATHER],
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Checking."
    assert final.stop_reason == "tool_use"
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"city": "Oslo"}


def test_errors_come_in_anthropics_shape(trio, agent, claude, asgi_server, provider_server):
    with pytest.raises(anthropic.AuthenticationError) as bad_key:
        anthropic.Anthropic(
            api_key="ap_0_nope", base_url=asgi_server, max_retries=0
        ).messages.create(
            model="assistant", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert bad_key.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.NotFoundError) as unknown:
        claude.messages.create(
            model="claude-nope", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert unknown.value.body == {
        "type": "error",
        "error": {
            "type": "not_found_error",
            "message": "The model `claude-nope` does not exist or you do not have access to it.",
        },
    }
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude.messages.create(
            model="assistant",
            max_tokens=10,
            messages=[{"role": "user", "content": [{"type": "document", "source": {}}]}],
        )
    assert "document" in bad.value.message
    provider_server.script("openai", ErrorReply(400, "bad"), ErrorReply(400, "bad"))
    with pytest.raises(anthropic.InternalServerError) as failed:
        claude.messages.create(
            model="assistant", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert failed.value.body["error"]["type"] == "api_error"
    assert Run.objects.filter(status="failed").count() == 1


def test_count_tokens(trio, agent, claude):
    counted = claude.messages.count_tokens(
        model="assistant", messages=[{"role": "user", "content": "x" * 400}]
    )
    assert counted.input_tokens == 100
    assert Run.objects.count() == 0


HI = [{"role": "user", "content": "hi"}]
BLOCK_REFUSALS = [
    (
        {"messages": [{"role": "system", "content": "Be brief."}, *HI]},
        "Each message's `role` must be `user` or `assistant`.",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
        "Blocks of type 'document' are not supported in user messages.",
    ),
    (
        {
            "messages": [
                *HI,
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": 3}],
                },
            ]
        },
        "A `tool_use` block's `input` must be an object.",
    ),
    (
        {
            "messages": [
                {"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}
            ]
        },
        "An image block's `source` must be base64 or url.",
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [{"type": "image", "source": {}}],
                        }
                    ],
                }
            ]
        },
        "Blocks of type 'image' are not supported in a tool_result.",
    ),
    (
        {"messages": HI, "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
        "Only custom tools (name, description, input_schema) are supported, not "
        "'web_search_20250305'.",
    ),
    (
        {"messages": HI, "tools": [WEATHER], "tool_choice": {"type": "tool"}},
        "A `tool` choice needs the tool's `name`.",
    ),
    (
        {"messages": HI, "system": [{"type": "image", "source": {}}]},
        "Blocks of type 'image' are not supported in `system`.",
    ),
]


@pytest.mark.parametrize(("body", "words"), BLOCK_REFUSALS)
def test_each_block_is_checked_by_its_own_shape(trio, agent, claude, body, words):
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model="assistant", max_tokens=10, **body)
    assert refused.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": words},
    }
    with pytest.raises(anthropic.BadRequestError) as no_max_tokens:  # (the SDK requires it)
        claude.post("/v1/messages", body={"model": "assistant", "messages": HI}, cast_to=object)
    assert no_max_tokens.value.body["error"]["message"] == "`max_tokens` is required."
    assert Run.objects.count() == 0
