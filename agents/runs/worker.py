"""The runs a worker process holds at once, all on one event loop.

A Celery task does not execute a run: it admits it. `admit` takes one of the process's
RUN_CONCURRENCY slots (waiting while all are taken, so the pool process stops taking
messages: backpressure), hands the run to the loop and returns; Celery acks the message.
From then on the record carries the run: the loop claims it with a lease and renews it
while the run waits for its model or tools. If the process dies, the lease expires and the
sweeper asks for the run again (a run lost between the ack and its claim is still queued,
and is asked for again after two leases), and the next claimer resumes it from its last
checkpoint, never repeating a recorded tool call. A run waiting for a model so costs a
coroutine and its state, not a process.

The loop lives as long as the process, so SDK clients (PerLoop) and their keep-alive
connections serve one run after another. A run's database statements (through
agents.runs.bridge.db, and Django's async ORM calls) go to one of RUN_DB_THREADS lanes — a
thread with its pooled connection — the least busy when the run starts: the runs of a
process share a few connections, and one slow statement holds up only its lane (one shared
thread made 100 runs wait 2 s for their claims in bench/concurrency.py). On a warm
shutdown the runs get RUN_DRAIN_S to finish; the others are handed over at once (lease
expired, queued again) instead of waiting for their leases to run out.

A quiet web process holds runs the same way (`Nearby`): a `/v1` chat or an MCP `ask_*`
that starts a run and follows its stream has it inserted already claimed and executes it
on the request's own event loop, with the same lease and record; a busier one, or one
stopping, asks a worker. A web process that dies leaves its runs to the sweeper like a
worker, and one that stops hands them over (`handing_over_at_shutdown`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.db import close_old_connections

from agents.models import Run
from agents.runs.bridge import on_lane
from agents.runs.engine import execute_run_async, hand_over
from agents.runs.subscriptions import subscriptions
from agents.runtime.spec import RunStatus
from agents.signals import request_execution
from base.stream_reads import Lanes

logger = logging.getLogger(__name__)

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()
_slots: threading.BoundedSemaphore | None = None
_held: dict[str, asyncio.Task] = {}  # lease owner -> the task executing that run
# The same for a web process's loop: reserved (since when, monotonic) or executing.
_nearby: dict[str, asyncio.Task | float] = {}
RESERVATION_S = 10.0
_stopping = False  # a web process handing its runs over: new ones go to a worker
_lanes: Lanes | None = None


def _running_loop() -> asyncio.AbstractEventLoop:
    global _loop, _slots
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            _slots = threading.BoundedSemaphore(settings.RUN_CONCURRENCY)
            _open_lanes()
            threading.Thread(target=_loop.run_forever, name="run-loop", daemon=True).start()
        return _loop


def _open_lanes() -> None:
    global _lanes
    if _lanes is None:
        _lanes = Lanes(settings.RUN_DB_THREADS, "run-db")


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def admit(run_id: int, tenant_id: int | None = None) -> str:
    """Give the run to this process's loop once a slot is free; return without waiting for
    it to execute."""
    loop = _running_loop()
    assert _slots is not None
    _slots.acquire()
    owner = _owner()
    try:
        loop.call_soon_threadsafe(_start, run_id, tenant_id, owner)
    except BaseException:
        _slots.release()
        raise
    return "admitted"


def _start(run_id: int, tenant_id: int | None, owner: str) -> None:
    task = asyncio.get_running_loop().create_task(
        _hold(run_id, tenant_id, owner), name=f"run-{run_id}"
    )
    _held[owner] = task
    task.add_done_callback(lambda _: _release_slot(owner))


def _release_slot(owner: str) -> None:
    _held.pop(owner, None)
    assert _slots is not None
    _slots.release()


class Nearby:
    """A run its web request has this process execute (the request follows it: a `/v1`
    chat, an MCP `ask_*`). Reserved before the run is started, so `run_start(claimed_by=
    nearby.owner)` inserts it already claimed under that lease (no claim statement before
    the first token); `start(run)` once its stream listens. `owner` is None when there is
    no room here: `start` then asks a worker.

    Room: this loop executes and follows at most RUN_NEARBY_CONCURRENCY (1) runs. A busy
    web process is the platform's narrowest part (it parses, checks and relays every chat),
    so under load the workers' CPU is the better place for a run (bench/concurrency.py:
    with room for 4, 20 chats at once took 1.35x the ideal instead of 1.19x); a quiet one
    saves the queue hop and the claim (bench/api.py: 10 ms of the first token at one
    user). A reservation whose request went away before starting its run lapses after
    RESERVATION_S; the run, claimed but not executing, is then the sweeper's once its
    lease expires."""

    def __init__(self, owner: str | None) -> None:
        self.owner = owner

    @classmethod
    def reserve(cls) -> Nearby:
        cap, now = settings.RUN_NEARBY_CONCURRENCY, time.monotonic()
        for owner, held in list(_nearby.items()):
            if isinstance(held, float) and now - held > RESERVATION_S:
                del _nearby[owner]
        if _stopping or len(_nearby) >= cap or subscriptions().following() >= cap:
            return cls(None)
        owner = _owner()
        _nearby[owner] = now
        return cls(owner)

    def start(self, run: Run) -> None:
        """Execute the run here if it was started under this reservation, else have it
        executed elsewhere. The run outlives the request: a client that goes away does
        not stop it."""
        owner, self.owner = self.owner, None
        if owner is None or run.lease_owner != owner:
            if owner is not None:
                _nearby.pop(owner, None)
            if run.status == RunStatus.QUEUED:  # (not a replay of a run under way)
                request_execution(run.pk, run.tenant_id)
            return
        with _lock:
            _open_lanes()
        run.stored_seq = 0  # a new run: nothing stored yet
        # A context of its own: nothing of the request's (its scope, its thread) follows it.
        task = asyncio.get_running_loop().create_task(
            _hold(run.pk, run.tenant_id, owner, claimed=run),
            name=f"run-{run.pk}",
            context=contextvars.Context(),
        )
        _nearby[owner] = task
        task.add_done_callback(lambda _: _nearby.pop(owner, None))

    def release(self) -> None:
        """The run was not started (the request was refused): give the room back."""
        if self.owner is not None:
            _nearby.pop(self.owner, None)
            self.owner = None


def handing_over_at_shutdown(app, *also: Callable[[], Awaitable[Any]]):
    """ASGI `app` whose lifespan shutdown first hands the runs held on this process's loop
    over to the workers (lease expired, queued again), then awaits each of `also` (what
    else must be written before the process ends). The server has already waited for its
    open streams (uvicorn's --timeout-graceful-shutdown)."""

    async def wrapped(scope, receive, send):
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return

        async def receiving():
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                await hand_over_nearby()
                for finish in also:
                    await finish()
            return message

        await app(scope, receiving, send)

    return wrapped


async def hand_over_nearby() -> int:
    """Stop the runs held on this loop and hand them over (those reserved but not started
    too); how many there were."""
    global _stopping
    _stopping = True
    owners = list(_nearby)
    tasks = [task for task in _nearby.values() if isinstance(task, asyncio.Task)]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if owners:
        await asyncio.to_thread(hand_over, owners)
        logger.info("handed %d runs over at shutdown", len(owners))
    return len(owners)


async def _hold(
    run_id: int, tenant_id: int | None, owner: str, *, claimed: Run | None = None
) -> None:
    assert _lanes is not None
    with _lanes.least_busy() as lane:
        try:
            # The run's statements (bridge.db) and Django's async ORM calls on the lane.
            with on_lane(lane):
                async with ThreadSensitiveContext(executor=lane):
                    # As a request would: drop the lane's connection if it died since its
                    # last run. Queued ahead of the run's first statement on the lane's one
                    # thread, not awaited: a hop of its own cost each run a wake-up of the
                    # thread and the loop.
                    lane.submit(_close_old_connections)
                    outcome = await execute_run_async(
                        run_id, owner=owner, tenant_id=tenant_id, claimed=claimed
                    )
            logger.info("run %s: %s", run_id, outcome)
        except asyncio.CancelledError:
            pass  # handed over at shutdown
        except Exception:
            logger.exception("run %s could not be executed; the sweeper will ask again", run_id)
    if _lanes.idle(lane):  # an idle lane gives its connection back: the pool may shrink
        lane.submit(_close_old_connections)


def _close_old_connections() -> None:
    try:
        close_old_connections()
    except Exception:  # (the run's first statement meets the same trouble, and says so)
        logger.warning("could not check a lane's database connection", exc_info=True)


def drain(grace_s: float) -> int:
    """At shutdown: let the held runs finish for `grace_s`, then hand the others over.
    Returns how many were handed over."""
    if _loop is None or _loop.is_closed():
        return 0
    deadline = time.monotonic() + grace_s
    while _held and time.monotonic() < deadline:
        time.sleep(0.05)
    owners = list(_held)
    if not owners:
        return 0

    async def stop() -> None:
        tasks = [task for owner in owners if (task := _held.get(owner)) is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run_coroutine_threadsafe(stop(), _loop).result(timeout=10)
    hand_over(owners)
    logger.info("handed %d runs over at shutdown", len(owners))
    return len(owners)
