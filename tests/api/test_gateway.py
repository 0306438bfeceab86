"""Gateway models (`<connection>/<model>`): /v1/chat/completions straight to a tenant's
provider connection, driven by the real `openai` SDK against a live server, with the
scripted fake provider as the connection's service."""

from __future__ import annotations

import asyncio
import json
import time

import anthropic
import httpx2
import openai
import pytest
from pydantic import BaseModel

from agentplatform.v1.endpoint import OpenAIError
from agentplatform.v1.gateway import responses as gateway_responses
from agents.models import Run
from tenancy import services as tenancy
from tests.api.conftest import sdk
from tests.api.test_frameworks import framework
from tests.factories import make_connection
from tests.fakes.provider_server import ErrorReply, TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "local-openai/gpt-test"  # the `connection` fixture: "Local OpenAI", default gpt-test
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture
def client(asgi_server, keys, connection) -> openai.OpenAI:
    return sdk(asgi_server, keys["run"])


def recorded() -> Run:
    for _ in range(50):  # written just after the answer, off the request's path
        run = Run.objects.filter(gateway_model=MODEL).order_by("-pk").first()
        if run is not None:
            return run
        time.sleep(0.05)
    raise AssertionError("the gateway call was not recorded")


def test_models_list_the_connections_models_beside_the_agents(trio, agent, client):
    assert {m.id for m in client.models.list().data} == {"assistant", MODEL, "static", "local"}


def test_a_chat_goes_straight_to_the_connection_and_is_recorded(client, provider_server):
    provider_server.script(
        "openai", TextReply("Hi from the model.", input_tokens=9, output_tokens=4)
    )
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}],
        temperature=0.3,
        tools=[WEATHER],
    )
    assert completion.choices[0].message.content == "Hi from the model."
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body
    assert sent["model"] == "gpt-test" and sent["temperature"] == 0.3
    assert sent["messages"] == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Hi"},
    ]  # exactly the caller's: no agent instructions
    assert sent["tools"] == [WEATHER]
    run = recorded()
    assert (run.input_tokens, run.output_tokens, run.status) == (9, 4, "succeeded")
    assert run.initiated_by_api_key.name == "chat" and run.input == "Hi" and run.agent is None


@pytest.mark.parametrize("include_usage", [False, True])
def test_streams_pass_through_with_the_usage_only_when_asked(
    client, provider_server, include_usage
):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "get_weather", '{"city": "Paris"}')], text="Let me see."),
    )
    extra = {"stream_options": {"include_usage": True}} if include_usage else {}
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Weather?"}], stream=True,
            tools=[WEATHER], **extra,
        )
    )  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Let me see."
    calls = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert "".join(d.function.arguments or "" for d in calls) == '{"city": "Paris"}'
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert bool(usage_chunks) is include_usage
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body
    assert sent["stream_options"]["include_usage"] is True  # always asked: the record needs it
    assert recorded().output_tokens == 5


def test_provider_errors_pass_through_without_the_key(client, provider_server, connection):
    provider_server.script("openai", ErrorReply(400, f"bad request for {connection.api_key}"))
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
    assert connection.api_key not in json.dumps(bad.value.body) and "redacted" in str(bad.value)
    assert recorded().status == "failed"


def test_unknown_models_limited_keys_and_other_kinds_are_refused(
    trio, client, asgi_server, connection
):
    hello = [{"role": "user", "content": "hi"}]
    for model in ("nope/gpt-test", "local-openai/"):
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model=model, messages=hello)
    connection.allowed_models = ["gpt-other"]
    connection.save()
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model=MODEL, messages=hello)
    _, limited = tenancy.api_key_create(
        tenant=trio.acme, name="lim", scopes=["read", "run"], allowed_agents=["assistant"]
    )
    with pytest.raises(openai.PermissionDeniedError):
        sdk(asgi_server, limited).chat.completions.create(
            model="local-openai/gpt-other", messages=hello
        )
    with pytest.raises(openai.BadRequestError):  # (an Anthropic connection's model is
        client.chat.completions.create(model="local-openai/gpt-other", messages=[])
    # translated: tests/api/test_gateway_translate.py)
    assert not Run.objects.exists()


def test_a_model_of_an_anthropic_connection_goes_through_messages(
    trio, asgi_server, keys, provider_server, connection
):
    make_connection(
        trio.acme, "Claude", "anthropic", api_key="sk-ant-secret-1",
        base_url=provider_server.anthropic_base_url, default_model="claude-test",
    )  # fmt: skip
    claude = anthropic.Anthropic(api_key=keys["run"], base_url=asgi_server, max_retries=0)
    provider_server.script(
        "anthropic", TextReply("Hello from Claude.", input_tokens=7, output_tokens=2)
    )
    message = claude.messages.create(
        model="claude/claude-test", max_tokens=50, messages=[{"role": "user", "content": "Hi"}]
    )
    assert message.content[0].text == "Hello from Claude."
    sent = provider_server.requests_to("/v1/messages")[-1]
    assert sent.body["model"] == "claude-test" and sent.headers["x-api-key"] == "sk-ant-secret-1"
    provider_server.script("anthropic", TextReply("Streamed.", input_tokens=5, output_tokens=3))
    with claude.messages.stream(
        model="claude/claude-test", max_tokens=50, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        assert "".join(stream.text_stream) == "Streamed."
    for _ in range(50):
        runs = list(Run.objects.filter(gateway_model="claude/claude-test").order_by("pk"))
        if len(runs) == 2:
            break
        time.sleep(0.05)
    assert [(r.input_tokens, r.output_tokens) for r in runs] == [(7, 2), (5, 3)]


def test_a_provider_that_cannot_be_reached_is_a_502_saying_why(trio, client, settings):
    import socket

    with socket.socket() as spare:  # a port nothing listens on
        spare.bind(("127.0.0.1", 0))
        closed = spare.getsockname()[1]
    cases = {
        "private": ("http://10.255.255.1:9/v1", {}, "10.255.255.1 is not allowed (private)"),
        "closed": (f"http://127.0.0.1:{closed}/v1", {}, "cannot connect to 127.0.0.1"),
        "bad-header": (
            "http://127.0.0.1:9/v1",
            {"X-Note": "one\r\nInjected: two"},
            "extra headers are not valid HTTP headers",
        ),
    }
    for name, (base_url, headers, said) in cases.items():
        make_connection(
            trio.acme, name, "openai", api_key="sk-never-shown", base_url=base_url,
            default_model="m", extra_headers=headers, max_retries=0,
        )  # fmt: skip
        for stream in (False, True):
            with pytest.raises(openai.InternalServerError) as failed:
                client.chat.completions.create(
                    model=f"{name}/m", messages=[{"role": "user", "content": "x"}], stream=stream
                )
            assert failed.value.status_code == 502, name
            message = failed.value.body["message"]
            assert said in message and "sk-never-shown" not in message, (name, message)


def test_an_agent_limited_key_is_refused_a_gateway_model_on_messages_in_anthropics_shape(
    trio, asgi_server, keys, provider_server, connection
):
    make_connection(
        trio.acme, "Claude", "anthropic", api_key="sk-ant-secret-2",
        base_url=provider_server.anthropic_base_url, default_model="claude-test",
    )  # fmt: skip
    _, limited = tenancy.api_key_create(
        tenant=trio.acme, name="lim", scopes=["read", "run"], allowed_agents=["assistant"]
    )
    claude = anthropic.Anthropic(api_key=limited, base_url=asgi_server, max_retries=0)
    hello = [{"role": "user", "content": "hi"}]
    for stream in (False, True):
        with pytest.raises(anthropic.PermissionDeniedError) as refused:
            claude.messages.create(
                model="claude/claude-test", max_tokens=10, messages=hello, stream=stream
            )
        assert refused.value.body == {
            "type": "error",
            "error": {
                "type": "permission_error",
                "message": "This API key may run only some agents, not models.",
            },
        }
    with pytest.raises(anthropic.PermissionDeniedError):  # the key, before the model is sought
        claude.messages.create(model="nope/claude-test", max_tokens=10, messages=hello)
    assert "sk-ant-secret-2" not in json.dumps(refused.value.body)
    assert provider_server.requests_to("/v1/messages") == []
    assert not Run.objects.exists()
    # The model itself answers a key not limited to agents.
    provider_server.script("anthropic", TextReply("Hi."))
    allowed = anthropic.Anthropic(api_key=keys["run"], base_url=asgi_server, max_retries=0)
    answer = allowed.messages.create(model="claude/claude-test", max_tokens=10, messages=hello)
    assert answer.content[0].text == "Hi."


# -- /v1/responses -------------------------------------------------------------------------
R_WEATHER = {  # the Responses API's shape of a function tool
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
PARIS_CALL = ToolCall("w1", "get_weather", '{"city": "Paris"}')


class City(BaseModel):
    name: str
    population: int


def test_a_response_comes_from_the_connection_in_responses_words_and_is_recorded(
    client, provider_server
):
    provider_server.script(
        "openai", TextReply("Hi from the model.", input_tokens=9, output_tokens=4)
    )
    response = client.responses.create(
        model=MODEL, input="Hi", instructions="Be terse.", temperature=0.3, max_output_tokens=50
    )
    assert (response.status, response.output_text, response.model) == (
        "completed", "Hi from the model.", MODEL,
    )  # fmt: skip
    assert response.id.startswith("resp_") and response.output[0].type == "message"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (9, 4)
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body
    assert sent["model"] == "gpt-test" and sent["temperature"] == 0.3
    assert sent["max_completion_tokens"] == 50 and "max_tokens" not in sent  # (an OpenAI one)
    assert sent["messages"] == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Hi"},
    ]  # exactly the caller's: no agent instructions
    run = recorded()
    assert (run.input_tokens, run.output_tokens, run.status, run.input) == (9, 4, "succeeded", "Hi")
    assert run.agent is None and run.initiated_by_api_key.name == "chat"
    with pytest.raises(openai.NotFoundError):  # not stored: not read back ...
        client.responses.retrieve(response.id)
    with pytest.raises(openai.BadRequestError) as chained:  # ... nor continued
        client.responses.create(model=MODEL, input="More", previous_response_id=response.id)
    assert chained.value.param == "previous_response_id" and "whole conversation" in str(
        chained.value
    )


def test_function_tools_round_trip_through_a_gateway_model(client, provider_server):
    provider_server.script("openai", ToolCallReply([PARIS_CALL]))
    conversation: list = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.responses.create(
        model=MODEL, input=conversation, tools=[R_WEATHER], tool_choice="required"
    )
    (call,) = first.output
    assert (call.type, call.name, call.call_id) == ("function_call", "get_weather", "w1")
    assert json.loads(call.arguments) == {"city": "Paris"}
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body
    assert sent["tools"] == [{"type": "function", "function": {
        k: R_WEATHER[k] for k in ("name", "description", "parameters")
    }}]  # fmt: skip
    assert sent["tool_choice"] == "required"

    provider_server.script("openai", TextReply("Sunny in Paris."))
    conversation += [
        *first.output,
        {"type": "function_call_output", "call_id": "w1", "output": "sunny"},
    ]
    second = client.responses.create(model=MODEL, input=conversation, tools=[R_WEATHER])
    assert second.output_text == "Sunny in Paris."
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"]
    assert sent[1]["role"] == "assistant" and sent[1]["tool_calls"] == [
        {"id": "w1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
    ]  # fmt: skip
    assert sent[2] == {"role": "tool", "tool_call_id": "w1", "content": "sunny"}


def test_a_gateway_stream_is_told_in_the_typed_events(client, provider_server):
    provider_server.script(
        "openai", ToolCallReply([PARIS_CALL], text="Let me see.", input_tokens=8, output_tokens=6)
    )
    events = list(
        client.responses.create(model=MODEL, input="Weather?", tools=[R_WEATHER], stream=True)
    )
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert types.index("response.output_text.done") < types.index(
        "response.function_call_arguments.delta"
    )  # the message is done before the call opens
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == (
        "Let me see."
    )
    arguments = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(arguments) > 1 and "".join(arguments) == '{"city": "Paris"}'  # as they came
    final = events[-1].response
    assert [o.type for o in final.output] == ["message", "function_call"]
    assert final.output[1].arguments == '{"city": "Paris"}' and final.usage.output_tokens == 6
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert (recorded().input_tokens, recorded().output_tokens) == (8, 6)

    provider_server.script("openai", TextReply("Streamed."))
    with client.responses.stream(model=MODEL, input="Hi") as stream:
        done = stream.get_final_response()  # (the SDK checks the events add up)
    assert done.output_text == "Streamed." and done.status == "completed"


def test_text_format_json_schema_reaches_the_provider_and_parses(client, provider_server):
    provider_server.script("openai", TextReply('{"name": "Paris", "population": 2100000}'))
    response = client.responses.parse(model=MODEL, input="Biggest city?", text_format=City)
    assert response.output_parsed == City(name="Paris", population=2100000)
    format = provider_server.requests_to("/v1/chat/completions")[-1].body["response_format"]
    assert format["type"] == "json_schema" and format["json_schema"]["name"] == "City"
    assert format["json_schema"]["strict"] is True
    assert set(format["json_schema"]["schema"]["properties"]) == {"name", "population"}


@pytest.mark.parametrize("stream", [False, True])
def test_provider_errors_become_responses_errors_without_the_key(
    client, provider_server, connection, stream
):
    provider_server.script("openai", ErrorReply(400, f"bad temperature for {connection.api_key}"))
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model=MODEL, input="x", stream=stream)
    assert "bad temperature" in bad.value.message and "redacted" in bad.value.message
    assert connection.api_key not in json.dumps(bad.value.body)
    assert recorded().status == "failed"
    provider_server.script("openai", ErrorReply(500, "Traceback (most recent call last): ..."))
    with pytest.raises(openai.InternalServerError) as failed:
        client.responses.create(model=MODEL, input="x", stream=stream)
    assert failed.value.status_code == 502 and failed.value.code == "provider_error"
    provider_server.script("openai", ErrorReply(401, f"Incorrect API key {connection.api_key}"))
    with pytest.raises(openai.InternalServerError) as refused:  # not the caller's key: 502
        client.responses.create(model=MODEL, input="x", stream=stream)
    assert "connection's credentials" in refused.value.message
    assert connection.api_key not in json.dumps(refused.value.body)


def test_gateway_responses_refusals(trio, client, asgi_server, connection):
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="nope/gpt-test", input="hi")
    _, limited = tenancy.api_key_create(
        tenant=trio.acme, name="lim", scopes=["read", "run"], allowed_agents=["assistant"]
    )
    with pytest.raises(openai.PermissionDeniedError):
        sdk(asgi_server, limited).responses.create(model=MODEL, input="hi")
    make_connection(trio.acme, "Claude", "anthropic", api_key="sk-ant-x", default_model="c")
    with pytest.raises(openai.BadRequestError) as other_kind:
        client.responses.create(model="claude/c", input="hi")
    assert "send it to /v1/messages" in other_kind.value.message
    bad_bodies = {
        "input": {},
        "input[0]": {"input": [{"type": "web_search_call"}]},
        "input[0].role": {"input": [{"role": "tool", "content": "x"}]},
        "tools[0]": {"input": "x", "tools": [{"type": "web_search"}]},
        "text.format": {"input": "x", "text": {"format": {"type": "xml"}}},
        "max_output_tokens": {"input": "x", "max_output_tokens": 0},
        "temperature": {"input": "x", "temperature": "hot"},
        "stream": {"input": "x", "stream": "yes"},
        "tool_choice": {"input": "x", "tool_choice": {"type": "file_search"}},
        "input[0].content[0].text": {
            "input": [{"role": "user", "content": [{"type": "input_text"}]}]
        },
        "text": {"input": "x", "text": "json"},
        "store": {"input": "x", "store": "no"},
    }
    for param, body in bad_bodies.items():
        with pytest.raises(openai.BadRequestError) as bad:
            client.responses.create(model=MODEL, **body)
        assert bad.value.param == param, (param, bad.value)
    for odd in ("nope/\x00", "/" * 400):
        with pytest.raises(openai.NotFoundError):
            client.responses.create(model=odd, input="hi")
    assert not Run.objects.exists()
    with pytest.raises(OpenAIError) as unreadable:  # a 200 that is no completion
        gateway_responses.response_of_completion(  # (`<html>` read as JSON: nothing)
            {}, gateway_responses.ResponseIds.new(MODEL)
        )
    assert unreadable.value.status == 502  # (an OpenAIError: what the view answers)


@pytest.mark.parametrize("scenario", ["tools", "output", "stream"])
def test_openai_agents_default_model_class_with_a_gateway_model(
    asgi_server, keys, connection, provider_server, scenario
):
    if scenario in ("tools", "stream"):  # (stream: the tools scenario, run streamed)
        provider_server.script("openai", ToolCallReply([PARIS_CALL]), TextReply("Sunny."))
    else:
        provider_server.script("openai", TextReply('{"name": "Paris", "population": 2100000}'))
    result = framework(asgi_server, keys["run"], f"openai_agents_gateway_responses_{scenario}")
    assert result.get("error") is None, result
    sent = provider_server.requests_to("/v1/chat/completions")
    assert sent[0].body["messages"][0] == {"role": "system", "content": "Use your tools."}
    assert sent[0].body["stream"] is (scenario == "stream")
    if scenario in ("tools", "stream"):
        assert result["output"] == "Sunny."
        assert result["calls"] == [{"tool": "get_weather", "city": "Paris"}]
        assert [m["role"] for m in sent[-1].body["messages"]] == [
            "system", "user", "assistant", "tool",
        ]  # fmt: skip
    else:
        assert result["output"] == {"name": "Paris", "population": 2100000}
        assert sent[0].body["response_format"]["type"] == "json_schema"


def told(*pieces: bytes) -> list[dict]:
    """The events a provider's chunk stream of `pieces` becomes (the translation alone)."""
    closed = []

    async def rest():
        try:
            for piece in pieces[1:]:
                yield piece
        finally:
            closed.append(1)

    async def collect() -> bytes:
        ids = gateway_responses.ResponseIds.new(MODEL)
        return b"".join([e async for e in gateway_responses.stream_events(pieces[0], rest(), ids)])

    out = asyncio.run(collect())
    assert closed == [1]  # (the provider's stream closed once: the call's record follows)
    return [json.loads(e.split(b"data: ", 1)[1]) for e in out.split(b"\n\n") if b"data: " in e]


def chunk(delta: dict, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"


def test_a_provider_stream_cut_short_or_failing_ends_with_response_failed():
    cut = told(chunk({"content": "Hal"}), chunk({"content": "f"}))
    assert cut[-1]["type"] == "response.failed"
    assert "ended before its answer was complete" in cut[-1]["response"]["error"]["message"]
    assert cut[-1]["response"]["output"][0]["content"][0]["text"] == "Half"  # what came
    failing = told(chunk({"content": "Hi"}), b'data: {"error": {"message": "overloaded"}}\n\n')
    assert failing[-1]["type"] == "response.failed"
    assert failing[-1]["response"]["error"]["message"] == "The provider failed: overloaded"
    # a call whose name comes after its first piece; the last event without its blank line
    late = told(
        chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"arguments": '{"a"'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": ": 1}"}}]}),
        chunk({}, "tool_calls").rstrip(),
    )
    assert late[-1]["type"] == "response.completed"
    (item,) = late[-1]["response"]["output"]
    assert (item["name"], item["call_id"], item["arguments"]) == ("f", "c1", '{"a": 1}')


def test_a_caller_leaving_a_stream_leaves_it_read_on_for_a_while_then_recorded(
    asgi_server, keys, connection, provider_server, settings
):
    """The /v1 handler races the view against the client's disconnect (asgi_handler): a
    slow stream left after its first chunk is read on, for its usage, for
    GATEWAY_STREAM_READ_ON_S (2 s in the tests), then closed and recorded, not when the
    provider would have finished; counted from what it gave (tests/api/test_gateway_settling.py)."""
    provider_server.script("openai", TextReply("slow words", chunk_delay_s=3))  # 9 s or more
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": True}
    headers = {"Authorization": f"Bearer {keys['run']}"}
    left = time.monotonic()
    with (
        httpx2.Client(timeout=10) as http,
        http.stream("POST", f"{asgi_server}/v1/chat/completions", json=body, headers=headers) as r,
    ):
        assert r.status_code == 200
        assert next(r.iter_bytes()).startswith(b"data: ")
        left = time.monotonic()
    for _ in range(100):
        if Run.objects.filter(gateway_model=MODEL).exists():
            break
        time.sleep(0.05)
    assert recorded().status == "succeeded" and recorded().input_tokens > 0
    assert time.monotonic() - left < settings.GATEWAY_STREAM_READ_ON_S + 2.5
