"""Remote agents as commands: JSON lines over a real subprocess's stdin/stdout
(tests/fakes/remote_agent_command.py), only commands the operator allow-lists, approvals that
park and resume in a new process, and the periodic health check shown on the agent's pages."""

from __future__ import annotations

import asyncio
import atexit
import functools
import json
import os
import pwd
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from agentplatform import embedded
from agents.models import Agent, Approval, Run
from agents.remote_health import check_remote_agents
from agents.runs import approval_decide, run_start
from agents.runtime import remote_transport
from agents.runtime.remote import command_health, remote_agent
from agents.runtime.spec import AgentSpec, RunStatus
from agents.signals import run_queued
from tests.agents.test_confirmation import settle
from tests.api.test_resources import as_key
from tests.factories import login, make_agent
from tests.fakes import remote_agent_command
from tools.runtime.builtins import BUILTINS
from tools.runtime.context import RunContext
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Capability, Effect, Tool

pytestmark = pytest.mark.integration  # each test starts the fake agent's processes

CTX = RunContext(tenant_id=1, run_id="run_1")
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def everyone_may_run(path: str) -> bool:
    """Whether any account may execute `path`: it and every folder above it have o+x."""
    real = Path(os.path.realpath(path))
    return all(p.stat().st_mode & stat.S_IXOTH for p in [real, *real.parents])


@functools.cache
def fake_command() -> tuple[str, ...]:
    """The fake agent as a command any account can run — as root, commands run as `nobody`
    — : the script copied to a folder everyone may read (this checkout may be under root's
    home), run by a Python every account may execute (the venv's may not be)."""
    python = next(
        (p for p in (sys.executable, "/usr/local/bin/python3", "/usr/bin/python3")
         if os.path.exists(p) and everyone_may_run(p)),
        None,
    )  # fmt: skip
    assert python is not None, "no Python 3 that every account may run"
    folder = Path(tempfile.mkdtemp(prefix="remote-agent-command-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    folder.chmod(0o755)
    script = folder / "remote_agent_command.py"
    shutil.copyfile(Path(remote_agent_command.__file__), script)
    script.chmod(0o644)
    return (python, str(script))


def command_run(mode: str = "calc", *args: str, registry: ToolRegistry = BUILTINS, **fields):
    spec = AgentSpec(
        name="cmd",
        instructions="",
        model="remote",
        kind="remote",
        remote_command_name="fake",
        remote_command=(*fake_command(), mode, *args),
        tool_names=None,
        **fields,
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
    allowed = {*remote_transport.COMMAND_ENV_KEYS, *remote_transport.COMMAND_ENV, "HOME"}
    assert {n for n in names if not n.startswith("LC_")} <= {*allowed, "PWD", "SHLVL", "_"}


def test_a_command_not_allow_listed_is_never_started():
    spec = AgentSpec(
        name="cmd", instructions="", model="remote", kind="remote", remote_command_name="rogue"
    )
    outcome = asyncio.run(remote_agent(spec=spec, registry=BUILTINS, ctx=CTX, egress=None))
    assert outcome.status is RunStatus.FAILED
    assert "'rogue' is not one the operator allow-lists" in outcome.error


def test_command_health():
    assert asyncio.run(command_health("fake", [*fake_command(), "calc"])) == (True, "ok")
    healthy, why = asyncio.run(command_health("fake", [*fake_command(), "crash"]))
    assert not healthy and "ended without answering" in why


@pytest.fixture
def commands(settings):
    fake = list(fake_command())
    settings.REMOTE_AGENT_COMMANDS = {"fake": [*fake, "tool:purge"], "down": [*fake, "crash"]}


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


# -- what a command can reach of the platform's (docs/security.md) ----------------------
PLATFORM_ENV = {
    "SECRET_KEY": "platform-secret-key-value",
    "FIELD_ENCRYPTION_KEYS": "platform-fernet-key-value",
    "DATABASE_URL": "postgres://owner:db-password@db/app",
    "REDIS_URL": "redis://:redis-password@cache:6379/0",
    "OPENAI_API_KEY": "sk-platform-openai-key",
    "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer otel-token-value",
    "METRICS_TOKEN": "platform-metrics-token",
    "HOME": "/srv/platform-home",
}


def test_a_command_starts_with_a_clean_environment_as_another_account(monkeypatch):
    for name, value in PLATFORM_ENV.items():
        monkeypatch.setenv(name, value)
    outcome = command_run("probe")
    assert outcome.status is RunStatus.SUCCEEDED, outcome.error
    seen = json.loads(outcome.output)
    env = seen["env"]
    shown = json.dumps(env)
    assert not [value for value in PLATFORM_ENV.values() if value in shown]  # by no name
    allowed = {*remote_transport.COMMAND_ENV_KEYS, *remote_transport.COMMAND_ENV, "HOME"}
    assert {n for n in env if not n.startswith("LC_")} <= {*allowed, "PWD", "SHLVL", "_"}
    assert env["PYTHONUNBUFFERED"] == "1" and env["PATH"] == os.environ["PATH"]
    if ROOT:  # switched: neither root's identity nor its processes' environment
        nobody = pwd.getpwnam("nobody")
        assert (seen["uid"], env["HOME"]) == (nobody.pw_uid, nobody.pw_dir)
        assert seen["readable"] == []  # not even /proc/<platform>/environ
    else:  # an unprivileged platform cannot switch (docs/remote-agents.md)
        assert (seen["uid"], env["HOME"]) == (os.getuid(), tempfile.gettempdir())


def test_an_account_that_does_not_exist_is_a_clear_failure():
    outcome = command_run("calc", remote_command_user="no-such-account-here")
    if ROOT:
        assert outcome.status is RunStatus.FAILED
        assert outcome.error == (
            "remote agent command 'fake' cannot be started: the account it runs as "
            "('no-such-account-here', REMOTE_AGENT_COMMAND_USER) does not exist"
        )
    else:  # (not switched: the account is not looked up)
        assert outcome.status is RunStatus.SUCCEEDED


@pytest.fixture
def data_dir():
    """A data directory as the platform makes it (its key file, its Redis folder), in a
    folder every account may pass through: only the modes the platform gives its own files
    stand between a command and them. `public.txt` is a control: a file there the command
    may read."""
    folder = Path(tempfile.mkdtemp(prefix="agentplatform-data-"))
    folder.chmod(0o755)
    data = folder / "data"
    embedded.local_secrets(data)
    data.chmod(0o755)
    redis = embedded.EmbeddedRedis(data).dir
    (redis / "dump.rdb").write_text("the queues' messages")
    (redis / "dump.rdb").chmod(0o644)
    (data / "public.txt").write_text("anyone may read this")
    (data / "public.txt").chmod(0o644)
    yield data
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.skipif(not ROOT, reason="a command runs as another account only under root")
@pytest.mark.django_db(transaction=True)
def test_a_command_cannot_read_the_key_file_through_a_run_or_a_health_check(
    client, trio, settings, monkeypatch, data_dir
):
    key_file, dump = data_dir / "local-secrets.json", data_dir / "redis" / "dump.rdb"
    public = data_dir / "public.txt"
    probe = [*fake_command(), "probe", str(key_file), str(dump), str(public)]
    settings.REMOTE_AGENT_COMMANDS = {"probe": probe, "keys": probe[:-1]}
    monkeypatch.setattr(run_queued, "receivers", [])  # executed here (settings of this process)
    make_agent(trio.acme, "probe", kind="remote", remote_command="probe")
    make_agent(trio.acme, "keys", kind="remote", remote_command="keys")

    # A run started over REST: its command reads the control file, not the key file.
    started = as_key(client, trio.acme, "read", "run").post(
        "/runs", {"agent": "probe", "input": "what can you read?"}
    )
    assert started.status_code == 201, started.content
    run = settle(Run.objects.get(pk=started.json()["id"]))
    assert run.status == "succeeded", run.error
    assert json.loads(run.output)["readable"] == [str(public)]

    # The periodic health check starts the same commands the same way.
    assert check_remote_agents() == 2
    health = dict(Agent.objects.values_list("slug", "remote_health_detail"))
    assert health == {"keys": "ok", "probe": f"health status is 'read {public}', not 'ok'"}
