"""Run events: persisted append-only with a sequence number, published live on Redis.

`iter_run_events(run, after_seq)` is the single source for every streaming endpoint: it
subscribes first, replays what is stored after `after_seq`, then follows live events
(skipping any it already replayed) until the run reaches a terminal event.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection

from agentplatform.versions import shared_redis
from agents.models import Run, RunEvent

TERMINAL_EVENTS = frozenset({"run.completed", "run.failed", "run.cancelled"})
DELTA_FLUSH_S = 0.05  # text deltas are coalesced into one stored event per 50 ms


def channel(run: Run) -> str:
    return f"ap:run:{run.pk}:{run.correlation_id}:events"


def publisher() -> redis.Redis:
    return shared_redis()


@dataclass(frozen=True)
class StoredEvent:
    seq: int
    type: str
    payload: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "type": self.type, "payload": self.payload}


class EventConflict(Exception):
    """This sequence number is taken: another worker owns the run now."""


def append_event(run: Run, seq: int, type: str, payload: dict[str, Any]) -> StoredEvent:
    """Store one event and publish it. One INSERT and one PUBLISH."""
    # One statement, no transaction block: a taken seq inserts nothing instead of failing.
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {RunEvent._meta.db_table} "  # noqa: S608 (our own table name)
            "(tenant_id, run_id, seq, type, payload, created_at) "
            "VALUES (%s, %s, %s, %s, %s::jsonb, NOW()) ON CONFLICT (run_id, seq) DO NOTHING",
            [run.tenant_id, run.pk, seq, type, json.dumps(payload, default=str)],
        )
        if cursor.rowcount == 0:
            raise EventConflict(f"run {run.pk} event {seq} exists")
    event = StoredEvent(seq, type, payload)
    publisher().publish(channel(run), json.dumps(event.as_dict(), default=str))
    return event


class RunEventSink:
    """The agent loop's sink for one run: hands its events, numbered, to the run's writer
    (which stores, then publishes them), coalescing bursts of text deltas."""

    def __init__(self, writer, *, wants_text_deltas: bool = True) -> None:
        self.writer = writer  # agents.run_writer.RunWriter
        self.wants_text_deltas = wants_text_deltas
        self._deltas: list[str] = []
        self._deltas_since = 0.0
        self._last_delta_write = 0.0

    @property
    def seq(self) -> int:
        return self.writer.seq

    async def emit(self, type: str, payload: dict[str, Any]) -> None:
        if type == "text.delta":
            now = time.monotonic()
            if not self._deltas and now - self._last_delta_write >= DELTA_FLUSH_S:
                # Leading edge: the first token of a burst goes out at once (time to first
                # token); the ones right behind it are coalesced.
                self._last_delta_write = now
                self.writer.event("text.delta", {"text": payload["text"]})
                return
            if not self._deltas:
                self._deltas_since = now
            self._deltas.append(payload["text"])
            if now - self._deltas_since >= DELTA_FLUSH_S:
                await self.flush()
            return
        await self.flush()
        self.writer.event(type, payload)

    async def flush(self) -> None:
        """Hand over the coalesced deltas (they are written with the next write)."""
        if self._deltas:
            text, self._deltas = "".join(self._deltas), []
            self._last_delta_write = time.monotonic()
            self.writer.event("text.delta", {"text": text})


def next_seq(run_id: int) -> int:
    last = RunEvent.objects.filter(run_id=run_id).order_by("-seq").values_list("seq", flat=True)
    return (last.first() or 0) + 1


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
