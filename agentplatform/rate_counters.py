"""Fixed-window counters in Redis, counted atomically: sign-in failures and API budgets.

A window opens at a key's first hit and lasts `window_s`; every hit in it adds one. SET NX
EX and INCR run in one MULTI, so concurrent callers each get a distinct count (Redis 6.2,
the embedded one, has no EXPIRE NX; INCR keeps the TTL the SET gave). Keys go through the
default cache's make_key, so they share its prefix (one per test session).
"""

from __future__ import annotations

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
    """`hit` for each (name, window_s), all in one round trip."""
    pipe = shared_redis().pipeline(transaction=True)
    for name, window_s in windows:
        key = cache.make_key(name)
        pipe.set(key, 0, ex=window_s, nx=True)
        pipe.incr(key)
        pipe.ttl(key)
    replies = pipe.execute()
    return [
        Count(value=int(replies[i + 1]), retry_after_s=max(int(replies[i + 2]), 1))
        for i in range(0, len(replies), 3)
    ]


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
