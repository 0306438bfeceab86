"""Tool definitions in each provider's documented shape.

- openai:    Chat Completions `tools[]` item: {"type": "function", "function": {name,
             description, parameters}}
- anthropic: Messages API `tools[]` item: {name, description, input_schema}
- gemini:    a FunctionDeclaration for `tools[].functionDeclarations[]`: {name,
             description, parameters} with `parameters` in Gemini's OpenAPI-3.0 subset
- mcp:       an MCP `Tool` as sent on the wire in tools/list: {name, description,
             inputSchema, outputSchema?, annotations{readOnlyHint, destructiveHint,
             idempotentHint, openWorldHint}}
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tools.runtime.tool import Tool


class Format(StrEnum):
    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    GEMINI = "gemini"
    MCP = "mcp"


def definition_for(tool: Tool, format: Format) -> dict[str, Any]:
    if format is Format.OPENAI:
        return {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.model_schema,
            },
        }
    if format is Format.ANTHROPIC:
        return {
            "name": tool.name,
            "description": tool.description,
            "input_schema": tool.model_schema,
        }
    if format is Format.GEMINI:
        return {
            "name": tool.name,
            "description": tool.description,
            "parameters": gemini_schema(tool.model_schema),
        }
    if format is Format.MCP:
        return mcp_definition(tool)
    raise ValueError(f"unknown format {format!r}")


def mcp_definition(tool: Tool) -> dict[str, Any]:
    from tools.runtime.tool import Effect

    effect = tool.capability.effect
    definition: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description,
        "inputSchema": tool.model_schema,
        "annotations": {
            "readOnlyHint": effect in (Effect.NONE, Effect.READ),
            "destructiveHint": effect is Effect.DESTRUCTIVE,
            "idempotentHint": tool.capability.idempotent,
            "openWorldHint": "http" in tool.tags,
        },
    }
    if tool.output_schema is not None:
        definition["outputSchema"] = tool.output_schema
    return definition


# Gemini's Schema object (an OpenAPI 3.0 subset) takes these fields.
_GEMINI_FIELDS = {
    "type", "format", "description", "nullable", "enum", "maxItems", "minItems",
    "properties", "required", "items", "minimum", "maximum", "minLength", "maxLength",
    "pattern", "anyOf", "propertyOrdering", "minProperties", "maxProperties",
}  # fmt: skip


def gemini_schema(schema: Any, defs: dict | None = None) -> Any:
    """JSON Schema -> Gemini Schema: inline $ref, `["x", "null"]` -> nullable, const -> enum,
    drop fields Gemini rejects (additionalProperties, $schema, title, default, ...)."""
    if not isinstance(schema, dict):
        return schema
    defs = {**(defs or {}), **schema.get("$defs", {}), **schema.get("definitions", {})}
    if "$ref" in schema:
        target = schema["$ref"].rsplit("/", 1)[-1]
        return gemini_schema(defs.get(target, {}), defs)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, list):
            types = [t for t in value if t != "null"]
            if len(types) < len(value):
                out["nullable"] = True
            out["type"] = types[0] if len(types) == 1 else types
        elif key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out["properties"] = {name: gemini_schema(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out["items"] = gemini_schema(value, defs)
        elif key == "anyOf":
            variants = [gemini_schema(v, defs) for v in value]
            non_null = [v for v in variants if v.get("type") != "null"]
            if len(non_null) < len(variants):
                out["nullable"] = True
            if len(non_null) == 1:
                out.update(non_null[0])
            else:
                out["anyOf"] = non_null
        elif key in _GEMINI_FIELDS:
            out[key] = value
    return out
