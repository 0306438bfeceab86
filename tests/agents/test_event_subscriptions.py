"""The streams of an event loop share one Redis subscription (agents/runs/subscriptions.py):
each gets what is published on its channel once Redis confirmed, the channel is left with
its last stream, a lost connection tells every stream to read the record, and the
connection lingers for the next stream (RUN_EVENTS_LINGER_S)."""

from __future__ import annotations

import asyncio

import pytest
import redis
from asgiref.sync import sync_to_async
from django.conf import settings

from agents.models import RunEvent
from agents.runs import run_start
from agents.runs.channels import channel
from agents.runs.reader import iter_run_events
from agents.runs.subscriptions import LOST, deliver_early, subscriptions


def numsub(name: str) -> int:
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        return dict(client.pubsub_numsub(name))[name.encode()]
    finally:
        client.close()


def publish(name: str, data: str) -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.publish(name, data)
    finally:
        client.close()


def test_streams_of_one_channel_share_one_subscription_and_each_gets_every_message():
    name = "ap:test:shared:events"

    async def scenario():
        hub = subscriptions()
        first, second = await hub.follow(name), await hub.follow(name)
        subscribed = await asyncio.to_thread(numsub, name)
        await asyncio.to_thread(publish, name, '{"seq": 1}')
        got = [await asyncio.wait_for(q.get(), 5) for q in (first, second)]
        await hub.leave(name, first)
        still = await asyncio.to_thread(numsub, name)
        await hub.leave(name, second)
        return subscribed, got, still, await asyncio.to_thread(numsub, name)

    subscribed, got, still, after = asyncio.run(scenario())
    assert subscribed == 1
    assert got == [b'{"seq": 1}', b'{"seq": 1}']
    assert (still, after) == (1, 0)


def test_a_lost_connection_tells_every_stream_and_subscribes_again():
    name = "ap:test:lost:events"

    async def scenario():
        hub = subscriptions()
        queue = await hub.follow(name)
        hub.wire.close()  # as a Redis restart would
        lost = await asyncio.wait_for(queue.get(), 5)
        for _ in range(250):  # subscribed again on the next read
            if await asyncio.to_thread(numsub, name) == 1:
                break
            await asyncio.sleep(0.02)
        while not queue.empty():
            queue.get_nowait()  # (LOST again, from the reconnection itself)
        await asyncio.to_thread(publish, name, "after")
        after = await asyncio.wait_for(queue.get(), 5)
        await hub.leave(name, queue)
        return lost, after

    lost, after = asyncio.run(scenario())
    assert lost is LOST
    assert after == b"after"


def test_the_connection_lingers_for_the_next_stream(settings):
    settings.RUN_EVENTS_LINGER_S = 30

    async def scenario():
        hub = subscriptions()
        queue = await hub.follow("ap:test:linger:a")
        connection = hub.wire
        await hub.leave("ap:test:linger:a", queue)
        kept = hub.wire is not None
        queue = await hub.follow("ap:test:linger:b")
        reused = hub.wire is connection
        await hub.leave("ap:test:linger:b", queue)
        settings.RUN_EVENTS_LINGER_S = 0
        await hub.follow("ap:test:linger:c")
        await hub.leave("ap:test:linger:c", hub.followers[b"ap:test:linger:c"].copy().pop())
        return kept, reused, hub.wire

    kept, reused, closed = asyncio.run(scenario())
    assert kept and reused
    assert closed is None  # without linger, closed with the last stream


def test_the_connection_is_closed_once_the_linger_is_over(settings):
    settings.RUN_EVENTS_LINGER_S = 0.2

    async def scenario():
        hub = subscriptions()
        queue = await hub.follow("ap:test:linger:over")
        await hub.leave("ap:test:linger:over", queue)
        kept = hub.wire is not None
        await asyncio.sleep(0.4)
        return kept, hub.wire, hub.reader

    assert asyncio.run(scenario()) == (True, None, None)


@pytest.mark.django_db(transaction=True)
def test_a_stream_reads_the_record_after_its_subscription_was_lost(trio, agent):
    """An event stored while the subscription was down (its publish never arrives) still
    reaches the stream."""
    run = run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)

    def store_unpublished() -> None:
        RunEvent.objects.create(
            tenant=trio.acme, run=run, seq=1, type="run.started", payload={"via": "record"}
        )

    async def scenario():
        events = iter_run_events(run)
        first = asyncio.ensure_future(events.__anext__())
        hub = subscriptions()
        key = channel(run).encode()
        while key not in hub.followers or key in hub.unconfirmed:
            await asyncio.sleep(0.01)
        await sync_to_async(store_unpublished)()
        hub.wire.close()  # as a Redis restart would
        event = await asyncio.wait_for(first, 10)
        await events.aclose()
        return event

    event = asyncio.run(scenario())
    assert (event["seq"], event["type"], event["payload"]) == (1, "run.started", {"via": "record"})


def test_streams_starting_at_once_on_a_fresh_loop_share_one_connection():
    names = [f"ap:test:burst:{i}" for i in range(8)]

    async def scenario():
        hub = subscriptions()
        queues = await asyncio.wait_for(asyncio.gather(*(hub.follow(name) for name in names)), 10)
        counts = [await asyncio.to_thread(numsub, name) for name in names]
        for name, queue in zip(names, queues, strict=True):
            await hub.leave(name, queue)
        return counts

    assert asyncio.run(scenario()) == [1] * len(names)


def test_a_loop_that_ends_takes_its_subscription_with_it(settings):
    settings.RUN_EVENTS_LINGER_S = 30  # it would linger, but the loop goes first
    import gc
    import weakref

    async def scenario():
        hub = subscriptions()
        queue = await hub.follow("ap:test:ending")
        await hub.leave("ap:test:ending", queue)
        return weakref.ref(asyncio.get_running_loop()), weakref.ref(hub)

    loop, hub = asyncio.run(scenario())
    gc.collect()
    assert loop() is None and hub() is None


def test_only_a_runs_own_stream_gets_its_events_as_they_are_made():
    name = "ap:test:early:events"

    async def scenario():
        hub = subscriptions()
        own, other = await hub.follow(name, early=True), await hub.follow(name)
        deliver_early(name.encode(), lambda: '[{"seq": 1}]')
        got = own.get_nowait(), other.empty()
        await hub.leave(name, own)
        await hub.leave(name, other)
        deliver_early(name.encode(), lambda: '[{"seq": 2}]')  # nobody follows: nothing to do
        return got, hub.early

    (early, other_empty), left = asyncio.run(scenario())
    assert early == '[{"seq": 1}]' and other_empty
    assert left == {}


def test_a_web_process_executes_no_more_runs_than_its_room(settings, monkeypatch):
    from agents.runs import worker as worker_runs
    from agents.runs.worker import Nearby

    settings.RUN_NEARBY_CONCURRENCY = 2

    async def scenario():
        first, second, third = Nearby.reserve(), Nearby.reserve(), Nearby.reserve()
        full = third.owner is None
        first.release()
        again = Nearby.reserve()
        monkeypatch.setattr(worker_runs, "RESERVATION_S", 0.0)  # unstarted ones lapse
        lapsed = Nearby.reserve()
        had_room = again.owner is not None, lapsed.owner is not None
        for nearby in (second, again, lapsed):
            nearby.release()
        return full, *had_room

    assert asyncio.run(scenario()) == (True, True, True)
    assert worker_runs._nearby == {}
