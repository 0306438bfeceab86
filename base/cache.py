"""Django's Redis cache with one connection pool per process.

Django keeps a cache object per thread and, in async code, per task, and each builds its
own connection pool: under ASGI every request (a thread of its own) and every MCP call (a
task of its own) opened and dropped a fresh Redis connection. Sharing the pools keeps the
connections open across requests.
"""

from __future__ import annotations

from functools import cached_property

from django.core.cache.backends.redis import RedisCache, RedisCacheClient

_POOLS: dict[tuple[str, ...], dict] = {}


class SharedPoolRedisCache(RedisCache):
    @cached_property
    def _cache(self) -> RedisCacheClient:
        client = super()._cache
        client._pools = _POOLS.setdefault(tuple(self._servers), {})
        return client
