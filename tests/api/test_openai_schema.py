"""The OpenAI-compatible endpoint (`/v1`) is documented in the OpenAPI schema at `/api/schema/`,
and what it really answers validates against the documented component schemas."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import jsonschema
import pytest
from django.test import AsyncClient

from tenancy import services as tenancy
from tests.api.test_frameworks import WEATHER_CALL
from tests.fakes.provider_server import TextReply, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)

V1_PATHS = {
    "/v1/models": "get",
    "/v1/models/{model_id}": "get",
    "/v1/chat/completions": "post",
    "/v1/responses": "post",
    "/v1/responses/{response_id}": "get",
}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture
def schema(client) -> dict[str, Any]:
    response = client.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return response.json()


@pytest.fixture
def keys(trio) -> dict[str, str]:
    _, run = tenancy.api_key_create(tenant=trio.acme, name="chat", scopes=["read", "run"])
    _, read = tenancy.api_key_create(tenant=trio.acme, name="ro", scopes=["read"])
    return {"run": run, "read": read}


def as_json_schema(node: Any) -> Any:
    """An OpenAPI 3.0 schema as JSON Schema: `nullable: true` becomes "or null"."""
    if isinstance(node, list):
        return [as_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: as_json_schema(value) for key, value in node.items() if key != "nullable"}
    if node.get("nullable") is True:
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


def validate(schema: dict[str, Any], component: str, instance: Any) -> None:
    """`instance` against `#/components/schemas/<component>`, every `$ref` resolved."""
    root = {
        "$ref": f"#/components/schemas/{component}",
        "components": as_json_schema(schema["components"]),
    }
    jsonschema.Draft202012Validator(root).validate(instance)


def resolved(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """A property's schema, its `$ref` (alone or as the one `allOf`) followed."""
    while "$ref" in node or len(node.get("allOf", ())) == 1:
        ref = node["$ref"] if "$ref" in node else node["allOf"][0]["$ref"]
        node = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return node


def sse_events(text: str) -> list[dict[str, str]]:
    """A `text/event-stream` body as its events' fields (comment lines left out)."""
    events = []
    for block in text.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":")
        )
        if fields:
            events.append(fields)
    return events


def response_schema(schema, path: str, status: str, media_type: str = "application/json"):
    operation = schema["paths"][path][V1_PATHS[path]]
    return operation["responses"][status]["content"][media_type]["schema"]


def test_the_v1_operations_are_documented(schema):
    assert schema["paths"].keys() >= V1_PATHS.keys()
    bearer = schema["components"]["securitySchemes"]["ApiKey"]
    assert (bearer["type"], bearer["scheme"]) == ("http", "bearer")
    for path, method in V1_PATHS.items():
        operation = schema["paths"][path][method]
        assert operation["tags"] == ["OpenAI-compatible"]
        assert operation["security"] == [{"ApiKey": []}]
        assert operation["summary"] and operation["description"]
        for status in ("401", "403", "429"):
            assert response_schema(schema, path, status) == {
                "$ref": "#/components/schemas/OpenAIError"
            }
    assert response_schema(schema, "/v1/models", "200")["$ref"].endswith("/OpenAIModelList")
    assert response_schema(schema, "/v1/models/{model_id}", "200")["$ref"].endswith("/OpenAIModel")
    assert response_schema(schema, "/v1/models/{model_id}", "404")["$ref"].endswith("/OpenAIError")

    chat = schema["paths"]["/v1/chat/completions"]["post"]
    body = chat["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/ChatCompletionRequest"}
    assert body["examples"]
    for example in body["examples"].values():
        validate(schema, "ChatCompletionRequest", example["value"])
    assert response_schema(schema, "/v1/chat/completions", "200")["$ref"].endswith(
        "/ChatCompletion"
    )
    streamed = chat["responses"]["200"]["content"]["text/event-stream"]
    assert streamed["schema"]["$ref"].endswith("/ChatCompletionStreamEvent")
    assert "[DONE]" in chat["responses"]["200"]["description"]
    assert "include_usage" in chat["responses"]["200"]["description"]
    assert {"400", "404", "413", "500"} <= chat["responses"].keys()
    request = schema["components"]["schemas"]["ChatCompletionRequest"]
    assert request["required"] == ["model", "messages"]
    options = resolved(schema, request["properties"]["stream_options"])
    assert "include_usage" in options["properties"]
    assert {
        "model", "messages", "stream", "stream_options", "tools", "tool_choice",
        "response_format", "temperature", "top_p", "max_tokens", "max_completion_tokens",
        "stop", "seed", "n", "user",
    } <= request["properties"].keys()  # fmt: skip
    for name, field in request["properties"].items():
        assert field.get("description") or "$ref" in field, name
    events = sse_events(streamed["example"])
    assert events[-1] == {"data": "[DONE]"}
    for event in events:
        validate(schema, "ChatCompletionStreamEvent", event)
    for event in events[:-1]:
        validate(schema, "ChatCompletionChunk", json.loads(event["data"]))
    assert json.loads(events[-2]["data"])["choices"] == []

    responses = schema["paths"]["/v1/responses"]["post"]
    body = responses["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/ResponsesRequest"}
    assert body["examples"]
    for example in body["examples"].values():
        validate(schema, "ResponsesRequest", example["value"])
    for path in ("/v1/responses", "/v1/responses/{response_id}"):
        assert response_schema(schema, path, "200")["$ref"].endswith("/Response")
        assert response_schema(schema, path, "404")["$ref"].endswith("/OpenAIError")
    assert {"400", "404", "413", "500"} <= responses["responses"].keys()
    streamed = responses["responses"]["200"]["content"]["text/event-stream"]
    assert streamed["schema"]["$ref"].endswith("/ResponseStreamEvent")
    events = sse_events(streamed["example"])
    for number, event in enumerate(events, start=1):
        validate(schema, "ResponseStreamEvent", event)
        data = json.loads(event["data"])
        validate(schema, "ResponseEvent", data)
        assert (data["type"], data["sequence_number"]) == (event["event"], number)
    assert events[-1]["event"] == "response.completed"

    for component in (
        "OpenAIError", "OpenAIModel", "OpenAIModelList", "ChatCompletion", "ChatTool",
        "ChatToolCall", "ChatResponseFormat", "Response",
    ):  # fmt: skip
        example = schema["components"]["schemas"][component]["example"]
        validate(schema, component, example)
    for path, method in V1_PATHS.items():
        for response in schema["paths"][path][method]["responses"].values():
            for media in response["content"].values():
                if "example" in media and media["schema"]["$ref"].endswith("/OpenAIError"):
                    validate(schema, "OpenAIError", media["example"])


def test_real_answers_validate_against_the_documented_schemas(
    schema, trio, agent, asgi_server, keys, provider_server, celery_worker_process
):
    provider_server.script(
        "openai",
        TextReply("Hello there.", input_tokens=12, output_tokens=3),
        TextReply("Hello again.", input_tokens=5, output_tokens=2),
        ToolCallReply([WEATHER_CALL], text="Looking it up.", input_tokens=7, output_tokens=4),
        TextReply("Streamed.", input_tokens=3, output_tokens=1),
    )
    chat = {"model": "assistant", "messages": [{"role": "user", "content": "Hi."}]}
    asked = {"model": "assistant", "input": "Weather in Paris?", "tools": [WEATHER]}
    with httpx2.Client(
        base_url=asgi_server, headers={"Authorization": f"Bearer {keys['run']}"}, timeout=20
    ) as http:
        models = http.get("/v1/models")
        model = http.get("/v1/models/assistant")
        answer = http.post("/v1/chat/completions", json=chat)
        streamed = http.post(
            "/v1/chat/completions",
            json={**chat, "stream": True, "stream_options": {"include_usage": True}},
        )
        response = http.post("/v1/responses", json=asked)
        read_back = http.get(f"/v1/responses/{response.json()['id']}")
        streamed_response = http.post(
            "/v1/responses", json={"model": "assistant", "input": "Hi.", "stream": True}
        )
    validate(schema, "OpenAIModelList", models.json())
    validate(schema, "OpenAIModel", model.json())
    assert answer.status_code == 200 and answer.headers["X-Run-Id"]
    validate(schema, "ChatCompletion", answer.json())
    assert answer.json()["choices"][0]["message"]["content"] == "Hello there."

    assert streamed.headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(streamed.text)
    assert events[-1] == {"data": "[DONE]"}
    for event in events:
        validate(schema, "ChatCompletionStreamEvent", event)
    chunks = [json.loads(event["data"]) for event in events[:-1]]
    for chunk in chunks:
        validate(schema, "ChatCompletionChunk", chunk)
    *_, finish, usage = chunks
    assert finish["choices"][0]["finish_reason"] == "stop" and "usage" not in finish
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}

    assert response.status_code == 200 and response.headers["X-Run-Id"]
    assert read_back.status_code == 200
    for body in (response.json(), read_back.json()):
        validate(schema, "Response", body)
        assert body["status"] == "completed"
        assert [item["type"] for item in body["output"]] == ["message", "function_call"]
        assert body["output"][1]["name"] == "get_weather"
    assert read_back.json()["id"] == response.json()["id"]

    assert streamed_response.headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(streamed_response.text)
    for event in events:
        validate(schema, "ResponseStreamEvent", event)
    data = [json.loads(event["data"]) for event in events]
    for item in data:
        validate(schema, "ResponseEvent", item)
    assert [item["type"] for item in data] == [event["event"] for event in events]
    assert [item["sequence_number"] for item in data] == list(range(1, len(data) + 1))
    assert data[-1]["type"] == "response.completed"
    validate(schema, "Response", data[-1]["response"])
    assert data[-1]["response"]["output"][0]["content"][0]["text"] == "Streamed."


def test_real_errors_validate_against_the_documented_error_schema(schema, trio, agent, keys):
    run, read = (f"Bearer {keys[scope]}" for scope in ("run", "read"))
    hello = [{"role": "user", "content": "hi"}]

    async def errors() -> list:
        client = AsyncClient()
        post = client.post
        return [
            await client.get("/v1/models"),  # 401
            await client.get("/v1/models", headers={"Authorization": "Bearer ap_0_nope"}),
            await client.get("/v1/models/nobody", headers={"Authorization": read}),  # 404
            await post(  # 403: `read` cannot run
                "/v1/chat/completions",
                {"model": "assistant", "messages": hello},
                content_type="application/json",
                headers={"Authorization": read},
            ),
            await post(  # 400: not JSON
                "/v1/chat/completions",
                "{nope",
                content_type="application/json",
                headers={"Authorization": run},
            ),
            await post(  # 400: an unhashable role
                "/v1/chat/completions",
                {"model": "assistant", "messages": [{"role": ["user"], "content": "hi"}]},
                content_type="application/json",
                headers={"Authorization": run},
            ),
            await post(  # 400: a lone surrogate in the model (not a 500)
                "/v1/chat/completions",
                b'{"model": "\\ud800", "messages": [{"role": "user", "content": "hi"}]}',
                content_type="application/json",
                headers={"Authorization": run},
            ),
            await post(  # 404: an unknown model
                "/v1/chat/completions",
                {"model": "gpt-4o", "messages": hello},
                content_type="application/json",
                headers={"Authorization": run},
            ),
        ]

    responses = asyncio.run(errors())
    assert [r.status_code for r in responses] == [401, 401, 404, 403, 400, 400, 400, 404]
    for response in responses:
        validate(schema, "OpenAIError", response.json())
    assert responses[5].json()["error"]["param"] == "messages[0].role"
    assert responses[6].json()["error"]["param"] == "model"
    assert responses[7].json()["error"]["code"] == "model_not_found"
    with pytest.raises(jsonschema.ValidationError):  # the check can fail
        validate(schema, "OpenAIError", {"error": {"message": "x"}})
