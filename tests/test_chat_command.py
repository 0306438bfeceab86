"""`manage.py chat` (agentplatform/management/commands/chat.py) as a person uses it: a real
process reading lines from its standard input, on the test database, its agent's model the
local fake provider; the records are the browser chat's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

from agents.models import Conversation, Message, Run
from tests import processes
from tests.conftest import PAY_SECRET, ROOT, subprocess_env
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)


def chat(*args: str, lines: str) -> subprocess.CompletedProcess:
    return processes.run(
        [sys.executable, "manage.py", "chat", *args],
        cwd=ROOT,
        env=subprocess_env(),
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.integration
def test_a_terminal_chat_streams_the_answer_shows_tool_calls_and_records_the_run(
    trio, agent, provider_server
):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "calculator", '{"expression": "6*7"}')]),
        TextReply("It is 42."),
    )
    done = chat("assistant", "--tenant", "acme", "--user", "bob", lines="6 times 7?\n/quit\n")
    assert done.returncode == 0, done.stderr
    assert '[calculator {"expression": "6*7"}]' in done.stdout
    assert '[calculator -> {"result": 42}]' in done.stdout
    assert "assistant> It is 42." in done.stdout
    run = Run.objects.get(tenant=trio.acme)
    assert (run.status, run.output, run.initiated_by_user) == ("succeeded", "It is 42.", trio.bob)
    conversation = Conversation.objects.get(pk=run.conversation_id)
    assert conversation.owner_user == trio.bob and conversation.agent == agent
    assert [m.role for m in Message.objects.filter(conversation=conversation)] == [
        "user",
        "assistant",
    ]


@pytest.mark.integration
def test_a_call_needing_approval_is_asked_and_sent_only_once_approved(
    trio, agent, provider_server, transfer
):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "transfer", '{"amount": 5, "to": "bob"}')]),
        TextReply("Sent."),
    )
    done = chat("assistant", "--tenant", "acme", lines="send 5 to bob\ny\n/quit\n")
    assert done.returncode == 0, done.stderr
    assert "[transfer waits for approval]" in done.stdout
    asked = done.stdout.split("Approve transfer ", 1)[1].split("? [y/N]", 1)[0]
    assert json.loads(asked) == {"amount": 5, "to": "bob"}
    assert "assistant> Sent." in done.stdout
    assert [r.json() for r in transfer.requests] == [{"amount": 5, "to": "bob"}]
    run = Run.objects.get(tenant=trio.acme)
    assert run.status == "succeeded" and run.approvals.get().decided_by == trio.alice


@pytest.mark.integration
def test_a_refused_call_is_not_sent_and_the_model_hears_it(trio, agent, provider_server, transfer):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "transfer", '{"amount": 5}')]),
        TextReply("Not sent, then."),
    )
    done = chat("assistant", "--tenant", "acme", lines="send 5\nn\n/quit\n")
    assert "assistant> Not sent, then." in done.stdout and transfer.requests == []


def test_it_refuses_unknown_tenants_agents_and_non_members(trio, agent):
    """Refused before it reads a line, so the command runs in this process."""
    for args, refusal in [
        (("assistant", "--tenant", "nope"), "No tenant 'nope'"),
        (("ghost", "--tenant", "acme"), "no agent or crew 'ghost'"),
        (("assistant", "--tenant", "acme", "--user", "charlie"), "not an active member of acme"),
    ]:
        with pytest.raises(CommandError, match=refusal):
            call_command("chat", *args)


@pytest.mark.integration
def test_an_http_tools_exact_request_is_shown_before_asking(trio, agent, provider_server, pay):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("p1", "pay", '{"amount": 5, "to": "bob"}')]),
        TextReply("Paid."),
    )
    done = chat("assistant", "--tenant", "acme", lines="pay bob 5\ny\n/quit\n")
    assert done.returncode == 0, done.stderr
    shown = done.stdout.split("Approve pay ", 1)[0]
    assert f"  POST {pay.url}/payments/bob\n" in shown
    assert "  Authorization: Bearer ***\n" in shown and '  {"amount":5}' in shown
    assert PAY_SECRET not in done.stdout + done.stderr
    [received] = pay.requests
    assert received.body == b'{"amount":5}'
    assert received.headers["authorization"] == f"Bearer {PAY_SECRET}"
