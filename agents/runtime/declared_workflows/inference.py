"""What an expression gives, as far as the compiler can tell, as a JSON Schema.

A schema here is a dict, or None when nothing is known. The compiler checks a value
against what receives it only where both are known (`compatible`), so a mismatch it
reports is certain: a tool argument declared `integer` given `input.city`, declared
`string`; a workflow declaring an object output whose last step gives text. Where it cannot
tell (a field of an unknown value, `a || b`, most functions), it says nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Schema = Mapping[str, Any] | None

JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
MAX_COMPARED_DEPTH = 8

_FUNCTION_RESULTS: dict[str, str] = {
    "abs": "number",
    "avg": "number",
    "ceil": "number",
    "floor": "number",
    "sum": "number",
    "to_number": "number",
    "length": "integer",
    "contains": "boolean",
    "starts_with": "boolean",
    "ends_with": "boolean",
    "join": "string",
    "to_string": "string",
    "type": "string",
    "keys": "array",
    "values": "array",
    "sort": "array",
    "sort_by": "array",
    "to_array": "array",
    "map": "array",
    "merge": "object",
}


def schema_of_literal(value: Any) -> dict[str, Any]:
    if value is None:
        return {"type": "null"}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        return {"type": "array"}
    if isinstance(value, dict):
        properties = {key: schema_of_literal(item) for key, item in value.items()}
        return {"type": "object", "properties": properties, "additionalProperties": False}
    return {}


ROOT: Mapping[str, Any] = {"$comment": "the scope"}  # `current` when it is the scope itself


def infer(node: dict[str, Any], current: Schema, scope: Mapping[str, Schema]) -> Schema:
    """The schema of what `node` gives when evaluated on a value of schema `current`, or on
    the scope when `current` is ROOT (`scope` gives the schema of each of its names)."""
    kind = node["type"]
    children = node.get("children", [])
    if kind == "field":
        if current is ROOT:
            return scope.get(node["value"])
        return property_schema(current, node["value"])
    if kind in ("subexpression", "pipe"):
        left = infer(children[0], current, scope)
        return infer(children[1], left, scope) if left is not None else None
    if kind == "literal":
        return schema_of_literal(node["value"])
    if kind in ("comparator", "not_expression"):
        return {"type": "boolean"}
    if kind == "multi_select_dict":
        properties = {
            pair["value"]: infer(pair["children"][0], current, scope) or {} for pair in children
        }
        return {"type": "object", "properties": properties, "additionalProperties": False}
    if kind in ("multi_select_list", "projection", "filter_projection", "value_projection"):
        return {"type": "array"}
    if kind == "flatten":
        return {"type": "array"}
    if kind == "function_expression":
        result = _FUNCTION_RESULTS.get(node["value"])
        return {"type": result} if result else None
    if kind == "index_expression":
        left = infer(children[0], current, scope)
        items = left.get("items") if isinstance(left, Mapping) else None
        return items if isinstance(items, Mapping) and children[1]["type"] == "index" else None
    if kind in ("current", "identity"):
        return None if current is ROOT else current
    return None


def property_schema(schema: Schema, name: str) -> Schema:
    if not isinstance(schema, Mapping):
        return None
    properties = schema.get("properties")
    if isinstance(properties, Mapping) and isinstance(properties.get(name), Mapping):
        return properties[name]
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else None


def types_of(schema: Schema) -> frozenset[str] | None:
    """The JSON types a value of `schema` may have; None when unknown (no `type`, or a
    schema combining others)."""
    if not isinstance(schema, Mapping):
        return None
    if "const" in schema:
        return frozenset(schema_of_literal(schema["const"]).get("type", "").split()) or None
    declared = schema.get("type")
    if isinstance(declared, str) and declared in JSON_TYPES:
        return frozenset({declared})
    if isinstance(declared, list) and declared and all(t in JSON_TYPES for t in declared):
        return frozenset(declared)
    return None


def _accepts(expected: frozenset[str], actual: str) -> bool:
    if actual in expected:
        return True
    # An integer is a number; a number may be an integer.
    return (actual == "integer" and "number" in expected) or (
        actual == "number" and "integer" in expected
    )


def mismatch(expected: Schema, actual: Schema, depth: int = 0) -> str | None:
    """Why a value of schema `actual` cannot be what `expected` declares, when both are
    known and they cannot agree; None when they may. Objects are compared property by
    property (a missing required property counts only when `actual` lists all of its own)."""
    wanted, given = types_of(expected), types_of(actual)
    if wanted is None or given is None:
        return None
    if not any(_accepts(wanted, t) for t in given):
        return f"expects {_names(wanted)}, gets {_names(given)}"
    if depth >= MAX_COMPARED_DEPTH or given != {"object"} or "object" not in wanted:
        return None
    assert expected is not None and actual is not None
    closed = actual.get("additionalProperties") is False
    actual_properties = actual.get("properties") or {}
    required = expected.get("required") or []
    for name in required if isinstance(required, list) else []:
        if closed and isinstance(name, str) and name not in actual_properties:
            return f"needs the property {name!r}, which is not given"
    expected_properties = expected.get("properties") or {}
    if not isinstance(expected_properties, Mapping) or not isinstance(actual_properties, Mapping):
        return None
    for name, schema in expected_properties.items():
        if name in actual_properties:
            why = mismatch(schema, actual_properties[name], depth + 1)
            if why:
                return f"property {name!r} {why}"
    if expected.get("additionalProperties") is False and closed:
        for name in actual_properties:
            if name not in expected_properties:
                return f"has no property {name!r}"
    return None


def _names(types: frozenset[str]) -> str:
    return " or ".join(sorted(types))
