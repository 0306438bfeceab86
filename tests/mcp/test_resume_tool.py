"""MCP `resume_run` (agentplatform/mcp/resume.py), in this process: who sees it listed, its
answer's shape, and its refusals as error results (the same through the SDK client and a
live server: tests/mcp/test_server.py)."""

from __future__ import annotations

import asyncio

import pytest

from agentplatform.mcp.resume import RESUME_TOOL, resume, resume_offered, resume_tool
from agents.models import Run, RunEvent
from agents.runs import run_start
from agents.runs.engine import execute_run
from tenancy import rls
from tenancy import services as tenancy
from tenancy.policy import Principal
from tests.fakes.provider_server import ErrorReply

# (transaction: the handler reads on another thread, as the server does)
pytestmark = pytest.mark.django_db(transaction=True)


def key(tenant, *scopes: str, **limits) -> Principal:
    api_key, _ = tenancy.api_key_create(tenant=tenant, name="k", scopes=list(scopes), **limits)
    return Principal.of_key(api_key)


def called(principal: Principal, arguments: dict):
    async def call():
        with rls.tenant_scope(principal.tenant.pk):  # as call_tool does
            return await resume(principal, arguments)

    return asyncio.run(call())


def failed_run(trio, agent, provider_server, by) -> Run:
    provider_server.script("openai", ErrorReply(500, "down"))
    run = run_start(tenant=trio.acme, agent=agent, input="hi", initiated_by=by, enqueue=False)
    assert execute_run(run.pk) == "failed"
    return run


def test_it_is_listed_for_callers_who_may_resume_runs(trio):
    assert resume_offered(key(trio.acme, "read", "run"))
    assert not resume_offered(key(trio.acme, "read"))
    assert not resume_offered(key(trio.acme, "read", "run", allowed_tools=["calculator"]))
    tool = resume_tool()
    assert tool.name == RESUME_TOOL and tool.input_schema["required"] == ["run_id"]


def test_the_runs_starter_resumes_it_and_others_are_told_why_not(trio, agent, provider_server):
    starter = key(trio.acme, "read", "run")
    run = failed_run(trio, agent, provider_server, starter.api_key)

    other = called(key(trio.acme, "read", "run", created_by=trio.bob), {"run_id": run.pk})
    assert other.is_error and other.content[0].text == f"No such run: {run.pk}."  # not theirs
    globex = called(key(trio.globex, "read", "run"), {"run_id": run.pk})
    assert globex.is_error and "No such run" in globex.content[0].text
    for bad in ({}, {"run_id": "1; drop"}, {"run_id": 0}, {"run_id": run.pk, "x": 1}):
        refused = called(starter, bad)
        assert refused.is_error and refused.content[0].text.startswith("invalid arguments")
    assert Run.objects.get(pk=run.pk).status == "failed"

    done = called(starter, {"run_id": run.pk})
    assert not done.is_error
    assert done.structured_content == {"run_id": run.pk, "status": "queued"}
    assert RunEvent.objects.get(run=run, type="run.resumed").payload["by"] == "API key k"

    again = called(starter, {"run_id": run.pk})
    assert again.is_error and again.meta == {"run_id": run.pk, "status": "not_resumable"}
    assert again.content[0].text == "This run is queued: only a failed run can be resumed."
