"""The `/v1` wire shapes (agentplatform/v1/shapes/): the models that check a request's
shape are the ones the OpenAPI document shows (agentplatform/v1/openapi.py), in OpenAPI 3.0's
words, and the first error of a body is the 400 its field declares."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentplatform.v1 import openapi
from agentplatform.v1.shapes.base import BadRequest, Shape
from agentplatform.v1.shapes.chat import ChatCompletionRequest, ChatSampling
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
        {"model": "a", "messages": HELLO, "temperature": 1, "metadata": {"k": "v"}}
    )
    assert (request.model, request.temperature, request.messages) == ("a", 1, HELLO)
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
