"""From synchronous code into a run's coroutines: on one event loop the process keeps.

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
import os
import threading
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import SyncToAsync, async_to_sync

P = ParamSpec("P")
R = TypeVar("R")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_pid = 0


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
