"""The recorder: every write of a run's record — its events, its checkpoints, its outcome, and
the calls recorded whole (direct tool calls, model calls outside a run's loop) — goes
through this module, with one rule for the values PostgreSQL refuses. Two writers: one
under an executing run's lease (`RunWriter`, `write_batch`), one for runs nobody executes
(`append_event`, `park_call`, `write_calls`).

The rule (`storable`, `storable_json`, `storable_text`): a NUL character, which text and
jsonb refuse, becomes U+FFFD; NaN and ±Infinity, which are not JSON, become their names as
text ("nan", "inf", "-inf"). Every writer below applies it, so a tool's result, a model's
text or a call's arguments never fail a write, and read back the same on every path. The
usual value costs what encoding it costs anyway (one json.dumps) and a substring test.

The writers:
- `RunWriter`: a leased (executing) run's events and checkpoints, in order, coalesced into
  as few round trips as possible. Events are numbered when emitted and written soon after,
  without making the loop wait: a text delta at once (time to first token), other events
  within DEFER_S, so that most of them ride along with the step's checkpoint instead of
  costing a statement of their own. A checkpoint carries every event emitted before it in
  the same statement; it waits until it is durable (`save`) only where the loop is about to
  act on it, else it is written while the loop goes on (`save_behind`). Each statement
  also checks and renews the lease, so a worker that lost its run writes nothing.
  `RunEventSink` is the agent loop's sink in front of it (bursts of text deltas coalesced);
  `write_batch` also writes the outcome (`agents.runs.engine.finalize`), `storable_outcome`
  readies it for the rows written beside it (the conversation's Message, the approvals).
- `append_event`: one event of a run nobody executes (a queued or parked run cancelled).
- `park_call`: a direct tool call that waits for approval (its Run, Approval and event).
- `write_calls` / `awrite_call`: finished calls recorded whole (each a Run and its events):
  direct tool calls, and model calls made outside a run's loop (agents.runs.recorder).

Events are published on Redis after they are stored, never before, as they were stored.
The events that end an attempt (`ENDING_EVENTS`: the terminal ones, `approval.required`) are
stored only by finalize, in the statement (or transaction) that records the outcome, and
published once it has committed: whoever hears of a run's ending — a stream, a `/v1` answer,
an MCP result — reads that same ending on the record right after. The writer therefore
never writes an ending event, nor anything queued after one, before `take` hands it over;
and once one is queued it starts no write of its own (what is queued before it goes with
the outcome too: a one-round chat's last words cost no statement of their own).

The writer is also where an executing run's secrets are scrubbed: every event, every Run
field and the outcome (hence the conversation's Message and the approvals) pass `redact` on
their way to the database and Redis, whatever a remote server, a tool or a model echoed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import select
import time
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any

import psycopg
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import JSONField
from django.db.models.expressions import RawSQL
from django.db.models.fields import NOT_PROVIDED
from django.db.models.sql import InsertQuery
from django.utils import timezone
from psycopg import sql

from agents.models import Approval, Conversation, Message, Run, RunEvent
from agents.runs.bridge import db
from agents.runs.channels import ENDING_EVENTS, channel, publisher
from agents.runs.claim import column_list, instance_of_row
from agents.runs.costs import TOOL_USAGE
from agents.runs.subscriptions import deliver_early, rewind
from agents.runtime.spec import RunOutcome, RunStatus
from base.prepared import prepared_cursor
from tenancy import rls
from tenancy.models import AuditEntry
from tools.runtime.context import NoSecrets, SecretAccessor
from tools.runtime.tool import ToolCall

IMMEDIATE = frozenset({"text.delta"})
DEFER_S = 0.02
DELTA_FLUSH_S = 0.05  # text deltas are coalesced into one stored event per 50 ms


# -- the rule ------------------------------------------------------------------------------
def storable_json(value: Any) -> str:
    """`value` as JSON text that PostgreSQL stores as jsonb (the rule applied). The usual
    case costs one json.dumps."""
    try:
        text = json.dumps(value, default=str, allow_nan=False)
    except ValueError:
        text = None
    if text is None or "\\u0000" in text:
        text = json.dumps(_storable(value), default=str)
    return text


def storable_text(text: str) -> str:
    """Text that PostgreSQL stores: no NUL character."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def storable(value: Any) -> Any:
    """`value` (text or JSON-like data) with the rule applied, for a write through the ORM;
    `value` itself when it needs nothing. Costs one json.dumps for data, a scan for text."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        return storable_text(value)
    try:
        text = json.dumps(value, default=str, allow_nan=False)
    except ValueError:
        return _storable(value)
    return _storable(value) if "\\u0000" in text else value


def stored_text(value: Any) -> str:
    """A value as the text a run stores for it (a direct call's input and output): text as
    it is, anything else as JSON; either with the rule applied."""
    return storable_text(value) if isinstance(value, str) else storable_json(value)


def storable_outcome(outcome: RunOutcome) -> RunOutcome:
    """The outcome with the rule applied to what finalize writes through the ORM as well as
    in its statement (the conversation's Message, the approvals' arguments)."""
    return dataclasses.replace(
        outcome,
        output=storable_text(outcome.output),
        error=storable_text(outcome.error),
        structured_output=storable(outcome.structured_output),
        awaiting=[
            dataclasses.replace(c, arguments=storable(c.arguments)) for c in outcome.awaiting
        ],
    )


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


# -- an executing run: events, checkpoints, outcome, under the lease ------------------------
@dataclass(frozen=True)
class StoredEvent:
    seq: int
    type: str
    payload: dict[str, Any]


class EventConflict(Exception):
    """This sequence number is taken: another worker owns the run now."""


class LeaseLost(Exception):
    """Another worker owns this run now; stop without writing."""


@dataclass
class Batch:
    """What is waiting to be written: events (their payloads encoded, the rule applied) and
    Run fields."""

    events: list[tuple[StoredEvent, str]] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.events or self.fields)


class RunWriter:
    def __init__(self, run: Run, owner: str, *, next_seq: int, lease_s: float) -> None:
        self.run, self.owner, self.lease_s = run, owner, lease_s
        self.seq = self.stored_seq = next_seq - 1
        self._channel = channel(run).encode()
        self._pending = Batch()
        self._lock = asyncio.Lock()  # one write at a time, in emission order
        self._scheduled = False  # a write task is queued (it takes everything pending)
        self._timer: asyncio.TimerHandle | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._ending = False  # an ending event is queued: it and what follows wait for take
        self._secrets: SecretAccessor = NoSecrets()
        # Its `tool.usage` payloads, while it has seen every event of the run (a first
        # attempt): finalize prices them without reading them back.
        self.tool_usage: list[dict[str, Any]] | None = [] if next_seq == 1 else None

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
            evidence=self.redact(outcome.evidence),
            awaiting=[
                dataclasses.replace(
                    c,
                    arguments=self.redact(c.arguments),
                    prepared=c.prepared and c.prepared.redacted(self._secrets),
                )
                for c in outcome.awaiting
            ],
        )

    def event(self, type: str, payload: dict[str, Any], *, at_once: bool | None = None) -> None:
        """Number the event and queue it; it is written within the current step, or, from
        an ending event on, with the outcome (take). `at_once`: start a write for it now
        (by default a text delta's: time to first token), else within DEFER_S."""
        self._raise_if_failed()
        self.seq += 1
        payload = self.redact(payload)
        event = StoredEvent(self.seq, type, payload)
        if type == TOOL_USAGE and self.tool_usage is not None:
            self.tool_usage.append(payload)
        encoded = storable_json(payload)
        self._pending.events.append((event, encoded))
        self._ending = self._ending or type in ENDING_EVENTS
        if self._ending:  # nothing to write or deliver before the outcome
            self._cancel_timer()
            return
        deliver_early(self._channel, lambda: _published([(event, encoded)]))
        if at_once is None:
            at_once = type in IMMEDIATE
        if at_once:
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
        """Write these fields and everything queued before them (but an ending event and what
        follows it); return once durable."""
        self.stage(**fields)
        await self._flush()
        self._raise_if_failed()

    def save_behind(self, **fields: Any) -> None:
        """Write these fields and everything queued before them now, without waiting: the
        next `save` or `take` waits for it (writes go in order), and a failure surfaces at
        the run's next event, save or take."""
        self.stage(**fields)
        self._write_now()

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
            await self._flush(behind=True)
        except Exception as exc:  # surfaced at the loop's next event, save or drain
            self._error = exc

    async def _flush(self, *, behind: bool = False) -> None:
        async with self._lock:
            self._scheduled = False
            if self._closed or self._error is not None:
                return
            if behind and self._ending:  # finalize is next: it writes these with the outcome
                return
            batch = self._writable()
            if not batch:
                return
            self._cancel_timer()  # this write takes the deferred events along
            try:
                await db(self._write)(batch)
            except Exception as exc:
                self._error = exc
                raise

    def _writable(self) -> Batch:
        """Take what may be written now: everything queued but the events from the first
        ending event on (finalize writes those, with the outcome)."""
        batch, self._pending = self._pending, Batch()
        if self._ending:
            events = batch.events
            ending = (i for i, (e, _) in enumerate(events) if e.type in ENDING_EVENTS)
            cut = next(ending, len(events))
            batch.events, self._pending.events = events[:cut], events[cut:]
        return batch

    def _write(self, batch: Batch) -> None:
        write_batch(self.run, self.owner, batch, renew_lease_s=self.lease_s)
        if batch.events:
            self.stored_seq = batch.events[-1][0].seq
        publish(self.run, batch)

    def abandon(self) -> None:
        """This attempt ends without its outcome recorded: early followers forget the events
        they were given that are not stored (the next attempt makes its own)."""
        if self.seq > self.stored_seq:
            rewind(self._channel, self.stored_seq)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error


class RunEventSink:
    """The agent loop's sink for one run: hands its events, numbered, to the run's writer
    (which stores, then publishes them), coalescing bursts of text deltas."""

    def __init__(self, writer: RunWriter, *, wants_text_deltas: bool = True) -> None:
        self.writer = writer
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
        # The deltas held back go with this event, in its write: an answer's last words
        # with its `inference.completed`, and so, when that was the last round, with the
        # outcome in finalize's statement instead of a statement of their own.
        self._hand_over(at_once=False)
        self.writer.event(type, payload)

    async def flush(self) -> None:
        """Hand over the coalesced deltas (they are written with the next write)."""
        self._hand_over(at_once=None)

    def _hand_over(self, *, at_once: bool | None) -> None:
        if self._deltas:
            text, self._deltas = "".join(self._deltas), []
            self._last_delta_write = time.monotonic()
            self.writer.event("text.delta", {"text": text}, at_once=at_once)


def write_batch(
    run: Run,
    owner: str,
    batch: Batch,
    *,
    renew_lease_s: float | None = None,
    refresh: bool = False,
) -> None:
    """One statement: update the Run under its lease (fields, last_seq, renewed lease) and
    insert the events only if that update matched. LeaseLost / EventConflict otherwise.
    `refresh`: the statement also returns the row as it now is, and `run` takes its values
    (for a caller that holds `run` and reads it next: no query after)."""
    db = connections[DEFAULT_DB_ALIAS]  # (not the proxy: each field's prep asks it again)
    sets, params = [], []
    for name, value in batch.fields.items():
        model_field = Run._meta.get_field(name)
        if isinstance(model_field, JSONField):
            sets.append(f'"{model_field.column}" = %s::jsonb')
            params.append(None if value is None else storable_json(value))
            continue
        sets.append(f'"{model_field.column}" = %s')
        if isinstance(value, str):
            value = storable_text(value)
        params.append(model_field.get_db_prep_save(value, db))
    if batch.events:
        sets.append('"last_seq" = %s')
        params.append(batch.events[-1][0].seq)
    if renew_lease_s is not None and "lease_expires_at" not in batch.fields:
        # The database's clock, as the claim uses.
        sets.append("\"lease_expires_at\" = NOW() + %s * interval '1 second'")
        params.append(renew_lease_s)
    sets = sets or ['"lease_owner" = "lease_owner"']
    returned = column_list(Run, Run._meta.db_table) if refresh else "id"
    statement = (
        f"WITH lease AS (UPDATE {Run._meta.db_table} SET {', '.join(sets)} "  # noqa: S608
        f"WHERE id = %s AND lease_owner = %s RETURNING {returned})"
    )
    params += [run.pk, owner]
    if batch.events:
        rows = ", ".join(["(%s::integer, %s::varchar, %s::jsonb)"] * len(batch.events))
        statement += (
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
        statement += " SELECT (SELECT count(*) FROM lease), 0"
    if refresh:  # (one row either way: the lease's columns are NULL when it did not match)
        statement += ", lease.* FROM (SELECT 1) AS one LEFT JOIN lease ON true"
    with prepared_cursor(db) as cursor:
        cursor.execute(statement, params)
        matched, added, *row = cursor.fetchone()
    if not matched:
        raise LeaseLost(f"run {run.pk} was taken over")
    if added < len(batch.events):
        raise EventConflict(f"run {run.pk}: events up to {batch.events[-1][0].seq} exist")
    if refresh:
        fresh = instance_of_row(Run, row)
        for field in Run._meta.concrete_fields:
            setattr(run, field.attname, getattr(fresh, field.attname))


def publish(run: Run, batch: Batch) -> None:
    """The batch's events on the run's channel, as stored: one message, a JSON list (each
    message costs every stream following the run a parse; a step's events travel together)."""
    if batch.events:
        publisher().publish(channel(run), _published(batch.events))


def _published(events: list[tuple[StoredEvent, str]]) -> str:
    """The message of some events: [{"seq", "type", "payload"}, ...], the payloads as stored."""
    return (
        "["
        + ", ".join(
            f'{{"seq": {e.seq}, "type": {json.dumps(e.type)}, "payload": {encoded}}}'
            for e, encoded in events
        )
        + "]"
    )


# -- a new run ------------------------------------------------------------------------------
def insert_run(
    run: Run,
    entry: AuditEntry | None = None,
    message: Message | None = None,
    title: str = "",
) -> None:
    """INSERT the new `run` (its pk set after), in the same statement as, when given:
    `entry`, the audit entry of its start (tenancy.records.audit.run_started_entry), naming
    the run by the id the INSERT gives it (`object_id`, `object_repr` as str(run) says it,
    `details["run"]`); `message`, the person's turn the run answers (a new Message of its
    conversation: `run.in_reply_to` is it, and it names the run), which becomes its
    conversation's leaf (the conversation's `title` set too, and `updated_at`).
    One statement needs no transaction block, and a turn's three writes cost one round
    trip, not three: both ids are taken first (the message's from its sequence), so each
    row names the other as it is inserted."""
    if entry is None and message is None:
        run.save(force_insert=True)
        return
    db = connections[DEFAULT_DB_ALIAS]
    steps, params = [], []
    if message is not None:
        sequence = f"pg_get_serial_sequence('{Message._meta.db_table}', 'id')"
        steps.append(f"ids AS (SELECT nextval({sequence}) AS message)")
        run.in_reply_to_id = RawSQL("(SELECT message FROM ids)", ())
    insert, run_params = compiled_insert(run)
    steps.append(f"run AS ({insert} RETURNING id, status)")
    params += run_params
    if entry is not None:
        step, entry_params = _entry_step(entry, db)
        steps.append(step)
        params += entry_params
    if message is not None:
        message.pk = RawSQL("(SELECT message FROM ids)", ())
        message.run_id = RawSQL("(SELECT id FROM run)", ())
        insert, message_params = compiled_insert(message, with_pk=True)
        steps.append(f"message AS ({insert})")
        params += message_params
        steps.append(
            f"conversation AS (UPDATE {Conversation._meta.db_table} SET title = %s, "  # noqa: S608
            "leaf_id = (SELECT message FROM ids), updated_at = %s WHERE id = %s)"
        )
        params += [title, timezone.now(), message.conversation_id]
    also = ", (SELECT message FROM ids)" if message is not None else ""
    statement = f"WITH {', '.join(steps)} SELECT id{also} FROM run"  # noqa: S608 (our names)
    with prepared_cursor(db) as cursor:
        cursor.execute(statement, params)
        row = cursor.fetchone()
    run.pk = row[0]
    run._state.adding, run._state.db = False, db.alias
    if message is not None:
        message.pk = run.in_reply_to_id = row[1]
        message.run_id = run.pk
        message._state.adding, message._state.db = False, db.alias
        run.in_reply_to = message


# Columns of the start's audit entry that name the run, by the id its INSERT gives it.
_NAMING_THE_RUN = {
    "object_id": "run.id::text",
    "object_repr": "'Run ' || run.id || ' (' || run.status || ')'",
    "details": "jsonb_set(%s, '{run}', to_jsonb(run.id))",
}


def _entry_step(entry: AuditEntry, db) -> tuple[str, list[Any]]:
    """The step inserting `entry` for the run the step `run` inserts (as compiled_insert
    writes an INSERT, the columns naming the run in SQL of their own)."""
    fragments, params = _fragments(entry, False, db, given=_NAMING_THE_RUN)
    return _insert_text(AuditEntry, False, fragments, from_run=True), params


def compiled_insert(instance: Any, *, with_pk: bool = False) -> tuple[str, list[Any]]:
    """The INSERT that `instance.save()` would run (its fields' pre_save included, no
    RETURNING), to be a step of a statement of ours (a CTE); `with_pk`: its id given too.

    A field still at its model's default is written as that literal, every other value as
    a parameter, an expression as Django compiles it. The text is made once per shape (which
    fields hold their defaults, which are expressions) and kept: a new run sends a dozen
    values instead of fifty, few enough for psycopg to keep its conversion of the statement
    too, and PostgreSQL prepares it once per connection (base.prepared). Compiling every
    INSERT through Django's SQLInsertCompiler, and converting it uncached, were two thirds
    of a /v1 chat's run start (bench/api.py)."""
    db = connections[DEFAULT_DB_ALIAS]  # (not the proxy: the compiler asks it a hundred things)
    fragments, params = _fragments(instance, with_pk, db)
    return _insert_text(type(instance), with_pk, fragments), params


def _fragments(
    instance: Any, with_pk: bool, db, *, given: dict[str, str] | None = None
) -> tuple[tuple[str, ...], list[Any]]:
    """Each inserted field's SQL (`given`'s where it names one: with a `%s`, that takes the
    field's value) and the parameters they take."""
    model = type(instance)
    fragments: list[str] = []
    params: list[Any] = []
    compiler = None
    for model_field, literal in _insert_fields(model, with_pk):
        own = (given or {}).get(model_field.name)
        if own is not None and "%s" not in own:
            fragments.append(own)
            continue
        value = model_field.pre_save(instance, True)
        if own is not None:
            fragments.append(own)
            params.append(model_field.get_db_prep_save(value, db))
            continue
        if literal is not None and _is_default(value, literal):
            fragments.append(literal[1])
            continue
        if type(value) is RawSQL:  # (compiled as it compiles itself, without a compiler)
            fragments.append(f"({value.sql})")
            params += value.params
            continue
        if hasattr(value, "resolve_expression") or hasattr(model_field, "get_placeholder"):
            if compiler is None:
                compiler = InsertQuery(model).get_compiler(connection=db)
            fragment, values = compiler.field_as_sql(
                model_field,
                getattr(model_field, "get_placeholder", None),
                compiler.prepare_value(model_field, value),
            )
        else:
            fragment, values = "%s", [model_field.get_db_prep_save(value, db)]
        fragments.append(fragment)
        params += values
    return tuple(fragments), params


@lru_cache(maxsize=64)
def _insert_fields(model: type, with_pk: bool) -> list[tuple[Any, tuple[Any, str] | None]]:
    """The fields an INSERT of `model` writes, each with its default and that as a literal
    (None where a default is made per row, or where the field has a placeholder of its
    own)."""
    fields = [
        f
        for f in model._meta.local_concrete_fields
        if (with_pk or not f.primary_key) and not f.generated
    ]
    return [
        (f, None if _per_row(f) or hasattr(f, "get_placeholder") else _literal(f, f.get_default()))
        for f in fields
    ]


@lru_cache(maxsize=256)
def _insert_text(
    model: type, with_pk: bool, fragments: tuple[str, ...], *, from_run: bool = False
) -> str:
    """The INSERT of `fragments`' values, or (`from_run`) the step selecting them from the
    step `run`."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f, _ in _insert_fields(model, with_pk))
    insert = f"INSERT INTO {quote(model._meta.db_table)} ({columns}) "
    if from_run:
        return f"entry AS ({insert}SELECT {', '.join(fragments)} FROM run)"  # noqa: S608 (ours)
    return f"{insert}VALUES ({', '.join(fragments)})"


def _is_default(value: Any, literal: tuple[Any, str]) -> bool:
    return type(value) is type(literal[0]) and value == literal[0]


def _per_row(field) -> bool:
    """Is the field's default made anew for each row (so never a literal of the statement)?"""
    return bool(
        field.generated
        or field.db_default is not NOT_PROVIDED
        or getattr(field, "auto_now", False)
        or getattr(field, "auto_now_add", False)
        or (field.has_default() and callable(field.default) and field.default not in (dict, list))
    )


def _literal(field, value: Any) -> tuple[Any, str]:
    """`value` and the SQL literal that writes it to `field` as a parameter would."""
    prepared = field.get_db_prep_save(value, connection)
    text = sql.Literal(prepared).as_string().replace("%", "%%")  # not a placeholder
    return value, f"{text}::{field.db_type(connection)}"


# -- a run nobody executes ------------------------------------------------------------------
def next_seq(run_id: int) -> int:
    last = RunEvent.objects.filter(run_id=run_id).order_by("-seq").values_list("seq", flat=True)
    return (last.first() or 0) + 1


def append_event(run: Run, seq: int, type: str, payload: dict[str, Any]) -> StoredEvent:
    """Store one event of a run no worker executes, then publish it (after the commit, in a
    transaction). One INSERT and one PUBLISH; EventConflict if `seq` is taken."""
    encoded = storable_json(payload)
    # One statement, no transaction block: a taken seq inserts nothing instead of failing.
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {RunEvent._meta.db_table} "  # noqa: S608 (our own table name)
            "(tenant_id, run_id, seq, type, payload, created_at) "
            "VALUES (%s, %s, %s, %s, %s::jsonb, NOW()) ON CONFLICT (run_id, seq) DO NOTHING",
            [run.tenant_id, run.pk, seq, type, encoded],
        )
        if cursor.rowcount == 0:
            raise EventConflict(f"run {run.pk} event {seq} exists")
    event = StoredEvent(seq, type, payload)
    message = _published([(event, encoded)])
    transaction.on_commit(lambda: publisher().publish(channel(run), message))
    return event


def park_call(
    *,
    tenant_id: int,
    call: ToolCall,
    state: dict[str, Any],
    event: dict[str, Any],
    initiated_by_user_id: int | None,
    initiated_by_api_key_id: int | None,
    correlation_id: str,
) -> tuple[Run, Approval]:
    """Record a direct tool call that waits for a human: its Run (awaiting approval, the call
    pending in `state`), its Approval and the `approval.required` event, in one transaction.
    Three INSERTs, then one PUBLISH."""
    with transaction.atomic():
        run = Run.objects.create(
            tenant_id=tenant_id,
            tool_name=call.name,
            input=stored_text(call.arguments),
            status=RunStatus.AWAITING_APPROVAL,
            state=storable(state),
            correlation_id=correlation_id,
            last_seq=1,
            initiated_by_user_id=initiated_by_user_id,
            initiated_by_api_key_id=initiated_by_api_key_id,
        )
        approval = Approval.objects.create(
            tenant_id=tenant_id,
            run=run,
            call_id=call.id,
            tool_name=call.name,
            arguments=storable(call.arguments),
            prepared_request=call.prepared.to_dict() if call.prepared else None,
        )
        append_event(run, 1, "approval.required", event)
    return run, approval


# -- finished calls, recorded whole ---------------------------------------------------------
# Any number of finished calls (each a Run and its events) in one statement of fixed text,
# and, on an event loop (the MCP server), grouped into as few statements as possible on an
# async connection of the loop's own.
#
# Why not the ORM here: this write is on the path of every MCP `tools/call`. Building Run
# instances and compiling their INSERT cost more than the call itself, and a write on a
# thread's connection makes each call wait for the event loop's thread to hand over the GIL
# (up to the 5 ms switch interval, several times per statement) while that thread is busy
# serving the other calls. Columns a tool call never sets take their model defaults, read
# from the model once, so the statement follows the model as it changes.

APPLICATION_NAME = "agentplatform-run-records"
IDLE_S = 60.0  # an async connection unused this long is closed (a new one when needed)


@dataclass(frozen=True)
class CallRecord:
    """One finished (or failed) call recorded whole, as the Run row and events to store: a
    direct tool call (`tool_name`), or a model call made outside a run's loop (a gateway
    call, embeddings, a judge's verdict: `gateway_model`, `model`, `provider`). Values as
    the call made them: the rule is applied when they are written."""

    tenant_id: int
    tool_name: str
    arguments: Any  # stored as the run's input (JSON text)
    status: str
    output: Any  # the result (stored as text, JSON unless it is text); "" when it failed
    error: str
    correlation_id: str  # unique per call: it pairs the inserted runs with their events
    started_at: datetime
    finished_at: datetime
    initiated_by_user_id: int | None
    initiated_by_api_key_id: int | None
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # Tokens the call spent on models (the `llm` built-in): input, output, cache read, write.
    usage: tuple[int, int, int, int] = (0, 0, 0, 0)
    cost_usd: Decimal = Decimal(0)  # what they cost (agents.runs.costs.tool_call_cost)
    gateway_model: str = ""  # a model call's: what was asked for, the model, its provider
    model: str = ""
    provider: str = ""
    agent_id: int | None = None  # a model call made for an agent's run (compaction)

    def row(self) -> tuple:
        """The values of `_VARYING`, in its order."""
        return (
            self.tenant_id, self.tool_name, stored_text(self.arguments), self.status,
            stored_text(self.output), storable_text(self.error), self.correlation_id,
            self.started_at, self.finished_at, len(self.events), self.initiated_by_user_id,
            self.initiated_by_api_key_id, self.finished_at, *self.usage, self.cost_usd,
            self.cost_usd, storable_text(self.gateway_model), storable_text(self.model),
            storable_text(self.provider), self.agent_id,
        )  # fmt: skip


_VARYING = (
    "tenant_id", "tool_name", "input", "status", "output", "error", "correlation_id",
    "started_at", "finished_at", "last_seq", "initiated_by_user_id",
    "initiated_by_api_key_id", "created_at",
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd",
    "total_cost_usd", "gateway_model", "model", "provider", "agent_id",
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
    if _per_row(field):
        raise ImproperlyConfigured(
            f"Run.{field.name} has a default computed per row: add it to run_writer._VARYING"
        )
    return _literal(field, getattr(template, field.attname))[1]


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


def write_calls(records: list[CallRecord]) -> list[int]:
    """Store the records on Django's connection (in its transaction, if any); their run ids."""
    with connection.cursor() as cursor:
        cursor.execute(_statement(), _parameters(records))
        ids = dict(cursor.fetchall())
    return [ids[r.correlation_id] for r in records]


async def awrite_call(record: CallRecord) -> int:
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
    closed after IDLE_S without writes. It earns its lines: bench/mcp.py (8 callers) made
    354-367 calls/s with it, 231-262 with each record written through `stream_read`."""

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
        group: list = []
        try:
            while self.pending:
                group, self.pending = self.pending, []
                await self._write_group(group)
        finally:  # the writer itself cancelled (the loop ends): nobody waits forever
            _settle(group + self.pending, error=RuntimeError("the record writer stopped"))

    async def _write_group(self, group: list[tuple[CallRecord, asyncio.Future]]) -> None:
        try:
            ids = await self._insert([record for record, _ in group])
        except (psycopg.DataError, psycopg.IntegrityError) as exc:  # e.g. its API key deleted
            if len(group) == 1:
                _settle(group, error=exc)
                return
            for item in group:  # a record the database refuses fails alone
                await self._write_group([item])
        except Exception as exc:
            _settle(group, error=exc)
        else:
            _settle(group, ids=ids)

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


def _settle(group: list[tuple[CallRecord, asyncio.Future]], *, ids=None, error=None) -> None:
    """Answer each waiting caller (one that went away has a cancelled future: skipped)."""
    for index, (_, future) in enumerate(group):
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
    """Django's parameters for its default database (the process's login), without its sync
    cursor and adapters.

    This connection acts for every tenant (`app.tenant_ids` is `*` from its start), because
    one statement holds the calls of several tenants (one statement per tenant, or a setting
    per statement, would undo the grouping it is for). What it writes is not chosen by a
    caller: each record's tenant is its authenticated API key's (agents.runs.direct_calls builds
    it), and the events take their run's tenant."""
    params = connections["default"].get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    every_tenant = f"-c {rls.TENANTS_SETTING}={rls.EVERY_TENANT}"
    params["options"] = f"{params.get('options', '')} {every_tenant}".strip()
    params.setdefault("application_name", APPLICATION_NAME)
    params.setdefault("connect_timeout", 5)  # calls wait for this connection: not for long
    return params


def _closed_by_server(connection: psycopg.AsyncConnection) -> bool:
    """An idle connection with something to read has been told goodbye (a restart, a
    terminated backend): better a new connection than a failed write."""
    poller = select.poll()  # not select.select: it fails on descriptors above 1023
    poller.register(connection.fileno(), select.POLLIN)
    return bool(poller.poll(0))
