"""The booking example end to end in Chromium: bob asks the booking agent (imported from
docs/examples/booking.yaml) for a slot; the model (the local fake provider, OpenAI wire)
searches, holds slot#2 and asks to confirm; the chat's approval card shows the exact POST
/bookings request, its API key masked; bob approves; the fake booking API receives exactly
those bytes and the booking is confirmed. Runs execute on the session's Celery worker."""

from __future__ import annotations

import json

import pytest

from agents.models import Approval, Run
from agents.runs.confirmation import request_text
from tests.booking.example import DATE, install_example
from tests.fakes.fixtures import booking_api_fixture
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)

booking_api = pytest.fixture(name="booking_api")(booking_api_fixture)


def test_a_person_books_a_slot_approving_the_exact_request(
    trio, connection, booking_api, provider_server, celery_worker_process, tab, tmp_path
):
    install_example(trio.acme, booking_api, tmp_path)  # the worker allows loopback egress
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("call_s", "search_slots", json.dumps({"date": DATE}))]),
        ToolCallReply([ToolCall("call_h", "hold_slot", '{"slot_id": "slot#2"}')]),
        ToolCallReply(
            [ToolCall("call_b", "confirm_booking", '{"name": "Ada Lovelace"}')],
            text="I am holding 10:30 in Room B. Please approve the booking.",
        ),
        TextReply("Booked: **10:30** in Room B for Ada Lovelace."),
    )
    tab.login("bob")
    tab.goto("/t/acme/chat/?agent=booking")
    page = tab.page
    assert page.get_by_label("Chat with").input_value() == "agent:booking"
    field = page.get_by_label("Message")
    field.fill(f"Book the 10:30 slot on {DATE} for Ada Lovelace.")
    field.press("Enter")
    page.wait_for_url(lambda url: url.rstrip("/").split("/")[-1].isdigit())

    # The search's card shows the slots as the model saw them: references, not ids.
    search = page.locator(".tool-card.done", has_text="search_slots")
    search.wait_for()
    search.locator("summary").click()
    assert "slot#2" in search.text_content()

    # The approval card: the exact request approving sends, the key shown as ***.
    card = page.locator(".approval-card", has_text="confirm_booking")
    card.wait_for()
    approval = Approval.objects.get(run__conversation__owner_user=trio.bob)
    [held] = booking_api.state.holds.values()
    shown = card.locator("pre.http-request").text_content()
    assert shown == request_text(approval.prepared_request)
    assert f"POST {booking_api.url}/bookings" in shown and "X-API-Key: ***" in shown
    assert json.dumps({"name": "Ada Lovelace", "hold_id": held["id"]}, separators=(",", ":")) in (
        shown
    )
    assert booking_api.api_key not in page.content()
    assert booking_api.requests_to("POST", "/bookings") == []  # nothing before approval
    tab.screenshot("booking-approval")

    card.get_by_role("button", name="Approve").click()
    page.locator(".approval-card.approved", has_text="Approved by bob").wait_for()
    page.locator(".segment:not(.streaming) strong", has_text="10:30").wait_for(timeout=15_000)
    page.get_by_role("button", name="Regenerate").wait_for()  # the run's end, committed
    run = Run.objects.get(pk=approval.run_id)
    assert run.status == "succeeded", run.error
    [received] = booking_api.requests_to("POST", "/bookings")
    assert received.body == approval.prepared_request["body"].encode("utf-8")
    assert received.header("X-API-Key") == booking_api.api_key
    [booking] = booking_api.state.bookings.values()
    assert (booking["status"], booking["slot_id"]) == ("confirmed", booking_api.slot_ids(DATE)[1])
    tab.screenshot("booking")
    tab.assert_clean()
