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
import math
import select
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

import psycopg
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, connections
from django.db.models.fields import NOT_PROVIDED
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
    """The field's default as a literal, for a default that is the same for every row."""
    per_row = (
        field.generated
        or field.db_default is not NOT_PROVIDED
        or getattr(field, "auto_now", False)
        or getattr(field, "auto_now_add", False)
        or (field.has_default() and callable(field.default) and field.default not in (dict, list))
    )
    if per_row:
        raise ImproperlyConfigured(
            f"Run.{field.name} has a default computed per row: add it to run_records._VARYING"
        )
    value = field.get_db_prep_save(getattr(template, field.attname), connection)
    literal = sql.Literal(value).as_string().replace("%", "%%")  # not a placeholder
    return f"{literal}::{field.db_type(connection)}"


def storable_json(value: Any) -> str:
    """JSON text that PostgreSQL stores as jsonb: no NUL character (jsonb refuses \\u0000)
    and no NaN or Infinity (not JSON); such values become text. The usual case costs one
    json.dumps."""
    try:
        text = json.dumps(value, default=str, allow_nan=False)
    except ValueError:
        text = None
    if text is None or "\\u0000" in text:
        text = json.dumps(_storable(value), default=str)
    return text


def storable_text(text: str) -> str:
    """Text that PostgreSQL stores: no NUL character."""
    return text.replace("\x00", "\ufffd")


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {storable_text(str(k)): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value


def _parameters(records: list[CallRecord]) -> list:
    columns = [list(values) for values in zip(*(r.row() for r in records), strict=True)]
    events: list[list] = [[], [], [], []]
    for record in records:
        for seq, (type, payload) in enumerate(record.events, start=1):
            for values, value in zip(
                events,
                (record.correlation_id, seq, type, storable_json(payload)),
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
    one WAL flush for all of them, no added wait when calls come one at a time. One writer
    task writes everything pending, so a caller that goes away (a client disconnecting
    cancels its call) neither stops the write nor strands the others waiting. Its own
    connection (autocommit) lives on the loop: no thread, no handover of the GIL; it is
    closed after IDLE_S without writes."""

    def __init__(self) -> None:
        self.pending: list[tuple[CallRecord, asyncio.Future]] = []
        self.writer: asyncio.Task | None = None
        self.connection: psycopg.AsyncConnection | None = None
        self.last_write = 0.0
        self.idle_check: asyncio.TimerHandle | None = None

    async def write(self, record: CallRecord) -> int:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self.pending.append((record, done))
        if self.writer is None or self.writer.done():
            self.writer = loop.create_task(self._write_pending())
        return await done

    async def _write_pending(self) -> None:
        batch: list = []
        try:
            while self.pending:
                batch, self.pending = self.pending, []
                await self._write_batch(batch)
        finally:  # the writer itself cancelled (the loop ends): nobody waits forever
            _settle(batch + self.pending, error=RuntimeError("the record writer stopped"))

    async def _write_batch(self, batch: list[tuple[CallRecord, asyncio.Future]]) -> None:
        try:
            ids = await self._insert([record for record, _ in batch])
        except (psycopg.DataError, psycopg.IntegrityError) as exc:  # e.g. its API key deleted
            if len(batch) == 1:
                _settle(batch, error=exc)
                return
            for item in batch:  # a record the database refuses fails alone
                await self._write_batch([item])
        except Exception as exc:
            _settle(batch, error=exc)
        else:
            _settle(batch, ids=ids)

    async def _insert(self, records: list[CallRecord]) -> list[int]:
        loop = asyncio.get_running_loop()
        self.last_write = loop.time()
        if self.connection is None or self.connection.closed or _closed_by_server(self.connection):
            if self.connection is not None:
                await self.connection.close()
            self.connection = await psycopg.AsyncConnection.connect(
                **_connection_params(), autocommit=True
            )
            if self.idle_check is None:
                self.idle_check = loop.call_later(IDLE_S, self._close_when_idle)
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
        busy = self.writer is not None and not self.writer.done()
        if idle < IDLE_S or busy:
            self.idle_check = loop.call_later(max(IDLE_S - idle, 1.0), self._close_when_idle)
        else:
            self.idle_check = None
            self.writer = loop.create_task(self._close_idle())  # in the writer's place

    async def _close_idle(self) -> None:
        await self._disconnect()
        await self._write_pending()  # records that came meanwhile (on a new connection)

    async def close(self) -> None:
        if self.writer is not None:
            await asyncio.wait([self.writer])
        await self._disconnect()

    async def _disconnect(self) -> None:
        if self.connection is not None:
            connection, self.connection = self.connection, None
            await connection.close()


def _settle(batch: list[tuple[CallRecord, asyncio.Future]], *, ids=None, error=None) -> None:
    """Answer each waiting caller (one that went away has a cancelled future: skipped)."""
    for index, (_, future) in enumerate(batch):
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(ids[index])


# Not weak: a group refers to its loop (its locks do), so the loop would never be collected
# either way; uvicorn's loop lives as long as the process, and short-lived loops `aclose`.
_groups: dict[asyncio.AbstractEventLoop, _GroupCommit] = {}


def _connection_params() -> dict[str, Any]:
    """Django's parameters for its default database, without its sync cursor and adapters.

    Without Django's `assume_role` either: this connection writes as the owner role, outside
    row-level security, because one batch holds the calls of several tenants (one statement
    per tenant, or a setting per batch, would undo the grouping this module is for). What
    it writes is not chosen by a caller: each record's tenant is its authenticated API
    key's (agents.tool_runs builds it), and the events take their run's tenant."""
    params = connections["default"].get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.setdefault("application_name", APPLICATION_NAME)
    params.setdefault("connect_timeout", 5)  # calls wait for this connection: not for long
    return params


def _closed_by_server(connection: psycopg.AsyncConnection) -> bool:
    """An idle connection with something to read has been told goodbye (a restart, a
    terminated backend): better a new connection than a failed write."""
    poller = select.poll()  # not select.select: it fails on descriptors above 1023
    poller.register(connection.fileno(), select.POLLIN)
    return bool(poller.poll(0))
