"""Gateway models (`<connection>/<model>`): /v1/chat/completions straight to a tenant's
provider connection, driven by the real `openai` SDK against a live server, with the
scripted fake provider as the connection's service."""

from __future__ import annotations

import json
import time

import anthropic
import openai
import pytest

from agentplatform.tenancy import services as tenancy
from agents.models import Run
from tests.api.conftest import sdk
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
    assert {m.id for m in client.models.list().data} == {"assistant", MODEL}


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
    make_connection(trio.acme, "Claude", "anthropic", api_key="sk-ant-x", default_model="c")
    with pytest.raises(openai.BadRequestError) as other_kind:
        client.chat.completions.create(model="claude/c", messages=hello)
    assert "send it to /v1/messages" in other_kind.value.message
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="local-openai/gpt-other", messages=[])
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
    with pytest.raises(anthropic.BadRequestError) as wrong_api:  # an OpenAI connection's model
        claude.messages.create(
            model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "Hi"}]
        )
    assert "send it to /v1/chat/completions" in wrong_api.value.message


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
