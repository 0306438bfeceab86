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
connections serve one run after another. A run's database statements (Django's, through
sync_to_async) go to one of RUN_DB_THREADS lanes — a thread with its pooled connection —
the least busy when the run starts: the runs of a process share a few connections, and
one slow statement holds up only its lane (one shared thread made 100 runs wait 2 s for
their claims in bench/concurrency.py). On a warm shutdown the runs get RUN_DRAIN_S to
finish; the others are handed over at once (lease expired, queued again) instead of
waiting for their leases to run out.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.db import close_old_connections

from agents.execution import execute_run_async, hand_over

logger = logging.getLogger(__name__)

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()
_slots: threading.BoundedSemaphore | None = None
_held: dict[str, asyncio.Task] = {}  # lease owner -> the task executing that run
_lanes: list[ThreadPoolExecutor] = []
_lane_runs: list[int] = []  # runs on each lane now


def _running_loop() -> asyncio.AbstractEventLoop:
    global _loop, _slots
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            _slots = threading.BoundedSemaphore(settings.RUN_CONCURRENCY)
            _lanes[:] = [
                ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"run-db-{i}")
                for i in range(settings.RUN_DB_THREADS)
            ]
            _lane_runs[:] = [0] * len(_lanes)
            threading.Thread(target=_loop.run_forever, name="run-loop", daemon=True).start()
        return _loop


def admit(run_id: int, tenant_id: int | None = None) -> str:
    """Give the run to this process's loop once a slot is free; return without waiting for
    it to execute."""
    loop = _running_loop()
    assert _slots is not None
    _slots.acquire()
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
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


async def _hold(run_id: int, tenant_id: int | None, owner: str) -> None:
    lane = min(range(len(_lanes)), key=_lane_runs.__getitem__)
    _lane_runs[lane] += 1
    try:
        async with ThreadSensitiveContext(executor=_lanes[lane]):
            await sync_to_async(close_old_connections)()  # as a request would: drop a dead one
            outcome = await execute_run_async(run_id, owner=owner, tenant_id=tenant_id)
        logger.info("run %s: %s", run_id, outcome)
    except asyncio.CancelledError:
        pass  # handed over at shutdown
    except Exception:
        logger.exception("run %s could not be executed; the sweeper will ask again", run_id)
    finally:
        _lane_runs[lane] -= 1
        _held.pop(owner, None)
        assert _slots is not None
        _slots.release()


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
