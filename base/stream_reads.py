"""How async code reaches the database, outside a run's own loop: two ways, both giving the
connection back as soon as the step ends.

- `brief`: a brief step of a request that goes on to stream for long (`/v1`), on the
  request's own thread;
- `stream_read`: a brief read or write for an open stream (SSE, MCP, the chat) or a step
  of async code that keeps no thread (quota holds, start-up checks), on any free thread.

An open stream waits for minutes on the event loop (agentplatform.asgi_handler: a streaming
response keeps no thread of its own) and must hold neither a thread nor a connection. A run
executing on a worker's loop reaches the database through Django's `sync_to_async`, which
its lane routes (agents.runs.worker), and direct tool calls record through the group commit
(agents.runs.writer.awrite_call): those two are the Run package's own.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextvars import ContextVar

from asgiref.sync import sync_to_async
from django.db import connection


def stream_read(function):
    """A brief database read for an open stream: on any free thread (a stream keeps none of
    its own), the connection given back right after."""
    return sync_to_async(_released(function), thread_sensitive=False)


def _released(function):
    """Run `function` and give its database connection back (unless a transaction is still
    open): an open stream waits for minutes, and must not hold one of the server's
    connections while it does."""

    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        finally:
            if not connection.in_atomic_block:
                connection.close()

    return call


def brief(function):
    """A brief database step of a request that goes on to stream for long (`/v1`): on the
    request's lane (`RequestLanes`) under a handler that gives it one, else on the
    request's own thread (so it sees the request's transaction, as in tests); its connection
    given back right after. A streaming request otherwise keeps its connection until the
    stream ends: with hundreds of streams the pool ran dry (bench/concurrency.py)."""

    async def step(*args):
        return await _step_on(function, _lane.get())(*args)

    return step


@functools.lru_cache(maxsize=256)
def _step_on(function, lane: Executor | None):
    """`function`'s step, made once per function and lane: asgiref's wrapper inspects the
    function as it is made, and making two per step of every request took 2% of a web
    process's CPU under a burst of `/v1` chats (py-spy, bench/api.py)."""
    released = _released(function)
    if lane is None:
        return sync_to_async(released)
    return sync_to_async(released, thread_sensitive=False, executor=lane)


_lane: ContextVar[Executor | None] = ContextVar("request_lane", default=None)


class Lanes:
    """A few threads that many holders share, each holder on the least busy one for as long
    as it holds it, its steps one at a time there: a thread that lives on keeps its pooled
    connection between steps, where a thread made per holder cost about 0.5 ms of CPU to
    make and join (bench/api.py). The runs of a worker (agents.runs.worker) and the `/v1`
    requests of a web process (`RequestLanes`) hold lanes. On one event loop only (the
    counts are not locked); the threads start on first use."""

    def __init__(self, count: int, name: str) -> None:
        self.executors = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-{i}")
            for i in range(count)
        ]
        self._busy = [0] * count

    @contextlib.contextmanager
    def least_busy(self) -> Iterator[ThreadPoolExecutor]:
        index = min(range(len(self._busy)), key=self._busy.__getitem__)
        self._busy[index] += 1
        try:
            yield self.executors[index]
        finally:
            self._busy[index] -= 1

    def idle(self, lane: ThreadPoolExecutor) -> bool:
        return not self._busy[self.executors.index(lane)]


class RequestLanes(Lanes):
    """The lanes the requests of a handler hold for their `brief` steps. A step holds a
    pooled connection while it runs (lanes beyond DB_POOL_MAX_SIZE wait for one)."""

    def __init__(self, count: int) -> None:
        super().__init__(count, "request")

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """This request's `brief` steps on one lane until the block ends."""
        with self.least_busy() as lane:
            token = _lane.set(lane)
            try:
                yield
            finally:
                _lane.reset(token)
