"""Versions shared by every process through Redis: a process keeps what it built from the
database under a version and builds again when the version moves (any process bumps it
on a change). Also the one Redis client (and connection pool) per process for them, for
run events and for cancel flags."""

from __future__ import annotations

import secrets
from functools import lru_cache

import redis
from django.conf import settings


@lru_cache(maxsize=4)
def redis_client(url: str, *, decode: bool = False) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=decode)


def shared_redis(*, decode: bool = False) -> redis.Redis:
    return redis_client(settings.REDIS_URL, decode=decode)


def current(key: str) -> str:
    """The version under `key` (one read; created on first use)."""
    client = shared_redis(decode=True)
    version = client.get(key)
    if version is None:
        client.set(key, secrets.token_hex(8), nx=True)
        version = client.get(key)
    return version


def bump(key: str) -> None:
    shared_redis(decode=True).set(key, secrets.token_hex(8))
