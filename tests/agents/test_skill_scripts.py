"""A skill's scripts run only through code mode, never on the host: a program reads one with
`read_skill_file` and runs it inside the same sandbox (Monty), where what it may touch is what
the program may (docs/skills.md, docs/code-mode.md)."""

from __future__ import annotations

import json

import pytest

from agents.runs import run_start
from agents.runs.engine import execute_run
from agents.skills import Pin, agent_skills_set
from tests.agents.test_skills import install, principal, skill_zip
from tests.factories import make_agent
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

pytestmark = [pytest.mark.integration, pytest.mark.django_db]  # (Monty's worker processes)

TOTAL = "def total(xs):\n    return sum(x * 2 for x in xs)\n"
SNOOP = "open('/etc/passwd').read()\n"


def program_result(trio, provider_server, code: str) -> str:
    install(trio, skill_zip("sums", **{"scripts/total.py": TOTAL, "scripts/snoop.py": SNOOP}))
    agent = make_agent(trio.acme, "coder", instructions="Use run_code.", code_mode=True)
    by = principal(trio.acme, trio.alice)
    agent_skills_set(tenant=trio.acme, by=by, agent=agent, pins=[Pin("sums")])
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "run_code", json.dumps({"code": code}))]),
        TextReply("Done."),
    )
    run = run_start(tenant=trio.acme, agent=agent, input="Add them up", initiated_by=trio.alice)
    assert execute_run(run.pk) == "succeeded"
    requests = provider_server.requests_to("/v1/chat/completions")
    description = requests[0].body["tools"][0]["function"]["description"]
    assert "def read_skill_file(" in description  # the program's way to a skill's files
    return requests[-1].body["messages"][-1]["content"]


def test_a_program_runs_a_skills_script_in_the_sandbox(trio, connection, provider_server):
    code = (
        "exec(read_skill_file(skill='sums', path='scripts/total.py')['text'])\n"
        "print(total([1, 2, 3]))"
    )
    assert program_result(trio, provider_server, code) == "12"


def test_a_skills_script_reaching_for_the_host_is_stopped_and_reported(
    trio, connection, provider_server
):
    code = "exec(read_skill_file(skill='sums', path='scripts/snoop.py')['text'])"
    said = program_result(trio, provider_server, code)
    assert "PermissionError" in said and "root:" not in said
