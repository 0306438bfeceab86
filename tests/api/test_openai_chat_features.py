"""Chat Completions beyond one plain message, driven by the real `openai` SDK against a
uvicorn server: the caller's tools (and continuing with their results), structured output,
sampling options, and the requests that get a clear 400."""

from __future__ import annotations

import base64
import json

import openai
import pytest
from django.core.exceptions import ValidationError
from pydantic import BaseModel

from agents.models import Fact, Run, RunEvent
from tenancy import services as tenancy
from tests.api.conftest import sdk
from tests.api.test_openai_compat import WEATHER, run_of
from tests.factories import make_agent, make_connection
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.tools.local_server import LocalServer, Reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client(asgi_server, keys, celery_worker_process) -> openai.OpenAI:
    """The real `openai` SDK on the server's `/v1`, with the `run` key (a worker running)."""
    return sdk(asgi_server, keys["run"])


ASK = [{"role": "user", "content": "Weather in Paris?"}]


def _tool_names(request) -> list[str]:
    return [t["function"]["name"] for t in request.body.get("tools") or []]


def test_a_call_to_the_callers_tool_ends_the_answer_with_tool_calls(
    trio, agent, client, provider_server
):
    provider_server.script(
        "openai", ToolCallReply([ToolCall("m1", "get_weather", '{"city": "Paris"}')])
    )
    completion = client.chat.completions.create(
        model="assistant", messages=ASK, tools=[WEATHER], tool_choice="required"
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert (call.type, call.function.name) == ("function", "get_weather")
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    sent = provider_server.requests_to("/v1/chat/completions")[-1]
    assert "get_weather" in _tool_names(sent) and "calculator" in _tool_names(sent)
    assert sent.body["tool_choice"] == "required"
    run = run_of(completion.id)
    assert run.status == "awaiting_client" and run.finished_at is not None
    assert not RunEvent.objects.filter(run=run, type="tool.started").exists()  # not run here

    # The next request carries the result: a new run continues from the whole conversation.
    provider_server.script("openai", TextReply("It is sunny in Paris."))
    follow = client.chat.completions.create(
        model="assistant",
        messages=[
            *ASK,
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "sunny"}'},
        ],
        tools=[WEATHER],
    )
    assert follow.choices[0].message.content == "It is sunny in Paris."
    assert follow.choices[0].finish_reason == "stop"
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[2]["tool_calls"][0]["id"] == call.id
    assert sent[3] == {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "sunny"}'}
    assert run_of(follow.id).status == "succeeded" and run_of(follow.id).input == ASK[0]["content"]


def test_the_callers_tool_calls_stream_as_openai_streams_them(trio, agent, client, provider_server):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("m1", "get_weather", '{"city": "Paris"}')], text="Let me look."),
    )
    stream = client.chat.completions.create(
        model="assistant", messages=ASK, tools=[WEATHER], stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Let me look."
    calls = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert [(d.index, d.function.name) for d in calls] == [(0, "get_weather")]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert all(c.usage is None for c in chunks)  # no include_usage: no usage

    # The SDK's own stream helper assembles the same call.
    provider_server.script(
        "openai", ToolCallReply([ToolCall("m2", "get_weather", '{"city": "Oslo"}')])
    )
    with client.chat.completions.stream(model="assistant", messages=ASK, tools=[WEATHER]) as events:
        final = events.get_final_completion()
    assert final.choices[0].message.tool_calls[0].function.arguments == '{"city": "Oslo"}'


def test_server_side_tools_still_run_on_the_platform_beside_the_callers(
    trio, agent, client, provider_server
):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "calculator", '{"expression": "6*7"}')]),
        ToolCallReply([ToolCall("c2", "get_weather", '{"city": "Paris"}')]),
    )
    completion = client.chat.completions.create(model="assistant", messages=ASK, tools=[WEATHER])
    assert completion.choices[0].finish_reason == "tool_calls"
    run = run_of(completion.id)
    done = RunEvent.objects.get(run=run, type="tool.completed")
    assert done.payload["result"] == {"result": 42}


def test_a_mixed_response_hands_over_only_the_callers_calls(trio, agent, client, provider_server):
    provider_server.script(
        "openai",
        ToolCallReply(
            [
                ToolCall("c1", "calculator", '{"expression": "1+1"}'),
                ToolCall("c2", "get_weather", '{"city": "Paris"}'),
            ]
        ),
    )
    completion = client.chat.completions.create(model="assistant", messages=ASK, tools=[WEATHER])
    assert [c.function.name for c in completion.choices[0].message.tool_calls] == ["get_weather"]
    assert not RunEvent.objects.filter(run=run_of(completion.id), type="tool.started").exists()


class City(BaseModel):
    name: str
    population: int


@pytest.mark.parametrize("stream", [False, True])
def test_response_format_json_schema_is_the_agents_structured_output(
    trio, agent, client, provider_server, stream
):
    provider_server.script(
        "openai",
        ToolCallReply(
            [ToolCall("f1", "final_answer", '{"name": "Paris", "population": 2100000}')],
            text="Here it is.",
        ),
    )
    if stream:
        with client.chat.completions.stream(
            model="assistant", messages=ASK, response_format=City
        ) as events:
            completion = events.get_final_completion()
    else:
        completion = client.chat.completions.parse(
            model="assistant", messages=ASK, response_format=City
        )
    message = completion.choices[0].message
    assert message.parsed == City(name="Paris", population=2100000)
    assert json.loads(message.content) == {"name": "Paris", "population": 2100000}
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body
    (final,) = [t for t in sent["tools"] if t["function"]["name"] == "final_answer"]
    assert set(final["function"]["parameters"]["properties"]) == {"name", "population"}
    assert Run.objects.get(pk=int(completion.id.split("-")[1])).structured_output == {
        "name": "Paris",
        "population": 2100000,
    }


def test_sampling_options_reach_the_provider_within_the_agents_limits(
    trio, agent, client, provider_server
):
    agent.max_tokens_per_run = 500
    agent.save()
    client.chat.completions.create(
        model="assistant",
        messages=ASK,
        temperature=0.2,
        top_p=0.5,
        max_completion_tokens=4000,
        stop=["END"],
        seed=7,
        user="end-user-42",
    )
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body
    assert (sent["temperature"], sent["top_p"], sent["stop"], sent["seed"]) == (
        0.2,
        0.5,
        ["END"],
        7,
    )
    assert sent.get("max_completion_tokens", sent.get("max_tokens")) == 500  # capped
    run = Run.objects.latest("pk")
    assert run.client_request["end_user"] == "end-user-42"
    assert run.limits == {  # what the worker ran it under, the caller's cap included
        "max_rounds": 10,
        "max_tool_calls": 50,
        "max_tokens_per_run": 500,
        "max_tokens_per_response": 500,
    }


CALL = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
NUL_CALL = {**CALL, "function": {"name": "f", "arguments": '{"a": "\\u0000"}'}}
DEEP: dict = {"type": "object"}
for _ in range(20):
    DEEP = {"type": "object", "properties": {"a": DEEP}}

BAD = [
    ({"n": 2}, "n", "Only one choice"),
    ({"temperature": 3}, "temperature", "from 0 to 2"),
    ({"top_p": "x"}, "top_p", "from 0 to 1"),
    ({"max_tokens": 0}, "max_tokens", "positive integer"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
    (
        {"tools": [{"type": "function", "function": {"name": "bad name"}}]},
        "tools[0].function.name",
        "name",
    ),
    ({"tools": [{"type": "function", "function": {"name": "calculator"}}]}, "tools", "own tool"),
    (
        {
            "tools": [
                {
                    "type": "function",
                    "function": {"name": "x", "parameters": {"$ref": "http://evil/x"}},
                }
            ]
        },
        "tools[0].function.parameters",
        "not usable",
    ),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "nope"),
    ({"response_format": {"type": "xml"}}, "response_format", "response_format"),
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "a", "schema": {"type": "array"}},
            }
        },
        "response_format.json_schema.schema",
        "type` object",
    ),
    (
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "tool", "tool_call_id": "zz", "content": "1"},
            ]
        },
        "messages[1].tool_call_id",
        "tool_call_id",
    ),
    (
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "user", "content": "well?"},
            ]
        },
        "messages[2]",
        "has no `tool` message",
    ),
    ({"temperature": int("1" + "0" * 400)}, "temperature", "from 0 to 2"),
    (
        {"tool_choice": "none", "response_format": {"type": "json_object"}},
        "tool_choice",
        "cannot be kept",
    ),
    (
        {"tools": [{"type": "function", "function": {"name": "calculator"}}]},
        "tools",
        "own tool named `calculator`",
    ),
    (
        {"tools": [{"type": "function", "function": {"name": "deep", "parameters": DEEP}}]},
        "tools[0].function.parameters",
        "nests deeper",
    ),
    (
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [CALL, CALL]},
            ]
        },
        "messages[1]",
        "Two tool calls have the id",
    ),
    (
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {**CALL, "function": {"name": "f", "arguments": '{"a": "\\u0000"}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": "a", "content": "1"},
            ]
        },
        "messages[1].tool_calls[0].function.arguments",
        "NUL",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
        "messages[0].content[0]",
        "Content parts of type 'input_audio' are not supported here",
    ),
    # Each item is checked by its own shape (agentplatform/v1/shapes/chat.py), where it is:
    (
        {"messages": [{"role": "function", "name": "f", "content": "1"}]},
        "messages[0].role",
        "The legacy `function` role is not supported: send `tool` messages.",
    ),
    (
        {"messages": [{"role": "narrator", "content": "x"}, *ASK]},
        "messages[0].role",
        "Each message needs a role: one of assistant, developer, system, tool, user.",
    ),
    (
        {
            "messages": [
                {"role": "system", "content": [{"type": "image_url", "image_url": "data:x"}]},
                *ASK,
            ]
        },
        "messages[0].content[0]",
        "Content parts of type 'image_url' are not supported here; send text parts.",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "text", "txt": "hi"}]}]},
        "messages[0].content[0].text",
        "A text part needs a `text` string.",
    ),
    (
        {"messages": [*ASK, {"role": "assistant", "tool_calls": [{**CALL, "id": ""}]}]},
        "messages[1].tool_calls[0].id",
        "A tool call needs an `id` and a `function`.",
    ),
    (
        {
            "messages": [
                *ASK,
                {"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "a b"}}]},
            ]
        },
        "messages[1].tool_calls[0].function.name",
        "A tool call's `function.name` must be a tool name.",
    ),
    (
        {
            "messages": [
                *ASK,
                {
                    "role": "assistant",
                    "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "[1]"}}],
                },
            ]
        },
        "messages[1].tool_calls[0].function.arguments",
        "A tool call's `function.arguments` must be a JSON object as a string.",
    ),
    (
        {"messages": [*ASK, {"role": "tool", "content": "1"}]},
        "messages[1].tool_call_id",
        "A `tool` message needs the `tool_call_id`",
    ),
    (
        {"tools": [{"type": "custom", "custom": {"name": "x"}}]},
        "tools[0]",
        'Each tool must be {"type": "function", "function": {...}}.',
    ),
    (
        {"tools": [{"type": "function", "function": {"name": "x", "description": 7}}]},
        "tools[0].function.description",
        "A tool's `description` must be a string.",
    ),
    (
        {"tool_choice": {"type": "function", "function": "get_weather"}},
        "tool_choice",
        '`tool_choice` must be "auto", "none", "required" or',
    ),
    (
        {"response_format": {"type": "json_schema"}},
        "response_format.json_schema.schema",
        "The schema must be a JSON Schema object with `type` object.",
    ),
]


@pytest.mark.parametrize(("extra", "param", "words"), BAD, ids=[b[1] for b in BAD])
def test_a_bad_request_is_a_400_naming_the_field(trio, agent, client, extra, param, words):
    body = {"model": "assistant", "messages": ASK, **extra}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**body)
    assert refused.value.param == param
    assert words in refused.value.message
    assert Run.objects.count() == 0


def test_the_offline_demo_answers_the_last_user_message_whatever_comes_with_it(
    trio, asgi_server, keys, celery_worker_process
):
    offline = make_connection(trio.acme, "Demo", "offline", is_default=False)
    make_agent(trio.acme, "demo", instructions="Be kind.", provider_connection=offline)
    client = sdk(asgi_server, keys["run"])
    completion = client.chat.completions.create(
        model="demo",
        messages=[
            {"role": "system", "content": "You are a pirate."},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Ahoy."},
            {"role": "user", "content": "calculator: 6*7"},
        ],
    )
    assert completion.choices[0].message.content.startswith("42 (offline demo")
    # The caller's own tool, called the demo's way, comes back as a tool call.
    called = client.chat.completions.create(
        model="demo",
        messages=[{"role": "user", "content": 'get_weather: {"city": "Paris"}'}],
        tools=[WEATHER],
    )
    (call,) = called.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "get_weather",
        {"city": "Paris"},
    )


# -- images ----------------------------------------------------------------------------------
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


def _image_message(url: str) -> list[dict]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        }
    ]


def test_an_image_reaches_the_provider_as_a_data_url(trio, agent, client, provider_server):
    client.chat.completions.create(model="assistant", messages=_image_message(PNG_URL))
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
    assert sent == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": PNG_URL}},
        ],
    }
    run = Run.objects.latest("pk")
    assert run.input == "What is in this picture?" and run.status == "succeeded"


def test_an_image_url_is_fetched_through_the_guarded_egress(trio, agent, client, provider_server):
    server = LocalServer()
    server.route("GET", "/cat.png", Reply(body=PNG, headers={"Content-Type": "image/png"}))
    server.route("GET", "/page.html", Reply(body=b"<html></html>"))
    try:
        client.chat.completions.create(
            model="assistant", messages=_image_message(f"{server.url}/cat.png")
        )
        sent = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
        assert sent["content"][1] == {"type": "image_url", "image_url": {"url": PNG_URL}}
        with pytest.raises(openai.BadRequestError) as not_an_image:
            client.chat.completions.create(
                model="assistant", messages=_image_message(f"{server.url}/page.html")
            )
        assert "Only PNG, JPEG, GIF and WebP" in not_an_image.value.message
    finally:
        server.close()
    with pytest.raises(openai.BadRequestError) as private:  # not allow-listed: never fetched
        client.chat.completions.create(
            model="assistant", messages=_image_message("http://10.1.2.3/cat.png")
        )
    assert "could not be fetched" in private.value.message


def test_bad_images_and_models_without_images_are_400s(trio, agent, client, asgi_server, keys):
    bad = {
        "data:image/png;base64,%%%": "base64",
        "data:image/jpeg;base64," + base64.b64encode(PNG).decode(): "holds image/png",
        "data:text/html;base64,PGgxPg==": "data URL image must be",
        "ftp://example.com/cat.png": "data URL or an http(s) URL",
    }
    for url, words in bad.items():
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="assistant", messages=_image_message(url))
        assert words in refused.value.message, url
    offline = make_connection(trio.acme, "Demo", "offline", is_default=False)
    make_agent(trio.acme, "demo", provider_connection=offline)
    with pytest.raises(openai.BadRequestError) as no_images:
        client.chat.completions.create(model="demo", messages=_image_message(PNG_URL))
    assert "does not take images" in no_images.value.message
    assert Run.objects.count() == 0


# -- user --------------------------------------------------------------------------------------
def test_user_names_a_member_for_a_key_that_may_act_for_members(
    trio, agent, asgi_server, provider_server, celery_worker_process
):
    agent.memory = True
    agent.save()
    _, acting = tenancy.api_key_create(
        tenant=trio.acme, name="portal", scopes=["read", "run"], acts_for_members=True
    )
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("m1", "remember_fact", '{"fact": "likes tea"}')]),
        TextReply("Noted."),
    )
    sdk(asgi_server, acting).chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": "I like tea."}], user="alice"
    )
    run = Run.objects.latest("pk")
    assert run.initiated_by_user == trio.alice and run.initiated_by_api_key.name == "portal"
    assert list(Fact.objects.filter(user=trio.alice).values_list("text", flat=True)) == [
        "likes tea"
    ]
    # Someone who is not a member, or a key without the right: only recorded.
    for key, user in ((acting, "charlie-not-here"), (None, "alice")):
        if key is None:
            _, key = tenancy.api_key_create(tenant=trio.acme, name="plain", scopes=["read", "run"])
        sdk(asgi_server, key).chat.completions.create(
            model="assistant", messages=[{"role": "user", "content": "hi"}], user=user
        )
        run = Run.objects.latest("pk")
        assert run.initiated_by_user is None and run.client_request["end_user"] == user
    with pytest.raises(ValidationError):  # a member's key may not impersonate
        tenancy.api_key_create(
            tenant=trio.acme, name="x", scopes=["run"], role="member", acts_for_members=True
        )
