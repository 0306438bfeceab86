"""Every face saving one object compiles the tenant's whole configuration: REST, the
configuration pages and the admin refuse what only the whole graph shows, at the field."""

from __future__ import annotations

import json
import time

import pytest
from django.core.exceptions import ValidationError

from agents.models import Agent
from tests.agents.test_admin import agent_form
from tests.api.test_resources import as_key, assert_error
from tests.factories import login, make_agent
from tests.tools.test_admin import form as admin_tool_form
from tests.web.test_config import tool_data, url
from tools.models import ToolDefinition
from tools.services import tool_definition_save

pytestmark = pytest.mark.django_db

POST_CONFIG = {"method": "POST", "url": "https://api.example.com/notes"}
WEATHER = {
    "name": "weather",
    "kind": "http",
    "description": "Today's weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    "config": {"url": "https://api.example.com/weather"},
}
CONFIRM = "the tenant's policy requires confirmation"


@pytest.fixture
def strict(trio):
    """acme requires confirmation for every tool that writes."""
    trio.acme.require_confirmation_for_writes = True
    trio.acme.save()
    return trio


# -- REST -----------------------------------------------------------------------------------
def test_rest_refuses_a_write_tool_without_confirmation_where_the_tenant_requires_it(
    client, strict
):
    api = as_key(client, strict.acme)
    note = {**WEATHER, "name": "note", "config": POST_CONFIG}
    details = assert_error(api.post("/tools", note), 400)["details"]
    assert CONFIRM in details["requires_approval"][0]
    assert api.post("/tools", {**note, "requires_approval": True}).status_code == 201
    assert as_key(client, strict.globex).post("/tools", note).status_code == 201  # theirs


def test_rest_refuses_an_agent_naming_a_tool_that_does_not_exist(client, trio):
    api = as_key(client, trio.acme)
    agent = {"slug": "support", "name": "Support", "use_all_tools": False}
    details = assert_error(api.post("/agents", {**agent, "tool_names": ["nope"]}), 400)["details"]
    assert details["tool_names"] == ["[0]: unknown tool 'nope'"]
    assert not Agent.objects.exists()
    assert api.post("/agents", {**agent, "tool_names": ["calculator"]}).status_code == 201


def test_rest_refuses_the_second_save_that_breaks_what_the_first_made(client, trio):
    api = as_key(client, trio.acme)
    assert api.post("/tools", WEATHER).status_code == 201
    agent = {"slug": "support", "name": "Support", "use_all_tools": False}
    assert api.post("/agents", {**agent, "tool_names": ["weather"]}).status_code == 201
    details = assert_error(api.patch("/tools/weather", {"name": "forecast"}), 400)["details"]
    assert details == {
        "__all__": ["agent 'support' (tools.names[0]): unknown tool 'weather'"]
    } or details == {
        "non_field_errors": ["agent 'support' (tools.names[0]): unknown tool 'weather'"]
    }
    assert ToolDefinition.objects.get().name == "weather"


def test_a_dependency_cycle_made_by_the_second_save_is_refused(trio):
    schema = {"type": "object", "properties": {"id": {"type": "integer"}}}
    producer = {
        **WEATHER,
        "name": "a",
        "input_schema": schema,
        "output_schema": schema,
    }
    a = tool_definition_save(tenant=trio.acme, changes=producer)
    tool_definition_save(
        tenant=trio.acme,
        changes={**producer, "name": "b", "depends_on": {"id": {"from": "a", "path": "$.id"}}},
    )
    with pytest.raises(ValidationError) as caught:
        tool_definition_save(
            tenant=trio.acme,
            definition=a,
            changes={"depends_on": {"id": {"from": "b", "path": "$.id"}}},
        )
    assert "dependency cycle: b -> a -> b" in str(caught.value)


# -- the configuration pages ----------------------------------------------------------------
def test_the_tool_page_refuses_a_write_tool_without_confirmation(client, strict):
    login(client, strict.alice)
    data = tool_data(config=json.dumps(POST_CONFIG), input_schema=json.dumps({"type": "object"}))
    response = client.post(url("tool_create"), data)
    assert response.status_code == 400
    assert 'id="id_requires_approval_error"' in response.content.decode()
    assert CONFIRM in response.content.decode().replace("&#x27;", "'")
    assert not ToolDefinition.objects.exists()
    assert client.post(url("tool_create"), {**data, "requires_approval": "on"}).status_code == 302


def test_the_tool_page_refuses_a_rename_an_agent_depends_on(client, trio):
    tool = tool_definition_save(tenant=trio.acme, changes=WEATHER)
    make_agent(trio.acme, "support", use_all_tools=False, tool_names=["weather"])
    login(client, trio.alice)
    response = client.post(url("tool_edit", pk=tool.pk), tool_data(name="forecast"))
    assert response.status_code == 400
    body = response.content.decode().replace("&#x27;", "'")
    assert "agent 'support' (tools.names[0]): unknown tool 'weather'" in body
    tool.refresh_from_db()
    assert tool.name == "weather"


# -- the admin ------------------------------------------------------------------------------
def test_the_admin_refuses_a_write_tool_without_confirmation(client, strict):
    login(client, strict.alice)
    data = admin_tool_form(
        tenant=str(strict.acme.pk), effect="write", config=json.dumps(POST_CONFIG)
    )
    response = client.post("/admin/tools/tooldefinition/add/", data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert CONFIRM in errors["requires_approval"][0]
    assert not ToolDefinition.objects.exists()


def test_the_admin_refuses_a_rename_an_agent_depends_on(client, trio):
    tool = tool_definition_save(tenant=trio.acme, changes=WEATHER)
    make_agent(trio.acme, "support", use_all_tools=False, tool_names=["weather"])
    login(client, trio.alice)
    data = admin_tool_form(
        tenant=str(trio.acme.pk),
        name="forecast",
        input_schema=json.dumps(WEATHER["input_schema"]),
        config=json.dumps(WEATHER["config"]),
    )
    response = client.post(f"/admin/tools/tooldefinition/{tool.pk}/change/", data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert errors["__all__"] == ["agent 'support' (tools.names[0]): unknown tool 'weather'"]
    add = client.post(
        "/admin/agents/agent/add/", agent_form(slug="x", use_all_tools=None, tool_names="nope")
    )
    assert add.context["adminform"].form.errors["tool_names"] == ["[0]: unknown tool 'nope'"]


def test_what_is_stored_already_does_not_block_other_saves(trio):
    """A problem saved past validation is not this save's: other objects still save."""
    make_agent(trio.acme, "old", use_all_tools=False, tool_names=["gone"])
    tool_definition_save(tenant=trio.acme, changes=WEATHER)


# -- the cost -------------------------------------------------------------------------------
def test_a_save_in_a_tenant_with_200_tools_compiles_the_whole_graph_quickly(trio):
    for index in range(200):
        schema = {"type": "object", "properties": {f"q{index}": {"type": "string"}}}
        ToolDefinition.objects.create(
            tenant=trio.acme, name=f"tool_{index}", kind="http", description="A tool.",
            input_schema=schema, output_schema=schema,
            config={"url": f"https://api.example.com/{index}"},
        )  # fmt: skip
    for index in range(20):
        make_agent(trio.acme, f"agent-{index}", use_all_tools=False, tool_names=["tool_1"])
    tool_definition_save(tenant=trio.acme, changes=WEATHER)  # warms the schema checks
    timings = []
    for index in range(5):
        started = time.perf_counter()
        tool_definition_save(
            tenant=trio.acme,
            definition=ToolDefinition.objects.get(name="weather"),
            changes={"description": f"Weather {index}."},
        )
        timings.append(time.perf_counter() - started)
    median = sorted(timings)[2]
    print(f"\nsave of one tool, 200 tools + 20 agents compiled: median {median * 1000:.0f} ms")
    assert median < 1.0
