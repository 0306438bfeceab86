"""Between a run's coroutines and synchronous code, both ways.

`db`: from a run's coroutines to the database (Django's ORM and our statements are
synchronous). On the run's lane (agents.runs.worker: a thread with its pooled connection)
when it executes on a worker's or a web process's loop, through a plain executor hand-off:
Django's `sync_to_async`, which the lane also serves (Django's own async ORM calls), spent
about 40 us more of CPU per hop on its bookkeeping (100 against 75 us in a loop of 5,000
hops, asgiref 3.11), and a run makes four or five. Elsewhere (a direct tool call, a run
executed through `call`), `sync_to_async`.

`call`: from synchronous code into a run's coroutines, on one event loop the process keeps.

asgiref's `async_to_sync` makes a thread and a new event loop for each call, so every run
executed from synchronous code (`run_inline`, `execute_run`, a direct tool call: admin
previews, evaluations, commands, tests) built its SDK client (providers.runtime.clients.
PerLoop), its connection to the provider and its loop's Redis connection again, and tore
them down after (about 4 ms of a three-round run in bench/agents.py's breakdown). `call`
runs the coroutine on a loop that lives as long as the process instead, where all of that
is kept. Its synchronous parts (the ORM, through `sync_to_async`) still run in the calling
thread, on that thread's database connection and inside its transaction, as with
`async_to_sync`: that is asgiref's own path for a thread whose loop lives elsewhere (a
`sync_to_async` thread), which `call` points at this loop for the length of the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import os
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Executor
from typing import ParamSpec, TypeVar

from asgiref.sync import SyncToAsync, async_to_sync, sync_to_async

P = ParamSpec("P")
R = TypeVar("R")

_lane: contextvars.ContextVar[Executor | None] = contextvars.ContextVar("run_lane", default=None)
_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_pid = 0


def db(function: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """`function` made awaitable: called on the run's lane (`on_lane`) with a copy of the
    caller's context, else through Django's `sync_to_async`. Unlike asgiref's hop, a context
    variable the step sets does not come back to the caller (a run's steps set none; a
    request's authentication does, rls.set_request_tenants, and keeps Django's way)."""

    async def on_the_lane(*args: P.args, **kwargs: P.kwargs) -> R:
        lane = _lane.get()
        if lane is None:
            return await sync_to_async(function)(*args, **kwargs)
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        bound = functools.partial(context.run, _on_lane_thread, loop, function, *args, **kwargs)
        return await loop.run_in_executor(lane, bound)

    return on_the_lane


def _on_lane_thread(
    loop: asyncio.AbstractEventLoop, function: Callable[..., R], *args, **kwargs
) -> R:
    # As asgiref's own hop: an `async_to_sync` in `function` runs on the run's loop, and its
    # `db` calls come back to this thread (through asgiref), not to the lane this thread is
    # serving (whose one thread is this one, waiting).
    _lane.set(None)  # (in the copied context of this call only)
    local = SyncToAsync.threadlocal
    local.main_event_loop, local.main_event_loop_pid = loop, os.getpid()
    return function(*args, **kwargs)


@contextlib.contextmanager
def on_lane(lane: Executor) -> Iterator[None]:
    """`db` calls in this block (a run's) go to `lane`."""
    token = _lane.set(lane)
    try:
        yield
    finally:
        _lane.reset(token)


def call(function: Callable[P, Awaitable[R]], *args: P.args, **kwargs: P.kwargs) -> R:
    """`function(*args, **kwargs)` awaited on the process's loop; this thread waits, serving
    the coroutine's synchronous calls meanwhile."""
    local = SyncToAsync.threadlocal
    saved = (getattr(local, "main_event_loop", None), getattr(local, "main_event_loop_pid", None))
    local.main_event_loop, local.main_event_loop_pid = _process_loop(), os.getpid()
    try:
        return async_to_sync(function)(*args, **kwargs)
    finally:
        local.main_event_loop, local.main_event_loop_pid = saved


def _process_loop() -> asyncio.AbstractEventLoop:
    """The loop, started on first use (again in a forked child: threads do not survive a
    fork)."""
    global _loop, _pid
    with _lock:
        if _loop is None or _pid != os.getpid() or _loop.is_closed():
            _loop, _pid = asyncio.new_event_loop(), os.getpid()
            threading.Thread(target=_loop.run_forever, name="run-bridge", daemon=True).start()
        return _loop
