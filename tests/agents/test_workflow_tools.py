"""Workflows exposed as tools (agents/workflow_tools.py): `workflow_<slug>` in the tenant's
registry with the workflow's input schema, offered to agents and listed over MCP; a call
runs the workflow as a run of its own (the calling run's child) and returns its output."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync

from agentplatform.mcp.server import tenant_catalog
from agents import runs
from agents.models import Run, WorkflowDefinition
from agents.runs import writer as run_writer
from agents.runs.engine import execute_run
from tenancy import rls
from tenancy import services as tenancy
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tools.loader import tenant_tools

# (transaction: a direct call reads on another thread, as the MCP server does)
pytestmark = pytest.mark.django_db(transaction=True)

SUM_INPUT = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


SUM = {
    "input": SUM_INPUT,
    "steps": [
        {
            "id": "add",
            "tool": "calculator",
            "arguments": {"expression": "join(' + ', [to_string(input.a), to_string(input.b)])"},
        },
        {"id": "total", "transform": "{sum: add.result}"},
    ],
}


@pytest.fixture
def summing(trio) -> WorkflowDefinition:
    return WorkflowDefinition.objects.create(
        tenant=trio.acme, slug="sum", name="Sum", description="Adds two numbers.",
        definition=SUM, expose_as_tool=True,
    )  # fmt: skip


def test_an_exposed_workflow_is_a_tool_with_its_input_schema(trio, summing):
    WorkflowDefinition.objects.create(
        tenant=trio.acme, slug="hidden", name="Hidden", definition=SUM
    )
    WorkflowDefinition.objects.create(
        tenant=trio.acme, slug="off", name="Off", definition=SUM,
        expose_as_tool=True, enabled=False,
    )  # fmt: skip
    WorkflowDefinition.objects.create(  # does not read: left out, the rest stay
        tenant=trio.acme, slug="broken", name="Broken", definition={"steps": "nope"},
        expose_as_tool=True,
    )  # fmt: skip
    registry = tenant_tools(trio.acme.pk).registry

    names = {n for n in registry.names() if n.startswith("workflow_")}
    assert names == {"workflow_sum"}
    tool = registry.get("workflow_sum")
    assert tool.input_schema == SUM_INPUT and tool.description == "Adds two numbers."
    assert tool.capability.effect.value == "write" and tool.capability.idempotent
    assert not tenant_tools(trio.globex.pk).registry.has("workflow_sum")
    listed = {t.name: t for t in tenant_catalog(trio.acme.pk)}  # MCP's tools/list
    assert listed["workflow_sum"].input_schema == SUM_INPUT


def test_an_agent_calls_the_workflow_and_it_runs_as_its_child_run(
    trio, agent, provider_server, summing
):
    agent.approval_policy = "never"
    agent.save()
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "workflow_sum", json.dumps({"a": 2, "b": 3}))]),
        TextReply("It is 5."),
    )
    run = runs.run_start(tenant=trio.acme, agent=agent, input="2+3?", enqueue=False)

    assert execute_run(run.pk) == "succeeded"

    child = Run.objects.get(parent=run)
    assert (child.workflow_id, child.child_key, child.status) == (summing.pk, "c1", "succeeded")
    assert child.structured_output == {"sum": 5} and child.depth == 1
    assert child.correlation_id == run.correlation_id
    told = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
    assert told["role"] == "tool" and json.loads(told["content"]) == {"sum": 5}
    # Called again (the parent resumed after a crash): the same child, not a second run.
    again = runs.workflow_start(
        tenant=trio.acme, workflow=summing, input={"a": 2, "b": 3}, parent=run, child_key="c1"
    )
    assert again.pk == child.pk


def test_a_direct_call_over_mcp_runs_the_workflow_and_returns_its_output(trio, summing):
    api_key, _ = tenancy.api_key_create(tenant=trio.acme, name="k", scopes=["read", "run"])

    def call(arguments):
        async def once():
            try:
                with rls.tenant_scope(trio.acme.pk):  # as the MCP server's call_tool does
                    return await runs.atool_run(
                        tenant=trio.acme, name="workflow_sum", arguments=arguments,
                        api_key=api_key, via="mcp",
                    )  # fmt: skip
            finally:
                await run_writer.aclose()

        return async_to_sync(once)()

    done = call({"a": 40, "b": 2})
    assert done.status == "succeeded" and done.result == {"sum": 42}
    workflow_run = Run.objects.get(workflow=summing)
    assert workflow_run.status == "succeeded" and workflow_run.parent_id is None

    refused = call({"a": "forty"})  # the workflow's input schema, checked
    assert refused.status == "failed" and "a" in refused.error
    assert Run.objects.filter(workflow=summing).count() == 1
