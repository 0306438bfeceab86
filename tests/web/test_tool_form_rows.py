"""The tool page's form instead of JSON (agentplatform/web/config/tool_rows.py): rows write
the same input_schema and config the JSON editor posts, through the same save service;
bad rows are refused at their field; what rows cannot show is edited as JSON."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from tests.factories import login, make_http_tool
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db

PET_URL = "https://api.example.com/pets/{pet_id}"


def url(view: str, **kwargs) -> str:
    return reverse(f"config:{view}", kwargs={"tenant_slug": "acme", **kwargs})


def rows_post(
    *,
    arguments: list[dict] | None = None,
    request: dict | None = None,
    headers: dict | None = None,
    query: dict | None = None,
    view: dict | None = None,
    **extra,
) -> dict:
    """A post of the tool form as the browser sends it from rows (editor=form)."""
    data = {
        "name": "pet",
        "description": "One pet by its id.",
        "tags": "",
        "effect": "",
        "idempotent": "unknown",
        "timeout_s": "30",
        "enabled": "on",
        "secret": "",
        "input_schema": "{}",
        "config": "{}",
        "editor": "form",
        "req-method": "GET",
        "req-url": PET_URL,
        "req-auth_type": "",
        "req-auth_header": "",
        "req-auth_username": "",
        "req-timeout_s": "",
    }
    data.update({f"req-{k}": v for k, v in (request or {}).items()})
    if arguments is None:
        arguments = [{"name": "pet_id", "type": "integer", "required": "on", "to": "path"}]
    blank = {"name": "", "type": "string", "description": "", "enum": "", "to": "query"}
    for i, row in enumerate(arguments):
        data.update({f"arg-{i}-{k}": v for k, v in {**blank, "destination": "", **row}.items()})
    pairs = {"hdr": headers or {}, "qry": query or {}}
    for prefix, values in pairs.items():
        for i, (key, value) in enumerate(values.items()):
            data.update({f"{prefix}-{i}-key": key, f"{prefix}-{i}-value": value})
    for i, (field, path) in enumerate((view or {}).items()):
        data.update({f"view-{i}-field": field, f"view-{i}-path": path})
    counts = {
        "arg": len(arguments),
        **{p: len(v) for p, v in pairs.items()},
        "view": len(view or {}),
    }
    for prefix, count in counts.items():
        data.update({f"{prefix}-TOTAL_FORMS": str(count), f"{prefix}-INITIAL_FORMS": "0"})
    data.update(extra)
    return data


def test_the_new_tool_page_shows_the_example_as_rows_and_json(client, trio):
    body = login(client, trio.alice).get(url("tool_create")).content.decode()
    assert 'name="arg-0-name"' in body and 'value="city"' in body
    assert 'name="req-url"' in body and "https://api.example.com/weather" in body
    assert 'name="input_schema"' in body and "Edit as JSON" in body
    assert 'name="editor" value="form" checked' in body


def test_rows_save_the_input_schema_and_config(client, trio):
    login(client, trio.alice)
    data = rows_post(
        arguments=[
            {"name": "pet_id", "type": "integer", "required": "on", "to": "path",
             "description": "The pet's id."},
            {"name": "status", "type": "string", "enum": "available, sold", "to": "query",
             "destination": "filter"},
            {"name": "tags", "type": "array", "to": "body"},
            {"name": "note", "type": "string", "to": ""},
            {"name": "", "type": "string", "to": "query"},  # a blank row: skipped
        ],
        request={"method": "POST", "auth_type": "header", "auth_header": "X-Key",
                 "timeout_s": "5"},
        headers={"Accept": "application/json"},
        query={"format": "full"},
        view={"name": "data.name", "owners": "data.owners.*.name"},
        secret="the-api-key",
    )  # fmt: skip
    response = client.post(url("tool_create"), data)
    assert response.status_code == 302, response.content.decode()
    tool = ToolDefinition.objects.get(tenant=trio.acme, name="pet")
    assert tool.input_schema == {
        "type": "object",
        "properties": {
            "pet_id": {"type": "integer", "description": "The pet's id."},
            "status": {"type": "string", "enum": ["available", "sold"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "note": {"type": "string"},
        },
        "required": ["pet_id"],
    }
    assert tool.config == {
        "method": "POST",
        "url": PET_URL,
        "arguments": [
            {"argument": "pet_id", "to": "path"},
            {"argument": "status", "to": "query", "name": "filter"},
            {"argument": "tags", "to": "body"},
        ],
        "fixed": {"headers": {"Accept": "application/json"}, "query": {"format": "full"}},
        "auth": {"type": "header", "header": "X-Key"},
        "timeout_s": 5.0,
        "model_view": {"name": "data.name", "owners": "data.owners.*.name"},
    }
    assert tool.secret == "the-api-key"
    body = client.get(url("tool_edit", pk=tool.pk)).content.decode()  # shown as rows again
    assert 'value="status"' in body and 'value="available, sold"' in body
    assert 'value="data.owners.*.name"' in body and "the-api-key" not in body


def test_rows_keep_what_they_do_not_show_from_the_json(client, trio):
    tool = make_http_tool(
        trio.acme, "pet", PET_URL,
        input_schema={"type": "object", "properties": {"pet_id": {"type": "integer"}}},
        config={
            "arguments": [{"argument": "pet_id", "to": "path"}],
            "retry": {"max_attempts": 2},
            "context": [{"value": "tenant_id", "to": "header", "name": "X-Tenant"}],
            "fixed": {"body": {"source": "agent"}},
        },
    )  # fmt: skip
    login(client, trio.alice)
    data = rows_post(config=json.dumps(tool.config), input_schema=json.dumps(tool.input_schema))
    data["arg-0-description"] = "Which pet."
    response = client.post(url("tool_edit", pk=tool.pk), data)
    assert response.status_code == 302, response.content.decode()
    tool.refresh_from_db()
    assert tool.input_schema["properties"]["pet_id"]["description"] == "Which pet."
    assert tool.config["retry"] == {"max_attempts": 2}
    assert tool.config["context"] == [{"value": "tenant_id", "to": "header", "name": "X-Tenant"}]
    assert tool.config["fixed"] == {"body": {"source": "agent"}}


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"req-url": "https://api.example.com/pets/{pet_id}/{owner}"}, "req-url",
         "{owner} has no argument: add one that goes to the path."),
        ({"arg-0-to": "query"}, "req-url", "{pet_id} has no argument"),
        ({"req-url": "https://api.example.com/pets"}, "arg-0-to", "The URL has no {pet_id}"),
        ({"arg-0-enum": "1, two"}, "arg-0-enum", "Each allowed value must be a whole number."),
        ({"arg-0-type": "boolean", "arg-0-enum": "yes"}, "arg-0-enum",
         "Only text and numbers can have a list of allowed values."),
        ({"arg-0-name": "pet id"}, "arg-0-name", "Use letters, digits, _ or -"),
        ({"arg-0-type": "date"}, "arg-0-type", "Select a valid choice."),
        ({"req-method": "TRACE"}, "req-method", "Select a valid choice."),
        ({"req-url": "ftp://files.example.com/{pet_id}"}, "config", "http:// or https://"),
        ({"req-timeout_s": "500"}, "req-timeout_s", "less than or equal to 120"),
        ({"hdr-TOTAL_FORMS": "1", "hdr-0-key": "", "hdr-0-value": "x"}, "hdr-0-key", "Name it."),
        ({"hdr-TOTAL_FORMS": "1", "hdr-0-key": "Host", "hdr-0-value": "x"}, "config",
         "cannot be used as a header name"),
    ],
)  # fmt: skip
def test_bad_rows_are_refused_at_their_field_and_nothing_is_saved(
    client, trio, change, field, message
):
    login(client, trio.alice)
    response = client.post(url("tool_create"), {**rows_post(), **change})
    assert response.status_code == 400
    body = response.content.decode()
    assert body.count(f'id="id_{field}_error"') == 1, body
    assert message in body
    assert not ToolDefinition.objects.filter(tenant=trio.acme).exists()


def test_two_arguments_with_one_name_are_refused(client, trio):
    login(client, trio.alice)
    arguments = [{"name": "pet_id", "to": "path"}, {"name": "pet_id", "to": ""}]
    response = client.post(url("tool_create"), rows_post(arguments=arguments))
    assert response.status_code == 400
    assert 'id="id_arg-1-name_error"' in response.content.decode()
    assert "Another argument has this name." in response.content.decode()
    assert not ToolDefinition.objects.exists()


ANY_OF = {
    "type": "object",
    "properties": {"id": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
}


def test_a_schema_rows_cannot_show_is_edited_and_saved_as_json(client, trio):
    login(client, trio.alice)
    config = {"method": "GET", "url": "https://api.example.com/x", "arguments": []}
    data = rows_post(input_schema=json.dumps(ANY_OF), config=json.dumps(config), editor="json")
    response = client.post(url("tool_create"), data)  # the rows posted beside are not used
    assert response.status_code == 302, response.content.decode()
    tool = ToolDefinition.objects.get(tenant=trio.acme, name="pet")
    assert tool.input_schema == ANY_OF and tool.config == config
    body = client.get(url("tool_edit", pk=tool.pk)).content.decode()
    assert "cannot be shown as fields: the argument &#x27;id&#x27; uses no type" in body
    assert 'name="arg-0-name"' not in body and 'type="hidden" name="editor" value="json"' in body
    assert '<details class="more json-editor" open>' in body


def test_json_errors_show_at_the_json_when_it_is_the_editor(client, trio):
    login(client, trio.alice)
    response = client.post(url("tool_create"), rows_post(input_schema="{oops", editor="json"))
    assert response.status_code == 400
    body = response.content.decode()
    assert body.count('id="id_input_schema_error"') == 1 and "Enter a valid JSON." in body
    assert not ToolDefinition.objects.exists()


def test_sync_writes_the_rows_into_the_json_and_saves_nothing(client, trio):
    login(client, trio.alice)
    data = rows_post(view={"name": "data.name"}, sync="json", secret="typed-secret-123")
    response = client.post(url("tool_create"), data, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    body = response.content.decode()
    assert "typed-secret-123" not in body
    assert "<html" not in body and 'id="tool-json"' in body
    assert "&quot;model_view&quot;: {\n    &quot;name&quot;: &quot;data.name&quot;" in body
    assert "&quot;pet_id&quot;: {\n      &quot;type&quot;: &quot;integer&quot;" in body
    assert not ToolDefinition.objects.exists()


def test_sync_of_bad_rows_only_lists_their_problems(client, trio):
    login(client, trio.alice)
    data = rows_post(sync="json", **{"req-url": "https://api.example.com/{pet_id}/{x}"})
    response = client.post(url("tool_create"), data, HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and response["HX-Reswap"] == "none"
    body = response.content.decode()
    assert 'id="rows-problems"' in body and 'hx-swap-oob="true"' in body
    assert "URL: {x} has no argument: add one that goes to the path." in body
    assert 'id="tool-json"' not in body


def test_sync_shows_the_json_as_rows_or_says_why_it_cannot(client, trio):
    login(client, trio.alice)
    config = {"method": "GET", "url": PET_URL, "arguments": [{"argument": "pet_id", "to": "path"}]}
    schema = {"type": "object", "properties": {"pet_id": {"type": "integer"}}}
    data = {"sync": "rows", "input_schema": json.dumps(schema), "config": json.dumps(config)}
    body = client.post(url("tool_create"), data, HTTP_HX_REQUEST="true").content.decode()
    assert 'id="tool-rows"' in body and 'value="pet_id"' in body and "<html" not in body
    data["input_schema"] = json.dumps(ANY_OF)
    body = client.post(url("tool_create"), data, HTTP_HX_REQUEST="true").content.decode()
    assert "cannot be shown as fields" in body and 'name="arg-0-name"' not in body
    data["input_schema"] = "{not json"
    body = client.post(url("tool_create"), data, HTTP_HX_REQUEST="true").content.decode()
    assert "the JSON below is not valid JSON yet" in body
    assert not ToolDefinition.objects.exists()


def test_json_nested_too_deeply_to_parse_is_refused_not_a_500(client, trio):
    login(client, trio.alice)
    deep = "[" * 100_000 + "]" * 100_000
    data = rows_post(input_schema=deep, config=deep, editor="json")
    response = client.post(url("tool_create"), data)
    assert response.status_code == 400 and "Nested too deeply." in response.content.decode()
    body = client.post(url("tool_create"), {**data, "sync": "rows"}).content.decode()
    assert "the JSON below is not valid JSON yet" in body
    response = client.post(url("tool_create"), {**data, "editor": "form", "sync": "json"})
    assert response.status_code == 200 and 'id="tool-json"' in response.content.decode()
    assert not ToolDefinition.objects.exists()


@pytest.mark.parametrize(
    "schema,config",
    [
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": [{}]}, {}),
        ({"type": "object", "properties": {"a": {"type": ["string", "null"]}}}, {}),
        ({"type": "object", "properties": {}}, {"arguments": 5}),
        ({"type": "object", "properties": {}}, {"arguments": [{"argument": [1], "to": "query"}]}),
    ],
)
def test_json_of_unexpected_types_shows_no_rows_and_never_a_500(client, trio, schema, config):
    login(client, trio.alice)
    config = {"method": "GET", "url": PET_URL, **config}
    data = {"sync": "rows", "input_schema": json.dumps(schema), "config": json.dumps(config)}
    response = client.post(url("tool_create"), data, HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and "cannot be shown as fields" in response.content.decode()
    data = rows_post(input_schema=data["input_schema"], config=data["config"], editor="json")
    saved = client.post(url("tool_create"), data)
    assert saved.status_code in (302, 400)  # saved, or refused at its field: never a 500
