"""The booking example at the provider boundary: the same booking driven by a model over
the real OpenAI wire (the `openai` SDK streaming from tests/fakes/provider_server.py), run
by the platform (run_start, the worker's execute_run, approval_decide). What the model is
sent — the tools' model contracts, results with references in place of ids — and the tool
calls it streams back, parsed from their pieces, are what the booking runs on."""

from __future__ import annotations

import json
import time

import pytest

from agents.models import Approval, Run, RunEvent
from agents.runs import approval_decide, run_start
from agents.runs.engine import execute_run
from tests.booking.example import DATE
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)


def settle(run: Run) -> Run:
    """Execute the run here (a Celery worker of this session may take it first) and wait
    until it is parked or finished."""
    execute_run(run.pk)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run.pk)
        if run.status not in ("queued", "running"):
            return run
        time.sleep(0.02)
    return run


def test_a_model_on_the_openai_wire_books_through_references_and_an_approved_request(
    trio, connection, booking_agent, booking_api, provider_server
):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("call_s", "search_slots", json.dumps({"date": DATE}))]),
        ToolCallReply([ToolCall("call_h", "hold_slot", '{"slot_id": "slot#2"}')]),
        ToolCallReply(
            [ToolCall("call_b", "confirm_booking", '{"name": "Ada Lovelace"}')],
            text="Holding 10:30 in Room B; booking it for Ada Lovelace once you approve.",
        ),
        TextReply("Booked: 10:30 in Room B for Ada Lovelace."),
    )
    run = run_start(
        tenant=trio.acme, agent=booking_agent, initiated_by=trio.bob,
        input=f"Book the 10:30 slot on {DATE} for Ada Lovelace.",
    )  # fmt: skip
    run = settle(run)
    assert run.status == "awaiting_approval", run.error

    # The calls streamed in pieces were parsed whole and ran, the reference mapped back.
    slot_ids = booking_api.slot_ids(DATE)
    started = RunEvent.objects.filter(run=run, type="tool.started").order_by("seq")
    assert [(e.payload["name"], e.payload["arguments"]) for e in started] == [
        ("search_slots", {"date": DATE}), ("hold_slot", {"slot_id": slot_ids[1]}),
    ]  # fmt: skip

    # What went over the wire to the model: the model contracts, its own calls as it wrote
    # them, and results with tokens in place of ids.
    requests = [r.body for r in provider_server.requests_to("/v1/chat/completions")]
    assert len(requests) == 3 and all(r["stream"] for r in requests)
    calls = [
        (call["function"]["name"], json.loads(call["function"]["arguments"]))
        for message in requests[2]["messages"] if message["role"] == "assistant"
        for call in message.get("tool_calls") or ()
    ]  # fmt: skip
    assert calls == [("search_slots", {"date": DATE}), ("hold_slot", {"slot_id": "slot#2"})]
    offered = {t["function"]["name"]: t["function"] for t in requests[0]["tools"]}
    assert offered.keys() == {"search_slots", "hold_slot", "confirm_booking"}
    assert offered["confirm_booking"]["parameters"]["properties"].keys() == {"name"}
    assert "slot#1" in offered["hold_slot"]["parameters"]["properties"]["slot_id"]["description"]
    sent_back = [m["content"] for m in requests[2]["messages"] if m["role"] == "tool"]
    slots = json.loads(sent_back[0])["slots"]
    assert [(s["id"], s["time"]) for s in slots] == [
        ("slot#1", "09:00"), ("slot#2", "10:30"), ("slot#3", "14:00"),
    ]  # fmt: skip
    assert "SLT-" not in json.dumps(requests) and "HLD-" not in json.dumps(requests)
    assert booking_api.api_key not in json.dumps(requests)

    # The events: each result as the model read it; the approval asked with the model's
    # arguments and the exact request they make.
    completed = RunEvent.objects.filter(run=run, type="tool.completed").order_by("seq")
    assert [e.payload["result"] for e in completed] == [json.loads(t) for t in sent_back]
    assert json.loads(sent_back[1]) == {
        "hold": "hold#1", "slot": "slot#2", "expires_at": "2030-01-01T00:15:00Z",
    }  # fmt: skip
    approval = Approval.objects.get(run=run)
    [asked] = RunEvent.objects.filter(run=run, type="approval.required")
    assert asked.payload["arguments"] == approval.arguments == {"name": "Ada Lovelace"}
    assert asked.payload["prepared_request"] == approval.prepared_request

    # Parked before the write; approving sends the prepared request, byte for byte.
    assert approval.tool_name == "confirm_booking"
    assert booking_api.requests_to("POST", "/bookings") == []
    [held] = booking_api.state.holds.values()
    assert held["slot_id"] == slot_ids[1]
    shown = approval.prepared_request
    assert json.loads(shown["body"]) == {"hold_id": held["id"], "name": "Ada Lovelace"}
    approval_decide(tenant=trio.acme, approval=approval, approved=True, by=trio.bob)
    run = settle(run)
    assert run.status == "succeeded", run.error
    assert run.output == "Booked: 10:30 in Room B for Ada Lovelace."
    [received] = booking_api.requests_to("POST", "/bookings")
    assert received.body == shown["body"].encode("utf-8")
    assert booking_api.url + received.path == shown["url"]
    [booking] = booking_api.state.bookings.values()
    assert booking["status"] == "confirmed" and booking["hold_id"] == held["id"]
