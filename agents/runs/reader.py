"""Following a run, for every face that streams or waits on one (REST's SSE, `/v1`, MCP's
`ask_*`, the web chat).

`iter_run_events(run, after_seq)` is the single source: it subscribes first, replays what is
stored after `after_seq`, then follows live events (skipping any it already replayed) until
the run reaches a terminal event. `follow_run(run)` reads an answer from it: the run's text
as it streams, then its `Ending` (finished, or parked waiting for a human). Both run on the
event loop; their database reads are brief, on any free thread (`stream_read`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import Q

from agents.models import Approval, ApprovalStatus, Run, RunEvent
from agents.runs.channels import TERMINAL_EVENTS, channel
from agents.runs.subscriptions import LOST, Rewind, subscriptions
from agents.runtime.spec import TERMINAL, RunStatus
from base.stream_reads import stream_read

SETTLE_S = 3.0  # how long to wait for the run row once its last event is out
SETTLE_POLL_S = 0.02
# How often a quiet stream asks the database whether the run ended unseen (a publish lost
# with a Redis hiccup): not every second, since hundreds of open streams would make that
# hundreds of queries a second in a web process.
QUIET_CHECK_S = 5.0


def heartbeat_seconds() -> float:
    """Seconds of silence before a stream says it is alive (settings.SSE_HEARTBEAT_S,
    default 15)."""
    return float(getattr(settings, "SSE_HEARTBEAT_S", 15.0))


async def iter_run_events(
    run: Run,
    after_seq: int = 0,
    *,
    heartbeat_s: float | None = None,
    execute: Callable[[], None] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """Stored events after `after_seq`, then live ones, until the run ends. With
    `heartbeat_s`, yields {"type": "heartbeat"} when nothing happened for that long.

    `execute` sends a run that was started without being sent to a worker (`run_start(...,
    enqueue=False)`) once the stream listens: nothing can be stored before, so there is
    nothing to replay (two queries fewer before the first token). Such a stream is its
    run's own, so it also takes events early, as they are made in this process
    (agents.runs.subscriptions)."""
    hub, name = subscriptions(), channel(run)
    # Before replay: nothing falls in between.
    queue = await hub.follow(name, early=execute is not None)
    try:
        last = after_seq
        if execute is not None:
            execute()
        else:
            stored = await stream_read(_stored_after)(run.pk, after_seq)
            for index, event in enumerate(stored):
                last = event["seq"]
                yield event
                if event["type"] in TERMINAL_EVENTS and not _resumed_next(stored, index):
                    return
            if await stream_read(_is_terminal)(run.pk):
                for event in await stream_read(_stored_after)(run.pk, last):
                    yield event  # whatever landed between the replay and this check
                return
        quiet_since = checked_at = time.monotonic()
        while True:
            try:
                async with asyncio.timeout(1.0):  # (no task per event, as wait_for makes)
                    data = await queue.get()
            except TimeoutError:
                now = time.monotonic()
                if heartbeat_s is not None and now - quiet_since >= heartbeat_s:
                    quiet_since = now
                    yield {"type": "heartbeat"}
                if now - checked_at < QUIET_CHECK_S:
                    continue
                checked_at = now
                if await stream_read(_ended_after)(run.pk, last):
                    for event in await stream_read(_stored_after)(run.pk, last):
                        yield event
                    return
                continue
            if data is LOST or isinstance(data, Rewind):
                # The subscription was made again (messages may have been missed), or events
                # given early were not stored (the next attempt continues from the record).
                if isinstance(data, Rewind):
                    last = min(last, data.seq)
                for event in await stream_read(_stored_after)(run.pk, last):
                    last = event["seq"]
                    yield event
                    if event["type"] in TERMINAL_EVENTS:
                        return
                continue
            quiet_since = time.monotonic()
            events = json.loads(data)  # a step's events, in order
            if isinstance(events, dict):  # one event, as a worker of the release before sent
                events = [events]
            for event in events:
                if event["seq"] <= last:
                    continue  # already replayed
                if event["seq"] > last + 1:  # missed some (e.g. published before subscribe)
                    for missing in await stream_read(_stored_after)(run.pk, last):
                        if missing["seq"] >= event["seq"]:
                            break
                        last = missing["seq"]
                        yield missing
                last = event["seq"]
                yield event
                if event["type"] in TERMINAL_EVENTS:
                    return
    finally:
        await hub.leave(name, queue)


def _stored_after(run_id: int, after_seq: int) -> list[dict[str, Any]]:
    rows = RunEvent.objects.filter(run_id=run_id, seq__gt=after_seq).order_by("seq")
    return [{"seq": r.seq, "type": r.type, "payload": r.payload} for r in rows]


def _resumed_next(stored: list[dict[str, Any]], index: int) -> bool:
    """A failure a person resumed (agents.runs.resume): the run went on after it."""
    following = stored[index + 1] if index + 1 < len(stored) else None
    return following is not None and following["type"] == "run.resumed"


def _is_terminal(run_id: int) -> bool:
    return Run.objects.get(pk=run_id).is_terminal


def _ended_after(run_id: int, last: int) -> bool:
    """A quiet stream: did the run end with events we have not seen (missed publishes)?"""
    return RunEvent.objects.filter(run_id=run_id, seq__gt=last, type__in=TERMINAL_EVENTS).exists()


# -- an answer: its text, then how the run ended ------------------------------------------
@dataclass
class Ending:
    """How the run ended up once the answer is over."""

    status: str
    output: str
    error: str
    prompt_tokens: int
    completion_tokens: int
    approvals: list[Approval] = field(default_factory=list)
    # For the API caller to run (status awaiting_client): [{"id", "name", "arguments"}]
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }

    @property
    def finish_reason(self) -> str:
        if self.status == RunStatus.AWAITING_CLIENT:
            return "tool_calls"
        return "length" if self.status == RunStatus.MAX_ROUNDS else "stop"

    @property
    def failed(self) -> bool:
        return self.status in (RunStatus.FAILED, RunStatus.CANCELLED)


HEARTBEAT = object()


def _status(run_id: int) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


SETTLED = {RunStatus.AWAITING_APPROVAL.value} | {s.value for s in TERMINAL}


async def _settled(run_id: int) -> bool:
    """Wait (briefly) until the record says the run is parked or finished. An ending event
    (agents.runs.channels.ENDING_EVENTS) goes out only once the record says so, so this answers at
    its first read unless the run went on meanwhile (an approval decided at once)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        if await stream_read(_status)(run_id) in SETTLED:
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(SETTLE_POLL_S)


def recorded_ending(run_id: int) -> Ending:
    """How the run ended, as its record says."""
    run = Run.objects.get(pk=run_id)
    approvals: list[Approval] = []
    if run.status == RunStatus.AWAITING_APPROVAL:  # its own calls, or its members' (crews)
        approvals = list(
            Approval.objects.filter(
                Q(run_id=run_id) | Q(run__parent_id=run_id), status=ApprovalStatus.PENDING
            ).order_by("pk")
        )
    return Ending(
        status=run.status,
        output=run.output,
        error=run.error,
        prompt_tokens=run.input_tokens,
        completion_tokens=run.output_tokens,
        approvals=approvals,
        tool_calls=_client_calls(run),
    )


def _client_calls(run: Run) -> list[dict[str, Any]]:
    """The calls a run awaiting its client ended with: its last message's."""
    if run.status != RunStatus.AWAITING_CLIENT or not run.state:
        return []
    messages = run.state.get("messages") or [{}]
    return list(messages[-1].get("tool_calls") or [])


async def follow_run(
    run: Run, *, execute: Callable[[], None] | None = None
) -> AsyncIterator[str | object | Ending]:
    """The run's text as it streams (str), HEARTBEAT while quiet, then its Ending: when it
    finished, or when it parked waiting for a human. `execute`: as for iter_run_events."""
    events = iter_run_events(run, 0, heartbeat_s=heartbeat_seconds(), execute=execute)
    parked = False
    rounds_with_text: set[int] = set()
    current_round = 0
    async with aclosing(events):
        async for event in events:
            kind = event["type"]
            if kind == "heartbeat":
                if parked and await stream_read(_status)(run.pk) in SETTLED:
                    break
                yield HEARTBEAT
            elif kind == "inference.started":
                current_round = event["payload"].get("round", current_round + 1)
            elif kind == "text.delta":
                text = event["payload"].get("text", "")
                if text and current_round not in rounds_with_text:
                    if rounds_with_text:
                        yield "\n\n"  # a new round's text: keep it apart from the last
                    rounds_with_text.add(current_round)
                if text:
                    yield text
            elif kind == "approval.required":
                parked = True
                if await _settled(run.pk):
                    break
            elif kind in TERMINAL_EVENTS:
                # (A crew's usage is its members' too: its record says how it ended.)
                ending = ending_in(event["payload"]) if run.crew_id is None else None
                if ending is not None:
                    yield ending
                    return
                break
    await _settled(run.pk)
    yield await stream_read(recorded_ending)(run.pk)


def ending_in(payload: dict[str, Any]) -> Ending | None:
    """The Ending an agent's terminal event carries (its status, output, error and usage, as
    recorded: the event goes out once the run's row is committed with them, with the same
    redaction and storage rule), or None when the record must be read."""
    usage, status = payload.get("usage"), payload.get("status")
    if not isinstance(usage, dict) or status not in TERMINAL:
        return None
    return Ending(
        status=status,
        output=payload.get("output") or "",
        error=payload.get("error") or "",
        prompt_tokens=int(usage.get("input_tokens") or 0),
        completion_tokens=int(usage.get("output_tokens") or 0),
        tool_calls=list(payload.get("client_tool_calls") or []),
    )
