"""agents.runs.bridge.db: how a run's coroutines reach their synchronous database steps."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import async_to_sync

from agents.runs.bridge import db, on_lane

_seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="")


def test_a_step_runs_on_the_runs_lane_with_the_callers_context():
    lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-lane")

    def step(value: int) -> tuple[str, str, int]:
        return threading.current_thread().name, _seen.get(), value + 1

    async def run() -> tuple[str, str, int]:
        _seen.set("the run's")
        with on_lane(lane):
            return await db(step)(1)

    try:
        thread, seen, value = asyncio.run(run())
    finally:
        lane.shutdown()
    assert thread.startswith("test-lane") and seen == "the run's" and value == 2


def test_an_async_to_sync_inside_a_step_comes_back_to_the_steps_thread():
    """The lane has one thread, busy with the step: the inner coroutine's own steps run on
    that thread (as asgiref's hop does it), not queued on the lane behind it (a deadlock)."""
    lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-lane")

    def inner_step() -> str:
        return threading.current_thread().name

    async def inner() -> str:
        return await db(inner_step)()

    def step() -> tuple[str, str]:
        return threading.current_thread().name, async_to_sync(inner)()

    async def run() -> tuple[str, str]:
        with on_lane(lane):
            return await asyncio.wait_for(db(step)(), timeout=10)

    try:
        outer, nested = asyncio.run(run())
    finally:
        lane.shutdown()
    assert outer.startswith("test-lane") and nested == outer


def test_without_a_lane_a_step_takes_djangos_way():
    def step() -> str:
        return threading.current_thread().name

    async def run() -> str:
        return await db(step)()

    assert not asyncio.run(run()).startswith("test-lane")
    assert async_to_sync(run)() == threading.current_thread().name  # (thread-sensitive)
