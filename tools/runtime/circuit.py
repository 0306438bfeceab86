"""A per-tool circuit breaker whose state can be shared across processes (Redis).

Closed: calls pass. After `failure_threshold` consecutive failures it opens: calls fail
fast until `cooldown_s` has passed; then it half-opens and lets exactly one probe call
through (across all processes); the probe's success closes it, its failure re-opens it.

Cost: a process re-reads the shared state at most once per `refresh_s` (1 s) while its
calls succeed, so the hot path makes no Redis round trip; a failure is written at once
and makes the next call read afresh. Another process's trip is seen within `refresh_s`.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from dataclasses import dataclass
from typing import Protocol


class CircuitOpen(Exception):
    pass


@dataclass(frozen=True, slots=True)
class CircuitState:
    failures: int = 0
    opened_until: float = 0.0  # epoch seconds; 0 = closed


class CircuitStore(Protocol):
    async def read(self, key: str) -> CircuitState: ...
    async def add_failure(self, key: str, threshold: int, cooldown_s: float) -> None: ...
    async def reset(self, key: str) -> None: ...
    async def claim_probe(self, key: str, ttl_s: float) -> bool: ...


class MemoryCircuitStore:
    """One process only: the pure runtime's, used without the platform (tests/tools/
    test_http_tool.py holds it to the circuit tests the platform's store passes)."""

    def __init__(self) -> None:
        self._states: dict[str, CircuitState] = {}
        self._probes: dict[str, float] = {}

    async def read(self, key: str) -> CircuitState:
        return self._states.get(key, CircuitState())

    async def add_failure(self, key: str, threshold: int, cooldown_s: float) -> None:
        state = self._states.get(key, CircuitState())
        failures = state.failures + 1
        opened = time.time() + cooldown_s if failures >= threshold else state.opened_until
        self._states[key] = CircuitState(failures, opened)
        self._probes.pop(key, None)

    async def reset(self, key: str) -> None:
        self._states.pop(key, None)
        self._probes.pop(key, None)

    async def claim_probe(self, key: str, ttl_s: float) -> bool:
        now = time.time()
        if self._probes.get(key, 0) > now:
            return False
        self._probes[key] = now + ttl_s
        return True


class RedisCircuitStore:
    """State in a Redis hash per tool; one asyncio client per event loop."""

    KEY_TTL_S = 86_400

    def __init__(self, url: str, prefix: str = "ap:circuit:") -> None:
        self._url = url
        self._prefix = prefix
        self._clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _client(self):
        import redis.asyncio

        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = redis.asyncio.Redis.from_url(self._url)
            self._clients[loop] = client
        return client

    async def read(self, key: str) -> CircuitState:
        raw = await self._client().hgetall(self._prefix + key)
        if not raw:
            return CircuitState()
        return CircuitState(int(raw.get(b"failures", 0)), float(raw.get(b"opened_until", 0)))

    async def add_failure(self, key: str, threshold: int, cooldown_s: float) -> None:
        name = self._prefix + key
        async with self._client().pipeline(transaction=True) as pipe:
            pipe.hincrby(name, "failures", 1)
            pipe.expire(name, self.KEY_TTL_S)
            pipe.delete(name + ":probe")
            failures, *_ = await pipe.execute()
        if failures >= threshold:
            await self._client().hset(name, "opened_until", time.time() + cooldown_s)

    async def reset(self, key: str) -> None:
        name = self._prefix + key
        await self._client().delete(name, name + ":probe")

    async def claim_probe(self, key: str, ttl_s: float) -> bool:
        ttl_ms = max(1, int(ttl_s * 1000))
        return bool(await self._client().set(self._prefix + key + ":probe", 1, nx=True, px=ttl_ms))


class CircuitBreaker:
    def __init__(
        self,
        key: str,
        store: CircuitStore,
        *,
        failure_threshold: int = 5,
        cooldown_s: float = 30,
        refresh_s: float = 1.0,
    ) -> None:
        self.key = key
        self.store = store
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self.refresh_s = refresh_s
        self._seen: CircuitState | None = None
        self._seen_until = 0.0

    async def _state(self) -> CircuitState:
        now = time.monotonic()
        if self._seen is None or now >= self._seen_until:
            self._seen = await self.store.read(self.key)
            self._seen_until = now + self.refresh_s
        return self._seen

    async def before_call(self) -> CircuitState:
        """The state seen; raises CircuitOpen while open or while another probe runs."""
        state = await self._state()
        if not state.opened_until:
            return state
        wait = state.opened_until - time.time()
        if wait > 0:
            raise CircuitOpen(
                f"circuit open after {state.failures} consecutive failures; "
                f"calls resume in {wait:.0f} s"
            )
        if not await self.store.claim_probe(self.key, self.cooldown_s):
            raise CircuitOpen("circuit half-open: a trial call is in progress; try again shortly")
        return state

    async def on_success(self, seen: CircuitState) -> None:
        if seen.failures or seen.opened_until:
            await self.store.reset(self.key)
            self._seen = CircuitState()

    async def on_failure(self) -> None:
        await self.store.add_failure(self.key, self.failure_threshold, self.cooldown_s)
        self._seen = None  # read the shared count afresh on the next call
