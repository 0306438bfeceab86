"""The compiled validators agree with jsonschema, and fall back to it when needed; tenant
schemas read nothing outside themselves and their patterns run in linear time."""

from __future__ import annotations

import json
import time

import jsonschema
import pytest

from tests.tools.local_server import Reply
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


# -- tenant-written references: nothing outside the schema is ever read ---------------------
SECRET_MARK = "SECRET-KEY-do-not-show"


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "local-secrets.json"
    path.write_text(json.dumps({"SECRET_KEY": SECRET_MARK}))
    return path


def outside_refs(secret_file, local_server) -> dict[str, dict]:
    """Schemas that point outside themselves, each at a file or a server that must stay
    unread (the server records every request)."""
    local_server.route("GET", "/schema.json", Reply(json={"type": "string", "x": SECRET_MARK}))
    here = {"type": "object", "properties": {"a": {"type": "string"}}}
    return {
        "file": {"type": "object", "properties": {"a": {"$ref": f"file://{secret_file}#/nope"}}},
        "http": {
            "type": "object",
            "properties": {"a": {"$ref": f"{local_server.url}/schema.json"}},
        },
        "relative to an $id": {
            "$id": f"{local_server.url}/root.json",
            "type": "object",
            "properties": {"a": {"$ref": "schema.json"}},
        },
        "in $defs": {
            **here,
            "properties": {"a": {"$ref": "#/$defs/a"}},
            "$defs": {"a": {"$ref": f"{local_server.url}/schema.json"}},
        },
        "dynamic": {**here, "properties": {"a": {"$dynamicRef": f"{local_server.url}/s#x"}}},
    }


def test_check_schema_refuses_references_outside_the_schema(secret_file, local_server):
    for name, schema in outside_refs(secret_file, local_server).items():
        with pytest.raises(SchemaError, match=r"not allowed|must not be a URL") as caught:
            check_schema(schema)
        assert SECRET_MARK not in str(caught.value), name
    with pytest.raises(SchemaError, match=r"at properties/a: \$ref '#/nope' points to nothing"):
        check_schema({"type": "object", "properties": {"a": {"$ref": "#/nope"}}})
    assert local_server.requests == []


def test_local_references_and_anchors_are_accepted():
    check_schema(
        {
            "type": "object",
            "properties": {
                "a": {"$ref": "#/$defs/day"},
                "b": {"$ref": "#/properties/a"},
                "c": {"$ref": "#named"},
                "$ref": {"type": "string"},  # a property may be named $ref
            },
            "$defs": {"day": {"type": "integer"}, "n": {"$anchor": "named", "type": "string"}},
        }
    )


def test_a_validator_retrieves_nothing_whatever_is_stored(secret_file, local_server):
    """Defence in depth: schemas that never went through check_schema (a row changed in the
    database) still read nothing, and the error says who must act without quoting."""
    for name, schema in outside_refs(secret_file, local_server).items():
        error = compile_validator(schema)({"a": "x"})
        assert error is not None and "cannot be resolved" in error, name
        assert SECRET_MARK not in error and str(secret_file) not in error
    assert local_server.requests == []
    pointing_nowhere = {"type": "object", "properties": {"a": {"$ref": "#/nope"}}, "k": "v" * 99}
    assert "v" * 99 not in compile_validator(pointing_nowhere)({"a": 1})  # no document quoted


def test_jsonschema_messages_do_not_quote_a_whole_argument():
    validate = compile_validator(
        {"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}]}}}
    )
    error = validate({"a": "x" * 10_000})
    assert error.startswith("a: ") and len(error) < 400


# -- tenant-written patterns: linear time on both paths, refused at save if RE2 can't -------
REDOS = "^(a+)+$"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string", "pattern": REDOS}}},  # compiled
        {"type": "object", "properties": {"a": {"anyOf": [{"pattern": REDOS}]}}},  # jsonschema
        {"type": "object", "patternProperties": {REDOS: {"type": "integer"}}},  # jsonschema
    ],
    ids=["compiled", "jsonschema", "patternProperties"],
)
@pytest.mark.parametrize("length", [26, 50_000])
def test_a_catastrophic_pattern_validates_in_milliseconds(schema, length):
    check_schema(schema)
    validate = compile_validator(schema)
    text = "a" * length + "!"
    started = time.thread_time()  # this thread's CPU time: the machine is shared
    if "patternProperties" in schema:
        assert validate({text: "x"}) is None  # the name does not match: no constraint
    else:
        assert "must match '^(a+)+$'" in validate({"a": text})
    assert time.thread_time() - started < 0.05


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string", "pattern": r"(\w)\1"}}},
        {"type": "object", "properties": {"a": {"anyOf": [{"pattern": "^(?=.*[A-Z])"}]}}},
        {"type": "object", "patternProperties": {"(?<!x)y": {"type": "integer"}}},
    ],
)
def test_patterns_re2_refuses_are_refused_at_save(schema):
    with pytest.raises(SchemaError, match=r"is not supported .* no backreferences"):
        check_schema(schema)
