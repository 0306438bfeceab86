"""The compiled validators agree with jsonschema, and fall back to it when needed."""

from __future__ import annotations

import jsonschema
import pytest

from tools.runtime.validation import SchemaError, check_schema, compile_validator

SCHEMAS = {
    "object": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
            "count": {"type": "integer", "minimum": 1, "exclusiveMaximum": 10},
            "ratio": {"type": "number", "maximum": 1, "exclusiveMinimum": 0},
            "flag": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
            "kind": {"enum": ["a", "b", 1]},
            "fixed": {"const": True},
            "maybe": {"type": ["string", "null"]},
            "nested": {
                "type": "object",
                "properties": {"x": {"type": "integer"}},
                "required": ["x"],
                "additionalProperties": {"type": "string"},
            },
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    "fallback": {
        "type": "object",
        "properties": {"v": {"anyOf": [{"type": "string"}, {"type": "integer", "multipleOf": 2}]}},
    },
}

CASES = [
    ("object", {"name": "abc"}),
    ("object", {}),
    ("object", {"name": "a"}),
    ("object", {"name": "abcdef"}),
    ("object", {"name": "ABC"}),
    ("object", {"name": "abc", "count": 1}),
    ("object", {"name": "abc", "count": 10}),
    ("object", {"name": "abc", "count": 0}),
    ("object", {"name": "abc", "count": 2.0}),
    ("object", {"name": "abc", "count": 2.5}),
    ("object", {"name": "abc", "count": True}),
    ("object", {"name": "abc", "ratio": 0}),
    ("object", {"name": "abc", "ratio": 0.5}),
    ("object", {"name": "abc", "ratio": 1}),
    ("object", {"name": "abc", "ratio": "1"}),
    ("object", {"name": "abc", "flag": 1}),
    ("object", {"name": "abc", "flag": False}),
    ("object", {"name": "abc", "tags": []}),
    ("object", {"name": "abc", "tags": ["x"]}),
    ("object", {"name": "abc", "tags": ["x", 2]}),
    ("object", {"name": "abc", "tags": ["x", "y", "z"]}),
    ("object", {"name": "abc", "kind": "a"}),
    ("object", {"name": "abc", "kind": 1}),
    ("object", {"name": "abc", "kind": True}),
    ("object", {"name": "abc", "kind": 1.0}),
    ("object", {"name": "abc", "kind": "c"}),
    ("object", {"name": "abc", "fixed": True}),
    ("object", {"name": "abc", "fixed": 1}),
    ("object", {"name": "abc", "maybe": None}),
    ("object", {"name": "abc", "maybe": 3}),
    ("object", {"name": "abc", "nested": {"x": 1, "y": "s"}}),
    ("object", {"name": "abc", "nested": {"x": 1, "y": 2}}),
    ("object", {"name": "abc", "nested": {}}),
    ("object", {"name": "abc", "extra": 1}),
    ("object", []),
    ("object", None),
    ("fallback", {"v": "s"}),
    ("fallback", {"v": 4}),
    ("fallback", {"v": 3}),
    ("fallback", {"v": None}),
]


@pytest.mark.parametrize("schema_name,value", CASES)
def test_compiled_validator_agrees_with_jsonschema(schema_name, value):
    schema = SCHEMAS[schema_name]
    expected = jsonschema.Draft202012Validator(schema).is_valid(value)
    error = compile_validator(schema)(value)
    assert (error is None) == expected, error


def test_errors_name_the_path_and_the_expectation():
    validate = compile_validator(SCHEMAS["object"])
    assert validate({}) == "name: required"
    assert validate({"name": "abc", "count": "3"}) == "count: expected integer, got string"
    assert validate({"name": "abc", "tags": ["x", 2]}) == "tags[1]: expected string, got integer"
    assert validate({"name": "abc", "nested": {"x": 1, "y": 2}}) == (
        "nested.y: expected string, got integer"
    )
    assert validate({"name": "abc", "zzz": 1}).startswith("zzz: unexpected argument (allowed: name")
    assert validate({"name": "abc", "count": 0}) == "count: must be ≥ 1"
    assert validate([]) == "arguments: expected object, got array"


def test_check_schema_refuses_invalid_or_non_object_schemas():
    check_schema({"type": "object", "properties": {}})
    check_schema({"properties": {"a": {"type": "string"}}})  # object implied
    with pytest.raises(SchemaError, match="at properties/a/type"):
        check_schema({"type": "object", "properties": {"a": {"type": "text"}}})
    with pytest.raises(SchemaError, match="must be a JSON object"):
        check_schema(["type"])
    with pytest.raises(SchemaError, match='"type": "object"'):
        check_schema({"type": "array"})
