"""RunWriter: a leased run's events and checkpoints, coalesced, ordered, under the lease."""

from __future__ import annotations

import asyncio
import json
import time

import psycopg
import pytest
import redis
from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import Run, RunEvent
from agents.runs import run_start
from agents.runs.channels import channel
from agents.runs.engine import claim, finalize
from agents.runs.reader import iter_run_events
from agents.runs.subscriptions import subscriptions
from agents.runs.writer import LeaseLost, RunEventSink, RunWriter
from agents.runtime.spec import RunOutcome, RunStatus
from tools.runtime.context import StaticSecrets
from tools.runtime.prepared_request import PreparedRequest
from tools.runtime.tool import ToolCall

pytestmark = pytest.mark.django_db(transaction=True)


def claimed(trio, agent, owner="me") -> Run:
    run = run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)
    return claim(run.pk, owner)


def stored(run: Run) -> list[tuple[int, str]]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", "type"))


def test_events_before_a_checkpoint_go_with_it_in_one_statement(trio, agent):
    run = claimed(trio, agent)

    async def step() -> None:
        writer = RunWriter(run, "me", next_seq=1, lease_s=30)
        writer.event("inference.completed", {"round": 1})
        writer.event("tool.started", {"call_id": "c1"})
        await writer.save(state={"messages": []}, input_tokens=7)
        writer.event("tool.completed", {"call_id": "c1"})
        writer.event("inference.started", {"round": 2})
        await writer.drain()

    with CaptureQueriesContext(connection) as queries:
        async_to_sync(step)()
    assert len(queries) == 2  # the checkpoint with its 2 events, then the next 2 events
    run.refresh_from_db()
    assert stored(run) == [
        (1, "inference.completed"), (2, "tool.started"),
        (3, "tool.completed"), (4, "inference.started"),
    ]  # fmt: skip
    assert (run.state, run.input_tokens, run.last_seq) == ({"messages": []}, 7, 4)
    assert run.lease_expires_at is not None


def test_a_lost_lease_writes_nothing_and_stops_the_writer(trio, agent):
    run = claimed(trio, agent)
    Run.objects.filter(pk=run.pk).update(lease_owner="someone else")

    async def step() -> None:
        writer = RunWriter(run, "me", next_seq=1, lease_s=30)
        writer.event("inference.started", {"round": 1})
        with pytest.raises(LeaseLost):
            await writer.save(state={"messages": ["mine"]})
        with pytest.raises(LeaseLost):  # and every later write is refused at once
            writer.event("inference.completed", {"round": 1})

    async_to_sync(step)()
    run.refresh_from_db()
    assert stored(run) == []
    assert run.state is None


def test_a_background_write_failure_surfaces_at_the_next_event(trio, agent):
    run = claimed(trio, agent)

    async def step() -> None:
        writer = RunWriter(run, "me", next_seq=1, lease_s=30)
        await sync_to_async(Run.objects.filter(pk=run.pk).update)(lease_owner="taken")
        writer.event("inference.started", {"round": 1})  # written in the background...
        await asyncio.sleep(0.3)
        with pytest.raises(LeaseLost):  # ...and its failure reported here
            writer.event("inference.completed", {"round": 1})

    async_to_sync(step)()
    assert stored(run) == []


def test_an_abandoned_attempt_sends_its_runs_own_stream_back_to_the_record(trio, agent):
    """An event the run's own stream got early but the attempt could not store (its lease
    lost) is not the run's: once the attempt is abandoned, the stream reads what the next
    attempt stored under the same numbers instead of skipping it."""
    run = claimed(trio, agent)

    def next_attempt() -> None:
        RunEvent.objects.create(
            tenant=trio.acme, run=run, seq=2, type="text.delta", payload={"text": "second"}
        )
        RunEvent.objects.create(
            tenant=trio.acme, run=run, seq=3, type="run.completed", payload={"status": "ok"}
        )

    async def scenario() -> list[dict]:
        events = iter_run_events(run, execute=lambda: None)  # its own stream: takes early
        first = asyncio.ensure_future(events.__anext__())
        hub, key = subscriptions(), channel(run).encode()
        while key not in hub.early or key in hub.unconfirmed:
            await asyncio.sleep(0.01)
        writer = RunWriter(run, "me", next_seq=1, lease_s=30)
        writer.event("run.started", {"agent": "a"})
        await writer.drain()
        seen = [await asyncio.wait_for(first, 5)]
        await sync_to_async(Run.objects.filter(pk=run.pk).update)(lease_owner="b")
        writer.event("text.delta", {"text": "first"})  # given early, its write refused
        seen.append(await asyncio.wait_for(events.__anext__(), 5))
        with pytest.raises(LeaseLost):
            await writer.drain()
        await sync_to_async(next_attempt)()
        writer.abandon()
        async with asyncio.timeout(10):
            seen += [event async for event in events]
        return seen

    seen = asyncio.run(scenario())
    assert [(e["seq"], e["payload"].get("text")) for e in seen] == [
        (1, None),
        (2, "first"),
        (2, "second"),
        (3, None),
    ]


def test_every_burst_of_text_is_stored_whole(trio, agent):
    """A burst's first token goes out at once, the rest coalesced; text after a flush is
    coalesced again, and none is lost."""
    run = claimed(trio, agent)

    async def answer() -> None:
        writer = RunWriter(run, "me", next_seq=1, lease_s=30)
        sink = RunEventSink(writer)
        for text in ("a", "b", "c"):
            await sink.emit("text.delta", {"text": text})
        await sink.flush()
        for text in ("d", "e"):
            await sink.emit("text.delta", {"text": text})
        await sink.emit("tool.started", {"name": "t"})
        await writer.drain()

    async_to_sync(answer)()
    deltas = RunEvent.objects.filter(run=run, type="text.delta").order_by("seq")
    texts = [event.payload["text"] for event in deltas]
    assert texts[0] == "a" and "".join(texts) == "abcde"  # (how the rest split: timing)


def test_an_answers_last_words_go_with_the_event_after_them_not_in_a_write_of_their_own(
    trio, agent
):
    """The first token is written at once; the words held back behind it go with the event
    that follows them. An answer that ends the run so reaches finalize whole, with its
    `inference.completed`, in the outcome's statement: one write before it, not two."""
    run = claimed(trio, agent)

    async def answer():
        writer = RunWriter(run, "me", next_seq=1, lease_s=30)
        sink = RunEventSink(writer)
        for text in ("Hel", "lo", "!"):
            await sink.emit("text.delta", {"text": text})
            await asyncio.sleep(0)  # as a stream's pieces come: the first one's write starts
        await sink.emit("inference.completed", {"round": 1})
        await asyncio.sleep(0)  # the loop goes on: a write scheduled now would start
        writer.stage(state={"finished": "succeeded"})
        await sink.emit("run.completed", {"status": "succeeded"})
        await sink.flush()
        return await writer.take()

    with CaptureQueriesContext(connection) as queries:
        batch = async_to_sync(answer)()
    assert len(queries) == 1  # the first token's write
    assert stored(run) == [(1, "text.delta")]
    assert [(e.seq, e.type) for e, _ in batch.events] == [
        (2, "text.delta"), (3, "inference.completed"), (4, "run.completed"),
    ]  # fmt: skip
    assert batch.events[0][0].payload == {"text": "lo!"}


def subscribed(client: redis.Redis, run: Run):
    """A pub/sub of the run's channel, once Redis confirmed it (however long that takes)."""
    pubsub = client.pubsub()
    pubsub.subscribe(channel(run))
    deadline = time.monotonic() + 10
    while (message := pubsub.get_message(timeout=1)) is None or message["type"] != "subscribe":
        assert time.monotonic() < deadline, "no subscription"
    return pubsub


def test_events_are_published_after_they_are_stored(trio, agent):
    run = claimed(trio, agent)
    client = redis.Redis.from_url(settings.REDIS_URL)
    pubsub = subscribed(client, run)

    async def step() -> None:
        writer = RunWriter(run, "me", next_seq=1, lease_s=30)
        writer.event("run.started", {"agent": "a"})
        writer.event("inference.started", {"round": 1})
        await writer.drain()

    async_to_sync(step)()
    published = []
    while (message := pubsub.get_message(ignore_subscribe_messages=True, timeout=1)) is not None:
        published.extend(json.loads(message["data"]))  # a step's events in one message
    pubsub.close()
    client.close()
    assert [(e["seq"], e["type"]) for e in published] == stored(run)
    assert published[0]["payload"] == {"agent": "a"}


def test_take_hands_over_what_is_queued_and_closes(trio, agent):
    run = claimed(trio, agent)

    async def step():
        writer = RunWriter(run, "me", next_seq=1, lease_s=30)
        writer.event("run.completed", {"status": "succeeded"})
        writer.stage(state={"finished": "succeeded"})
        batch = await writer.take()
        await asyncio.sleep(0.05)  # the scheduled background write finds nothing to do
        return batch

    batch = async_to_sync(step)()
    assert [e.type for e, _ in batch.events] == ["run.completed"]
    assert batch.fields == {"state": {"finished": "succeeded"}}
    assert stored(run) == []


def test_the_runs_secrets_are_masked_in_events_fields_published_events_and_the_outcome(trio, agent):
    secret = "s3cret-VALUE"
    run = claimed(trio, agent)
    client = redis.Redis.from_url(settings.REDIS_URL)  # (held: collected, it would reconnect)
    pubsub = subscribed(client, run)

    async def step() -> RunOutcome:
        writer = RunWriter(run, "me", next_seq=1, lease_s=30)
        writer.redact_with(StaticSecrets({"agent:remote_token": secret}))
        writer.event("inference.completed", {"text": f"got {secret}", secret: [secret]})
        await writer.save(state={"messages": [{"text": secret}]})
        outcome = RunOutcome(
            status=RunStatus.SUCCEEDED,
            output=f"out {secret}",
            error=secret,
            structured_output={"k": secret},
            awaiting=[
                ToolCall("c1", "t", {"a": secret}, prepared=PreparedRequest("GET", secret, ()))
            ],
            evidence=[{"call_id": "c1", "result": f"got {secret}"}],
        )
        return writer.redacted(outcome)

    outcome = async_to_sync(step)()
    run.refresh_from_db()
    published = pubsub.get_message(timeout=10)["data"].decode()
    pubsub.close()
    client.close()
    assert RunEvent.objects.get(run=run).payload == {
        "text": "got [redacted]",
        "[redacted]": ["[redacted]"],
    }
    assert run.state == {"messages": [{"text": "[redacted]"}]}
    assert secret not in published and "got [redacted]" in published
    assert (outcome.output, outcome.error) == ("out [redacted]", "[redacted]")
    assert outcome.structured_output == {"k": "[redacted]"}
    assert outcome.awaiting[0].arguments == {"a": "[redacted]"}
    assert outcome.awaiting[0].prepared.url == "[redacted]"
    assert outcome.evidence == [{"call_id": "c1", "result": "got [redacted]"}]


ENDINGS = {
    "run.completed": RunOutcome(status=RunStatus.SUCCEEDED, output="Hello"),
    "approval.required": RunOutcome(
        status=RunStatus.AWAITING_APPROVAL, awaiting=[ToolCall("c1", "transfer", {"amount": 5})]
    ),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_an_ending_event_is_stored_and_published_only_with_the_outcome(trio, agent, ending):
    """A write in flight (held up by a lock on the run's row), another queued behind it,
    then the event that ends the attempt: the queued write leaves it, and what was queued
    before it, to finalize. Had it taken the ending along, a follower would hear the run
    ended while its row still said running.
    The run's own stream (an early follower) never gets it before the outcome either; when
    it does get it, the row shows that ending."""
    run = claimed(trio, agent)
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    holder = psycopg.connect(**params)  # a transaction holding the run's row
    holder.execute("SELECT 1 FROM agents_run WHERE id = %s FOR UPDATE", [run.pk])

    def seen(items: list) -> list[str]:
        return [e["type"] for item in items if isinstance(item, bytes) for e in json.loads(item)]

    async def status() -> str:
        return await Run.objects.filter(pk=run.pk).values_list("status", flat=True).aget()

    async def step():
        stream = await subscriptions().follow(channel(run), early=True)
        writer = RunWriter(run, "me", next_seq=1, lease_s=30)
        writer.event("text.delta", {"text": "Hel"})  # written at once: waits for the row
        await asyncio.sleep(0.1)
        writer.event("text.delta", {"text": "lo"})  # a second write, queued behind it
        await asyncio.sleep(0.1)
        writer.event(ending, {"status": ENDINGS[ending].status.value, "output": "Hello"})
        taking = asyncio.ensure_future(writer.take())
        await asyncio.sleep(0.1)
        await asyncio.to_thread(holder.commit)
        batch = await taking
        await asyncio.sleep(0.2)  # (what was published meanwhile has arrived)
        before = seen([stream.get_nowait() for _ in range(stream.qsize())])
        stored_before = await sync_to_async(stored)(run)
        if ending not in before:
            await sync_to_async(finalize)(run, "me", ENDINGS[ending], batch)
            while ending not in seen([await asyncio.wait_for(stream.get(), 5)]):
                pass
        heard_with = await status()  # the row, once the follower heard of the ending
        await subscriptions().leave(channel(run), stream)
        return batch, before, stored_before, heard_with

    try:
        batch, before, stored_before, heard_with = asyncio.run(step())
    finally:
        holder.close()
    assert ending not in before, f"{ending} was heard before the outcome (row: {heard_with})"
    assert before.count("text.delta") == 1  # published as stored: the other goes with the outcome
    assert stored_before == [(1, "text.delta")]
    assert [(e.seq, e.type) for e, _ in batch.events] == [(2, "text.delta"), (3, ending)]
    assert heard_with == ENDINGS[ending].status  # what the follower hears, the record says
    assert stored(run)[-1] == (3, ending)
