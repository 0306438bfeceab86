"""The fake provider server, driven by the REAL anthropic / openai SDK clients over loopback HTTP.

If the SDKs parse what it sends (without warnings), it speaks their wire formats.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anthropic
import httpx2
import openai
import pytest

from tests.fakes.fixtures import provider_server_fixture
from tests.fakes.provider_server import (
    ErrorReply,
    ProviderServer,
    TextReply,
    ToolCall,
    ToolCallReply,
    embedding_for,
    resolved_model,
)

pytestmark = pytest.mark.filterwarnings("error")

server = pytest.fixture(name="server")(provider_server_fixture)

T = TypeVar("T")
MESSAGES = [{"role": "user", "content": "hi"}]
WEATHER = ToolCall("toolu_1", "get_weather", '{"city": "Paris", "unit": "c"}')
TIME = ToolCall("toolu_2", "get_time", '{"tz": "Europe/Paris"}')
ANTHROPIC_TOOLS = [
    {"name": n, "description": n, "input_schema": {"type": "object"}}
    for n in ("get_weather", "get_time")
]
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"tz": {"type": "string"}},
                "required": ["tz"],
                "additionalProperties": False,
            },
        },
    },
]


def with_anthropic(
    server: ProviderServer, body: Callable[[anthropic.AsyncAnthropic], Awaitable[T]], **kw: Any
) -> T:
    async def main() -> T:
        async with anthropic.AsyncAnthropic(
            api_key=kw.pop("api_key", "k"),
            base_url=server.anthropic_base_url,
            http_client=httpx2.AsyncClient(),
            max_retries=0,
            **kw,
        ) as client:
            return await body(client)

    return asyncio.run(main())


def with_openai(
    server: ProviderServer, body: Callable[[openai.AsyncOpenAI], Awaitable[T]], **kw: Any
) -> T:
    async def main() -> T:
        async with openai.AsyncOpenAI(
            api_key=kw.pop("api_key", "k"),
            base_url=server.openai_base_url,
            http_client=httpx2.AsyncClient(),
            max_retries=0,
            **kw,
        ) as client:
            return await body(client)

    return asyncio.run(main())


def sse_events(text: str) -> list[tuple[str | None, str]]:
    """(event, data) pairs of an SSE body."""
    events = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((fields.get("event"), fields["data"]))
    return events


# --------------------------------------------------------------------------------- Anthropic


def test_anthropic_text(server):
    server.script(
        "anthropic", TextReply("Hello there", input_tokens=7, output_tokens=3, cache_read_tokens=4)
    )

    async def body(client):
        return await client.messages.create(model="claude-test", max_tokens=64, messages=MESSAGES)

    message = with_anthropic(server, body)
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "Hello there"
    assert message.model == "claude-test-20250101" == resolved_model("claude-test")
    assert message.stop_reason == "end_turn"
    assert message.id.startswith("msg_")
    assert message.usage.input_tokens == 7
    assert message.usage.output_tokens == 3
    assert message.usage.cache_read_input_tokens == 4
    assert message.usage.cache_creation_input_tokens == 0


def test_anthropic_max_tokens_and_default_reply(server):
    server.script("anthropic", TextReply("cut", stop_reason="max_tokens"))

    async def body(client):
        first = await client.messages.create(model="m", max_tokens=5, messages=MESSAGES)
        second = await client.messages.create(model="m", max_tokens=5, messages=MESSAGES)
        return first, second

    first, second = with_anthropic(server, body)
    assert first.stop_reason == "max_tokens"
    assert second.content[0].text == "ok"
    assert second.stop_reason == "end_turn"


def test_anthropic_one_tool_call(server):
    server.script("anthropic", ToolCallReply([WEATHER]))

    async def body(client):
        return await client.messages.create(
            model="claude-test", max_tokens=64, messages=MESSAGES, tools=ANTHROPIC_TOOLS
        )

    message = with_anthropic(server, body)
    assert message.stop_reason == "tool_use"
    (block,) = message.content
    assert block.type == "tool_use"
    assert (block.id, block.name, block.input) == (
        "toolu_1",
        "get_weather",
        {"city": "Paris", "unit": "c"},
    )


def test_anthropic_parallel_tool_calls_with_text(server):
    server.script("anthropic", ToolCallReply([WEATHER, TIME], text="Let me check."))

    async def body(client):
        return await client.messages.create(
            model="claude-test", max_tokens=64, messages=MESSAGES, tools=ANTHROPIC_TOOLS
        )

    message = with_anthropic(server, body)
    assert [b.type for b in message.content] == ["text", "tool_use", "tool_use"]
    assert message.content[0].text == "Let me check."
    assert [(b.id, b.input) for b in message.content[1:]] == [
        ("toolu_1", {"city": "Paris", "unit": "c"}),
        ("toolu_2", {"tz": "Europe/Paris"}),
    ]


def test_anthropic_malformed_tool_arguments(server):
    bad = ToolCall("toolu_9", "get_weather", '{"city": "Par')
    server.script("anthropic", ToolCallReply([bad]), ToolCallReply([bad]))

    async def body(client):
        message = await client.messages.create(model="m", max_tokens=64, messages=MESSAGES)
        stream = await client.messages.create(
            model="m", max_tokens=64, messages=MESSAGES, stream=True
        )
        partial = "".join(
            [e.delta.partial_json async for e in stream if e.type == "content_block_delta"]
        )
        return message, partial

    message, partial = with_anthropic(server, body)
    assert message.content[0].input == {"INVALID_JSON": '{"city": "Par'}
    assert partial == '{"city": "Par'


def test_anthropic_stream_text_with_helper(server):
    server.script(
        "anthropic",
        TextReply("Hello streaming world", input_tokens=12, output_tokens=4, cache_read_tokens=2),
    )

    async def body(client):
        async with client.messages.stream(
            model="claude-test", max_tokens=64, messages=MESSAGES
        ) as stream:
            pieces = [text async for text in stream.text_stream]
            return pieces, await stream.get_final_message()

    pieces, message = with_anthropic(server, body)
    assert 2 <= len(pieces) <= 3
    assert "".join(pieces) == "Hello streaming world" == message.content[0].text
    assert message.model == "claude-test-20250101"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 12
    assert message.usage.output_tokens == 4
    assert message.usage.cache_read_input_tokens == 2


def test_anthropic_stream_raw_events(server):
    server.script("anthropic", TextReply("abcdef"))

    async def body(client):
        stream = await client.messages.create(
            model="claude-test", max_tokens=64, messages=MESSAGES, stream=True
        )
        return [event async for event in stream]

    events = with_anthropic(server, body)
    assert [e.type for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0].message
    assert start.content == [] and start.stop_reason is None
    assert start.usage.input_tokens == 10
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == "abcdef"
    assert events[-2].delta.stop_reason == "end_turn"
    assert events[-2].usage.output_tokens == 5


def test_anthropic_stream_tool_calls_with_helper(server):
    server.script("anthropic", ToolCallReply([WEATHER, TIME], text="Checking"))

    async def body(client):
        async with client.messages.stream(
            model="claude-test", max_tokens=64, messages=MESSAGES, tools=ANTHROPIC_TOOLS
        ) as stream:
            deltas = [
                event.delta.partial_json
                async for event in stream
                if event.type == "content_block_delta" and event.delta.type == "input_json_delta"
            ]
            return deltas, await stream.get_final_message()

    deltas, message = with_anthropic(server, body)
    assert 4 <= len(deltas) <= 6  # each call's input JSON comes in 2-3 pieces
    assert message.stop_reason == "tool_use"
    assert [b.type for b in message.content] == ["text", "tool_use", "tool_use"]
    assert message.content[0].text == "Checking"
    assert message.content[1].input == {"city": "Paris", "unit": "c"}
    assert (message.content[2].id, message.content[2].name) == ("toolu_2", "get_time")
    assert message.content[2].input == {"tz": "Europe/Paris"}


def test_anthropic_rate_limit_with_retry_after(server):
    server.script(
        "anthropic",
        ErrorReply(429, "slow down", headers={"retry-after": "0.1"}),
        ErrorReply(429, "slow down again", headers={"retry-after": "2"}),
    )

    async def body(client):
        with pytest.raises(anthropic.RateLimitError) as plain:
            await client.messages.create(model="m", max_tokens=5, messages=MESSAGES)
        with pytest.raises(anthropic.RateLimitError) as streamed:
            async with client.messages.stream(model="m", max_tokens=5, messages=MESSAGES) as s:
                await s.get_final_message()
        return plain.value, streamed.value

    plain, streamed = with_anthropic(server, body)
    assert plain.status_code == 429
    assert plain.response.headers["retry-after"] == "0.1"
    assert plain.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
        "request_id": plain.body["request_id"],
    }
    assert plain.type == "rate_limit_error"
    assert plain.request_id and plain.request_id.startswith("req_")
    assert streamed.response.headers["retry-after"] == "2"


def test_anthropic_overloaded_and_server_errors(server):
    server.script("anthropic", ErrorReply(529, "Overloaded"), ErrorReply(500))

    async def body(client):
        errors = []
        for _ in range(2):
            with pytest.raises(anthropic.APIStatusError) as info:
                await client.messages.create(model="m", max_tokens=5, messages=MESSAGES)
            errors.append(info.value)
        return errors

    overloaded, internal = with_anthropic(server, body)
    assert isinstance(overloaded, anthropic.OverloadedError)
    assert overloaded.type == "overloaded_error"
    assert isinstance(internal, anthropic.InternalServerError)
    assert internal.type == "api_error"


def test_anthropic_authentication(server):
    server.expect_api_key("secret")

    async def body(client):
        with pytest.raises(anthropic.AuthenticationError) as info:
            await client.messages.create(model="m", max_tokens=5, messages=MESSAGES)
        good = client.with_options(api_key="secret")
        return info.value, await good.messages.create(model="m", max_tokens=5, messages=MESSAGES)

    error, message = with_anthropic(server, body, api_key="wrong")
    assert error.status_code == 401
    assert error.type == "authentication_error"
    assert message.content[0].text == "ok"
    # anthropic 2.x sends the API key as `Authorization: Bearer`, not `x-api-key`
    assert [r.headers.get("authorization") for r in server.received] == [
        "Bearer wrong",
        "Bearer secret",
    ]

    # a raw client using the documented `x-api-key` header is accepted too
    with httpx2.Client(base_url=server.url, headers={"anthropic-version": "2023-06-01"}) as http:
        request = {"model": "m", "max_tokens": 5, "messages": MESSAGES}
        by_header = http.post("/v1/messages", headers={"x-api-key": "secret"}, json=request)
        missing = http.post("/v1/messages", json=request)
    assert by_header.status_code == 200
    assert missing.status_code == 401
    assert missing.json()["error"] == {
        "type": "authentication_error",
        "message": "invalid x-api-key",
    }


def test_anthropic_received_request(server):
    async def body(client):
        await client.messages.create(
            model="claude-test",
            max_tokens=64,
            system="be brief",
            messages=MESSAGES,
            tools=ANTHROPIC_TOOLS,
        )

    with_anthropic(server, body)
    (request,) = server.received
    assert (request.api, request.method, request.path) == ("anthropic", "POST", "/v1/messages")
    assert "anthropic-version" in request.headers
    assert request.headers["authorization"] == "Bearer k"
    assert request.body["model"] == "claude-test"
    assert request.body["system"] == "be brief"
    assert request.body["messages"] == MESSAGES
    assert [t["name"] for t in request.body["tools"]] == ["get_weather", "get_time"]
    assert server.requests_to("/v1/messages") == [request]


def test_anthropic_models_and_count_tokens(server):
    async def body(client):
        models = [m async for m in client.models.list()]
        one = await client.models.retrieve("claude-test-1")
        with pytest.raises(anthropic.NotFoundError):
            await client.models.retrieve("nope")
        count = await client.messages.count_tokens(model="m", messages=MESSAGES)
        return models, one, count

    models, one, count = with_anthropic(server, body)
    assert [m.id for m in models] == ["claude-test-1", "gpt-test-1"]
    assert all(m.type == "model" and m.display_name and m.created_at for m in models)
    assert one.id == "claude-test-1"
    assert count.input_tokens > 0
    assert {r.api for r in server.received} == {"anthropic"}


# --------------------------------------------------------------------------------- OpenAI


def test_openai_text(server):
    server.script(
        "openai", TextReply("Hello there", input_tokens=9, output_tokens=2, cache_read_tokens=4)
    )

    async def body(client):
        return await client.chat.completions.create(model="gpt-test", messages=MESSAGES)

    completion = with_openai(server, body)
    assert completion.object == "chat.completion"
    assert completion.model == "gpt-test-20250101"
    (choice,) = completion.choices
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    assert choice.message.content == "Hello there"
    assert choice.message.tool_calls is None
    assert completion.usage.prompt_tokens == 9
    assert completion.usage.completion_tokens == 2
    assert completion.usage.total_tokens == 11
    assert completion.usage.prompt_tokens_details.cached_tokens == 4


def test_openai_length_finish_reason(server):
    server.script("openai", TextReply("cut", stop_reason="max_tokens"))

    async def body(client):
        return await client.chat.completions.create(model="gpt-test", messages=MESSAGES)

    assert with_openai(server, body).choices[0].finish_reason == "length"


def test_openai_one_tool_call(server):
    server.script("openai", ToolCallReply([WEATHER]))

    async def body(client):
        return await client.chat.completions.create(
            model="gpt-test", messages=MESSAGES, tools=OPENAI_TOOLS
        )

    choice = with_openai(server, body).choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert (call.id, call.type, call.function.name) == ("toolu_1", "function", "get_weather")
    assert json.loads(call.function.arguments) == {"city": "Paris", "unit": "c"}


def test_openai_parallel_tool_calls(server):
    bad = ToolCall("call_3", "get_time", '{"tz": ')
    server.script("openai", ToolCallReply([WEATHER, TIME, bad], text="Checking both."))

    async def body(client):
        return await client.chat.completions.create(
            model="gpt-test", messages=MESSAGES, tools=OPENAI_TOOLS
        )

    message = with_openai(server, body).choices[0].message
    assert message.content == "Checking both."
    assert [c.id for c in message.tool_calls] == ["toolu_1", "toolu_2", "call_3"]
    assert json.loads(message.tool_calls[1].function.arguments) == {"tz": "Europe/Paris"}
    assert message.tool_calls[2].function.arguments == '{"tz": '  # raw, malformed on purpose


def test_openai_stream_text_helper_and_raw(server):
    server.script("openai", TextReply("Hello streaming world"), TextReply("Hello streaming world"))

    async def body(client):
        async with client.chat.completions.stream(model="gpt-test", messages=MESSAGES) as stream:
            helper_pieces = [e.delta async for e in stream if e.type == "content.delta" and e.delta]
            final = await stream.get_final_completion()
        raw = await client.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True)
        chunks = [chunk async for chunk in raw]
        return helper_pieces, final, chunks

    helper_pieces, final, chunks = with_openai(server, body)
    assert 2 <= len(helper_pieces) <= 3
    assert "".join(helper_pieces) == "Hello streaming world"
    assert final.choices[0].message.content == "Hello streaming world"
    assert final.choices[0].finish_reason == "stop"
    assert final.model == "gpt-test-20250101"

    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Hello streaming world"
    assert [c.choices[0].finish_reason for c in chunks][-1] == "stop"
    assert all(c.usage is None for c in chunks)  # no include_usage: no usage chunk


def test_openai_stream_tool_calls(server):
    server.script("openai", ToolCallReply([WEATHER, TIME]), ToolCallReply([WEATHER, TIME]))

    async def body(client):
        async with client.chat.completions.stream(
            model="gpt-test", messages=MESSAGES, tools=OPENAI_TOOLS
        ) as stream:
            final = await stream.get_final_completion()
        raw = await client.chat.completions.create(
            model="gpt-test", messages=MESSAGES, tools=OPENAI_TOOLS, stream=True
        )
        return final, [chunk async for chunk in raw]

    final, chunks = with_openai(server, body)
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert [(c.id, c.function.name) for c in calls] == [
        ("toolu_1", "get_weather"),
        ("toolu_2", "get_time"),
    ]
    assert calls[0].function.parsed_arguments == {"city": "Paris", "unit": "c"}
    assert json.loads(calls[1].function.arguments) == {"tz": "Europe/Paris"}

    # raw chunks: the first chunk of a call names it, the rest carry only index + arguments
    assembled: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or []:
            entry = assembled.setdefault(delta.index, {"arguments": ""})
            if delta.id is not None:
                assert "id" not in entry and delta.type == "function" and delta.function.name
                entry.update(id=delta.id, name=delta.function.name)
            else:
                assert delta.function.name is None and delta.type is None
            entry["arguments"] += delta.function.arguments or ""
    assert sorted(assembled) == [0, 1]
    assert json.loads(assembled[0]["arguments"]) == {"city": "Paris", "unit": "c"}
    assert assembled[1]["id"] == "toolu_2"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_openai_stream_usage(server):
    server.script(
        "openai",
        TextReply("counted", input_tokens=20, output_tokens=3, cache_read_tokens=8),
        TextReply("counted again"),
    )

    async def body(client):
        raw = await client.chat.completions.create(
            model="gpt-test",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in raw]
        async with client.chat.completions.stream(
            model="gpt-test", messages=MESSAGES, stream_options={"include_usage": True}
        ) as stream:
            final = await stream.get_final_completion()
        return chunks, final

    chunks, final = with_openai(server, body)
    *content, last = chunks
    assert last.choices == []
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (20, 3)
    assert last.usage.total_tokens == 23
    assert last.usage.prompt_tokens_details.cached_tokens == 8
    assert all(c.usage is None for c in content)
    assert final.usage.completion_tokens == 5
    assert final.choices[0].message.content == "counted again"
    assert server.received[0].body["stream_options"] == {"include_usage": True}


def test_openai_rate_limit_with_retry_after(server):
    server.script(
        "openai",
        ErrorReply(429, "Rate limit reached", headers={"retry-after": "0.1"}),
        ErrorReply(429, "again", headers={"retry-after": "3"}),
    )

    async def body(client):
        with pytest.raises(openai.RateLimitError) as plain:
            await client.chat.completions.create(model="gpt-test", messages=MESSAGES)
        with pytest.raises(openai.RateLimitError) as streamed:
            await client.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True)
        return plain.value, streamed.value

    plain, streamed = with_openai(server, body)
    assert plain.status_code == 429
    assert plain.response.headers["retry-after"] == "0.1"
    assert plain.body == {
        "message": "Rate limit reached",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    assert plain.code == "rate_limit_exceeded"
    assert plain.request_id and plain.request_id.startswith("req_")
    assert streamed.response.headers["retry-after"] == "3"


def test_openai_authentication(server):
    server.expect_api_key("secret")

    async def body(client):
        with pytest.raises(openai.AuthenticationError) as info:
            await client.chat.completions.create(model="gpt-test", messages=MESSAGES)
        with pytest.raises(openai.AuthenticationError):
            await client.embeddings.create(model="emb", input="x")
        good = client.with_options(api_key="secret")
        completion = await good.chat.completions.create(model="gpt-test", messages=MESSAGES)
        return info.value, completion

    error, completion = with_openai(server, body, api_key="wrong")
    assert error.status_code == 401
    assert error.code == "invalid_api_key"
    assert completion.choices[0].message.content == "ok"
    assert [r.headers["authorization"] for r in server.received] == [
        "Bearer wrong",
        "Bearer wrong",
        "Bearer secret",
    ]


def test_openai_received_request(server):
    async def body(client):
        await client.chat.completions.create(
            model="gpt-test", messages=MESSAGES, tools=OPENAI_TOOLS, temperature=0.2
        )

    with_openai(server, body)
    (request,) = server.received
    assert (request.api, request.method, request.path) == ("openai", "POST", "/v1/chat/completions")
    assert "anthropic-version" not in request.headers
    assert request.body["model"] == "gpt-test"
    assert request.body["messages"] == MESSAGES
    assert request.body["temperature"] == 0.2
    assert [t["function"]["name"] for t in request.body["tools"]] == ["get_weather", "get_time"]


def test_openai_embeddings_float_base64_and_default(server):
    async def body(client):
        as_float = await client.embeddings.create(
            model="text-embedding-test", input=["alpha", "beta"], encoding_format="float"
        )
        as_base64 = await client.embeddings.create(
            model="text-embedding-test", input=["alpha", "beta"], encoding_format="base64"
        )
        default = await client.embeddings.create(model="text-embedding-test", input="alpha")
        sized = await client.embeddings.create(
            model="text-embedding-test", input="alpha", dimensions=32, encoding_format="float"
        )
        tokens = await client.embeddings.create(
            model="text-embedding-test", input=[[1, 2, 3]], encoding_format="float"
        )
        return as_float, as_base64, default, sized, tokens

    as_float, as_base64, default, sized, tokens = with_openai(server, body)
    assert as_float.object == "list"
    assert as_float.model == "text-embedding-test"
    assert [(d.object, d.index) for d in as_float.data] == [("embedding", 0), ("embedding", 1)]
    alpha, beta = (d.embedding for d in as_float.data)
    assert len(alpha) == 8 and alpha != beta
    assert alpha == embedding_for("alpha")
    assert abs(sum(v * v for v in alpha) - 1.0) < 1e-5
    assert as_float.usage.prompt_tokens == as_float.usage.total_tokens > 0

    # explicit base64: the SDK hands back the string; little-endian float32
    raw = base64.b64decode(as_base64.data[0].embedding)
    assert list(struct.unpack("<8f", raw)) == alpha
    # no encoding_format: the SDK itself asks for base64 and decodes it into floats
    assert server.received[2].body["encoding_format"] == "base64"
    assert default.data[0].embedding == alpha

    assert len(sized.data[0].embedding) == 32
    assert sized.data[0].embedding == embedding_for("alpha", 32)
    assert tokens.data[0].embedding == embedding_for("[1,2,3]")
    assert tokens.usage.prompt_tokens == 3


def test_openai_embeddings_scripted_error_and_bad_input(server):
    server.script("embeddings", ErrorReply(429, "embedding quota", {"retry-after": "1"}))

    async def body(client):
        with pytest.raises(openai.RateLimitError) as limited:
            await client.embeddings.create(model="emb", input="x", encoding_format="float")
        with pytest.raises(openai.BadRequestError):
            await client.embeddings.create(model="emb", input=[], encoding_format="float")
        ok = await client.embeddings.create(model="emb", input="x", encoding_format="float")
        return limited.value, ok

    limited, ok = with_openai(server, body)
    assert limited.response.headers["retry-after"] == "1"
    assert ok.data[0].embedding == embedding_for("x")


def test_openai_models(server):
    server.models = ["gpt-a", "gpt-b"]

    async def body(client):
        page = await client.models.list()
        one = await client.models.retrieve("gpt-b")
        return [m async for m in page], one

    models, one = with_openai(server, body)
    assert [(m.id, m.object) for m in models] == [("gpt-a", "model"), ("gpt-b", "model")]
    assert all(m.owned_by and m.created for m in models)
    assert one.id == "gpt-b"
    assert {r.api for r in server.received} == {"openai"}


# --------------------------------------------------------------------------------- HTTP behaviour


def test_wire_format_of_streams(server):
    server.script("anthropic", ToolCallReply([WEATHER], text="hi"))
    server.script("openai", TextReply("hello"))
    with httpx2.Client(base_url=server.url) as http:
        anthropic_response = http.post(
            "/v1/messages",
            headers={"anthropic-version": "2023-06-01", "x-api-key": "k"},
            json={"model": "m", "max_tokens": 5, "messages": MESSAGES, "stream": True},
        )
        openai_response = http.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": MESSAGES, "stream": True},
        )
        plain = http.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES})
    for response in (anthropic_response, openai_response):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["transfer-encoding"] == "chunked"
        assert "content-length" not in response.headers
    assert int(plain.headers["content-length"]) == len(plain.content)

    events = sse_events(anthropic_response.text)
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    assert all(json.loads(data)["type"] == name for name, data in events)
    tool_start = next(
        json.loads(d) for n, d in events if n == "content_block_start" and '"tool_use"' in d
    )
    assert tool_start["index"] == 1
    assert tool_start["content_block"] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "get_weather",
        "input": {},
    }

    openai_events = sse_events(openai_response.text)
    assert all(name is None for name, _ in openai_events)
    assert openai_events[-1] == (None, "[DONE]")


def test_keep_alive_reuses_one_connection(server):
    server.script("anthropic", TextReply("a"), TextReply("b"), TextReply("c"))

    async def body(client):
        for _ in range(2):
            await client.messages.create(model="m", max_tokens=5, messages=MESSAGES)
        async with client.messages.stream(model="m", max_tokens=5, messages=MESSAGES) as s:
            await s.get_final_message()
        for _ in range(3):
            await client.messages.create(model="m", max_tokens=5, messages=MESSAGES)

    with_anthropic(server, body)
    assert len(server.received) == 6
    assert server.connection_count == 1


def test_openai_stream_then_request_on_same_connection(server):
    async def body(client):
        for _ in range(2):
            raw = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            assert "".join([c.choices[0].delta.content or "" async for c in raw if c.choices])
            await client.chat.completions.create(model="m", messages=MESSAGES)

    with_openai(server, body)
    assert server.connection_count == 1


def test_concurrent_requests(server):
    async def body(client):
        calls = [
            client.messages.create(model=f"m{i}", max_tokens=5, messages=MESSAGES)
            for i in range(20)
        ]
        return await asyncio.gather(*calls)

    messages = with_anthropic(server, body)
    assert sorted(m.model for m in messages) == sorted(f"m{i}-20250101" for i in range(20))
    assert server.errors == []


def test_delay_makes_client_time_out_and_server_survives(server):
    server.script("openai", TextReply("late", delay_s=1.0))

    async def body(client):
        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(model="m", messages=MESSAGES, timeout=0.1)
        elapsed = time.monotonic() - started
        completion = await client.chat.completions.create(model="m", messages=MESSAGES)
        return elapsed, completion

    elapsed, completion = with_openai(server, body)
    assert elapsed < 0.9
    assert completion.choices[0].message.content == "ok"
    assert server.errors == []


def test_chunk_delay_spaces_out_stream_events(server):
    server.script("anthropic", TextReply("abcdef", chunk_delay_s=0.03))

    async def body(client):
        started = time.monotonic()
        arrivals = []
        async with client.messages.stream(model="m", max_tokens=5, messages=MESSAGES) as s:
            async for _ in s.text_stream:
                arrivals.append(time.monotonic() - started)
        return arrivals, time.monotonic() - started

    arrivals, total = with_anthropic(server, body)
    assert len(arrivals) == 3
    # 9 events, 8 gaps of 30 ms; the first text follows 3 of them and precedes 5 more
    assert arrivals[0] >= 0.08
    assert total - arrivals[0] >= 0.12
    assert arrivals[1] - arrivals[0] >= 0.02


def test_usage_can_come_late_or_not_at_all(server):
    server.script(
        "openai",
        TextReply("late", output_tokens=7, usage_delay_s=0.3),
        TextReply("never", usage=False),
        TextReply("never", usage=False),
    )
    server.script("anthropic", TextReply("late", output_tokens=7, usage_delay_s=0.3))

    async def openai_body(client):
        started = time.monotonic()
        stream = await client.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        arrivals = [(c, time.monotonic() - started) async for c in stream]
        never = await client.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        whole = await client.chat.completions.create(model="m", messages=MESSAGES)
        return arrivals, [c async for c in never], whole

    arrivals, never, whole = with_openai(server, openai_body)
    (finish, finished_at), (usage, counted_at) = arrivals[-2:]
    assert finish.choices[0].finish_reason == "stop" and usage.usage.completion_tokens == 7
    assert counted_at - finished_at >= 0.25
    assert never[-1].choices[0].finish_reason == "stop" and all(c.usage is None for c in never)
    assert whole.choices[0].message.content == "never" and whole.usage is None

    async def anthropic_body(client):
        started, arrivals = time.monotonic(), []
        async with client.messages.stream(model="m", max_tokens=5, messages=MESSAGES) as s:
            async for event in s:
                arrivals.append((event.type, time.monotonic() - started))
            return arrivals, await s.get_final_message()

    arrivals, message = with_anthropic(server, anthropic_body)
    times = dict(arrivals)
    assert times["message_delta"] - times["content_block_stop"] >= 0.25
    assert message.usage.output_tokens == 7


def test_unknown_path_and_script_validation(server):
    with httpx2.Client(base_url=server.url) as http:
        missing = http.post("/v1/nothing", json={})
        bad_json = http.post(
            "/v1/chat/completions",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        no_model = http.post(
            "/v1/messages", json={"messages": []}, headers={"anthropic-version": "2023-06-01"}
        )
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "invalid_request_error"
    assert bad_json.status_code == 400 and bad_json.json()["error"]["code"] is None
    assert no_model.status_code == 400
    assert no_model.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(ValueError):
        server.script("gemini", TextReply("x"))
    with pytest.raises(TypeError):
        server.script("embeddings", TextReply("x"))
    server.script("openai", TextReply("x"))
    assert server.pending("openai") == 1


def test_close_is_prompt_and_idempotent():
    server = ProviderServer()
    server.script("anthropic", TextReply("never", delay_s=5))

    async def body(client):
        task = asyncio.ensure_future(
            client.messages.create(model="m", max_tokens=5, messages=MESSAGES)
        )
        while not server.received:
            await asyncio.sleep(0.01)
        started = time.monotonic()
        await asyncio.to_thread(server.close)
        closed_in = time.monotonic() - started
        with pytest.raises(anthropic.APIConnectionError):
            await task
        return closed_in

    closed_in = with_anthropic(server, body)
    assert closed_in < 1.0
    server.close()
    assert server.errors == []
