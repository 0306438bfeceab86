"""Run events: persisted append-only with a sequence number, published live on Redis.

Writing them is here; following a run (replay, then live) is `agents.run_reader`'s.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import redis
from django.db import connection

from agentplatform.stream_reads import stream_read  # noqa: F401 (agents.tool_runs imports it here)
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
