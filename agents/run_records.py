"""The records of direct tool calls, written fast: any number of finished calls (each a Run
and its events) in one statement of fixed text, and, on an event loop (the MCP server),
grouped into as few statements as possible on an async connection of the loop's own.

Why not the ORM here: this write is on the path of every MCP `tools/call`. Building Run
instances and compiling their INSERT cost more than the call itself, and a write on a
thread's connection makes each call wait for the event loop's thread to hand over the GIL
(up to the 5 ms switch interval, several times per statement) while that thread is busy
serving the other calls. Columns a tool call never sets take their model defaults, read
from the model once, so the statement follows the model as it changes.
"""

from __future__ import annotations

import asyncio
import json
import select
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

import psycopg
from django.db import connection, connections
from psycopg import sql

from agents.models import Run, RunEvent

APPLICATION_NAME = "agentplatform-run-records"
IDLE_S = 60.0  # an async connection unused this long is closed (a new one when needed)


@dataclass(frozen=True)
class CallRecord:
    """One finished (or failed) direct tool call, as the Run row and events to store."""

    tenant_id: int
    tool_name: str
    input: str
    status: str
    output: str
    error: str
    correlation_id: str  # unique per call: it pairs the inserted runs with their events
    started_at: datetime
    finished_at: datetime
    initiated_by_user_id: int | None
    initiated_by_api_key_id: int | None
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def row(self) -> tuple:
        """The values of `_VARYING`, in its order."""
        return (
            self.tenant_id, self.tool_name, self.input, self.status, self.output, self.error,
            self.correlation_id, self.started_at, self.finished_at, len(self.events),
            self.initiated_by_user_id, self.initiated_by_api_key_id, self.finished_at,
        )  # fmt: skip


_VARYING = (
    "tenant_id", "tool_name", "input", "status", "output", "error", "correlation_id",
    "started_at", "finished_at", "last_seq", "initiated_by_user_id",
    "initiated_by_api_key_id", "created_at",
)  # fmt: skip


@lru_cache(maxsize=1)
def _statement() -> str:
    """The INSERT of runs and their events: the columns of `_VARYING` from arrays (one
    element per call), every other column its default as a literal."""
    fields = [f for f in Run._meta.local_concrete_fields if not f.primary_key]
    by_column = {f.column: f for f in fields}
    assert set(_VARYING) <= set(by_column), "Run lost a column this statement writes"
    template = Run()  # its attributes hold every field's default
    values = ", ".join(
        f"u.{f.column}" if f.column in _VARYING else _default(f, template) for f in fields
    )
    arrays = ", ".join(f"%s::{by_column[c].db_type(connection)}[]" for c in _VARYING)
    return (
        f"WITH run AS (INSERT INTO {Run._meta.db_table} "  # noqa: S608 (our names, literals)
        f"({', '.join(f.column for f in fields)}) "
        f"SELECT {values} FROM unnest({arrays}) AS u({', '.join(_VARYING)}) "
        "RETURNING id, tenant_id, correlation_id), "
        f"added AS (INSERT INTO {RunEvent._meta.db_table} "
        "(tenant_id, run_id, seq, type, payload, created_at) "
        "SELECT run.tenant_id, run.id, e.seq, e.type, e.payload::jsonb, NOW() "
        "FROM unnest(%s::varchar[], %s::integer[], %s::varchar[], %s::text[]) "
        "AS e(correlation_id, seq, type, payload) JOIN run USING (correlation_id)) "
        "SELECT correlation_id, id FROM run"
    )


def _default(field, template: Run) -> str:
    value = field.get_db_prep_save(getattr(template, field.attname), connection)
    return f"{sql.Literal(value).as_string()}::{field.db_type(connection)}"


def _parameters(records: list[CallRecord]) -> list:
    columns = [list(values) for values in zip(*(r.row() for r in records), strict=True)]
    events: list[list] = [[], [], [], []]
    for record in records:
        for seq, (type, payload) in enumerate(record.events, start=1):
            for values, value in zip(
                events,
                (record.correlation_id, seq, type, json.dumps(payload, default=str)),
                strict=True,
            ):
                values.append(value)
    return [*columns, *events]


def write(records: list[CallRecord]) -> list[int]:
    """Store the records on Django's connection (in its transaction, if any); their run ids."""
    with connection.cursor() as cursor:
        cursor.execute(_statement(), _parameters(records))
        ids = dict(cursor.fetchall())
    return [ids[r.correlation_id] for r in records]


async def awrite(record: CallRecord) -> int:
    """Store the record from async code: committed when this returns; its run id."""
    loop = asyncio.get_running_loop()
    group = _groups.get(loop)
    if group is None:
        group = _groups[loop] = _GroupCommit()
    return await group.write(record)


async def aclose() -> None:
    """Close this loop's connection now; for a loop about to end (a test's)."""
    group = _groups.pop(asyncio.get_running_loop(), None)
    if group is not None:
        await group.close()


class _GroupCommit:
    """Records arriving while a statement is in flight go in the next one: one round trip and
    one WAL flush for all of them, no added wait when calls come one at a time. Its own
    connection (autocommit) lives on the loop: no thread, no handover of the GIL; it is
    closed after IDLE_S without writes."""

    def __init__(self) -> None:
        self.pending: list[tuple[CallRecord, asyncio.Future]] = []
        self.lock = asyncio.Lock()
        self.connection: psycopg.AsyncConnection | None = None
        self.last_write = 0.0
        self.closing: asyncio.Task | None = None

    async def write(self, record: CallRecord) -> int:
        done = asyncio.get_running_loop().create_future()
        self.pending.append((record, done))
        async with self.lock:
            if not done.done():  # not written by the previous holder: write all waiting
                batch, self.pending = self.pending, []
                try:
                    ids = await self._insert([r for r, _ in batch])
                except Exception as exc:
                    for _, future in batch:
                        future.set_exception(exc)
                else:
                    for (_, future), run_id in zip(batch, ids, strict=True):
                        future.set_result(run_id)
        return await done

    async def _insert(self, records: list[CallRecord]) -> list[int]:
        loop = asyncio.get_running_loop()
        self.last_write = loop.time()
        if self.connection is None or self.connection.closed or _closed_by_server(self.connection):
            if self.connection is not None:
                await self.connection.close()
            self.connection = await psycopg.AsyncConnection.connect(
                **_connection_params(), autocommit=True
            )
            loop.call_later(IDLE_S, self._close_when_idle)
        try:
            cursor = await self.connection.execute(_statement(), _parameters(records))
            ids = dict(await cursor.fetchall())
        except psycopg.OperationalError:  # a broken connection: a new one next time
            await self.connection.close()
            raise
        return [ids[r.correlation_id] for r in records]

    def _close_when_idle(self) -> None:
        loop = asyncio.get_running_loop()
        idle = loop.time() - self.last_write
        if idle < IDLE_S or self.lock.locked():
            loop.call_later(max(IDLE_S - idle, 1.0), self._close_when_idle)
        else:
            self.closing = loop.create_task(self.close())

    async def close(self) -> None:
        async with self.lock:
            if self.connection is not None:
                await self.connection.close()
                self.connection = None


# Not weak: a group refers to its loop (its locks do), so the loop would never be collected
# either way; uvicorn's loop lives as long as the process, and short-lived loops `aclose`.
_groups: dict[asyncio.AbstractEventLoop, _GroupCommit] = {}


def _connection_params() -> dict[str, Any]:
    """Django's parameters for its default database, without its sync cursor and adapters."""
    params = connections["default"].get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.setdefault("application_name", APPLICATION_NAME)
    return params


def _closed_by_server(connection: psycopg.AsyncConnection) -> bool:
    """An idle connection with something to read has been told goodbye (a restart, a
    terminated backend): better a new connection than a failed write."""
    readable, _, _ = select.select([connection.fileno()], [], [], 0)
    return bool(readable)
