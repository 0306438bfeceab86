"""`/v1/responses`, driven by the real `openai` SDK (and openai-agents' default model
class) against a live server whose agent's model is the scripted fake provider."""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import BaseModel

from agents.models import Run
from tenancy import services as tenancy
from tests.api.conftest import sdk
from tests.api.test_frameworks import PARIS, WEATHER_CALL, framework
from tests.factories import make_crew
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture
def client(asgi_server, keys, celery_worker_process) -> openai.OpenAI:
    return sdk(asgi_server, keys["run"])


def run_of(response_id: str) -> Run:
    return Run.objects.get(pk=int(response_id.removeprefix("resp_")))


def test_a_response_answers_and_can_be_read_back(trio, agent, client, provider_server):
    provider_server.script("openai", TextReply("Hello there.", input_tokens=12, output_tokens=3))
    response = client.responses.create(
        model="assistant", input="Say hello.", instructions="Answer in English."
    )
    assert response.status == "completed" and response.output_text == "Hello there."
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 3)
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"]
    assert "Answer in English." in sent[0]["content"] and sent[-1]["content"] == "Say hello."
    again = client.responses.retrieve(response.id)
    assert again.output_text == "Hello there." and again.status == "completed"
    assert run_of(response.id).status == "succeeded"


def test_function_tools_end_the_response_and_continue_from_previous_response_id(
    trio, agent, client, provider_server
):
    provider_server.script("openai", ToolCallReply([WEATHER_CALL]))
    first = client.responses.create(model="assistant", input="Weather in Paris?", tools=[WEATHER])
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    provider_server.script("openai", TextReply("Sunny in Paris."))
    second = client.responses.create(
        model="assistant",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        tools=[WEATHER],
    )
    assert second.output_text == "Sunny in Paris."
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[3] == {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"}


def test_streaming_sends_the_typed_events(trio, agent, client, provider_server):
    provider_server.script("openai", ToolCallReply([WEATHER_CALL], text="Looking it up."))
    events = list(
        client.responses.create(
            model="assistant", input="Weather in Paris?", tools=[WEATHER], stream=True
        )
    )
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert "response.output_text.delta" in types
    assert "response.function_call_arguments.delta" in types
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Looking it up."
    final = events[-1].response
    assert [o.type for o in final.output] == ["message", "function_call"]
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))

    provider_server.script("openai", TextReply("Streamed."))
    with client.responses.stream(model="assistant", input="Hi") as stream:
        done = stream.get_final_response()
    assert done.output_text == "Streamed."


class City(BaseModel):
    name: str
    population: int


def test_text_format_json_schema_is_structured_output(trio, agent, client, provider_server):
    provider_server.script("openai", ToolCallReply([ToolCall("f1", "final_answer", PARIS)]))
    response = client.responses.parse(model="assistant", input="Biggest city?", text_format=City)
    assert response.output_parsed == City(name="Paris", population=2100000)


def test_store_false_responses_cannot_be_read_or_continued_nor_can_anothers(
    trio, agent, client, provider_server, asgi_server, keys
):
    private = client.responses.create(model="assistant", input="hi", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(private.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="assistant", input="more", previous_response_id=private.id)
    mine = client.responses.create(model="assistant", input="hi")
    _, other = tenancy.api_key_create(
        tenant=trio.acme, name="member's", scopes=["read", "run"], role="member"
    )
    _, globex = tenancy.api_key_create(tenant=trio.globex, name="g", scopes=["read", "run"])
    for key in (other, globex):  # a member key sees its own runs only; another tenant's: 404
        with pytest.raises(openai.NotFoundError):
            sdk(asgi_server, key).responses.retrieve(mine.id)
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model="assistant", input=[{"type": "web_search_call"}])
    assert bad.value.param == "input[0]"
    with pytest.raises(openai.BadRequestError) as bad_tool:
        client.responses.create(model="assistant", input="x", tools=[{"type": "web_search"}])
    assert "Only function tools" in bad_tool.value.message


@pytest.mark.parametrize("scenario", ["tools", "output"])
def test_openai_agents_default_model_class_speaks_responses(
    trio, agent, asgi_server, keys, celery_worker_process, provider_server, scenario
):
    if scenario == "tools":
        provider_server.script("openai", ToolCallReply([WEATHER_CALL]), TextReply("Sunny."))
    else:
        provider_server.script("openai", ToolCallReply([ToolCall("f1", "final_answer", PARIS)]))
    result = framework(asgi_server, keys["run"], f"openai_agents_responses_{scenario}")
    assert result.get("error") is None, result
    if scenario == "tools":
        assert result["output"] == "Sunny."
        assert result["calls"] == [{"tool": "get_weather", "city": "Paris"}]
    else:
        assert result["output"] == {"name": "Paris", "population": 2100000}


def test_refusals_name_the_responses_field(trio, agent, client):
    make_crew(trio.acme, "desk", [agent])
    with pytest.raises(openai.BadRequestError) as crew_tools:
        client.responses.create(model="desk", input="hi", tools=[WEATHER])
    assert crew_tools.value.param == "input" and "A crew takes text turns only" in str(
        crew_tools.value
    )
    for odd in ("resp_\u00b2", "resp_" + "9" * 30):
        with pytest.raises((openai.BadRequestError, openai.NotFoundError)):
            client.responses.create(model="assistant", input="hi", previous_response_id=odd)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(odd)
    with pytest.raises(openai.BadRequestError) as too_many:
        client.responses.create(model="assistant", input="hi", max_output_tokens=0)
    assert too_many.value.param == "max_output_tokens"


ITEM_REFUSALS = [
    (
        {"input": [{"type": "function_call", "call_id": "c1", "arguments": "{}"}]},
        "input[0].name",
        "A `function_call` item needs `call_id`, `name` and `arguments` strings.",
    ),
    (
        {"input": [{"type": "function_call", "call_id": "c1", "name": "a b", "arguments": "{}"}]},
        "input[0].name",
        "A `function_call` item's `name` must be a tool name",
    ),
    (
        {"input": [{"type": "function_call_output", "output": "sunny"}]},
        "input[0].call_id",
        "A `function_call_output` item needs its `call_id`.",
    ),
    (
        {"input": [{"type": "item_reference", "id": "msg_1"}]},
        "input[0]",
        "Input items of type 'item_reference' are not supported.",
    ),
    (
        {"input": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
        "input[0].content[0]",
        "Content parts of type 'input_audio' are not supported here",
    ),
    (
        {
            "input": [
                {"role": "user", "content": [{"type": "input_image", "image_url": "ftp://x/a.png"}]}
            ]
        },
        "input[0].content[0].image_url",
        "An image URL must be a data URL or an http(s) URL.",
    ),
    (
        {"input": "x", "text": {"format": {"type": "json_schema", "name": "city"}}},
        "text.format.schema",
        "A `json_schema` format needs its `schema`.",
    ),
    (
        {"input": "x", "tools": [{**WEATHER, "name": "get weather"}]},
        "tools[0].name",
        "A function tool needs its `name`",
    ),
    (  # (the agent's request is then checked as a chat completion's, named as here)
        {"input": "x", "tools": [{**WEATHER, "parameters": {"$ref": "http://evil.example/x"}}]},
        "tools[0].parameters",
        "The schema is not usable",
    ),
]


@pytest.mark.parametrize(
    ("body", "param", "words"), ITEM_REFUSALS, ids=[r[1] for r in ITEM_REFUSALS]
)
def test_each_input_item_is_checked_by_its_own_shape(trio, agent, client, body, param, words):
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="assistant", **body)
    assert (refused.value.param, refused.value.code) == (param, None)
    assert words in refused.value.message
    assert not Run.objects.exists()
