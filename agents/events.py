"""Run events, read: stored append-only with a sequence number and published live on Redis
by the recorder (agents/run_writer.py), followed here.

`iter_run_events(run, after_seq)` is the single source for every streaming endpoint: it
subscribes first, replays what is stored after `after_seq`, then follows live events
(skipping any it already replayed) until the run reaches a terminal event.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import redis
import redis.asyncio
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection

from agentplatform.versions import shared_redis
from agents.models import Run, RunEvent

TERMINAL_EVENTS = frozenset({"run.completed", "run.failed", "run.cancelled"})


def channel(run: Run) -> str:
    return f"ap:run:{run.pk}:{run.correlation_id}:events"


def publisher() -> redis.Redis:
    return shared_redis()


async def iter_run_events(
    run: Run, after_seq: int = 0, *, heartbeat_s: float | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Stored events after `after_seq`, then live ones, until the run ends. With
    `heartbeat_s`, yields {"type": "heartbeat"} when nothing happened for that long."""
    client = redis.asyncio.Redis.from_url(settings.REDIS_URL)
    pubsub = client.pubsub()
    await pubsub.subscribe(channel(run))  # before replay: nothing falls in between
    try:
        last = after_seq
        stored = await stream_read(_stored_after)(run.pk, after_seq)
        for event in stored:
            last = event["seq"]
            yield event
            if event["type"] in TERMINAL_EVENTS:
                return
        if await stream_read(_is_terminal)(run.pk):
            for event in await stream_read(_stored_after)(run.pk, last):
                yield event  # whatever landed between the replay and this check
            return
        quiet_since = time.monotonic()
        while True:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if message is None:
                if heartbeat_s is not None and time.monotonic() - quiet_since >= heartbeat_s:
                    quiet_since = time.monotonic()
                    yield {"type": "heartbeat"}
                if await stream_read(_ended_after)(run.pk, last):
                    for event in await stream_read(_stored_after)(run.pk, last):
                        yield event
                    return
                continue
            event = json.loads(message["data"])
            if event["seq"] <= last:
                continue  # already replayed
            if event["seq"] > last + 1:  # missed some (e.g. published before subscribe)
                for missing in await stream_read(_stored_after)(run.pk, last):
                    if missing["seq"] >= event["seq"]:
                        break
                    last = missing["seq"]
                    yield missing
            last = event["seq"]
            quiet_since = time.monotonic()
            yield event
            if event["type"] in TERMINAL_EVENTS:
                return
    finally:
        await pubsub.unsubscribe()
        await pubsub.aclose()
        await client.aclose()


def stream_read(function):
    """A brief database read for an open stream: on any free thread (a stream keeps none of
    its own; see agentplatform.asgi_handler), the connection given back right after."""
    return sync_to_async(_released(function), thread_sensitive=False)


def _released(function):
    """Run `function` and give its database connection back: an open stream waits for
    minutes, and must not hold one of the server's connections while it does."""

    def call(*args):
        try:
            return function(*args)
        finally:
            connection.close()

    return call


def _stored_after(run_id: int, after_seq: int) -> list[dict[str, Any]]:
    rows = RunEvent.objects.filter(run_id=run_id, seq__gt=after_seq).order_by("seq")
    return [{"seq": r.seq, "type": r.type, "payload": r.payload} for r in rows]


def _is_terminal(run_id: int) -> bool:
    return Run.objects.get(pk=run_id).is_terminal


def _ended_after(run_id: int, last: int) -> bool:
    """A quiet second: did the run end with events we have not seen (missed publishes)?"""
    return RunEvent.objects.filter(run_id=run_id, seq__gt=last, type__in=TERMINAL_EVENTS).exists()
