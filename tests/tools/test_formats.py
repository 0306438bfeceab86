"""definitions(format) in exactly the shape each provider's API (and SDK types) document."""

from __future__ import annotations

import typing

import mcp.types
from anthropic.types import ToolParam
from openai.types.chat import ChatCompletionFunctionToolParam
from openai.types.shared_params import FunctionDefinition

from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Capability, Effect, Tool

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name", "title": "City"},
        "unit": {"type": ["string", "null"], "enum": ["c", "f", None], "default": "c"},
        "when": {"$ref": "#/$defs/When"},
    },
    "required": ["city"],
    "additionalProperties": False,
    "$defs": {"When": {"type": "object", "properties": {"day": {"const": "today"}}}},
}


async def _noop(arguments, ctx):
    return None


def registry() -> ToolRegistry:
    return ToolRegistry(
        [
            Tool(
                name="weather",
                description="Weather for a city.",
                input_schema=SCHEMA,
                handler=_noop,
                output_schema={"type": "object", "properties": {"temp": {"type": "number"}}},
                tags=frozenset({"http"}),
                capability=Capability(effect=Effect.READ, idempotent=True),
            ),
            Tool(
                name="drop_table",
                description="Drop a table.",
                input_schema={"type": "object", "properties": {}},
                handler=_noop,
                capability=Capability(effect=Effect.DESTRUCTIVE, idempotent=False),
            ),
        ]
    )


def _typed_dict_keys(cls) -> tuple[set[str], set[str]]:
    return set(typing.get_type_hints(cls)), set(cls.__required_keys__)


def test_openai_chat_completions_function_tools():
    first = registry().definitions("openai")[0]
    assert first == {
        "type": "function",
        "function": {"name": "weather", "description": "Weather for a city.", "parameters": SCHEMA},
    }
    allowed, required = _typed_dict_keys(ChatCompletionFunctionToolParam)
    assert required <= set(first) <= allowed
    allowed, required = _typed_dict_keys(FunctionDefinition)
    assert required <= set(first["function"]) <= allowed


def test_anthropic_messages_tools():
    first = registry().definitions("anthropic")[0]
    assert first == {
        "name": "weather",
        "description": "Weather for a city.",
        "input_schema": SCHEMA,
    }
    allowed, required = _typed_dict_keys(ToolParam)
    assert required <= set(first) <= allowed


def test_gemini_function_declarations_use_its_openapi_subset():
    first = registry().definitions("gemini")[0]
    assert first == {
        "name": "weather",
        "description": "Weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "nullable": True, "enum": ["c", "f", None]},
                "when": {"type": "object", "properties": {"day": {"enum": ["today"]}}},
            },
            "required": ["city"],
        },
    }


def test_mcp_tools_list_entries_parse_as_sdk_tools_with_annotations():
    weather, drop = registry().definitions("mcp")
    parsed = mcp.types.Tool.model_validate(weather)
    assert parsed.name == "weather" and parsed.input_schema == SCHEMA
    assert parsed.output_schema == {"type": "object", "properties": {"temp": {"type": "number"}}}
    assert parsed.annotations.read_only_hint is True
    assert parsed.annotations.destructive_hint is False
    assert parsed.annotations.idempotent_hint is True
    assert parsed.annotations.open_world_hint is True
    assert parsed.model_dump(by_alias=True, exclude_none=True) == weather  # exactly the wire shape
    dropped = mcp.types.Tool.model_validate(drop)
    assert dropped.annotations.destructive_hint is True
    assert dropped.annotations.read_only_hint is False
    assert "outputSchema" not in drop


def test_unknown_format_is_refused():
    import pytest

    with pytest.raises(ValueError):
        registry().definitions("cohere")
