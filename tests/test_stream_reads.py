"""The database steps of `/v1` requests (base/stream_reads.py): on a few threads the
requests of the /v1 handler share (`RequestLanes`), each request's steps on one of them."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.conf import settings

from agentplatform.asgi_handler import StreamingASGIHandler
from base.stream_reads import RequestLanes, brief
from tenancy import services as tenancy


def test_requests_share_a_few_threads_for_their_brief_steps():
    lanes = RequestLanes(2)
    step = brief(lambda: threading.current_thread().name)

    async def request() -> tuple[str, str]:
        with lanes.held():
            first = await step()
            await asyncio.sleep(0)  # (the others take their turns)
            return first, await step()

    async def many() -> list[tuple[str, str]]:
        return await asyncio.gather(*(request() for _ in range(10)))

    answers = asyncio.run(many())
    assert all(first == second for first, second in answers)  # a request keeps its thread
    assert {first for first, _ in answers} == {"request-0_0", "request-1_0"}


def get(app, path: str, key: str) -> int:
    """The status of a GET through the ASGI app `app`."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000),
        "headers": [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {key}".encode())],
    }  # fmt: skip
    sent: list[dict] = []

    async def talk() -> None:
        requested = [{"type": "http.request", "body": b"", "more_body": False}]

        async def receive():
            if requested:
                return requested.pop()
            await asyncio.sleep(3600)

        async def send(message):
            sent.append(message)

        await app(scope, receive, send)

    asyncio.run(talk())
    return sent[0]["status"]


@pytest.mark.django_db(transaction=True)
def test_the_v1_handler_makes_its_requests_database_steps_on_its_lanes(trio):
    """A key seen for the first time is checked in a database step (`brief`): on one of the
    handler's lanes, which the next request uses again, not on a thread of its own."""
    handler = StreamingASGIHandler(settings.API_MIDDLEWARE, views_release_connections=True)
    before = set(threading.enumerate())

    def lanes() -> set[threading.Thread]:
        return {t for t in set(threading.enumerate()) - before if t.name.startswith("request-")}

    for name in ("one", "two"):
        key = tenancy.api_key_create(tenant=trio.acme, name=name, scopes=["read"])[1]
        assert get(handler, "/v1/models", key) == 200
        if name == "one":
            used = lanes()
            assert len(used) == 1
    assert lanes() == used
