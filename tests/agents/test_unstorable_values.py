"""Values PostgreSQL refuses — NUL characters (text, jsonb) and NaN/Infinity (jsonb) — in a
tool's result, a model's text and a tool's arguments are stored on every path, by the one
rule of the recorder (agents/runs/writer.py): NUL becomes U+FFFD, a non-finite number its
name as text ("nan", "inf", "-inf").
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal

import pytest

from agents.models import Approval, Conversation, Message, Run, RunEvent
from agents.runs import approval_decide, run_inline
from agents.runs.direct_calls import atool_run, tool_run
from agents.runs.engine import execute_run
from agents.runs.writer import storable, storable_json, storable_text
from agents.runtime.structured import FINAL_ANSWER
from tenancy import services as tenancy
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.tools.local_server import LocalServer, Reply
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db(transaction=True)

REFUSED_RESULT = {"text": "a\x00b", "nan": float("nan"), "inf": float("inf")}
STORED_RESULT = {"text": "a\ufffdb", "nan": "nan", "inf": "inf"}
ARGUMENTS_JSON = '{"note": "x\\u0000y", "n": NaN}'  # what a model may send
REFUSED_ARGUMENTS = {"note": "x\x00y", "n": float("nan")}
STORED_ARGUMENTS = {"note": "x\ufffdy", "n": "nan"}


def test_the_rule():
    assert storable_text("a\x00b") == "a\ufffdb"
    assert storable(REFUSED_RESULT) == STORED_RESULT
    assert storable({"k\x00": [float("-inf"), ("t\x00",)]}) == {"k\ufffd": ["-inf", ["t\ufffd"]]}
    assert storable({"t": ["a\x00b"]}) == {"t": ["a\ufffdb"]}  # NUL alone
    assert storable({"n": [float("nan")]}) == {"n": ["nan"]}  # NaN alone
    assert json.loads(storable_json(REFUSED_RESULT)) == STORED_RESULT
    assert storable_json({"x": float("nan")}) == '{"x": "nan"}'
    plain = {"a": [1, 2.5, "b"], "c": None}
    assert storable(plain) is plain and storable_json(plain) == json.dumps(plain)
    # A tool's result may hold values JSON has no type for (dates, decimals): their text.
    dated = {"at": datetime(2026, 1, 2, 3, 4), "price": Decimal("1.50")}
    assert storable(dated) is dated
    assert storable_json(dated) == '{"at": "2026-01-02 03:04:00", "price": "1.50"}'
    assert json.loads(storable_json({**dated, "n": float("nan")}))["at"] == "2026-01-02 03:04:00"


@pytest.fixture
def odd(trio, settings) -> Iterator[LocalServer]:
    """acme's `odd`: a GET tool whose server answers JSON with NUL and non-finite numbers."""
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    server = LocalServer()
    server.route("GET", "/odd", Reply(json=REFUSED_RESULT))
    yield server
    server.close()


def odd_tool(tenant, server: LocalServer, **capability) -> None:
    ToolDefinition.objects.create(
        tenant=tenant, name="odd", description="Odd values.", kind="http",
        input_schema={
            "type": "object",
            # a parked call runs with its arguments as stored: NaN became "nan"
            "properties": {"note": {"type": "string"}, "n": {"type": ["number", "string"]}},
        },
        config={"method": "GET", "url": server.url + "/odd"}, **capability,
    )  # fmt: skip


def finish(run: Run) -> Run:
    """Execute the decided run here; a Celery worker of this session may take it first."""
    execute_run(run.pk)
    deadline = time.monotonic() + 10
    while not (run := Run.objects.get(pk=run.pk)).is_terminal and time.monotonic() < deadline:
        time.sleep(0.02)
    return run


def payloads(run: Run, type: str) -> list[dict]:
    events = RunEvent.objects.filter(run=run, type=type).order_by("seq")
    return list(events.values_list("payload", flat=True))


def test_an_agent_run_stores_them_in_events_state_output_and_the_conversation(
    trio, agent, provider_server, odd
):
    odd_tool(trio.acme, odd)
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "odd", ARGUMENTS_JSON)]),
        TextReply("done\x00!"),
    )
    conversation = Conversation.objects.create(tenant=trio.acme, agent=agent, owner_user=trio.bob)
    run = run_inline(
        tenant=trio.acme, agent=agent, input="go", conversation=conversation, initiated_by=trio.bob
    )

    assert (run.status, run.output) == ("succeeded", "done\ufffd!")
    [started] = payloads(run, "tool.started")
    assert started["arguments"] == STORED_ARGUMENTS
    [completed] = payloads(run, "tool.completed")
    assert (completed["result"], completed["error"]) == (STORED_RESULT, None)
    texts = [p["text"] for p in payloads(run, "inference.completed")]
    assert texts[-1] == "done\ufffd!"
    assert "".join(p["text"] for p in payloads(run, "text.delta")) == "done\ufffd!"
    assert payloads(run, "run.completed")[0]["output"] == "done\ufffd!"
    # The state keeps the result as the model read it: JSON text, itself storable.
    sent = provider_server.requests_to("/v1/chat/completions")[1].body["messages"][-1]
    assert run.state["messages"][-2]["content"] == sent["content"]
    assert run.state["messages"][-3]["tool_calls"][0]["arguments"] == STORED_ARGUMENTS
    answer = Message.objects.get(conversation=conversation, role="assistant")
    assert answer.content == "done\ufffd!"
    assert len(odd.requests) == 1


def test_an_agent_runs_structured_output_stores_them(trio, agent, provider_server):
    agent.output_schema = {"type": "object", "properties": {"note": {"type": "string"}}}
    agent.save()
    provider_server.script(
        "openai", ToolCallReply([ToolCall("f1", FINAL_ANSWER, '{"note": "x\\u0000y"}')])
    )
    run = run_inline(tenant=trio.acme, agent=agent, input="go", initiated_by=trio.bob)

    run.refresh_from_db()
    assert (run.status, run.structured_output) == ("succeeded", {"note": "x\ufffdy"})


def test_an_agent_run_waiting_for_approval_stores_them_in_its_approval(
    trio, agent, provider_server, odd
):
    odd_tool(trio.acme, odd, requires_approval=True)
    provider_server.script("openai", ToolCallReply([ToolCall("c1", "odd", ARGUMENTS_JSON)]))
    run = run_inline(tenant=trio.acme, agent=agent, input="go", initiated_by=trio.bob)

    run.refresh_from_db()
    assert run.status == "awaiting_approval"
    assert Approval.objects.get(run=run).arguments == STORED_ARGUMENTS


@pytest.mark.parametrize("face", ["rest", "mcp"])
def test_a_direct_call_stores_them_in_its_run_and_events(trio, odd, face):
    odd_tool(trio.acme, odd)
    key, _ = tenancy.api_key_create(tenant=trio.acme, name="k", scopes=["read", "run"])
    if face == "rest":
        outcome = tool_run(tenant=trio.acme, name="odd", arguments=REFUSED_ARGUMENTS, api_key=key)
    else:
        from asgiref.sync import async_to_sync

        from agents.runs import writer as run_writer

        async def over_mcp():
            try:
                return await atool_run(
                    tenant=trio.acme, name="odd", arguments=REFUSED_ARGUMENTS, api_key=key,
                    via="mcp",
                )  # fmt: skip
            finally:
                await run_writer.aclose()

        outcome = async_to_sync(over_mcp)()

    assert outcome.status == "succeeded"
    run = Run.objects.get(pk=outcome.run_id)
    assert json.loads(run.input) == STORED_ARGUMENTS
    assert json.loads(run.output) == STORED_RESULT
    assert payloads(run, "tool.started")[0]["arguments"] == STORED_ARGUMENTS
    assert payloads(run, "tool.completed")[0]["result"] == STORED_RESULT


def test_an_approval_parked_call_stores_them_when_parked_and_when_run(trio, odd):
    odd_tool(trio.acme, odd, requires_approval=True)
    outcome = tool_run(tenant=trio.acme, name="odd", arguments=REFUSED_ARGUMENTS, user=trio.alice)
    assert outcome.status == "awaiting_approval"
    run = Run.objects.get(pk=outcome.run_id)
    assert json.loads(run.input) == STORED_ARGUMENTS
    assert run.state["pending_calls"][0]["arguments"] == STORED_ARGUMENTS
    approval = Approval.objects.get(run=run)
    assert approval.arguments == STORED_ARGUMENTS
    assert payloads(run, "approval.required")[0]["arguments"] == STORED_ARGUMENTS
    assert odd.requests == []

    approval_decide(tenant=trio.acme, approval=approval, approved=True, by=trio.alice)
    run = finish(run)
    assert run.status == "succeeded"
    assert json.loads(run.output) == STORED_RESULT
    assert payloads(run, "tool.completed")[0]["result"] == STORED_RESULT
    assert len(odd.requests) == 1
