"""A tool or agent a saved workflow names is not deleted from under it, on every face (the
services behind REST and the pages, the admin, the configuration document's import), and
the refusal names the workflow; renaming one is refused by the whole-graph check."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from agents import workflows
from agents.config_document import config_export, config_import
from agents.models import Agent, WorkflowDefinition
from agents.services import agent_delete
from tests.api.test_resources import as_key, assert_error
from tests.factories import login, make_agent, make_tool
from tools.models import ToolDefinition
from tools.services import tool_definition_delete, tool_definition_save

pytestmark = pytest.mark.django_db

DEFINITION = {
    "steps": [
        {"id": "sum", "tool": "adder", "arguments": {"expression": "'1 + 1'"}},
        {"id": "note", "agent": "writer", "prompt": "to_string(sum)"},
    ]
}
CALCULATOR_INPUT = {"type": "object", "properties": {"expression": {"type": "string"}}}
SUM_STEP = {"id": "sum", "tool": "calculator", "arguments": {"expression": "'1 + 1'"}}
TOOL_REFUSED = "Workflow “brief” uses this tool: change or delete it first."
AGENT_REFUSED = "Workflow “brief” uses this agent: change or delete it first."


@pytest.fixture
def used(trio):
    tool = make_tool(
        trio.acme, "adder", input_schema={
            "type": "object", "properties": {"expression": {"type": "string"}},
        },
    )  # fmt: skip
    agent = make_agent(trio.acme, "writer")
    workflows.workflow_save(
        tenant=trio.acme, changes={"slug": "brief", "name": "Brief", "definition": DEFINITION}
    )
    return tool, agent


def test_the_services_refuse_naming_the_workflow_and_keep_both(trio, used):
    tool, agent = used
    with pytest.raises(ValidationError) as caught:
        tool_definition_delete(tenant=trio.acme, definition=tool)
    assert caught.value.messages == [TOOL_REFUSED]
    with pytest.raises(ValidationError) as caught:
        agent_delete(tenant=trio.acme, agent=agent)
    assert caught.value.messages == [AGENT_REFUSED]
    assert ToolDefinition.objects.filter(pk=tool.pk).exists()
    assert Agent.objects.filter(pk=agent.pk).exists()
    # Another tenant's workflow of the same names holds nothing of acme's; once the
    # workflow is gone, both may go.
    workflows.workflow_delete(tenant=trio.acme, workflow=WorkflowDefinition.objects.get())
    tool_definition_delete(tenant=trio.acme, definition=tool)
    agent_delete(tenant=trio.acme, agent=agent)
    assert not ToolDefinition.objects.filter(pk=tool.pk).exists()


def test_renaming_a_tool_a_workflow_names_is_refused_naming_it(trio, used):
    tool, _ = used
    with pytest.raises(ValidationError) as caught:
        tool_definition_save(tenant=trio.acme, definition=tool, changes={"name": "summer"})
    assert "workflow 'brief'" in " ".join(caught.value.messages)
    assert ToolDefinition.objects.get(pk=tool.pk).name == "adder"


def test_rest_answers_400_naming_the_workflow(client, trio, used):
    api = as_key(client, trio.acme)
    error = assert_error(api.delete("/tools/adder"), 400)
    assert TOOL_REFUSED in json.dumps(error, ensure_ascii=False)
    error = assert_error(api.delete("/agents/writer"), 400)
    assert AGENT_REFUSED in json.dumps(error, ensure_ascii=False)
    assert ToolDefinition.objects.filter(name="adder").exists()
    assert Agent.objects.filter(slug="writer").exists()


def test_the_pages_say_why_and_keep_both(trio, used):
    tool, _ = used
    client = login(Client(), trio.alice)
    page = client.post(f"/t/acme/tools/{tool.pk}/delete/", follow=True)
    assert TOOL_REFUSED in page.content.decode()
    page = client.post("/t/acme/agents/writer/delete/", follow=True)
    assert AGENT_REFUSED in page.content.decode()
    assert ToolDefinition.objects.filter(pk=tool.pk).exists()
    assert Agent.objects.filter(slug="writer").exists()


def test_the_admin_lists_the_workflow_as_protecting_it(trio, used):
    tool, agent = used
    client = Client()
    client.force_login(trio.alice)
    for url in (
        f"/admin/tools/tooldefinition/{tool.pk}/delete/",
        f"/admin/agents/agent/{agent.pk}/delete/",
    ):
        confirm = client.get(url)
        assert "uses this" in confirm.content.decode() and "brief" in confirm.content.decode()
        client.post(url, {"post": "yes"})
    bulk = client.post(
        "/admin/tools/tooldefinition/",
        {"action": "delete_selected", "_selected_action": [tool.pk], "post": "yes"},
    )
    assert bulk.status_code == 200 and TOOL_REFUSED in bulk.content.decode()
    assert ToolDefinition.objects.filter(pk=tool.pk).exists()
    assert Agent.objects.filter(pk=agent.pk).exists()


def test_an_import_pruning_them_while_the_workflow_stays_is_refused(trio, used):
    exported = config_export(tenant=trio.acme)
    exported["tools"] = [t for t in exported["tools"] if t["name"] != "adder"]
    exported["agents"] = [a for a in exported["agents"] if a["slug"] != "writer"]
    plan = config_import(tenant=trio.acme, text=json.dumps(exported), format="json", prune=True)
    assert not plan.applied  # the end state compiled: the workflow it keeps names them
    assert {p.path for p in plan.problems} == {
        "workflows[0].definition.steps[0].tool", "workflows[0].definition.steps[1].agent",
    }, plan.as_dict()  # fmt: skip
    assert ToolDefinition.objects.filter(name="adder").exists()
    assert Agent.objects.filter(slug="writer").exists()


def test_a_definition_replacing_a_built_in_may_go_the_built_in_comes_back(trio):
    replacement = make_tool(trio.acme, "calculator", input_schema=CALCULATOR_INPUT)
    workflows.workflow_save(
        tenant=trio.acme,
        changes={"slug": "sum", "name": "Sum", "definition": {"steps": [SUM_STEP]}},
    )
    tool_definition_delete(tenant=trio.acme, definition=replacement)
    assert not ToolDefinition.objects.filter(pk=replacement.pk).exists()
    workflows.workflow_compile(tenant=trio.acme, definition={"steps": [SUM_STEP]})  # still runs
