"""The booking example at the runtime boundary (agents/runtime/loop.py with the tenant's
tools as the platform builds them, a scripted FakeModel, the fake API over real HTTP): no
write reaches POST /bookings before a person approves, and what arrives then is, byte for
byte, the request that was approved."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agents.runtime.loop import run_agent
from agents.runtime.spec import Decision, RunStatus
from agents.runtime.state import RunState
from agents.specs import agent_spec
from providers.runtime.fake import FakeModel
from providers.runtime.types import ToolResultMessage
from tests.booking.example import DATE
from tools.loader import tenant_tools
from tools.runtime.formats import Format, definition_for
from tools.runtime.tool import ToolCall
from tools.services import tool_context

pytestmark = pytest.mark.django_db


class Journal:
    """The run's events and its saved states, in order."""

    wants_text_deltas = False

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.states: list[dict[str, Any]] = []

    async def emit(self, type: str, payload: dict[str, Any]) -> None:
        self.events.append((type, payload))

    async def save(self, state: RunState, reason: str, *, durable: bool = True) -> None:
        self.states.append(state.to_dict())

    def of(self, type: str) -> list[dict[str, Any]]:
        return [payload for kind, payload in self.events if kind == type]


def test_nothing_is_booked_before_approval_and_the_approved_bytes_are_what_arrives(
    trio, booking_agent, booking_api
):
    toolbox = tenant_tools(trio.acme)
    ctx = tool_context(tenant=trio.acme, user_id=trio.bob.pk, run_id="41", secrets=toolbox.secrets)
    spec = agent_spec(booking_agent, None)
    model = FakeModel(
        [
            ToolCall("c1", "search_slots", {"date": DATE}),
            ToolCall("c2", "hold_slot", {"slot_id": "slot#2"}),
            ToolCall("c3", "confirm_booking", {"name": "Ada Lovelace"}),
            "Booked: BKG for Ada Lovelace at 10:30.",
        ]
    )
    journal = Journal()

    def run(**kwargs: Any):
        return asyncio.run(
            run_agent(
                spec=spec, adapter=model, registry=toolbox.registry, ctx=ctx, sink=journal,
                checkpoint=journal, **kwargs,
            )
        )  # fmt: skip

    parked = run(input=f"Book me the 10:30 slot on {DATE}, name Ada Lovelace.")

    # Parked on confirm_booking, with the search and the hold done and nothing booked.
    assert parked.status is RunStatus.AWAITING_APPROVAL, parked.error
    [waiting] = parked.awaiting
    assert waiting.name == "confirm_booking" and waiting.prepared is not None
    slot_ids = booking_api.slot_ids(DATE)
    [hold] = booking_api.requests_to("POST", "/holds")
    assert hold.body == json.dumps({"slot_id": slot_ids[1]}, separators=(",", ":")).encode()
    [held] = booking_api.state.holds.values()
    assert booking_api.requests_to("POST", "/bookings") == []
    assert [(r.method, r.path) for r in booking_api.received] == [
        ("GET", f"/slots?date={DATE}"), ("POST", "/holds"),
    ]  # fmt: skip

    # What a person is asked to approve: the exact request, hold id filled in, key masked.
    prepared = waiting.prepared
    assert (prepared.method, prepared.url) == ("POST", f"{booking_api.url}/bookings")
    assert json.loads(prepared.body) == {"hold_id": held["id"], "name": "Ada Lovelace"}
    assert ["X-API-Key", "***"] in [list(h) for h in prepared.headers]
    [asked] = journal.of("approval.required")
    assert asked["prepared_request"] == prepared.to_dict()

    # The model never saw a server id, nor was it offered hold_id.
    seen = json.dumps([m.content for m in journal_results(journal)])
    assert "SLT-" not in seen and "HLD-" not in seen and "slot#2" in seen
    offered = {t.name: definition_for(t, Format.OPENAI) for t in model.requests[0].tools}
    parameters = offered["confirm_booking"]["function"]["parameters"]
    assert parameters["properties"].keys() == {"name"} and parameters["required"] == ["name"]

    # Approved: exactly the prepared request is sent, plus the key.
    done = run(
        state=RunState.from_dict(journal.states[-1]),
        decisions={"c3": Decision(approved=True, by="bob", prepared=prepared)},
    )
    assert done.status is RunStatus.SUCCEEDED, done.error
    [received] = booking_api.requests_to("POST", "/bookings")
    assert received.method == prepared.method
    assert booking_api.url + received.path == prepared.url
    assert received.body == prepared.body.encode("utf-8")
    sent = [(n.lower(), v) for n, v in received.headers]
    for name, value in prepared.headers:
        expected = booking_api.api_key if name == "X-API-Key" else value
        assert (name.lower(), expected) in sent, name
    [booking] = booking_api.state.bookings.values()
    assert booking["slot_id"] == slot_ids[1] and booking["status"] == "confirmed"
    assert booking_api.api_key not in json.dumps([journal.events, journal.states])


def journal_results(journal: Journal) -> list[ToolResultMessage]:
    """The tool results as the model was given them (the last state's messages)."""
    messages = RunState.from_dict(journal.states[-1]).messages
    return [m for m in messages if isinstance(m, ToolResultMessage)]


def test_a_booking_without_a_hold_is_refused_to_the_model_and_nothing_is_sent(
    trio, booking_agent, booking_api
):
    toolbox = tenant_tools(trio.acme)
    ctx = tool_context(tenant=trio.acme, user_id=trio.bob.pk, run_id="42", secrets=toolbox.secrets)
    model = FakeModel([ToolCall("c1", "confirm_booking", {"name": "Ada"}), "I need a hold."])
    journal = Journal()
    outcome = asyncio.run(
        run_agent(
            spec=agent_spec(booking_agent, None), adapter=model, registry=toolbox.registry,
            ctx=ctx, sink=journal, checkpoint=journal, input="Book anything for Ada.",
        )
    )  # fmt: skip
    assert outcome.status is RunStatus.SUCCEEDED, outcome.error
    [completed] = journal.of("tool.completed")
    assert completed["error"] == (
        "'hold_id' is taken from the result of hold_slot, which has not given one in this "
        "conversation: call hold_slot first"
    )
    assert journal.of("approval.required") == [] and booking_api.received == []
