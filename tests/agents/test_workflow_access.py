"""Who may start a workflow, on every path that starts one (REST, an MCP or REST call of its
tool, an agent calling its tool, a trigger's run_as, a resume): whoever may start runs, a
key limited to agents only the workflows it names, and only with the use of each agent the
workflow's agent steps name (agents.access.may_start_workflow): a workflow is no way round
an agent's `use_agent` restriction."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from rest_framework.test import APIClient

from agents import access, runs
from agents.models import Run, WorkflowDefinition
from agents.runs import writer as run_writer
from agents.runs.engine import execute_run
from agents.services import use_grant
from agents.triggers import trigger_save
from tenancy import rls
from tenancy import services as tenancy
from tenancy.models import Role
from tenancy.policy import Principal
from tests.factories import add_member, login, make_agent, make_user
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

# (transaction: a direct call reads on another thread, as the MCP server does)
pytestmark = pytest.mark.django_db(transaction=True)

ASK = {
    "input": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    "steps": [{"id": "answer", "agent": "secret", "prompt": "input.q"}],
}
SUM = {
    "input": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    "steps": [{"id": "total", "transform": "{sum: input.a}"}],
}


@pytest.fixture
def asking(trio, agent) -> WorkflowDefinition:
    """`ask`, exposed as a tool, whose agent step uses `secret`: only dana (and admins) may
    use that agent."""
    secret = make_agent(trio.acme, "secret", instructions="Answer.")
    dana = make_user("dana")
    add_member(trio.acme, dana, Role.MEMBER)
    use_grant(tenant=trio.acme, target=secret, granted=True, user=dana)
    return WorkflowDefinition.objects.create(
        tenant=trio.acme, slug="ask", name="Ask", definition=ASK, expose_as_tool=True
    )


@pytest.fixture
def summing(trio) -> WorkflowDefinition:
    return WorkflowDefinition.objects.create(
        tenant=trio.acme, slug="sum", name="Sum", definition=SUM, expose_as_tool=True
    )


def _call_tool(tenant, name, arguments, **who):
    async def once():
        try:
            with rls.tenant_scope(tenant.pk):  # as the MCP server's call_tool does
                return await runs.atool_run(
                    tenant=tenant, name=name, arguments=arguments, via="mcp", **who
                )
        finally:
            await run_writer.aclose()

    return async_to_sync(once)()


def test_the_rule_asks_for_the_use_of_the_workflows_agents(trio, asking, summing):
    bob = Principal.for_initiator(trio.acme, trio.bob)
    assert not access.may_start_workflow(bob, asking)
    assert access.may_start_workflow(bob, summing)  # no agent steps: anyone who may start
    dana = get_user_model().objects.get(username="dana")
    for allowed in (trio.alice, dana):  # an admin, the grant's holder
        assert access.may_start_workflow(Principal.for_initiator(trio.acme, allowed), asking)


def test_rest_refuses_a_member_without_the_use_of_its_agent(trio, asking):
    bob = login(APIClient(), trio.bob, tenant="acme")
    refused = bob.post("/api/v1/runs", {"workflow": "ask", "arguments": {"q": "hi"}}, format="json")
    assert refused.status_code == 403, refused.content
    alice = login(APIClient(), trio.alice, tenant="acme")
    started = alice.post(
        "/api/v1/runs", {"workflow": "ask", "arguments": {"q": "hi"}}, format="json"
    )
    assert started.status_code == 201, started.content
    assert Run.objects.filter(workflow=asking).count() == 1


def test_a_direct_tool_call_is_checked_against_the_callers_key_or_user(trio, asking, summing):
    limited, _ = tenancy.api_key_create(
        tenant=trio.acme, name="lim", scopes=["read", "run"], allowed_agents=["assistant"]
    )
    refused = _call_tool(trio.acme, "workflow_sum", {"a": 1}, api_key=limited)
    assert refused.status == "failed" and "may not run this workflow" in refused.error
    refused = _call_tool(trio.acme, "workflow_ask", {"q": "hi"}, user=trio.bob)
    assert refused.status == "failed" and "may not run this workflow" in refused.error
    assert not Run.objects.filter(workflow__in=[asking, summing]).exists()

    named, _ = tenancy.api_key_create(
        tenant=trio.acme, name="named", scopes=["read", "run"], allowed_agents=["sum"]
    )
    done = _call_tool(trio.acme, "workflow_sum", {"a": 7}, api_key=named)
    assert done.status == "succeeded" and done.result == {"sum": 7}
    assert Run.objects.get(workflow=summing).initiated_by_api_key_id == named.pk


def test_an_agent_calling_the_workflow_tool_needs_its_starter_to_use_the_workflows_agents(
    trio, agent, provider_server, asking
):
    agent.approval_policy = "never"
    agent.save()
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "workflow_ask", json.dumps({"q": "hi"}))]),
        TextReply("I could not."),
    )
    run = runs.run_start(
        tenant=trio.acme, agent=agent, input="ask", initiated_by=trio.bob, enqueue=False
    )

    assert execute_run(run.pk) == "succeeded"

    assert not Run.objects.filter(parent=run).exists()  # the secret agent never ran
    told = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
    assert told["role"] == "tool" and "may not run this workflow" in told["content"]


def test_a_trigger_may_not_run_the_workflow_as_a_member_without_the_use_of_its_agent(trio, asking):
    changes = {
        "name": "t", "kind": "schedule", "cron": "0 9 * * *", "workflow": asking,
        "input_template": '{"q": "hi"}', "run_as": trio.bob,
    }  # fmt: skip
    by = Principal.for_initiator(trio.acme, trio.alice)
    with pytest.raises(ValidationError, match="may not start this workflow"):
        trigger_save(tenant=trio.acme, by=by, changes=changes)
    with pytest.raises(PermissionDenied):  # and when it fires (the restriction came later)
        runs.workflow_start(
            tenant=trio.acme, workflow=asking, input={"q": "hi"}, initiated_by=trio.bob
        )


def test_a_resume_needs_the_use_of_the_workflows_agents_still(trio, agent, summing):
    flow = WorkflowDefinition.objects.create(
        tenant=trio.acme, slug="ask", name="Ask", definition=ASK
    )
    secret = make_agent(trio.acme, "secret", instructions="Answer.")
    run = runs.workflow_start(
        tenant=trio.acme, workflow=flow, input={"q": "hi"}, initiated_by=trio.bob, enqueue=False
    )
    Run.objects.filter(pk=run.pk).update(status="failed", error="the model was down")
    erin = make_user("erin")
    add_member(trio.acme, erin, Role.MEMBER)
    use_grant(tenant=trio.acme, target=secret, granted=True, user=erin)  # now erin's only

    with pytest.raises(PermissionDenied):
        runs.run_resume(tenant=trio.acme, run=Run.objects.get(pk=run.pk), by=trio.bob)
    assert Run.objects.get(pk=run.pk).status == "failed"
