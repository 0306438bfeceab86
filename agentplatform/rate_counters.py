"""Fixed-window counters in Redis, counted atomically: sign-in failures and API budgets.

A window opens at a key's first hit and lasts `window_s`; every hit in it adds one. SET NX
EX and INCR run in one MULTI, so concurrent callers each get a distinct count (Redis 6.2,
the embedded one, has no EXPIRE NX; INCR keeps the TTL the SET gave). Keys go through the
default cache's make_key, so they share its prefix (one per test session).
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass

from django.core.cache import cache

from agentplatform.versions import shared_redis


@dataclass(frozen=True)
class Count:
    value: int
    retry_after_s: int  # until the window closes


def hit(name: str, window_s: int) -> Count:
    """Add one to `name`'s window and return the count including this hit. One round trip."""
    return hits([(name, window_s)])[0]


def hits(windows: list[tuple[str, int]]) -> list[Count]:
    """`hit` for each (name, window_s), all in one round trip. A name may come more than
    once: its hits get consecutive counts, in order."""
    wanted: dict[str, list[int]] = {}  # name -> how many hits, its window
    for name, window_s in windows:
        wanted.setdefault(name, [0, window_s])[0] += 1
    pipe = shared_redis().pipeline(transaction=True)
    for name, (times, window_s) in wanted.items():
        key = cache.make_key(name)
        pipe.set(key, 0, ex=window_s, nx=True)
        pipe.incrby(key, times)
        pipe.ttl(key)
    replies = pipe.execute()  # per name: SET's, INCRBY's (the count) and TTL's answers
    reached = {
        name: (int(replies[3 * i + 1]), int(replies[3 * i + 2])) for i, name in enumerate(wanted)
    }
    counted: list[Count] = []
    for name, _ in windows:
        value, ttl = reached[name]
        counted.append(Count(value=value - wanted[name][0] + 1, retry_after_s=max(ttl, 1)))
        wanted[name][0] -= 1  # (the next hit of this name counts one more)
    return counted


async def hits_async(windows: list[tuple[str, int]]) -> list[Count]:
    """`hits` from async code, off the event loop: the hits asked for while a round trip is
    on its way wait for the next, and go together (one thread hop and one round trip for
    all the requests of that moment; a blocking round trip per request held the loop for
    16% of a gateway call's CPU with 50 callers, bench/gateway.py)."""
    loop = asyncio.get_running_loop()
    batch = _batches.get(loop)
    if batch is None:
        batch = _batches[loop] = _Batch()
    return await batch.add(loop, windows)


class _Batch:
    def __init__(self) -> None:
        self.waiting: list[tuple[list[tuple[str, int]], asyncio.Future]] = []
        self.draining: asyncio.Task | None = None

    async def add(self, loop, windows: list[tuple[str, int]]) -> list[Count]:
        future = loop.create_future()
        self.waiting.append((windows, future))
        if self.draining is None:
            self.draining = loop.create_task(self._drain(loop))
        return await future

    async def _drain(self, loop) -> None:
        try:
            while self.waiting:
                batch, self.waiting = self.waiting, []
                try:
                    counts = await loop.run_in_executor(
                        None, hits, [window for windows, _ in batch for window in windows]
                    )
                except Exception as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for windows, future in batch:
                    mine, counts = counts[: len(windows)], counts[len(windows) :]
                    if not future.done():
                        future.set_result(mine)
        finally:
            self.draining = None


_batches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def unhit(name: str) -> None:
    """Take back one hit (a sign-in that turned out to succeed)."""
    key = cache.make_key(name)
    # A Lua script: never below zero, and never recreate a key that expired meanwhile.
    shared_redis().eval(
        "if redis.call('GET', KEYS[1]) and tonumber(redis.call('GET', KEYS[1])) > 0 "
        "then return redis.call('DECR', KEYS[1]) end return 0",
        1,
        key,
    )


def reset(name: str) -> None:
    shared_redis().delete(cache.make_key(name))
