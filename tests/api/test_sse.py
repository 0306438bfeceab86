"""SSE streams of runs: live order, resuming with Last-Event-ID, heartbeats, disconnects.

Streams are read through Django's AsyncClient (the async iterator the ASGI handler would
send), and over real HTTP from a uvicorn server for the disconnect of a real client.
"""

# Fixtures imported from other modules are used as parameters by name:

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import ExitStack, aclosing
from dataclasses import dataclass

import httpx2
import psutil
import pytest
import redis
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from django.test import AsyncClient, Client

from agents.models import Run, RunEvent
from agents.runs import run_start
from agents.runs.channels import channel
from tenancy import services as tenancy
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.live_server import listens_on

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Message:
    id: int | None = None
    event: str | None = None
    data: object = None
    comment: str | None = None
    retry: int | None = None


def parse(raw: str) -> Message:
    message = Message()
    for line in raw.split("\n"):
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "":
            message.comment = value
        elif name == "id":
            message.id = int(value)
        elif name == "event":
            message.event = value
        elif name == "data":
            message.data = json.loads(value)
        elif name == "retry":
            message.retry = int(value)
    return message


async def messages(chunks: AsyncIterator[bytes]) -> AsyncIterator[Message]:
    buffer = ""
    async for chunk in chunks:
        buffer += chunk.decode()
        while "\n\n" in buffer:
            raw, buffer = buffer.split("\n\n", 1)
            yield parse(raw)


@pytest.fixture
def key(trio) -> str:
    _, full = tenancy.api_key_create(tenant=trio.acme, name="ci", scopes=["read", "run"])
    return full


def sse_headers(key: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Accept": "text/event-stream", **extra}


def script_two_rounds(provider_server, delay_s: float = 0.2) -> None:
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "calculator", '{"expression": "6*7"}')], delay_s=delay_s),
        TextReply("It is 42.", delay_s=delay_s),
    )


def subscribers(run: Run) -> int:
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    try:
        return dict(client.pubsub_numsub(channel(run)))[channel(run).encode()]
    finally:
        client.close()


def wait_for_subscribers(run: Run, count: int, timeout: float = 5) -> int:
    deadline = time.monotonic() + timeout
    while (found := subscribers(run)) != count and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def wait_for_status(run: Run, status: str, timeout: float = 5) -> str:
    """The stream ends with the terminal event; the worker records the row just after."""
    deadline = time.monotonic() + timeout
    while (found := Run.objects.get(pk=run.pk).status) != status and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def stored(run: Run) -> list[tuple[int, str, dict]]:
    return [(e.seq, e.type, e.payload) for e in RunEvent.objects.filter(run=run).order_by("seq")]


def test_events_arrive_in_order_while_the_run_progresses(
    trio, agent, key, provider_server, celery_worker_process
):
    # Each model answer takes 0.5 s: the stream has that long to deliver the first round's
    # events before the model is asked again.
    script_two_rounds(provider_server, delay_s=0.5)
    Client().get("/healthz")  # the URLconf imported: the stream opens before the first round
    run = run_start(tenant=trio.acme, agent=agent, input="6*7?")
    status = sync_to_async(lambda: Run.objects.get(pk=run.pk).status)

    def model_requests() -> int:
        return len(provider_server.requests_to("/v1/chat/completions"))

    async def watch() -> list[tuple[Message, str, int]]:
        response = await AsyncClient().get(
            f"/api/v1/runs/{run.pk}/events", headers=sse_headers(key)
        )
        assert response.status_code == 200
        assert response["Content-Type"] == "text/event-stream"
        assert response["Cache-Control"] == "no-cache"
        seen = []
        async for message in messages(response.streaming_content):
            if message.event is not None:
                seen.append((message, await status(), model_requests()))
        return seen

    seen = asyncio.run(asyncio.wait_for(watch(), timeout=15))
    seqs = [m.id for m, _, _ in seen]
    assert seqs == list(range(1, len(seqs) + 1))
    first, last = seen[0], seen[-1]
    assert first[0].event == "run.started" and first[1] == "running"  # live, not a replay
    assert last[0].event == "run.completed" and last[0].data["output"] == "It is 42."
    assert first[2] <= 1 and last[2] == 2  # the first round's events came before the second
    types = [m.event for m, _, _ in seen]
    assert types.index("tool.completed") < types.index("text.delta")
    assert [(m.id, m.event, m.data) for m, _, _ in seen] == stored(run)


def test_reconnecting_with_last_event_id_resumes_without_gaps_or_duplicates(
    trio, agent, key, provider_server, celery_worker_process
):
    script_two_rounds(provider_server)
    run = run_start(tenant=trio.acme, agent=agent, input="6*7?")
    url = f"/api/v1/runs/{run.pk}/events"

    async def read(headers: dict[str, str], stop_after: int | None = None) -> list[Message]:
        response = await AsyncClient().get(url, headers=headers)
        got: list[Message] = []
        stream = response.streaming_content
        async with aclosing(messages(stream)) as parsed:
            async for message in parsed:
                if message.event is not None:
                    got.append(message)
                    if len(got) == stop_after:
                        break
        await stream.aclose()  # the client goes away (mid-run when it stopped early)
        return got

    async def both() -> tuple[list[Message], list[Message]]:
        before = await read(sse_headers(key), stop_after=2)
        after = await read(sse_headers(key, **{"Last-Event-ID": str(before[-1].id)}))
        return before, after

    before, after = asyncio.run(asyncio.wait_for(both(), timeout=15))
    assert wait_for_status(run, "succeeded") == "succeeded"
    joined = [(m.id, m.event, m.data) for m in before + after]
    assert joined == stored(run)  # every event once, in order
    assert after[-1].event == "run.completed"

    async def replay(last_id: str) -> list[Message]:
        return await read(sse_headers(key, **{"Last-Event-ID": last_id}))

    assert [m.id for m in asyncio.run(replay("1"))] == [m.id for m in before + after][1:]
    assert asyncio.run(replay(str(after[-1].id))) == []  # finished: ends at once

    async def bad() -> int:
        response = await AsyncClient().get(url, headers=sse_headers(key, **{"Last-Event-ID": "x"}))
        return response.status_code

    assert asyncio.run(bad()) == 400


def test_post_runs_with_stream_true_answers_with_the_runs_stream(
    trio, agent, key, provider_server, celery_worker_process
):
    script_two_rounds(provider_server, delay_s=0.05)

    async def start() -> tuple[int, dict[str, str], list[Message]]:
        response = await AsyncClient().post(
            "/api/v1/runs",
            {"agent": "assistant", "input": "6*7?", "stream": True},
            content_type="application/json",
            headers={"Authorization": f"Bearer {key}"},
        )
        got = [m async for m in messages(response.streaming_content)]
        return response.status_code, dict(response.headers), got

    status, headers, got = asyncio.run(asyncio.wait_for(start(), timeout=15))
    assert status == 201 and headers["Content-Type"] == "text/event-stream"
    run = Run.objects.get(pk=int(headers["X-Run-Id"]))
    assert wait_for_status(run, "succeeded") == "succeeded"
    run.refresh_from_db()
    assert headers["Location"] == f"/api/v1/runs/{run.pk}"
    assert got[0].retry == 3000
    events = [m for m in got if m.event is not None]
    assert [(m.id, m.event, m.data) for m in events] == stored(run)
    text = "".join(m.data["text"] for m in events if m.event == "text.delta")
    assert text == run.output == "It is 42."


def test_heartbeats_keep_a_quiet_stream_open_and_going_away_unsubscribes(
    trio, agent, key, settings
):
    settings.SSE_HEARTBEAT_S = 0.2
    run = run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)  # stays queued

    async def listen() -> tuple[list[Message], int, int]:
        response = await AsyncClient().get(
            f"/api/v1/runs/{run.pk}/events", headers=sse_headers(key)
        )
        stream = messages(response.streaming_content)
        got = [await anext(stream), await anext(stream)]
        while_open = await sync_to_async(wait_for_subscribers)(run, 1)
        reading = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.1)
        reading.cancel()  # what the ASGI handler does when the client disconnects
        with pytest.raises(asyncio.CancelledError):
            await reading
        await stream.aclose()
        after = await sync_to_async(wait_for_subscribers)(run, 0)
        return got, while_open, after

    got, while_open, after = asyncio.run(asyncio.wait_for(listen(), timeout=10))
    assert got[0].retry == 3000 and got[1].comment == "heartbeat"
    assert (while_open, after) == (1, 0)


def test_a_client_disconnect_over_http_ends_the_server_side_stream(trio, agent, key, asgi_server):
    run = run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)  # stays queued
    url = f"{asgi_server}/api/v1/runs/{run.pk}/events"
    with (
        httpx2.Client(timeout=10) as client,
        client.stream("GET", url, headers=sse_headers(key)) as response,
    ):
        assert response.status_code == 200
        chunks = response.iter_bytes()  # kept: dropping it would close the connection now
        assert next(chunks).startswith(b"retry: 3000")
        assert wait_for_subscribers(run, 1) == 1
    # the connection is closed: uvicorn tells Django, which cancels the stream
    assert wait_for_subscribers(run, 0) == 0


def server_process(base_url: str) -> psutil.Process:
    """The live server's process: the one among this test process's descendants that
    listens on its port."""
    port = int(base_url.rsplit(":", 1)[1])
    for child in psutil.Process().children(recursive=True):
        if listens_on(child, port):
            return child
    raise LookupError(f"no server child on port {port}")


def test_open_streams_hold_no_thread_and_no_database_connection(trio, agent, key, asgi_server):
    """Twenty open streams of a quiet run: the server's thread count and its PostgreSQL
    connections stay where they were (each stream waits on the event loop), and the streams
    share one Redis subscription."""
    run = run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)  # stays queued
    url = f"{asgi_server}/api/v1/runs/{run.pk}/events"
    server = server_process(asgi_server)
    with httpx2.Client(timeout=10) as client:  # one request first: the server is warm
        assert client.get(url, headers={"Authorization": f"Bearer {key}"}).status_code == 200
    threads_before = server.num_threads()
    readers = []  # kept: dropping a reader would close its connection
    with ExitStack() as streams, httpx2.Client(timeout=10) as client:
        for _ in range(20):
            response = streams.enter_context(client.stream("GET", url, headers=sse_headers(key)))
            assert response.status_code == 200
            readers.append(response.iter_bytes())
            assert next(readers[-1]).startswith(b"retry: 3000")
        assert wait_for_subscribers(run, 1) == 1  # one subscription for the twenty
        threads_open = server.num_threads()
        backends = server_backends(server)
    assert wait_for_subscribers(run, 0) == 0
    # Not one per stream; the event loop's executor (brief reads) may have grown to its
    # maximum, min(32, cores + 4), while twenty streams started at once.
    assert threads_open <= threads_before + min(32, (os.cpu_count() or 1) + 4)
    assert backends == 0  # the pool's connections are idle and none is held by a stream


def server_backends(server: psutil.Process, timeout: float = 3) -> int:
    """PostgreSQL backends inside a query or a transaction (an idle pooled connection does
    not count), once none is for `timeout`: a stream holding one would hold it all along,
    while another process's query (a worker finishing an earlier test's run) soon ends."""
    from django.db import connection

    deadline = time.monotonic() + timeout
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = '' AND state <> 'idle' AND pid <> pg_backend_pid()"
            )
            busy = cursor.fetchone()[0]
        if busy == 0 or time.monotonic() > deadline:
            return busy
        time.sleep(0.05)
