"""Agent kinds chosen on the Agent row: simple and remote through the run machinery."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from agents.models import Agent, RunEvent
from agents.runs import run_inline
from agents.runtime.kinds import KINDS
from tests.factories import make_agent
from tests.fakes.provider_server import TextReply
from tests.fakes.remote_agent_server import RemoteAgentServer


def test_the_kind_registry_lists_builtins_and_remote():
    assert {"orchestrator", "simple", "remote"} <= set(KINDS)


def test_a_simple_agent_makes_one_call_without_tools(trio, connection, provider_server):
    agent = make_agent(trio.acme, "haiku", kind="simple")
    provider_server.script("openai", TextReply("Autumn moon rises."))
    run = run_inline(tenant=trio.acme, agent=agent, input="A haiku, please.")
    assert run.status == "succeeded" and run.output == "Autumn moon rises."
    assert "tools" not in provider_server.requests_to("/v1/chat/completions")[0].body


def test_a_remote_agent_runs_tools_locally_with_its_token(trio, settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    server = RemoteAgentServer(expect_token="remote-secret")
    try:
        server.script(
            {"type": "tool_call", "calls": [{"id": "r1", "name": "calculator",
             "arguments": {"expression": "2+2"}}], "state": {"step": 1}},
            {"type": "response", "text": "It is 4."},
        )  # fmt: skip
        agent = Agent(
            tenant=trio.acme, slug="far", name="Far", kind="remote", remote_url=server.url,
            remote_token="remote-secret",
        )  # fmt: skip
        agent.full_clean()
        agent.save()
        run = run_inline(tenant=trio.acme, agent=agent, input="2+2?", initiated_by=trio.alice)
        assert run.status == "succeeded" and run.output == "It is 4.", run.error
        result = server.queries[1]
        assert result["type"] == "tool_result" and result["state"] == {"step": 1}
        assert result["results"][0]["content"] == '{"result": 4}'
        payloads = repr(list(RunEvent.objects.filter(run=run).values_list("payload", flat=True)))
        assert "remote-secret" not in payloads
    finally:
        server.close()


def test_unknown_kinds_and_remote_without_url_are_refused(trio):
    with pytest.raises(ValidationError, match="kind"):
        Agent(tenant=trio.acme, slug="x", name="X", kind="psychic").full_clean()
    with pytest.raises(ValidationError, match="remote_url"):
        Agent(tenant=trio.acme, slug="y", name="Y", kind="remote").full_clean()
