"""SDK clients are bound to the event loop that first used them (their httpx2 pool is);
keep one per running loop, so adapters work under asyncio.run, async_to_sync and ASGI,
and close each with its loop (no sockets left to the garbage collector)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerLoop(Generic[T]):
    def __init__(self, factory: Callable[[], T], close: Callable[[T], Awaitable[None]]) -> None:
        self._factory = factory
        self._close = close
        self._values: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    async def get(self) -> T:
        loop = asyncio.get_running_loop()
        entry = self._values.get(loop)
        if entry is not None:
            return entry[0]
        value = self._factory()
        closer = self._closer(value)
        self._values[loop] = (value, closer)
        # The first step registers the generator with the loop, so the loop's
        # shutdown_asyncgens() (asyncio.run does it) runs the `finally` below.
        await closer.asend(None)
        return value

    async def _closer(self, value: T) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            await self._close(value)
