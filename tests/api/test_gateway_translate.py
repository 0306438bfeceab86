"""Gateway models on the other API's endpoint (agentplatform/v1/gateway/chat.py, messages.py): the
real `anthropic` SDK against an OpenAI connection's model on /v1/messages, the real `openai`
SDK against an Anthropic connection's model on /v1/chat/completions, with the scripted fake
provider as the connections' service."""

from __future__ import annotations

import asyncio
import json
import time

import anthropic
import openai
import pytest
from django.conf import settings

from agentplatform.v1.gateway import chat as gateway_chat
from agentplatform.v1.gateway import messages as gateway_messages
from agents.models import Run
from tests.api.conftest import sdk
from tests.factories import make_connection
from tests.fakes.provider_server import ErrorReply, TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)

GPT = "local-openai/gpt-test"  # the `connection` fixture (an OpenAI connection)
CLAUDE = "claude/claude-test"
A_WEATHER = {  # Anthropic's shape of a tool
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
O_WEATHER = {  # OpenAI's
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
PARIS = ToolCall("c1", "get_weather", '{"city": "Paris"}')


@pytest.fixture
def claude_sdk(asgi_server, keys, connection) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=keys["run"], base_url=asgi_server, max_retries=0)


@pytest.fixture
def claude_connection(trio, provider_server):
    return make_connection(
        trio.acme, "Claude", "anthropic", api_key="sk-ant-secret-9",
        base_url=provider_server.anthropic_base_url, default_model="claude-test",
    )  # fmt: skip


@pytest.fixture
def openai_sdk(asgi_server, keys, claude_connection) -> openai.OpenAI:
    return sdk(asgi_server, keys["run"])


def recorded(model: str, count: int = 1) -> list[Run]:
    for _ in range(60):  # written just after the answer, off the request's path
        runs = list(Run.objects.filter(gateway_model=model).order_by("pk"))
        if len(runs) >= count:
            return runs
        time.sleep(0.05)
    raise AssertionError("the gateway call was not recorded")


# == the anthropic SDK against an OpenAI connection's model ==================================
def test_a_message_to_an_openai_model_is_translated_both_ways(claude_sdk, provider_server):
    provider_server.script("openai", TextReply("Hi from GPT.", input_tokens=9, output_tokens=4))
    message = claude_sdk.messages.create(
        model=GPT,
        max_tokens=50,
        system=[{"type": "text", "text": "Be terse."}],
        messages=[{"role": "user", "content": "Hi"}],
        stop_sequences=["END"],
        extra_body={"temperature": 0.3, "top_p": 0.9},  # (no longer the SDK's arguments)
    )
    assert [b.text for b in message.content] == ["Hi from GPT."]
    assert (message.stop_reason, message.model, message.role) == ("end_turn", GPT, "assistant")
    assert (message.usage.input_tokens, message.usage.output_tokens) == (9, 4)
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body
    assert sent["model"] == "gpt-test" and sent["messages"] == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Hi"},
    ]
    assert (sent["temperature"], sent["top_p"], sent["stop"]) == (0.3, 0.9, ["END"])
    assert sent["max_completion_tokens"] == 50 and "max_tokens" not in sent  # (an OpenAI one)
    (run,) = recorded(GPT)
    assert (run.input_tokens, run.output_tokens, run.status, run.input) == (9, 4, "succeeded", "Hi")

    provider_server.script("openai", TextReply("Cut", stop_reason="max_tokens"))
    cut = claude_sdk.messages.create(
        model=GPT, max_tokens=1, messages=[{"role": "user", "content": "Hi"}]
    )
    assert cut.stop_reason == "max_tokens"


def test_a_tool_use_round_trip_through_an_openai_model(claude_sdk, provider_server):
    provider_server.script("openai", ToolCallReply([PARIS], text="Let me see."))
    conversation: list = [{"role": "user", "content": "Weather in Paris?"}]
    first = claude_sdk.messages.create(
        model=GPT, max_tokens=50, messages=conversation, tools=[A_WEATHER],
        tool_choice={"type": "any"},
    )  # fmt: skip
    assert first.stop_reason == "tool_use"
    text, use = first.content
    assert text.text == "Let me see."
    assert (use.type, use.id, use.name, use.input) == (
        "tool_use",
        "c1",
        "get_weather",
        {"city": "Paris"},
    )
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body
    assert sent["tools"] == [O_WEATHER] and sent["tool_choice"] == "required"

    provider_server.script("openai", TextReply("Sunny in Paris."))
    conversation += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user",
         "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "sunny"}]},
    ]  # fmt: skip
    second = claude_sdk.messages.create(
        model=GPT, max_tokens=50, messages=conversation, tools=[A_WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
    )  # fmt: skip
    assert second.content[0].text == "Sunny in Paris."
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body
    assert sent["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Let me see."}],
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}],
    }  # fmt: skip
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


def test_a_message_stream_from_an_openai_model(claude_sdk, provider_server):
    provider_server.script(
        "openai", ToolCallReply([PARIS], text="Let me see.", input_tokens=8, output_tokens=6)
    )
    with claude_sdk.messages.stream(
        model=GPT, max_tokens=50, messages=[{"role": "user", "content": "Weather?"}],
        tools=[A_WEATHER],
    ) as stream:  # fmt: skip
        events = list(stream)
        final = stream.get_final_message()
    types = [e.type for e in events]
    assert types[0] == "message_start" and "message_stop" in types
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta"
                   and e.delta.type == "text_delta") == "Let me see."  # fmt: skip
    partial = [e.delta.partial_json for e in events if e.type == "content_block_delta"
               and e.delta.type == "input_json_delta"]  # fmt: skip
    assert len(partial) > 1 and "".join(partial) == '{"city": "Paris"}'  # as they came
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"city": "Paris"} and final.stop_reason == "tool_use"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (8, 6)
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    (run,) = recorded(GPT)
    assert (run.input_tokens, run.output_tokens) == (8, 6)

    provider_server.script("openai", TextReply("Streamed."))
    with claude_sdk.messages.stream(
        model=GPT, max_tokens=50, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        assert "".join(stream.text_stream) == "Streamed."
    assert stream.get_final_message().stop_reason == "end_turn"


@pytest.mark.parametrize("stream", [False, True])
def test_an_openai_models_errors_come_in_anthropics_shape(
    claude_sdk, provider_server, connection, stream
):
    hello = [{"role": "user", "content": "x"}]
    provider_server.script("openai", ErrorReply(400, f"bad temperature for {connection.api_key}"))
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude_sdk.messages.create(model=GPT, max_tokens=5, messages=hello, stream=stream)
    assert bad.value.body["type"] == "error"
    assert bad.value.body["error"]["type"] == "invalid_request_error"
    assert "bad temperature" in bad.value.message and connection.api_key not in str(bad.value.body)
    assert recorded(GPT)[-1].status == "failed"
    provider_server.script("openai", ErrorReply(500, "Traceback (most recent call last): ..."))
    with pytest.raises(anthropic.APIStatusError) as failed:
        claude_sdk.messages.create(model=GPT, max_tokens=5, messages=hello, stream=stream)
    assert failed.value.status_code == 502 and failed.value.body["error"]["type"] == "api_error"
    provider_server.script("openai", ErrorReply(401, f"Incorrect API key {connection.api_key}"))
    with pytest.raises(anthropic.APIStatusError) as refused:  # not the caller's key: 502
        claude_sdk.messages.create(model=GPT, max_tokens=5, messages=hello, stream=stream)
    assert refused.value.status_code == 502 and "connection's credentials" in refused.value.message
    assert connection.api_key not in json.dumps(refused.value.body)


def test_bad_messages_for_an_openai_model_are_400s_in_anthropics_shape(claude_sdk):
    hello = [{"role": "user", "content": "x"}]
    bad_bodies = [
        {"messages": hello},  # no max_tokens
        {"messages": hello, "max_tokens": 5, "stream": "yes"},
        {"messages": hello, "max_tokens": 5, "temperature": "hot"},
        {"messages": [{"role": "system", "content": "x"}], "max_tokens": 5},
        {"messages": [{"role": "user", "content": [{"type": "document"}]}], "max_tokens": 5},
        {"messages": hello, "max_tokens": 5, "tools": [{"type": "web_search_20250305"}]},
        {"messages": hello, "max_tokens": 5, "tool_choice": {"type": "sometimes"}},
        {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "input": 3}]}],
         "max_tokens": 5},
    ]  # fmt: skip
    for body in bad_bodies:
        with pytest.raises(anthropic.BadRequestError) as bad:
            claude_sdk.post("/v1/messages", body={"model": GPT, **body}, cast_to=object)
        assert bad.value.body["error"]["type"] == "invalid_request_error", body
    assert not Run.objects.exists()


# == the openai SDK against an Anthropic connection's model ===================================
def test_a_chat_with_an_anthropic_model_is_translated_both_ways(openai_sdk, provider_server):
    provider_server.script(
        "anthropic", TextReply("Hello from Claude.", input_tokens=7, output_tokens=2)
    )
    completion = openai_sdk.chat.completions.create(
        model=CLAUDE,
        messages=[
            {"role": "system", "content": "Be terse."},
            {"role": "developer", "content": "And kind."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
            ]},
        ],
        temperature=0.5,
        stop="END",
        user="end-user-1",
    )  # fmt: skip
    assert completion.choices[0].message.content == "Hello from Claude."
    assert completion.choices[0].finish_reason == "stop" and completion.model == CLAUDE
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (7, 2)
    sent = provider_server.requests_to("/v1/messages")[-1]
    assert sent.headers["x-api-key"] == "sk-ant-secret-9"
    assert sent.body["model"] == "claude-test" and sent.body["system"] == "Be terse.\n\nAnd kind."
    assert sent.body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBORw0K"}},
    ]}]  # fmt: skip
    assert sent.body["max_tokens"] == settings.GATEWAY_DEFAULT_MAX_TOKENS  # (required there)
    assert (sent.body["temperature"], sent.body["stop_sequences"]) == (0.5, ["END"])
    assert sent.body["metadata"] == {"user_id": "end-user-1"}
    (run,) = recorded(CLAUDE)
    assert (run.input_tokens, run.output_tokens, run.status) == (7, 2, "succeeded")
    assert run.input == "What is this?"

    provider_server.script("anthropic", TextReply("Cut", stop_reason="max_tokens"))
    cut = openai_sdk.chat.completions.create(
        model=CLAUDE, messages=[{"role": "user", "content": "Hi"}], max_completion_tokens=3
    )
    assert cut.choices[0].finish_reason == "length"
    assert provider_server.requests_to("/v1/messages")[-1].body["max_tokens"] == 3


def test_a_tool_call_round_trip_through_an_anthropic_model(openai_sdk, provider_server):
    provider_server.script("anthropic", ToolCallReply([PARIS]))
    conversation: list = [{"role": "user", "content": "Weather in Paris?"}]
    first = openai_sdk.chat.completions.create(
        model=CLAUDE, messages=conversation, tools=[O_WEATHER], tool_choice="required",
        parallel_tool_calls=False,
    )  # fmt: skip
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert (call.id, call.function.name) == ("c1", "get_weather")
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    sent = provider_server.requests_to("/v1/messages")[-1].body
    assert sent["tools"] == [A_WEATHER]
    assert sent["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}

    provider_server.script("anthropic", TextReply("Sunny in Paris."))
    conversation += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    second = openai_sdk.chat.completions.create(
        model=CLAUDE, messages=conversation, tools=[O_WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )  # fmt: skip
    assert second.choices[0].message.content == "Sunny in Paris."
    sent = provider_server.requests_to("/v1/messages")[-1].body
    assert sent["messages"][1:] == [
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Paris"}},
        ]},
        {"role": "user", "content": [  # (the results first, then the user's text)
            {"type": "tool_result", "tool_use_id": "c1", "content": "sunny"},
            {"type": "text", "text": "And tomorrow?"},
        ]},
    ]  # fmt: skip
    assert sent["tool_choice"] == {"type": "tool", "name": "get_weather"}


@pytest.mark.parametrize("include_usage", [False, True])
def test_a_chat_stream_from_an_anthropic_model(openai_sdk, provider_server, include_usage):
    provider_server.script(
        "anthropic", ToolCallReply([PARIS], text="Let me see.", input_tokens=8, output_tokens=6)
    )
    extra = {"stream_options": {"include_usage": True}} if include_usage else {}
    chunks = list(
        openai_sdk.chat.completions.create(
            model=CLAUDE, messages=[{"role": "user", "content": "Weather?"}], stream=True,
            tools=[O_WEATHER], **extra,
        )
    )  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Let me see."
    calls = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert (calls[0].id, calls[0].function.name) == ("c1", "get_weather")
    assert len(calls) > 2 and "".join(d.function.arguments or "" for d in calls) == (
        '{"city": "Paris"}'
    )
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "tool_calls"
    usage = [c.usage for c in chunks if c.usage is not None]
    if include_usage:
        assert [(u.prompt_tokens, u.completion_tokens) for u in usage] == [(8, 6)]
    else:
        assert usage == []
    assert provider_server.requests_to("/v1/messages")[-1].body["stream"] is True
    (run,) = recorded(CLAUDE)
    assert (run.input_tokens, run.output_tokens) == (8, 6)


@pytest.mark.parametrize("stream", [False, True])
def test_an_anthropic_models_errors_come_in_openais_shape(
    openai_sdk, provider_server, claude_connection, stream
):
    hello = [{"role": "user", "content": "x"}]
    key = claude_connection.api_key
    provider_server.script("anthropic", ErrorReply(400, f"bad max_tokens for {key}"))
    with pytest.raises(openai.BadRequestError) as bad:
        openai_sdk.chat.completions.create(model=CLAUDE, messages=hello, stream=stream)
    assert "bad max_tokens" in bad.value.message and key not in json.dumps(bad.value.body)
    assert recorded(CLAUDE)[-1].status == "failed"
    provider_server.script("anthropic", ErrorReply(529, "Overloaded"))
    with pytest.raises(openai.InternalServerError) as failed:
        openai_sdk.chat.completions.create(model=CLAUDE, messages=hello, stream=stream)
    assert failed.value.status_code == 502 and failed.value.code == "provider_error"
    provider_server.script("anthropic", ErrorReply(401, f"invalid x-api-key {key}"))
    with pytest.raises(openai.InternalServerError) as refused:
        openai_sdk.chat.completions.create(model=CLAUDE, messages=hello, stream=stream)
    assert "connection's credentials" in refused.value.message
    assert key not in json.dumps(refused.value.body)


def test_bad_chats_for_an_anthropic_model_are_400s_naming_the_field(openai_sdk):
    hello = [{"role": "user", "content": "x"}]
    bad_bodies = {
        "response_format": {"response_format": {"type": "json_schema", "json_schema": {
            "name": "City", "schema": {"type": "object"}}}},
        "n": {"n": 2},
        "temperature": {"temperature": "hot"},
        "stream": {"stream": "yes"},
        "messages[0].role": {"messages": [{"role": "function", "content": "x"}]},
        "messages[0].content[0]": {"messages": [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "x", "format": "wav"}}]}]},
        "messages[0].content[1]": {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "x"},
            {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]},
        "messages[1].tool_calls[0]": {"messages": [*hello, {"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]},
        "messages[1].tool_call_id": {"messages": [*hello, {"role": "tool", "content": "x"}]},
        "tools[0]": {"tools": [{"type": "custom", "custom": {"name": "x"}}]},
        "tool_choice": {"tool_choice": "sometimes"},
    }  # fmt: skip
    for param, body in bad_bodies.items():
        with pytest.raises(openai.BadRequestError) as bad:
            openai_sdk.chat.completions.create(**{"model": CLAUDE, "messages": hello, **body})
        assert bad.value.param == param, (param, bad.value)
    with pytest.raises(openai.BadRequestError) as odd:  # (not a 500)
        openai_sdk.chat.completions.create(
            model=CLAUDE, messages=hello, tool_choice={"type": "function", "function": "f"}
        )
    assert odd.value.param == "tool_choice"
    with pytest.raises(openai.BadRequestError) as schema:
        openai_sdk.chat.completions.create(
            model=CLAUDE, messages=hello, response_format={"type": "json_object"}
        )
    assert "cannot be sent to an Anthropic connection's model" in schema.value.message
    assert not Run.objects.exists()


# == the stream translations alone ============================================================
def _collect(translate, pieces: list[bytes]) -> tuple[bytes, int]:
    """What `translate(first, rest)` makes of `pieces`, and how often it closed `rest` (the
    provider's stream: its closing lets the call be recorded)."""
    closed = []

    async def rest():
        try:
            for piece in pieces[1:]:
                yield piece
        finally:
            closed.append(1)

    async def run() -> bytes:
        return b"".join([e async for e in translate(pieces[0], rest())])

    return asyncio.run(run()), len(closed)


def _data(out: bytes) -> list:
    return [json.loads(line[6:]) for line in out.split(b"\n") if line.startswith(b"data: {")]


def chunk(delta: dict, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"


def test_a_chunk_stream_cut_short_or_failing_ends_with_an_error_event():
    def events(*pieces):
        out, times = _collect(
            lambda first, rest: gateway_messages.messages_events(first, rest, "msg_1", GPT),
            list(pieces),
        )
        assert times == 1
        return _data(out)

    cut = events(chunk({"content": "Hal"}), chunk({"content": "f"}))
    assert cut[-1]["type"] == "error" and "ended before" in cut[-1]["error"]["message"]
    failing = events(chunk({"content": "Hi"}), b'data: {"error": {"message": "overloaded"}}\n\n')
    assert failing[-1] == {"type": "error", "error": {
        "type": "api_error", "message": "The provider failed: overloaded"}}  # fmt: skip
    late = events(  # a call named after its first piece; the last event without its blank line
        chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"arguments": '{"a"'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": ": 1}"}}]}),
        chunk({}, "tool_calls").rstrip(),
    )
    assert [e["type"] for e in late][-2:] == ["message_delta", "message_stop"]
    start = next(e for e in late if e["type"] == "content_block_start")
    assert start["content_block"]["name"] == "f" and start["content_block"]["id"] == "c1"
    assert (
        "".join(e["delta"]["partial_json"] for e in late if e["type"] == "content_block_delta")
        == '{"a": 1}'
    )
    assert late[-2]["delta"]["stop_reason"] == "tool_use"


def test_a_messages_stream_cut_short_or_failing_ends_with_an_error_chunk():
    ids = gateway_chat._ChunkIds("chatcmpl-1", 1, CLAUDE)

    def chunks(*pieces):
        out, times = _collect(
            lambda first, rest: gateway_chat.chunks_of_events(first, rest, ids, False),
            list(pieces),
        )
        assert times == 1 and out.endswith(b"data: [DONE]\n\n")
        return _data(out)

    text = b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}\n\n'  # noqa: E501
    cut = chunks(text)
    assert (
        cut[-1]["error"]["code"] == "provider_error"
        and "ended before" in cut[-1]["error"]["message"]
    )
    failing = chunks(
        text,
        b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", '
        b'"message": "Overloaded"}}\n\n',
    )
    assert failing[-1]["error"]["message"] == "The provider failed: Overloaded"
