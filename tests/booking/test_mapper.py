"""The booking example at the mapper boundary: what the model gives becomes one exact
request. The tenant's tools as the platform builds them (imported from
docs/examples/booking.yaml), the run's frame (tools/runtime/frames.py) filled from a real
search, and the HTTP tool's preparer: `slot#2` becomes that slot's server id in the body of
`POST /holds`, byte for byte; a raw id, an unknown token or another kind's is refused; and
confirm_booking's `hold_id` is the hold's, whatever the model sends."""

from __future__ import annotations

from dataclasses import replace

import pytest
from asgiref.sync import async_to_sync

from tests.booking.example import DATE
from tools.loader import tenant_tools
from tools.runtime.frames import Frame, FrameError
from tools.runtime.tool import ToolCall
from tools.services import tool_context

pytestmark = pytest.mark.django_db


@pytest.fixture
def tools(trio, booking_agent):
    toolbox = tenant_tools(trio.acme)
    ctx = tool_context(tenant=trio.acme, user_id=trio.bob.pk, run_id="9", secrets=toolbox.secrets)
    return toolbox.registry, ctx


def searched(registry, ctx, frame: Frame) -> dict:
    """search_slots run for DATE, its result as the model is shown it (tokens, the view)."""
    result = async_to_sync(registry.execute)(ToolCall("c1", "search_slots", {"date": DATE}), ctx)
    assert result.error is None, result.error
    search = registry.get("search_slots")
    return search.view(frame.shown(result.data, search.references))


def test_a_slot_reference_becomes_the_exact_hold_request(tools, booking_api):
    registry, ctx = tools
    frame = Frame()
    shown = searched(registry, ctx, frame)
    slot_ids = booking_api.slot_ids(DATE)
    assert shown == {
        "date": DATE,
        "slots": [
            {"id": "slot#1", "time": "09:00", "room": "Room A"},
            {"id": "slot#2", "time": "10:30", "room": "Room B"},
            {"id": "slot#3", "time": "14:00", "room": "Room A"},
        ],
    }

    hold = registry.get("hold_slot")
    arguments, missing = frame.inputs({"slot_id": "slot#2"}, hold.depends_on, hold.reference_inputs)
    assert (arguments, missing) == ({"slot_id": slot_ids[1]}, [])
    call = ToolCall("c2", "hold_slot", arguments)
    prepared = registry.prepare(call, ctx)
    assert prepared.to_dict() == {
        "method": "POST",
        "url": f"{booking_api.url}/holds",
        "headers": [
            ["X-API-Key", "***"],
            ["Idempotency-Key", "9:c2"],
            ["Content-Type", "application/json"],
        ],
        "body": f'{{"slot_id":"{slot_ids[1]}"}}',
        "credential_header": "X-API-Key",
    }

    result = async_to_sync(registry.execute)(replace(call, prepared=prepared), ctx)
    assert result.error is None, result.error
    [received] = booking_api.requests_to("POST", "/holds")
    assert received.body == f'{{"slot_id":"{slot_ids[1]}"}}'.encode()
    assert received.header("X-API-Key") == booking_api.api_key
    assert received.header("Idempotency-Key") == "9:c2"


@pytest.mark.parametrize(
    ("given", "refusal"),
    [
        pytest.param(
            "raw", "'slot_id' takes a slot reference such as 'slot#1', as a tool's result "
            "showed it; ids cannot be given directly", id="the-real-id",
        ),
        pytest.param(
            "slot#7", "unknown reference 'slot#7': use one a tool's result showed in this "
            "conversation", id="an-invented-token",
        ),
        pytest.param(
            "hold#1", "'slot_id' takes a slot reference (slot#1), not 'hold#1'",
            id="another-kind",
        ),
    ],
)  # fmt: skip
def test_a_slot_the_model_did_not_see_is_refused_before_any_request(
    tools, booking_api, given, refusal
):
    registry, ctx = tools
    frame = Frame()
    searched(registry, ctx, frame)
    hold = registry.get("hold_slot")
    value = booking_api.slot_ids(DATE)[1] if given == "raw" else given
    with pytest.raises(FrameError) as refused:
        frame.inputs({"slot_id": value}, hold.depends_on, hold.reference_inputs)
    assert str(refused.value) == refusal


def test_the_hold_id_is_the_hold_s_whatever_the_model_sends(tools, booking_api):
    registry, ctx = tools
    confirm = registry.get("confirm_booking")
    frame = Frame()
    _, missing = frame.inputs({"name": "Ada"}, confirm.depends_on, confirm.reference_inputs)
    assert [(name, source.tool) for name, source in missing] == [("hold_id", "hold_slot")]

    frame.record("hold_slot", {"id": "HLD-REAL", "slot_id": "SLT-1", "expires_at": "soon"})
    arguments, missing = frame.inputs(
        {"name": "Ada Lovelace", "hold_id": "HLD-INVENTED"},
        confirm.depends_on,
        confirm.reference_inputs,
    )
    assert (arguments, missing) == ({"name": "Ada Lovelace", "hold_id": "HLD-REAL"}, [])
    prepared = registry.prepare(ToolCall("c3", "confirm_booking", arguments), ctx)
    assert prepared.body == '{"name":"Ada Lovelace","hold_id":"HLD-REAL"}'
    assert booking_api.requests_to("POST", "/bookings") == []  # preparing sends nothing
