"""The fake booking API (tests/fakes/booking_api.py) answers as the booking example expects:
its own ids only, the API key required, every request recorded byte for byte."""

from __future__ import annotations

import json

import httpx2
import pytest

from tests.fakes.booking_api import API_KEY_HEADER, BookingApi


@pytest.fixture
def api():
    with BookingApi() as api:
        yield api


def call(api: BookingApi, method: str, path: str, body: object = None, key: str | None = None):
    content = None if body is None else json.dumps(body).encode()
    headers = {API_KEY_HEADER: api.api_key if key is None else key}
    return httpx2.request(method, api.url + path, content=content, headers=headers)


def test_search_hold_and_book_take_the_ids_it_issued(api):
    slots = call(api, "GET", "/slots?date=2026-12-03").json()
    assert [(s["time"], s["room"]) for s in slots["slots"]] == [
        ("09:00", "Room A"), ("10:30", "Room B"), ("14:00", "Room A"),
    ]  # fmt: skip
    ids = [s["id"] for s in slots["slots"]]
    assert all(i.startswith("SLT-") for i in ids) and api.slot_ids("2026-12-03") == ids
    assert [s["id"] for s in call(api, "GET", "/slots?date=2026-12-03").json()["slots"]] == ids

    hold = call(api, "POST", "/holds", {"slot_id": ids[1]})
    assert hold.status_code == 201 and hold.json()["slot_id"] == ids[1]
    booking = call(api, "POST", "/bookings", {"hold_id": hold.json()["id"], "name": "Ada"})
    assert booking.status_code == 201
    assert booking.json() | {"id": "BKG"} == {
        "id": "BKG", "status": "confirmed", "hold_id": hold.json()["id"], "slot_id": ids[1],
        "name": "Ada",
    }  # fmt: skip
    assert booking.json()["id"].startswith("BKG-")


def test_ids_it_did_not_issue_are_404_and_reuse_is_409(api):
    ids = [s["id"] for s in call(api, "GET", "/slots?date=2026-12-03").json()["slots"]]
    assert call(api, "POST", "/holds", {"slot_id": "SLT-INVENTED"}).status_code == 404
    assert call(api, "POST", "/bookings", {"hold_id": "HLD-1", "name": "A"}).json() == {
        "error": "unknown hold 'HLD-1'"
    }
    assert call(api, "POST", "/holds", {"slot_id": ids[0]}).status_code == 201
    assert call(api, "POST", "/holds", {"slot_id": ids[0]}).status_code == 409


def test_it_needs_the_key_and_records_every_request_as_received(api):
    refused = call(api, "POST", "/holds", {"slot_id": "x"}, key="wrong")
    assert refused.status_code == 401 and api.state.holds == {}
    [received] = api.received
    assert (received.method, received.path) == ("POST", "/holds")
    assert received.body == b'{"slot_id": "x"}' and received.header("x-api-key") == "wrong"
    assert api.requests_to("POST", "/holds") == [received]
