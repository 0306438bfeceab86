"""A run's skills are fixed when it starts: a run resumed after a failure keeps the version
its `@latest` pin resolved to then, and records no other; and the prompt says how a skill's
scripts run, by whether the agent is in code mode (agents/skills/disclosure.py)."""

from __future__ import annotations

import pytest

from agents import runs
from agents.models import RunEvent
from agents.runs.engine import execute_run
from agents.skills import Pin, agent_skills_set
from tests.agents.test_skills import install, principal, skill_zip
from tests.factories import make_agent
from tests.fakes.provider_server import ErrorReply, TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db

LOAD = '{"name": "pdf-forms"}'


def test_a_resumed_run_keeps_the_skill_version_it_started_with(trio, agent, provider_server):
    install(trio)  # pdf-forms@1, approved
    by = principal(trio.acme, trio.alice)
    agent_skills_set(tenant=trio.acme, by=by, agent=agent, pins=[Pin("pdf-forms")])
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "load_skill", LOAD)]),
        ErrorReply(500, "upstream is down"),
    )
    run = runs.run_start(tenant=trio.acme, agent=agent, input="Fill it", initiated_by=trio.alice,
                         enqueue=False)  # fmt: skip
    assert execute_run(run.pk) == "failed"
    run.refresh_from_db()
    assert run.state is not None  # failed after its checkpoint: load_skill's result kept

    install(trio, skill_zip(body="The second way."))  # pdf-forms@2 approved: @latest moves
    provider_server.script(
        "openai", ToolCallReply([ToolCall("c2", "load_skill", LOAD)]), TextReply("Done.")
    )
    runs.run_resume(tenant=trio.acme, run=run, by=trio.alice)
    assert execute_run(run.pk) == "succeeded"

    requests = provider_server.requests_to("/v1/chat/completions")
    loaded = requests[-1].body["messages"][-1]["content"]
    assert "Fill the form." in loaded and "The second way." not in loaded
    assert '"version": 1' in loaded
    recorded = RunEvent.objects.filter(run=run, type="run.skills")
    assert [e.payload for e in recorded] == [{"skills": ["pdf-forms@1"]}]
    # A new run of the same agent is given the newest approved version.
    provider_server.script("openai", ToolCallReply([ToolCall("c3", "load_skill", LOAD)]),
                           TextReply("Done."))  # fmt: skip
    later = runs.run_start(tenant=trio.acme, agent=agent, input="Again", initiated_by=trio.alice,
                           enqueue=False)  # fmt: skip
    assert execute_run(later.pk) == "succeeded"
    given = RunEvent.objects.get(run=later, type="run.skills").payload
    assert given == {"skills": ["pdf-forms@2"]}
    last = provider_server.requests_to("/v1/chat/completions")[-1].body
    assert "The second way." in last["messages"][-1]["content"]


@pytest.mark.parametrize("code_mode", [False, True])
def test_the_prompt_says_how_scripts_run_by_code_mode(trio, connection, provider_server, code_mode):
    install(trio)
    agent = make_agent(trio.acme, "writer", instructions="Be brief.", code_mode=code_mode)
    by = principal(trio.acme, trio.alice)
    agent_skills_set(tenant=trio.acme, by=by, agent=agent, pins=[Pin("pdf-forms")])
    provider_server.script("openai", TextReply("Hi."))
    run = runs.run_start(tenant=trio.acme, agent=agent, input="Hi", initiated_by=trio.alice,
                         enqueue=False)  # fmt: skip
    assert execute_run(run.pk) == "succeeded"
    body = provider_server.requests_to("/v1/chat/completions")[0].body
    system = body["messages"][0]["content"]
    offered = {tool["function"]["name"] for tool in body["tools"]}
    assert ("run_code" in offered) is code_mode
    if code_mode:
        assert "cannot be run" not in system
        assert "To run a skill's script, call run_code" in system
    else:
        assert "Scripts in a skill cannot be run here" in system
        assert "run_code" not in system
