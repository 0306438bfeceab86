"""The `/v1` wire shapes (agentplatform/v1/shapes/): the models that check a request's
shape are the ones the OpenAPI document shows (agentplatform/v1/openapi.py), in OpenAPI 3.0's
words, and the first error of a body is the 400 its field declares."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentplatform.v1 import openapi
from agentplatform.v1.shapes.base import BadRequest, Shape
from agentplatform.v1.shapes.chat import ChatCompletionRequest, ChatSampling, ChatUserMessage
from agentplatform.v1.shapes.embeddings import EmbeddingsRequest
from agentplatform.v1.shapes.messages import AnthropicMessagesRequest
from agentplatform.v1.shapes.responses import ResponsesRequest

HELLO = [{"role": "user", "content": "Hi."}]
JSON_SCHEMA_ONLY = {"const", "$defs", "title", "prefixItems", "ge", "le", "examples"}


def keys_in(node: Any) -> set[str]:
    if isinstance(node, list):
        return set().union(*(keys_in(item) for item in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = set(node)
    for value in node.values():
        found |= keys_in(value)
    return found


def test_the_document_speaks_openapi_3_0():
    """No JSON Schema 2020 keyword OpenAPI 3.0 lacks; null only as `nullable`; a `$ref`
    alone (3.0 ignores its siblings)."""
    components = openapi.components()
    assert not keys_in(components) & JSON_SCHEMA_ONLY
    text = json.dumps(components)
    assert '{"type": "null"}' not in text

    def refs_stand_alone(node: Any) -> None:
        if isinstance(node, dict):
            assert "$ref" not in node or len(node) == 1, node
            for value in node.values():
                refs_stand_alone(value)
        elif isinstance(node, list):
            for item in node:
                refs_stand_alone(item)

    refs_stand_alone(components)
    refs_stand_alone(openapi.operations())


def test_every_referenced_component_is_in_the_document():
    components = openapi.components()
    document = json.dumps([components, openapi.operations()])
    for name in {part.split('"')[0] for part in document.split("#/components/schemas/")[1:]}:
        assert name in components, name


@pytest.mark.parametrize("shape", [s for s in openapi.SHAPES if "example" in str(s.model_config)])
def test_each_shapes_example_is_one_of_it(shape: type[Shape]):
    shape.model_validate(openapi.example_of(shape), strict=False)


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ({"messages": HELLO}, "model", "`model` is required: an agent or crew slug."),
        ({"model": "", "messages": HELLO}, "model", "`model` is required"),
        ({"model": "\ud800", "messages": HELLO}, "model", "Text must be valid Unicode."),
        ({"model": "a", "messages": []}, "messages", "`messages` must be a non-empty list."),
        ({"model": "a", "messages": HELLO * 2001}, "messages", "At most 2000 messages."),
        ({"model": "a", "messages": HELLO, "stream": "yes"}, "stream", "`stream` must be a bool."),
        (
            {"model": "a", "messages": HELLO, "stream_options": {"include_usage": 1}},
            "stream_options.include_usage",
            "must be a bool",
        ),
        ({"model": "a", "messages": HELLO, "n": True}, "n", "Only one choice"),
        ({"model": "a", "messages": HELLO, "n": 1.0}, "n", "Only one choice"),
        ({"model": "a", "messages": HELLO, "seed": 2**63}, "seed", "must be an integer"),
        ({"model": "a", "messages": HELLO, "stop": ["", "x"]}, "stop", "at most 4"),
        ({"model": "a", "messages": HELLO, "user": "u" * 257}, "user", "at most 256"),
        ({"model": "a", "messages": HELLO, "top_p": True}, "top_p", "from 0 to 1"),
    ],
)
def test_the_first_error_is_the_400_its_field_declares(body, param, message):
    with pytest.raises(BadRequest) as refused:
        ChatCompletionRequest.checked(body)
    assert refused.value.param == param
    assert message in str(refused.value)


def test_a_good_body_is_read_once_and_keeps_what_it_does_not_declare():
    request = ChatCompletionRequest.checked(
        {
            "model": "a",
            "messages": [{"role": "user", "content": "Hi.", "name": "ada"}],
            "temperature": 1,
            "metadata": {"k": "v"},
        }
    )
    assert (request.model, request.temperature) == ("a", 1)
    (message,) = request.messages
    assert isinstance(message, ChatUserMessage)  # the item is typed, by its role
    assert (message.content, message.model_extra) == ("Hi.", {"name": "ada"})
    assert request.model_extra == {"metadata": {"k": "v"}}
    assert ChatSampling.checked({"max_tokens": 5}).max_tokens == 5


def test_a_responses_body_names_its_own_fields():
    with pytest.raises(BadRequest) as refused:
        ResponsesRequest.checked({"model": "a", "input": []})
    assert (refused.value.param, str(refused.value)) == (
        "input",
        "`input` must be a string or a non-empty list of items.",
    )
    with pytest.raises(BadRequest) as refused:
        ResponsesRequest.checked({"model": "a", "input": "Hi.", "store": "no"})
    assert refused.value.param == "store"


CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
ITEMS = [
    (ChatCompletionRequest, {"messages": [{"role": 5}]}, "messages[0].role", "Each message"),
    (
        ChatCompletionRequest,
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, 7]}]},
        "messages[0].content[1]",
        "A content part needs its `type`; send text or image_url parts.",
    ),
    (
        ChatCompletionRequest,
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
        "messages[0].content[0].image_url",
        "An image part needs its `url`.",
    ),
    (
        ChatCompletionRequest,
        {"messages": [{"role": "assistant", "tool_calls": [{**CALL, "type": "custom"}]}]},
        "messages[0].tool_calls[0].type",
        "`messages[0].tool_calls[0].type` must be 'function'.",
    ),
    (
        ChatCompletionRequest,
        {
            "messages": HELLO,
            "tools": [{"type": "function", "function": {"name": "x", "parameters": []}}],
        },
        "tools[0].function.parameters",
        "The schema must be a JSON Schema object with `type` object.",
    ),
    (
        ChatCompletionRequest,
        {
            "messages": HELLO,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"schema": {"type": "array"}},
            },
        },
        "response_format.json_schema.schema",
        "The schema must be a JSON Schema object with `type` object.",
    ),
    (ResponsesRequest, {"input": [3]}, "input[0]", "An input item must be an object"),
    (
        ResponsesRequest,
        {"input": [{"role": "tool", "content": "x"}]},
        "input[0].role",
        "A message's `role` must be one of user, assistant, system, developer.",
    ),
    (ResponsesRequest, {"input": "x", "tools": [{"name": "f"}]}, "tools[0]", "function tool"),
    (
        ResponsesRequest,
        {"input": "x", "text": {"format": {"type": "xml"}}},
        "text.format",
        "`text.format` must be",
    ),
    (
        AnthropicMessagesRequest,
        {"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text"}]}]},
        "messages[0].content[0].text",
        "A text block needs a `text` string.",
    ),
    (
        AnthropicMessagesRequest,
        {
            "max_tokens": 5,
            "messages": [{"role": "assistant", "content": [{"type": "tool_result"}]}],
        },
        "messages[0].content[0]",
        "Blocks of type 'tool_result' are not supported in assistant messages.",
    ),
    (EmbeddingsRequest, {"input": ["a"] * 2049}, "input", "`input` must be a non-empty string"),
    (EmbeddingsRequest, {"input": "x" * 32_001}, "input", "`input` must be a non-empty string"),
]


@pytest.mark.parametrize(("shape", "body", "param", "message"), ITEMS, ids=[i[2] for i in ITEMS])
def test_an_items_error_is_the_400_its_own_shape_declares(shape, body, param, message):
    with pytest.raises(BadRequest) as refused:
        shape.checked({"model": "a", **body})
    assert refused.value.param == param
    assert message in str(refused.value)


GOOD = [
    (
        ChatCompletionRequest,
        {
            "model": "a",
            "messages": [
                {"role": "system", "content": [{"type": "text", "text": "Be kind."}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Hi"},
                        {"type": "image_url", "image_url": {"url": "https://x.example/a.png"}},
                    ],
                },
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "c1", "content": "1"},
            ],
            "tools": [
                {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
            ],
            "tool_choice": {"type": "function", "function": {"name": "f"}},
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "object"}},
            },
        },
    ),
    (
        ResponsesRequest,
        {
            "model": "a",
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Hi"},
                        {"type": "input_image", "image_url": "data:image/png;base64,AA"},
                    ],
                },
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": {"ok": True}},
            ],
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
        },
    ),
    (
        AnthropicMessagesRequest,
        {
            "model": "a",
            "max_tokens": 5,
            "system": [{"type": "text", "text": "Be kind."}],
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Hi"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA"},
                        },
                    ],
                },
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "1"}],
                },
            ],
            "tools": [{"name": "f", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "f"},
            "metadata": {"user_id": "u1"},
        },
    ),
    (EmbeddingsRequest, {"model": "static", "input": ["a", "b"], "dimensions": 256}),
]
LIBRARY_WORDS = ("Input should", "pydantic", "validation error", "Field required", "function-",
                 "tagged-union", "Value error", "[type=")  # fmt: skip


def mangled(node: Any):
    """`node` with one of its values (or items) replaced by each odd value, one at a time."""
    odd = [None, 7, -1, "", "x\x00", "\ud800", [], {}, [None], {"type": "odd"}, True, 1.5]
    yield from odd
    if isinstance(node, dict):
        for key, value in node.items():
            yield {k: v for k, v in node.items() if k != key}
            for changed in mangled(value):
                yield {**node, key: changed}
    elif isinstance(node, list):
        for index, value in enumerate(node):
            for changed in mangled(value):
                yield [*node[:index], changed, *node[index + 1 :]]


@pytest.mark.parametrize(("shape", "body"), GOOD, ids=[g[0].__name__ for g in GOOD])
def test_no_library_words_reach_the_caller(shape, body):
    """Every body a value or item away from a good one is taken or refused in our words."""
    shape.checked(body)
    refusals = 0
    for changed in mangled(body):
        if not isinstance(changed, dict):
            continue
        try:
            shape.checked(changed)
        except BadRequest as exc:
            refusals += 1
            assert exc.param is None or isinstance(exc.param, str)
            assert not any(word in str(exc) for word in LIBRARY_WORDS), (changed, str(exc))
    assert refusals > 50
