"""One event loop per worker process, kept for the process's lifetime.

`async_to_sync` makes a new loop per call, so every run would build new SDK clients and
open new connections to the provider. In a worker, runs go to this loop instead: clients
(PerLoop) and their keep-alive connections live from one run to the next. Its database work
(`sync_to_async`) happens on asgiref's one shared sync thread, whose connection is checked
like a request's before each run. Elsewhere (tests, admin previews) runs keep using
`async_to_sync`, on the caller's thread and connection.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def _running_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="run-loop", daemon=True).start()
        return _loop


def run_in_worker_loop(function: Callable[..., Awaitable[T]], *args) -> T:
    """Run `function(*args)` on the process's run loop and wait for its result."""

    async def checked() -> T:
        await sync_to_async(close_old_connections)()  # as a request would: drop a dead one
        return await function(*args)

    return asyncio.run_coroutine_threadsafe(checked(), _running_loop()).result()
