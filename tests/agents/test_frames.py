"""Dependency frames and references in real runs: tools of a tenant over real HTTP, the
model over the real OpenAI wire (the provider fake), runs executed as a worker does."""

from __future__ import annotations

import json

import pytest

from agents.models import Approval, Conversation, Run, RunEvent
from agents.runs import approval_decide, run_start
from tests.agents.test_confirmation import settle
from tests.factories import make_http_tool
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.tools.local_server import LocalServer, Reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def crm(trio, connection):
    """acme's find_customer (GET, gives {"id": 4711}) and create_note (POST, its
    customer_id taken from find_customer's $.id); yields the server, which records."""
    server = LocalServer()
    server.route("GET", "/customers", Reply(json={"id": 4711, "name": "Ada"}))
    server.route("POST", "/customers/4711/notes", Reply(status=201, json={"ok": True}))
    make_http_tool(
        trio.acme,
        "find_customer",
        server.url + "/customers",
        description="Find a customer by e-mail.",
        input_schema={
            "type": "object",
            "properties": {"email": {"type": "string"}},
            "required": ["email"],
        },
        output_schema={"type": "object", "properties": {"id": {"type": "integer"}}},
    )
    make_http_tool(
        trio.acme,
        "create_note",
        server.url + "/customers/{customer_id}/notes",
        method="POST",
        description="Add a note to a customer.",
        input_schema={
            "type": "object",
            "properties": {
                "customer_id": {"type": "integer"},
                "email": {"type": "string"},
                "text": {"type": "string"},
            },
            "required": ["customer_id", "text"],
        },
        config={"arguments": [{"argument": "customer_id", "to": "path"}]},
        depends_on={"customer_id": {"from": "find_customer", "path": "$.id"}},
    )
    yield server
    server.close()


def run_with(trio, agent, provider_server, *replies, conversation=None) -> Run:
    provider_server.script("openai", *replies)
    run = run_start(
        tenant=trio.acme,
        agent=agent,
        input="note it",
        initiated_by=trio.alice,
        conversation=conversation,
    )
    return settle(run)


def tool_messages(provider_server) -> list[str]:
    """What the model was given as tool results, over the wire, in its last request."""
    last = provider_server.requests_to("/v1/chat/completions")[-1].body
    return [m["content"] for m in last["messages"] if m["role"] == "tool"]


def offered(provider_server, name: str) -> dict:
    first = provider_server.requests_to("/v1/chat/completions")[0].body
    [tool] = [t for t in first["tools"] if t["function"]["name"] == name]
    return tool["function"]["parameters"]


def test_an_input_is_taken_from_the_producers_result_never_from_the_model(
    trio, agent, provider_server, crm
):
    run = run_with(
        trio, agent, provider_server,
        ToolCallReply([ToolCall("c1", "find_customer", '{"email": "ada@example.com"}')]),
        # The model tries to set the filled input: it is not its to set.
        ToolCallReply([ToolCall("c2", "create_note", '{"text": "Called.", "customer_id": 1}')]),
        TextReply("Noted."),
    )  # fmt: skip
    assert run.status == "succeeded", run.error
    schema = offered(provider_server, "create_note")
    assert "customer_id" not in schema["properties"] and schema["required"] == ["text"]
    [note] = [r for r in crm.requests if r.method == "POST"]
    assert note.path == "/customers/4711/notes" and note.json() == {"text": "Called."}


def test_a_producer_that_only_reads_is_run_when_its_inputs_are_known(
    trio, agent, provider_server, crm
):
    run = run_with(
        trio, agent, provider_server,
        ToolCallReply([ToolCall("c1", "create_note", '{"email": "ada@x.org", "text": "Hi."}')]),
        TextReply("Noted."),
    )  # fmt: skip
    assert run.status == "succeeded", run.error
    assert [(r.method, r.path) for r in crm.requests] == [
        ("GET", "/customers?email=ada%40x.org"),
        ("POST", "/customers/4711/notes"),
    ]
    started = RunEvent.objects.filter(run=run, type="tool.started").values_list(
        "payload", flat=True
    )
    assert [(e["name"], e.get("for")) for e in started] == [
        ("find_customer", "c1"),
        ("create_note", None),
    ]
    assert Run.objects.get(pk=run.pk).state["tool_calls"] == 2  # the producer counts too


def test_without_the_producers_result_the_model_is_told_to_call_it_and_nothing_is_sent(
    trio, agent, provider_server, crm
):
    run = run_with(
        trio, agent, provider_server,
        ToolCallReply([ToolCall("c1", "create_note", '{"text": "Hi."}')]),
        TextReply("I need the customer first."),
    )  # fmt: skip
    assert run.status == "succeeded"
    assert crm.requests == []
    [told] = tool_messages(provider_server)
    assert "taken from the result of find_customer" in told and "call find_customer first" in told


@pytest.fixture
def booking(trio, connection):
    """search_slots shows slot ids as references; hold_slot takes one."""
    server = LocalServer()
    slots = [{"id": "SLT-9f2", "time": "09:00"}, {"id": "SLT-c41", "time": "10:00"}]
    server.route("GET", "/slots", Reply(json={"slots": slots}))
    server.route("POST", "/holds", Reply(status=201, json={"id": "HLD-77", "slot": "SLT-c41"}))
    make_http_tool(
        trio.acme,
        "search_slots",
        server.url + "/slots",
        description="Free slots.",
        config={"references": {"slots.*.id": "slot"}},
    )
    make_http_tool(
        trio.acme,
        "hold_slot",
        server.url + "/holds",
        method="POST",
        description="Hold a slot.",
        input_schema={
            "type": "object",
            "properties": {"slot_id": {"type": "string"}},
            "required": ["slot_id"],
        },
        config={
            "arguments": [{"argument": "slot_id", "to": "body", "reference": "slot"}],
            "references": {"id": "hold", "slot": "slot"},
        },
    )
    yield server
    server.close()


def test_the_model_sees_references_and_they_map_back_to_the_ids(
    trio, agent, provider_server, booking
):
    run = run_with(
        trio, agent, provider_server,
        ToolCallReply([ToolCall("c1", "search_slots", "{}")]),
        ToolCallReply([ToolCall("c2", "hold_slot", '{"slot_id": "slot#2"}')]),
        TextReply("Held."),
    )  # fmt: skip
    assert run.status == "succeeded", run.error
    seen = tool_messages(provider_server)
    assert json.loads(seen[0]) == {
        "slots": [{"id": "slot#1", "time": "09:00"}, {"id": "slot#2", "time": "10:00"}]
    }
    assert json.loads(seen[1]) == {"id": "hold#1", "slot": "slot#2"}
    assert not any(real in "".join(seen) for real in ("SLT-9f2", "SLT-c41", "HLD-77"))
    [hold] = [r for r in booking.requests if r.method == "POST"]
    assert hold.json() == {"slot_id": "SLT-c41"}


def test_an_invented_or_raw_id_is_refused_and_nothing_is_sent(
    trio, agent, provider_server, booking
):
    run = run_with(
        trio, agent, provider_server,
        ToolCallReply([ToolCall("c1", "search_slots", "{}")]),
        ToolCallReply([
            ToolCall("c2", "hold_slot", '{"slot_id": "slot#7"}'),
            ToolCall("c3", "hold_slot", '{"slot_id": "SLT-c41"}'),
        ]),
        TextReply("Could not."),
    )  # fmt: skip
    assert run.status == "succeeded"
    assert [r.method for r in booking.requests] == ["GET"]
    invented, raw = tool_messages(provider_server)[1:]
    assert "unknown reference 'slot#7'" in invented
    assert "ids cannot be given directly" in raw


def test_references_and_results_carry_to_the_next_run_of_the_conversation(
    trio, agent, provider_server, booking
):
    conversation = Conversation.objects.create(tenant=trio.acme, owner_user=trio.alice, agent=agent)
    first = run_with(
        trio, agent, provider_server,
        ToolCallReply([ToolCall("c1", "search_slots", "{}")]),
        TextReply("09:00 or 10:00?"),
        conversation=conversation,
    )  # fmt: skip
    assert first.status == "succeeded"
    second = run_with(
        trio, agent, provider_server,
        ToolCallReply([ToolCall("c1", "hold_slot", '{"slot_id": "slot#2"}')]),
        TextReply("Held."),
        conversation=conversation,
    )  # fmt: skip
    assert second.status == "succeeded", second.error
    assert [r.json() for r in booking.requests if r.method == "POST"] == [{"slot_id": "SLT-c41"}]
    # Another conversation does not share them.
    other = Conversation.objects.create(tenant=trio.acme, owner_user=trio.alice, agent=agent)
    third = run_with(
        trio, agent, provider_server,
        ToolCallReply([ToolCall("c1", "hold_slot", '{"slot_id": "slot#2"}')]),
        TextReply("No."),
        conversation=other,
    )  # fmt: skip
    assert "unknown reference 'slot#2'" in tool_messages(provider_server)[0]
    assert third.status == "succeeded"
    assert len([r for r in booking.requests if r.method == "POST"]) == 1


def test_the_approval_shows_the_filled_request_and_a_resume_sends_exactly_it(
    trio, agent, provider_server, crm
):
    from tools.models import ToolDefinition

    ToolDefinition.objects.filter(tenant=trio.acme, name="create_note").update(
        requires_approval=True
    )
    run = run_with(
        trio, agent, provider_server,
        ToolCallReply([ToolCall("c1", "find_customer", '{"email": "ada@example.com"}')]),
        ToolCallReply([ToolCall("c2", "create_note", '{"text": "Called."}')]),
        TextReply("Noted."),
    )  # fmt: skip
    assert run.status == "awaiting_approval", run.error
    approval = Approval.objects.get(run=run)
    assert approval.prepared_request["url"] == f"{crm.url}/customers/4711/notes"
    assert approval.arguments == {"text": "Called."}  # as the model asked
    assert [r.method for r in crm.requests] == ["GET"]  # no write before approval
    assert Run.objects.get(pk=run.pk).state["frame"]["outputs"]["find_customer"]["id"] == 4711

    # An approver's edit is completed from the run's frame too, and asked again.
    edited = approval_decide(
        tenant=trio.acme, approval=approval, approved=True, by=trio.alice,
        arguments={"text": "Called twice.", "customer_id": 1},
    )  # fmt: skip
    second = edited.replaced_by
    assert second.prepared_request["url"] == f"{crm.url}/customers/4711/notes"
    assert second.prepared_request["body"] == '{"text":"Called twice."}'

    approval_decide(tenant=trio.acme, approval=second, approved=True, by=trio.alice)
    run = settle(run)  # a worker resumes from the stored state, frame and all
    assert run.status == "succeeded", run.error
    [note] = [r for r in crm.requests if r.method == "POST"]
    assert note.body == second.prepared_request["body"].encode()
    assert note.path == "/customers/4711/notes"
