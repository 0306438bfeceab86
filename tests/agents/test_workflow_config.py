"""Workflows in the configuration document: exported, imported (compiled with the document's
own tools and agents), round-tripped into another tenant, problems at their paths; a
workflow saved through its service is compiled with the tenant's tools and versioned."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from agents import workflows
from agents.config_document import config_export, config_import, config_plan
from agents.models import WorkflowDefinition
from agents.runtime.config.compiler import ConfigInvalid, compile_config
from agents.runtime.config.document import document_json_schema
from agents.runtime.config.loading import dump_document
from agents.services import agent_save
from tenancy.models import ConfigVersion
from tests.factories import make_agent

pytestmark = pytest.mark.django_db

LOOKUP_TOOL = {
    "name": "lookup",
    "kind": "http",
    "description": "Looks a customer up.",
    "input_schema": {
        "type": "object",
        "properties": {"id": {"type": "integer"}},
        "required": ["id"],
    },
    "config": {
        "method": "GET",
        "url": "https://crm.example.com/customers",
        "arguments": [{"argument": "id", "to": "query"}],
    },
}
DEFINITION: dict[str, Any] = {
    "input": {"type": "object", "properties": {"id": {"type": "integer"}}},
    "steps": [
        {"id": "customer", "tool": "lookup", "arguments": {"id": "input.id"}},
        {"id": "note", "agent": "writer", "prompt": "to_string(customer)"},
    ],
}


def document(**workflow: Any) -> dict[str, Any]:
    entry = {"slug": "brief", "name": "Brief", "definition": DEFINITION, **workflow}
    return {
        "version": 1,
        "tools": [LOOKUP_TOOL],
        "agents": [{"slug": "writer", "name": "Writer"}],
        "workflows": [entry],
    }


def as_yaml(data: dict[str, Any]) -> str:
    return dump_document(data, "yaml")


def test_a_document_with_a_workflow_imports_exports_and_round_trips(trio):
    plan = config_import(tenant=trio.acme, text=as_yaml(document(expose_as_tool=True)))
    assert plan.valid and plan.applied, plan.as_dict()

    stored = WorkflowDefinition.objects.get(tenant=trio.acme, slug="brief")
    assert stored.definition == DEFINITION and stored.expose_as_tool
    exported = config_export(tenant=trio.acme)
    assert exported["workflows"] == [
        {
            "slug": "brief",
            "name": "Brief",
            "description": "",
            "definition": DEFINITION,
            "expose_as_tool": True,
            "enabled": True,
        }
    ]
    assert config_plan(tenant=trio.acme, text=as_yaml(exported)).changes == []

    into = config_import(tenant=trio.globex, text=json.dumps(exported), format="json")
    assert into.valid and into.applied, into.as_dict()
    assert config_export(tenant=trio.globex)["workflows"] == exported["workflows"]


def test_a_workflow_naming_what_the_document_lacks_is_refused_at_its_path(trio):
    bad = copy.deepcopy(DEFINITION)
    bad["steps"][0]["tool"] = "teleport"
    bad["steps"][1]["prompt"] = "note"
    data = document(definition=bad)
    data["workflows"].append({"slug": "brief", "name": "Twice", "definition": DEFINITION})

    plan = config_import(tenant=trio.acme, text=as_yaml(data))

    assert {p.path: p.reason for p in plan.problems} == {
        "workflows[1].slug": "'brief' appears twice in workflows",
        "workflows[0].definition.steps[0].tool": "no tool named 'teleport'",
        "workflows[0].definition.steps[1].prompt": "reads 'note', its own output (a cycle)",
    }
    assert not plan.applied and not WorkflowDefinition.objects.exists()


def test_the_document_checks_types_against_its_own_tools(trio):
    bad = copy.deepcopy(DEFINITION)
    bad["steps"][0]["arguments"] = {"id": "'seven'"}
    with pytest.raises(ConfigInvalid) as caught:
        compile_config(document(definition=bad))
    assert [(p.path, p.reason) for p in caught.value.problems] == [
        (
            "workflows[0].definition.steps[0].arguments.id",
            "tool 'lookup''s argument 'id' expects integer, gets string",
        )
    ]


def test_the_published_schema_holds_the_workflow_document():
    schema = document_json_schema()
    entry = schema["$defs"]["WorkflowEntry"]["properties"]["definition"]
    assert entry["$ref"] == "#/$defs/Workflow"
    assert "ToolStepEntry" in schema["$defs"] and "BranchArms" in schema["$defs"]


def test_a_service_save_compiles_with_the_tenants_tools_and_is_versioned(trio):
    make_agent(trio.acme, "writer")
    definition = {
        "steps": [
            {"id": "sum", "tool": "calculator", "arguments": {"expression": "'1 + 2'"}},
            {"id": "note", "agent": "writer", "prompt": "to_string(sum)"},
        ]
    }
    saved = workflows.workflow_save(
        tenant=trio.acme, changes={"slug": "sum", "name": "Sum", "definition": definition}
    )
    assert ConfigVersion.objects.filter(tenant=trio.acme, object_id=str(saved.pk)).count() == 1

    with pytest.raises(workflows.WorkflowInvalid) as caught:
        workflows.workflow_save(
            tenant=trio.globex, changes={"slug": "sum", "name": "Sum", "definition": definition}
        )
    assert [(p.path, p.reason) for p in caught.value.problems] == [
        ("steps[1].agent", "no agent 'writer'")
    ]
    # A change that leaves the document alone does not compile it again.
    saved.definition = {**definition}
    renamed = workflows.workflow_save(tenant=trio.acme, workflow=saved, changes={"name": "S"})
    assert renamed.name == "S"


def test_a_workflow_is_checked_with_the_whole_configuration_on_a_direct_save(trio):
    """The model's full_clean compiles the tenant's document with the workflow in it (the
    admin saves through it), so a workflow naming an unknown agent is refused there too."""
    workflow = WorkflowDefinition(
        tenant=trio.acme,
        slug="w",
        name="W",
        definition={"steps": [{"id": "a", "agent": "ghost", "prompt": "input"}]},
    )
    with pytest.raises(ValidationError) as caught:
        workflow.full_clean()
    assert caught.value.message_dict == {"definition": ["steps[0].agent: no agent 'ghost'"]}


def test_renaming_an_agent_a_workflow_runs_is_refused_naming_the_workflow(trio):
    writer = make_agent(trio.acme, "writer")
    definition = {"steps": [{"id": "note", "agent": "writer", "prompt": "input"}]}
    workflows.workflow_save(
        tenant=trio.acme, changes={"slug": "w", "name": "W", "definition": definition}
    )
    with pytest.raises(ValidationError) as caught:
        agent_save(tenant=trio.acme, agent=writer, changes={"slug": "author"})
    assert caught.value.messages == ["workflow 'w' (definition.steps[0].agent): no agent 'writer'"]


def test_an_import_checks_types_against_the_builtins_too(trio):
    data = document(
        definition={
            "steps": [{"id": "sum", "tool": "calculator", "arguments": {"expression": "`12`"}}]
        }
    )
    plan = config_plan(tenant=trio.acme, text=as_yaml(data))
    assert [(p.path, p.reason) for p in plan.problems] == [
        (
            "workflows[0].definition.steps[0].arguments.expression",
            "tool 'calculator''s argument 'expression' expects string, gets integer",
        )
    ]
