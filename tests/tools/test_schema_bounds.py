"""Tenant schemas and views cannot make a call's work explode: `$ref`s that expand
exponentially or in a cycle are refused when the schema is checked, in time linear in its
size; an HTTP tool's model_view has a bounded number of fields and a bounded size."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from django.conf import settings
from pydantic import ValidationError

from tests.tools.local_server import Reply
from tools.runtime.circuit import RedisCircuitStore
from tools.runtime.context import RunContext
from tools.runtime.egress import EgressPolicy, GuardedHttpClient
from tools.runtime.http_tool import HttpToolConfig, build_http_tool
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import ToolCall
from tools.runtime.validation import SchemaError, check_schema, compile_validator


def fan_out(levels: int, defs_key: str = "$defs") -> dict:
    """Each level an anyOf of two $refs to the next: 2**levels paths for jsonschema."""
    defs = {f"d{i}": {"anyOf": [{"$ref": f"#/{defs_key}/d{i + 1}"}] * 2} for i in range(levels)}
    defs[f"d{levels}"] = {"type": "integer"}
    return {"type": "object", "properties": {"x": {"$ref": f"#/{defs_key}/d0"}}, defs_key: defs}


@pytest.mark.parametrize("levels", [16, 30])
def test_a_fan_out_of_refs_is_refused_quickly(levels):
    started = time.perf_counter()
    with pytest.raises(SchemaError, match=r"at \$defs/d\d+/anyOf: expands to more than 10,000"):
        check_schema(fan_out(levels))
    assert time.perf_counter() - started < 1


def test_a_fan_out_is_refused_under_definitions_and_inside_a_subresource():
    with pytest.raises(SchemaError, match="expands to more than"):
        check_schema(fan_out(16, "definitions"))
    inner = fan_out(16)
    inner["$id"] = "inner"  # its $refs resolve within it
    with pytest.raises(SchemaError, match="expands to more than"):
        check_schema({"type": "object", "properties": {"i": inner}})


@pytest.mark.parametrize(
    "schema,where,ref",
    [
        ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "$defs/a", "#/$defs/a"),
        (
            {
                "type": "object",
                "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"$ref": "#/$defs/a"}},
                "properties": {"x": {"$ref": "#/$defs/a"}},
            },
            "$defs/b",
            "#/$defs/a",
        ),
        ({"type": "object", "properties": {"x": {"$ref": "#"}}}, "properties/x", "#"),
    ],
)
def test_a_ref_cycle_is_refused_with_a_clear_message(schema, where, ref):
    with pytest.raises(SchemaError) as caught:
        check_schema(schema)
    assert str(caught.value) == (
        f"input_schema at {where}: $ref '{ref}' leads back to itself; "
        "$ref cycles (recursive schemas) are not supported"
    )


def test_a_long_chain_of_refs_is_refused_before_it_could_exhaust_the_stack():
    defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(2000)}
    defs["d2000"] = {"type": "integer"}
    schema = {"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs}
    with pytest.raises(SchemaError, match="nests deeper than 100 levels once its"):
        check_schema(schema)


def test_dynamic_refs_are_refused():
    schema = {
        "type": "object",
        "properties": {"x": {"$dynamicAnchor": "x", "anyOf": [{"$dynamicRef": "#x"}]}},
    }
    with pytest.raises(SchemaError, match=r"\$dynamicRef is not supported; use \$ref"):
        check_schema(schema)


def test_a_schema_reusing_definitions_is_accepted_and_validates():
    address = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
        "required": ["city"],
    }
    schema = {
        "type": "object",
        "properties": {
            "billing": {"$ref": "#/$defs/address"},
            "shipping": {"anyOf": [{"$ref": "#/$defs/address"}, {"type": "null"}]},
            "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}},
        },
        "required": ["billing"],
        "$defs": {
            "address": address,
            "line": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "from": {"$ref": "#/$defs/address"}},
            },
        },
    }
    check_schema(schema)
    validate = compile_validator(schema)
    good = {"billing": {"city": "Oslo"}, "shipping": None, "lines": [{"sku": "a"}]}
    assert validate(good) is None
    assert validate({"billing": {"zip": "0150"}}) == "billing: 'city' is a required property"
    assert validate({"billing": {"city": "Oslo"}, "lines": [{"from": {"city": 1}}]}) == (
        "lines.0.from.city: 1 is not of type 'string'"
    )


def test_a_subresource_resolves_its_own_refs():
    inner = {"$id": "a/b", "$defs": {"y": {"type": "string"}}, "$ref": "#/$defs/y"}
    schema = {"type": "object", "properties": {"p": {"$ref": "#/$defs/x"}}, "$defs": {"x": inner}}
    check_schema(schema)
    assert compile_validator(schema)({"p": 1}) == "p: 1 is not of type 'string'"


# -- model_view ---------------------------------------------------------------------------


def test_model_view_allows_at_most_50_fields():
    config = {"url": "http://h/x", "model_view": {f"f{i}": "" for i in range(50)}}
    HttpToolConfig.model_validate(config)
    config["model_view"]["f50"] = ""
    with pytest.raises(ValidationError, match=r"model_view\n.*at most 50 items"):
        HttpToolConfig.model_validate(config)


def call_with_view(server, view: dict, **config) -> object:
    tool = build_http_tool(
        name="items",
        description="Items API",
        input_schema={"type": "object", "properties": {}},
        config=HttpToolConfig.model_validate(
            {"url": server.url + "/v1/items", "model_view": view, **config}
        ),
        egress=GuardedHttpClient(EgressPolicy(allowlist=("127.0.0.1/32",))),
        circuit_store=RedisCircuitStore(settings.REDIS_URL, prefix=f"test-{uuid.uuid4().hex}:"),
        circuit_key="t1:items",
    )
    registry = ToolRegistry([tool])
    return asyncio.run(registry.execute(ToolCall("call_1", "items", {}), RunContext(tenant_id=42)))


def test_a_model_view_repeating_the_response_fails_the_call(local_server):
    payload = {"items": ["x" * 1000] * 100}  # ~100 KB
    local_server.route("GET", "/v1/items", Reply(json=payload))
    result = call_with_view(local_server, {f"f{i}": "" for i in range(50)})
    assert result.result is None
    assert result.error.startswith(
        "the response's model_view would be over 1,000,000 characters, the tool's "
        "max_response_bytes"
    )

    local_server.route("GET", "/v1/items", Reply(json={"items": ["x" * 60, "y" * 60]}))
    view = {"all": "", "again": ""}  # each ~150 characters: within the response's limit
    result = call_with_view(local_server, view, max_response_bytes=200)
    assert result.error is not None and "over 200 characters" in result.error


def test_a_model_view_within_the_limit_is_shown(local_server):
    local_server.route("GET", "/v1/items", Reply(json={"items": [{"id": 1}, {"id": 2}]}))
    result = call_with_view(local_server, {"all": "", "ids": "items.*.id"})
    assert result.error is None
    assert result.result == {"all": {"items": [{"id": 1}, {"id": 2}]}, "ids": [1, 2]}
