"""A leased run's writes — its events and its checkpoints — in order, coalesced into as few
database round trips as possible.

Events are numbered when emitted and written soon after, without making the loop wait: a
text delta at once (time to first token), other events within DEFER_S, so that most of them
ride along with the step's checkpoint instead of costing a statement of their own. A
checkpoint waits until it is durable and carries every event emitted before it in the same
statement. Each statement also checks
and renews the lease, so a worker that lost its run writes nothing. Events are published on
Redis after they are stored (one pipelined round trip), never before.

The writer is also where the run's secrets are scrubbed: every event, every Run field and
the outcome (hence the conversation's Message and the approvals) pass `redact` on their
way to the database and Redis, whatever a remote server, a tool or a model echoed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection

from agents.events import EventConflict, StoredEvent, channel, publisher
from agents.models import Run, RunEvent
from agents.runtime.spec import RunOutcome
from tools.runtime.context import NoSecrets, SecretAccessor
from tools.runtime.tool import ToolCall

IMMEDIATE = frozenset({"text.delta"})
DEFER_S = 0.02


class LeaseLost(Exception):
    """Another worker owns this run now; stop without writing."""


@dataclass
class Batch:
    """What is waiting to be written: events (JSON already encoded) and Run fields."""

    events: list[tuple[StoredEvent, str]] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.events or self.fields)


class RunWriter:
    def __init__(self, run: Run, owner: str, *, next_seq: int, lease_s: float) -> None:
        self.run, self.owner, self.lease_s = run, owner, lease_s
        self.seq = next_seq - 1
        self._pending = Batch()
        self._lock = asyncio.Lock()  # one write at a time, in emission order
        self._scheduled = False  # a write task is queued (it takes everything pending)
        self._timer: asyncio.TimerHandle | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._secrets: SecretAccessor = NoSecrets()

    def redact_with(self, secrets: SecretAccessor) -> None:
        """Scrub the values of `secrets` (those this run sends anywhere) from all it
        writes from now on; set before the run's first model or tool call."""
        self._secrets = secrets

    def redact(self, value: Any) -> Any:
        """`value` (text or JSON-like data) with each of the run's secrets masked."""
        return self._secrets.redact(value)

    def redacted(self, outcome: RunOutcome) -> RunOutcome:
        """The outcome as finalize stores it (Run fields, Message, approvals)."""
        if not self._secrets:
            return outcome
        return dataclasses.replace(
            outcome,
            output=self.redact(outcome.output),
            structured_output=self.redact(outcome.structured_output),
            error=self.redact(outcome.error),
            awaiting=[ToolCall(c.id, c.name, self.redact(c.arguments)) for c in outcome.awaiting],
        )

    def event(self, type: str, payload: dict[str, Any]) -> None:
        """Number the event and queue it; it is written within the current step."""
        self._raise_if_failed()
        self.seq += 1
        payload = self.redact(payload)
        event = StoredEvent(self.seq, type, payload)
        self._pending.events.append((event, json.dumps(payload, default=str)))
        if type in IMMEDIATE:
            self._write_now()
        elif self._timer is None and not self._scheduled:
            self._timer = asyncio.get_running_loop().call_later(DEFER_S, self._write_now)

    def _write_now(self) -> None:
        self._cancel_timer()
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().create_task(self._write_soon())

    def stage(self, **fields: Any) -> None:
        """Queue Run fields for the next write, without waiting for it."""
        self._raise_if_failed()
        self._pending.fields.update({name: self.redact(v) for name, v in fields.items()})

    async def save(self, **fields: Any) -> None:
        """Write these fields and everything queued before them; return once durable."""
        self.stage(**fields)
        await self._flush()
        self._raise_if_failed()

    async def drain(self) -> None:
        """Wait until everything queued is written."""
        await self._flush()
        self._raise_if_failed()

    async def take(self) -> Batch:
        """Stop writing and hand over what is still queued (finalize writes it together
        with the outcome, in one transaction)."""
        async with self._lock:
            self._raise_if_failed()
            self._closed = True
            self._cancel_timer()
            batch, self._pending = self._pending, Batch()
            return batch

    async def _write_soon(self) -> None:
        try:
            await self._flush()
        except Exception as exc:  # surfaced at the loop's next event, save or drain
            self._error = exc

    async def _flush(self) -> None:
        async with self._lock:
            self._scheduled = False
            if self._closed or self._error is not None or not self._pending:
                return
            self._cancel_timer()  # this write takes the deferred events along
            batch, self._pending = self._pending, Batch()
            try:
                await sync_to_async(self._write)(batch)
            except Exception as exc:
                self._error = exc
                raise

    def _write(self, batch: Batch) -> None:
        write_batch(self.run, self.owner, batch, renew_lease_s=self.lease_s)
        publish(self.run, batch)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error


def write_batch(run: Run, owner: str, batch: Batch, *, renew_lease_s: float | None = None) -> None:
    """One statement: update the Run under its lease (fields, last_seq, renewed lease) and
    insert the events only if that update matched. LeaseLost / EventConflict otherwise."""
    sets, params = [], []
    for name, value in batch.fields.items():
        model_field = Run._meta.get_field(name)
        sets.append(f'"{model_field.column}" = %s')
        params.append(model_field.get_db_prep_save(value, connection))
    if batch.events:
        sets.append('"last_seq" = %s')
        params.append(batch.events[-1][0].seq)
    if renew_lease_s is not None and "lease_expires_at" not in batch.fields:
        # The database's clock, as the claim uses.
        sets.append("\"lease_expires_at\" = NOW() + %s * interval '1 second'")
        params.append(renew_lease_s)
    sets = sets or ['"lease_owner" = "lease_owner"']
    sql = (
        f"WITH lease AS (UPDATE {Run._meta.db_table} SET {', '.join(sets)} "  # noqa: S608
        "WHERE id = %s AND lease_owner = %s RETURNING id)"
    )
    params += [run.pk, owner]
    if batch.events:
        rows = ", ".join(["(%s::integer, %s::varchar, %s::jsonb)"] * len(batch.events))
        sql += (
            f", added AS (INSERT INTO {RunEvent._meta.db_table} "  # noqa: S608
            "(tenant_id, run_id, seq, type, payload, created_at) "
            "SELECT %s, lease.id, v.seq, v.type, v.payload, NOW() "
            f"FROM lease, (VALUES {rows}) AS v(seq, type, payload) "
            "ON CONFLICT (run_id, seq) DO NOTHING RETURNING 1) "
            "SELECT (SELECT count(*) FROM lease), (SELECT count(*) FROM added)"
        )
        params.append(run.tenant_id)
        for event, encoded in batch.events:
            params += [event.seq, event.type, encoded]
    else:
        sql += " SELECT (SELECT count(*) FROM lease), 0"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        matched, added = cursor.fetchone()
    if not matched:
        raise LeaseLost(f"run {run.pk} was taken over")
    if added < len(batch.events):
        raise EventConflict(f"run {run.pk}: events up to {batch.events[-1][0].seq} exist")


def publish(run: Run, batch: Batch) -> None:
    events = batch.events
    if not events:
        return
    pipe = publisher().pipeline(transaction=False)
    name = channel(run)
    for event, _ in events:
        pipe.publish(name, json.dumps(event.as_dict(), default=str))
    pipe.execute()
