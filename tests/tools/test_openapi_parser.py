"""OpenAPI documents into tool drafts (tools/runtime/imports/openapi.py): the published
documents in tests/data/openapi turn into the tools an admin would write, and hostile
documents are refused quickly with our message."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tools.runtime.http_tool import HttpToolConfig
from tools.runtime.imports import ImportRefused
from tools.runtime.imports.openapi import MAX_OPERATIONS, openapi_drafts
from tools.runtime.validation import check_schema

DATA = Path(__file__).parent.parent / "data" / "openapi"
TICTACTOE_URL = "https://learn.openapis.org/examples/v3.1/tictactoe.yaml"


def drafts_of(name: str, **kwargs) -> dict:
    result = openapi_drafts((DATA / name).read_text(), **kwargs)
    return {item.draft.name: item.draft for item in result.operations}


def mini(paths: dict, **extra) -> dict:
    return {
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "servers": [{"url": "https://api.example.com/v1"}],
        "paths": paths,
        **extra,
    }


def refused(document, match: str, **kwargs) -> ImportRefused:
    started = time.perf_counter()
    with pytest.raises(ImportRefused, match=match) as caught:
        openapi_drafts(document, **kwargs)
    assert time.perf_counter() - started < 5  # refused, not ground through (~0.5 s at most)
    return caught.value


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("petstore-2.0.yaml", {}),
        ("swagger-petstore-3.0.yaml", {}),
        ("petstore-expanded-3.0.yaml", {}),
        ("tictactoe-3.1.yaml", {"document_url": TICTACTOE_URL}),
    ],
)
def test_every_draft_of_the_published_documents_is_a_valid_tool(name, kwargs):
    result = openapi_drafts((DATA / name).read_text(), **kwargs)
    assert result.operations
    for item in result.operations:
        draft = item.draft
        config = HttpToolConfig.model_validate(draft.config)
        config.check_against_schema(draft.input_schema)
        check_schema(draft.input_schema)
        if draft.output_schema is not None:
            check_schema(draft.output_schema, what="output_schema")
        assert draft.effect == ""  # derived from the method, as a hand-made tool's
        assert draft.definition_fields()["kind"] == "http"


def test_swagger_2_petstore_paths_bodies_headers_and_its_api_key():
    result = openapi_drafts((DATA / "petstore-2.0.yaml").read_text())
    assert result.format == "Swagger 2.0" and result.base_url == "http://petstore.swagger.io/v2"
    tools = {item.draft.name: item.draft for item in result.operations}
    get_pet = tools["getPetById"]
    assert get_pet.config == {
        "method": "GET",
        "url": "http://petstore.swagger.io/v2/pet/{petId}",
        "arguments": [{"argument": "petId", "to": "path"}],
        "auth": {"type": "header", "header": "api_key"},
    }
    assert get_pet.input_schema["properties"]["petId"]["type"] == "integer"
    assert get_pet.output_schema["required"] == ["name", "photoUrls"]
    assert get_pet.output_schema["properties"]["category"]["properties"]["name"] == {
        "type": "string"
    }  # its $ref inlined
    assert get_pet.source == "GET /pet/{petId}"
    add_pet = tools["addPet"]  # `in: body`: each property an argument sent in the body
    assert set(add_pet.input_schema["properties"]) == {
        "id",
        "category",
        "name",
        "photoUrls",
        "tags",
        "status",
    }
    assert add_pet.input_schema["required"] == ["name", "photoUrls"]
    assert {t["to"] for t in add_pet.config["arguments"]} == {"body"}
    assert "OAuth 2" in add_pet.notes[0] and "auth" not in add_pet.config
    # The path's `username` and the body's clash: the body's is renamed, sent as `username`.
    update_user = tools["updateUser"]
    assert {"argument": "username", "to": "path"} in update_user.config["arguments"]
    assert {"argument": "body_username", "to": "body", "name": "username"} in update_user.config[
        "arguments"
    ]
    skipped = {s.operation_id: s.reason for s in result.skipped}
    assert "form data" in skipped["uploadFile"] and "form data" in skipped["updatePetWithForm"]
    assert "not a JSON object" in skipped["createUsersWithArrayInput"]


def test_openapi_3_0_petstore_query_arrays_and_outputs():
    tools = drafts_of("swagger-petstore-3.0.yaml")
    inventory = tools["getInventory"]
    assert inventory.config["auth"] == {"type": "header", "header": "api_key"}
    assert inventory.config["url"] == "https://petstore3.swagger.io/api/v3/store/inventory"
    by_status = tools["findPetsByStatus"]
    assert by_status.config["arguments"] == [{"argument": "status", "to": "query"}]
    assert by_status.output_schema is None  # a list: tool output schemas are objects
    assert any("JSON array" in note for note in by_status.notes)
    order = tools["placeOrder"]
    assert order.config["method"] == "POST"
    assert order.input_schema["properties"]["status"]["enum"] == ["placed", "approved", "delivered"]
    expanded = drafts_of("petstore-expanded-3.0.yaml")
    assert set(expanded) == {"findPets", "addPet", "find_pet_by_id", "deletePet"}
    assert expanded["find_pet_by_id"].output_schema["type"] == "object"  # an allOf of objects
    assert expanded["addPet"].input_schema["required"] == ["name"]


def test_openapi_3_1_tictactoe_resolves_its_server_against_the_documents_url():
    result = openapi_drafts((DATA / "tictactoe-3.1.yaml").read_text(), document_url=TICTACTOE_URL)
    tools = {item.draft.name: item.draft for item in result.operations}
    square = tools["get-square"]
    assert square.config["url"] == "https://learn.openapis.org/board/{row}/{column}"
    assert square.config["auth"] == {"type": "bearer"}
    assert square.input_schema["properties"]["row"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 3,
        "description": "Board row (vertical coordinate)",
    }
    assert square.input_schema["required"] == ["row", "column"]
    assert tools["get-board"].output_schema["properties"]["winner"]["enum"] == [".", "X", "O"]
    # Its PUT sends a bare string as the body, which an HTTP tool cannot: skipped, with why.
    assert [s.operation_id for s in result.skipped] == ["put-square"]
    with pytest.raises(ImportRefused, match="no absolute server URL"):
        openapi_drafts((DATA / "tictactoe-3.1.yaml").read_text())  # pasted: where is it?
    given = openapi_drafts(
        (DATA / "tictactoe-3.1.yaml").read_text(), base_url="https://ttt.example.com/api"
    )
    assert given.operations[0].draft.config["url"] == "https://ttt.example.com/api/board"


def test_names_are_sanitised_unique_and_never_a_platform_tools():
    operation = {"responses": {"200": {"description": "ok"}}}
    document = mini(
        {
            "/a": {"get": {**operation, "operationId": "list things!"}},
            "/b": {"get": {**operation, "operationId": "list things?"}},
            "/c/{item-id}": {
                "get": operation,
                "parameters": [{"name": "item-id", "in": "path", "required": True}],
            },
            "/d": {"get": {**operation, "operationId": "knowledge_search"}},
        }
    )
    tools = {item.draft.name: item.draft for item in openapi_drafts(document).operations}
    assert set(tools) == {"list_things", "list_things_2", "get_c_item-id", "api_knowledge_search"}
    # A placeholder must be an identifier: `{item-id}` becomes `{item_id}`, its argument too.
    assert tools["get_c_item-id"].config["url"].endswith("/c/{item_id}")
    assert tools["get_c_item-id"].config["arguments"] == [{"argument": "item_id", "to": "path"}]


def test_parameters_a_tool_cannot_send_are_dropped_with_a_note():
    parameters = [
        {"name": "X Bad Header", "in": "header", "schema": {"type": "string"}},
        {"name": "Authorization", "in": "header", "schema": {"type": "string"}},
        {"name": "session", "in": "cookie", "schema": {"type": "string"}},
        {"name": "filter[name]", "in": "query", "schema": {"type": "string"}},
    ]
    document = mini(
        {"/a": {"get": {"operationId": "a", "parameters": parameters, "responses": {}}}}
    )
    [item] = openapi_drafts(document).operations
    assert item.draft.config["arguments"] == [
        {"argument": "filter_name", "to": "query", "name": "filter[name]"}
    ]
    assert len(item.draft.notes) == 3


def test_security_alternatives_basic_bearer_none_and_unsupported():
    schemes = {
        "basic": {"type": "http", "scheme": "basic"},
        "token": {"type": "http", "scheme": "bearer"},
        "query_key": {"type": "apiKey", "in": "query", "name": "key"},
        "oidc": {"type": "openIdConnect", "openIdConnectUrl": "https://x.example.com"},
    }
    ok = {"responses": {"200": {"description": "ok"}}}
    document = mini(
        {
            "/a": {
                "get": {**ok, "operationId": "a", "security": [{"query_key": []}, {"token": []}]}
            },
            "/b": {"get": {**ok, "operationId": "b", "security": [{"basic": []}]}},
            "/c": {"get": {**ok, "operationId": "c", "security": [{}]}},
            "/d": {"get": {**ok, "operationId": "d", "security": [{"oidc": []}]}},
            "/e": {"get": {**ok, "operationId": "e", "security": [{"token": [], "basic": []}]}},
        },
        components={"securitySchemes": schemes},
    )
    tools = {item.draft.name: item.draft for item in openapi_drafts(document).operations}
    assert tools["a"].config["auth"] == {"type": "bearer"}  # the first alternative it can send
    assert tools["b"].config["auth"] == {"type": "basic"} and "username" in tools["b"].notes[0]
    assert "auth" not in tools["c"].config and not tools["c"].notes
    assert "auth" not in tools["d"].config and "OpenID Connect" in tools["d"].notes[0]
    assert "together" in tools["e"].notes[0]


def test_a_schema_containing_itself_is_cut_where_it_recurs():
    tree = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#/components/schemas/Tree"}},
        },
    }
    document = mini(
        {
            "/trees": {
                "post": {
                    "operationId": "plant",
                    "requestBody": {
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Tree"}}
                        }
                    },
                    "responses": {"201": {"description": "ok"}},
                }
            }
        },
        components={"schemas": {"Tree": tree}},
    )
    result = openapi_drafts(document)
    children = result.operations[0].draft.input_schema["properties"]["children"]
    assert children["items"] == {"description": "A Tree (recursive: not expanded)."}
    assert any("contains itself" in note for note in result.notes)


# -- hostile documents -------------------------------------------------------------------
def test_a_document_over_two_megabytes_is_refused():
    huge = json.dumps(mini({"/a": {"get": {"description": "x" * 2_100_000}}}))
    refused(huge, "larger than 2 MB")


def test_deep_nesting_is_refused_in_json_and_yaml():
    refused('{"a": ' * 100_000 + "1" + "}" * 100_000, "nests deeper than 64")
    refused(
        "a:\n" + "".join("  " * i + f"b{i}:\n" for i in range(1, 200)) + "  " * 200 + "x", "deeper"
    )
    refused("[" * 5_000 + "]" * 5_000, "deeper")


def test_a_yaml_alias_bomb_is_refused_quickly():
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcdefghi"):
        previous = "abcdefghi"[i]
        lines.append(f"{name}: &{name} [{','.join(['*' + previous] * 9)}]")
    refused("\n".join(lines), "expands to more than")
    refused("openapi: 3.1.0\npaths: &p {/a: {get: *p}}", "contains itself")


def test_refs_repeating_each_other_are_refused():
    schemas = {
        f"L{i}": {
            "type": "object",
            "properties": {f"p{j}": {"$ref": f"#/components/schemas/L{i + 1}"} for j in range(10)},
        }
        for i in range(8)
    }
    schemas["L8"] = {"type": "string"}
    document = mini(
        {
            "/x": {
                "post": {
                    "requestBody": {
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/L0"}}
                        }
                    },
                    "responses": {},
                }
            }
        },
        components={"schemas": schemas},
    )
    refused(document, "expand to more than")


def test_a_reference_leading_only_to_itself_and_external_references_are_refused():
    loop = {"A": {"$ref": "#/components/schemas/B"}, "B": {"$ref": "#/components/schemas/A"}}
    body = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/A"}}}}
    document = mini(
        {"/x": {"post": {"requestBody": body, "responses": {}}}}, components={"schemas": loop}
    )
    refused(document, "only leads to itself")
    for ref in ("https://evil.example.com/pet.json", "other.yaml#/Pet", "file:///etc/passwd"):
        body = {"content": {"application/json": {"schema": {"$ref": ref}}}}
        error = refused(mini({"/x": {"post": {"requestBody": body, "responses": {}}}}), "outside")
        assert error.path == "paths./x.post.requestBody"
    refused(mini({"/x": {"$ref": "#/nowhere"}}), "points at nothing")


def test_thousands_of_operations_are_refused():
    paths = {f"/r{i}": {"get": {"responses": {}}} for i in range(MAX_OPERATIONS + 1)}
    error = refused(mini(paths), f"{MAX_OPERATIONS + 1:,} operations, more than {MAX_OPERATIONS}")
    assert error.path == "paths"


@pytest.mark.parametrize(
    "document,match",
    [
        ("", "empty"),
        ("just words", "must be a JSON or YAML object"),
        ("{not json", r"neither JSON nor YAML \(line 1"),
        ("a: [unclosed", r"neither JSON nor YAML \(line"),
        ("!!python/object/apply:os.system ['echo hi']", "neither JSON nor YAML"),
        ("openapi: 3.0.0\npaths: {}", "no paths"),
        ("swagger: '1.2'\npaths: {/a: {}}", "not an OpenAPI"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_unusable_text_is_refused_with_our_message(document, match):
    error = refused(document, match)
    assert not any(word in str(error) for word in ("expected", "found", "scanner", "Expecting"))


def test_values_of_the_wrong_type_leave_their_operation_out_never_an_exception():
    body = {"type": "object", "properties": {"x": {"type": "string"}}, "required": [[1], "x"]}
    document = mini(
        {
            "/a": {
                "post": {
                    "operationId": "a",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": body}},
                    },
                    "responses": {"200": {"description": "ok"}},
                },
                "get": {"operationId": "b", "parameters": 5, "responses": {}},
            },
        }
    )
    result = openapi_drafts(document)
    drafts = {item.draft.name: item.draft for item in result.operations}
    assert drafts["a"].input_schema["required"] == ["x"]  # the odd entry dropped
    assert {s.operation_id for s in result.skipped} <= {"b"}
    for item in result.operations:
        HttpToolConfig.model_validate(item.draft.config)
    refused(mini({"/a": {"get": {}}}, servers=[{"url": "https://[x/v1"}]), "server URL")
    bad_own_server = {"get": {"servers": [{"url": "https://[x/v1"}]}}
    refused(mini({"/a": bad_own_server}, servers=[]), "server URL")
    refused(mini({"/a": {"get": {}}}), "server URL", base_url="http://[::1")
