"""Fixed-window counters in Redis, counted atomically: sign-in failures and API budgets.

A window opens at a key's first hit and lasts `window_s`; every hit in it adds one. One Lua
script counts all the windows of a call (SET NX EX, then INCRBY, then TTL, per key), atomic
as one command, so concurrent callers each get a distinct count (Redis 6.2, the embedded
one, has no EXPIRE NX; INCRBY keeps the TTL the SET gave). Keys go through the default
cache's make_key, so they share its prefix (one per test session).
"""

from __future__ import annotations

import asyncio
import hashlib
import weakref
from dataclasses import dataclass
from functools import lru_cache

from django.conf import settings
from django.core.cache import cache

from base.redis_wire import Batched, RedisReplyError, RedisWire
from base.versions import shared_redis

# KEYS: the counters; ARGV: per key its window's seconds, then its hits. Answers per key
# the count after its hits and the seconds its window has left.
_COUNT = """
local answers = {}
for i, key in ipairs(KEYS) do
  redis.call('SET', key, 0, 'EX', ARGV[2 * i - 1], 'NX')
  answers[2 * i - 1] = redis.call('INCRBY', key, ARGV[2 * i])
  answers[2 * i] = redis.call('TTL', key)
end
return answers
"""
_COUNT_SHA = hashlib.sha1(
    _COUNT.encode(), usedforsecurity=False
).hexdigest()  # (EVALSHA names it so)


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
    wanted = _wanted(windows)
    return _counts(windows, wanted, _sync_script(shared_redis())(*_script_args(wanted)))


async def hits_async(windows: list[tuple[str, int]]) -> list[Count]:
    """`hits` from async code, on the event loop over a connection of its own (redis_wire:
    a thread hop to redis-py's client cost each /v1 call about 0.2 ms): the hits asked for
    while a round trip is on its way wait for the next, and go together (one round trip
    for all the requests of that moment)."""
    loop = asyncio.get_running_loop()
    batch = _batches.get(loop)
    if batch is None:
        batch = _batches[loop] = Batched(settings.REDIS_URL, _count_hits)
    return await batch.ask(windows)


def _wanted(windows: list[tuple[str, int]]) -> dict[str, list[int]]:
    """name -> [how many hits, its window]."""
    wanted: dict[str, list[int]] = {}
    for name, window_s in windows:
        wanted.setdefault(name, [0, window_s])[0] += 1
    return wanted


def _script_args(wanted: dict[str, list[int]]) -> tuple[list[str], list[int]]:
    keys = [cache.make_key(name) for name in wanted]
    args = [n for times, window_s in wanted.values() for n in (window_s, times)]
    return keys, args


def _counts(windows, wanted: dict[str, list[int]], answers: list) -> list[Count]:
    reached = {
        name: (int(answers[2 * i]), int(answers[2 * i + 1])) for i, name in enumerate(wanted)
    }
    counted: list[Count] = []
    for name, _ in windows:
        value, ttl = reached[name]
        counted.append(Count(value=value - wanted[name][0] + 1, retry_after_s=max(ttl, 1)))
        wanted[name][0] -= 1  # (the next hit of this name counts one more)
    return counted


@lru_cache(maxsize=4)
def _sync_script(client):
    script = client.register_script(_COUNT)  # EVALSHA, loading the script when Redis lacks it
    return lambda keys, args: script(keys=keys, args=args)


async def _count_hits(redis: RedisWire, requests: list[list[tuple[str, int]]]) -> list:
    """The counts of each request's windows: one script call for all of them."""
    windows = [window for request in requests for window in request]
    wanted = _wanted(windows)
    keys, args = _script_args(wanted)
    try:
        answers = await redis.call("EVALSHA", _COUNT_SHA, len(keys), *keys, *args)
    except RedisReplyError as exc:
        if not str(exc).startswith("NOSCRIPT"):
            raise
        answers = await redis.call("EVAL", _COUNT, len(keys), *keys, *args)
    counts = _counts(windows, wanted, answers)
    split = []
    for request in requests:
        split.append(counts[: len(request)])
        counts = counts[len(request) :]
    return split


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
