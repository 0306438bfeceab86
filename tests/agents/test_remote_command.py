"""Remote agents as commands: JSON lines over a real subprocess's stdin/stdout
(tests/fakes/remote_agent_command.py), only commands the operator allow-lists, approvals that
park and resume in a new process, and the periodic health check shown on the agent's pages."""

from __future__ import annotations

import asyncio
import sys

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from agents.models import Agent, Approval, Run
from agents.remote_health import check_remote_agents
from agents.runtime import remote_transport
from agents.runtime.remote import command_health, remote_agent
from agents.runtime.spec import AgentSpec, RunStatus
from agents.services import approval_decide, run_start
from agents.signals import run_queued
from tests.agents.test_confirmation import settle
from tests.api.test_resources import as_key
from tests.factories import login, make_agent
from tools.runtime.builtins import BUILTINS
from tools.runtime.context import RunContext
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Capability, Effect, Tool

pytestmark = pytest.mark.integration  # each test starts the fake agent's processes

FAKE = [sys.executable, "-m", "tests.fakes.remote_agent_command"]
CTX = RunContext(tenant_id=1, run_id="run_1")


def command_run(mode: str = "calc", registry: ToolRegistry = BUILTINS, **spec_fields):
    spec = AgentSpec(
        name="cmd",
        instructions="",
        model="remote",
        kind="remote",
        remote_command_name="fake",
        remote_command=(*FAKE, mode),
        tool_names=None,
        **spec_fields,
    )
    return asyncio.run(
        remote_agent(spec=spec, registry=registry, ctx=CTX, egress=None, input="2+2?")
    )


@pytest.mark.parametrize(
    ("mode", "status", "says"),
    [
        ("calc", RunStatus.SUCCEEDED, 'calculator said {"result": 4}'),
        ("crash", RunStatus.FAILED, "ended without answering (exit 3)"),
        ("garbage", RunStatus.FAILED, "sent invalid JSON"),
    ],
)
def test_a_command_speaks_json_lines(mode, status, says):
    outcome = command_run(mode)
    assert outcome.status is status
    assert says in (outcome.output if status is RunStatus.SUCCEEDED else outcome.error)


def test_a_command_that_is_too_slow_times_out(monkeypatch):
    monkeypatch.setattr(remote_transport, "REQUEST_TIMEOUT_S", 0.5)
    outcome = command_run("slow")
    assert outcome.status is RunStatus.FAILED and "did not answer in 0.5 s" in outcome.error


def test_a_command_gets_none_of_the_platforms_environment(monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "platform-secret")
    monkeypatch.setenv("DATABASE_URL", "postgres://owner:pw@db/x")
    names = command_run("env").output.split(",")
    assert "SECRET_KEY" not in names and "DATABASE_URL" not in names
    assert set(names) <= {*remote_transport.COMMAND_ENV_KEYS, "PWD", "SHLVL", "_", "LC_CTYPE"}


def test_a_command_not_allow_listed_is_never_started():
    spec = AgentSpec(
        name="cmd", instructions="", model="remote", kind="remote", remote_command_name="rogue"
    )
    outcome = asyncio.run(remote_agent(spec=spec, registry=BUILTINS, ctx=CTX, egress=None))
    assert outcome.status is RunStatus.FAILED
    assert "'rogue' is not one the operator allow-lists" in outcome.error


def test_command_health():
    assert asyncio.run(command_health("fake", [*FAKE, "calc"])) == (True, "ok")
    healthy, why = asyncio.run(command_health("fake", [*FAKE, "crash"]))
    assert not healthy and "ended without answering" in why


@pytest.fixture
def commands(settings):
    settings.REMOTE_AGENT_COMMANDS = {"fake": [*FAKE, "tool:purge"], "down": [*FAKE, "crash"]}


@pytest.mark.django_db(transaction=True)
def test_an_agent_names_only_an_allow_listed_command(trio, commands):
    agent = Agent(tenant=trio.acme, name="Cmd", slug="cmd", kind="remote", remote_command="rm")
    with pytest.raises(ValidationError, match="operator allow-lists"):
        agent.full_clean()
    agent.remote_command, agent.remote_url = "fake", "https://agents.example.com/x"
    with pytest.raises(ValidationError, match="not both"):
        agent.full_clean()
    agent.remote_url = ""
    agent.full_clean()


@pytest.mark.django_db(transaction=True)
def test_a_command_agent_parks_for_approval_and_resumes_in_a_new_process(
    trio, commands, monkeypatch
):
    purged: list[dict] = []

    async def purge(arguments: dict, ctx: RunContext) -> dict:
        purged.append(arguments)
        return {"purged": arguments["id"]}

    tool = Tool(
        "purge",
        "Purge a record.",
        {"type": "object", "properties": {"id": {"type": "integer"}}},
        purge,
        capability=Capability(effect=Effect.DESTRUCTIVE, requires_approval=True),
    )
    monkeypatch.setattr(BUILTINS, "_tools", {**BUILTINS._tools, "purge": tool})
    # Executed here only: a Celery worker of this session has neither this allow-list (a
    # setting of this process) nor the tool.
    monkeypatch.setattr(run_queued, "receivers", [])  # (restored after the test)
    agent = make_agent(trio.acme, "cmd", kind="remote", remote_command="fake")
    run = settle(run_start(tenant=trio.acme, agent=agent, input="purge 7", initiated_by=trio.alice))
    assert run.status == "awaiting_approval", run.error
    assert purged == [] and run.state["remote"]["state"] == {"asked": "purge"}

    approval = Approval.objects.get(run=run)
    approval_decide(tenant=trio.acme, approval=approval, approved=True, by=trio.alice)
    run = settle(run)  # a new worker execution: a new process gets the tool_result first
    assert run.status == "succeeded", run.error
    assert purged == [{"id": 7}]
    assert run.output == 'purge said {"purged": 7}'
    assert (run.input_tokens, run.output_tokens) == (5, 3)


@pytest.mark.django_db(transaction=True)
def test_health_is_checked_periodically_and_shown_on_the_agents_pages(client, trio, commands):
    good = make_agent(trio.acme, "good", kind="remote", remote_command="fake")
    bad = make_agent(trio.acme, "bad", kind="remote", remote_command="down")
    make_agent(trio.acme, "plain")  # not remote: not checked
    assert check_remote_agents() == 2
    good.refresh_from_db()
    bad.refresh_from_db()
    assert good.remote_healthy is True and good.remote_health_checked_at is not None
    assert bad.remote_healthy is False and "exit 3" in bad.remote_health_detail

    login(client, trio.alice)
    page = client.get(reverse("config:agent_edit", kwargs={"tenant_slug": "acme", "slug": "bad"}))
    assert "Health: failing" in page.content.decode()
    shown = as_key(client, trio.acme, "read").get("/agents/bad").json()
    assert shown["remote_command"] == "down" and shown["remote_healthy"] is False
    assert Run.objects.count() == 0  # a health check is not a run
