"""Versions shared by every process through Redis: a process keeps what it built from the
database under a version and builds again when the version moves (any process bumps it
on a change). Also the one Redis client (and connection pool) per process for them, for
run events and for cancel flags.

Reading a version costs no round trip: each process mirrors the versions it has read and
keeps the mirror current from a pub/sub channel on which every bump announces the new
value (SET and PUBLISH in one transaction, so announcements arrive in the order of the
writes). Before answering from the mirror, a read applies the announcements already
waiting on the subscription's socket (a poll, no round trip). Redis writes an announcement
to its subscribers in the same turn as it answers the bump, so a bump that finished before
a read began is seen by it, as with a read from Redis. Without a working subscription
(Redis restarted, a reconnection that may have lost announcements, a fork) reads go to
Redis, as they always did; and a mirrored version is trusted for TRUST_S at most, which bounds
what a connection that died without a word could make a process miss.

Work that may be rolled back (a configuration import, its dry run) bumps inside `held()`:
its bumps stay in its own context while it runs (its reads see new versions, no other
request's or process's do, so none of them takes what it built from uncommitted rows for
current), and are dropped when it ends by an exception or announced when it ends normally.
The change signals bump once more after the commit.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from functools import lru_cache
from typing import TypeVar

import redis
from django.conf import settings
from django.db.transaction import on_commit
from redis.backoff import NoBackoff
from redis.retry import Retry

T = TypeVar("T")
CHANNEL = "versions:changed"
RESUBSCRIBE_AFTER_S = 1.0  # after a failed subscription, read from Redis this long
TRUST_S = 5.0
READ_TIMEOUT_S = 1.0  # the subscription's connect and read bound (the caller waits)
BACKLOG = 256  # announcements in one catch-up after which it reads up to a PING's answer

# The versions bumped inside `held()`, by key; None outside. A context variable: the bumps
# are this context's (its thread, its tasks), never another request's.
_held: ContextVar[dict[str, str] | None] = ContextVar("versions_held", default=None)


@lru_cache(maxsize=4)
def redis_client(url: str, *, decode: bool = False) -> redis.Redis:
    # A burst beyond the pool's size waits for a connection instead of failing (redis-py
    # raises "Too many connections" past 100 otherwise: hundreds of requests at once did).
    pool = redis.BlockingConnectionPool.from_url(
        url,
        decode_responses=decode,
        max_connections=settings.REDIS_MAX_CONNECTIONS,
        timeout=settings.REDIS_POOL_TIMEOUT_S,
    )
    return redis.Redis(connection_pool=pool)


def shared_redis(*, decode: bool = False) -> redis.Redis:
    return redis_client(settings.REDIS_URL, decode=decode)


def current(key: str) -> str:
    """The version under `key` (created on first use)."""
    held = _held.get()
    if held is not None and key in held:
        return held[key]
    mirror = _mirror()
    with mirror.lock:
        live = mirror.catch_up()
        kept = mirror.known.get(key) if live else None
        changes = mirror.changes
    if kept is not None and time.monotonic() - kept[1] < TRUST_S:
        return kept[0]
    version = _read(key)
    if live:
        with mirror.lock:
            if mirror.subscription is not None and mirror.changes == changes:
                mirror.known[key] = (version, time.monotonic())
            # else a bump seen meanwhile may be newer than this read: read again next time
    return version


def bump(key: str) -> None:
    version = secrets.token_hex(8)
    held = _held.get()
    if held is not None:  # this context's until `held` ends
        held[key] = version
        return
    pipe = shared_redis(decode=True).pipeline(transaction=True)
    pipe.set(key, version)
    pipe.publish(CHANNEL, f"{key} {version}")
    pipe.execute()
    mirror = _mirror()
    with mirror.lock:  # read it back (the announcement may still be on its way)
        mirror.known.pop(key, None)
        mirror.changes += 1


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Bumps inside stay in this context until it ends: its own reads see them, Redis and
    every other context do not. Ended by an exception (its transaction rolls back), they
    are dropped; ended normally (its transaction goes on to commit), each key is bumped
    for everyone then. Either way, what was built under a held version is never current
    again. Enter it inside the transaction, so the bumps its change signals register for
    after the commit run outside it. Nested, it is the outer one's."""
    if _held.get() is not None:
        yield
        return
    bumped: dict[str, str] = {}
    token = _held.set(bumped)
    try:
        yield
    finally:
        _held.reset(token)
    for key in bumped:  # ended normally (an exception does not get here)
        bump(key)


def _read(key: str) -> str:
    client = shared_redis(decode=True)
    version = client.get(key)
    if version is None:
        client.set(key, secrets.token_hex(8), nx=True)
        version = client.get(key)
    return version


class _Mirror:
    """One process's copy of the versions it has read, and its subscription."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.lock = threading.Lock()
        self.known: dict[str, tuple[str, float]] = {}  # key -> (version, when learnt)
        self.client: redis.Redis | None = None
        self.subscription: redis.client.PubSub | None = None
        self.changes = 0  # counts bumps seen, so a read overtaken by one is not kept
        self.reconnected = False
        self.retry_at = 0.0

    def catch_up(self) -> bool:
        """Apply the announcements waiting; False when the mirror cannot be trusted."""
        try:
            if self.subscription is None:
                if time.monotonic() < self.retry_at:
                    return False
                self._subscribe()
            if self._apply_waiting() >= BACKLOG:
                self._apply_until_pong()
            if self.reconnected:  # redis-py resubscribed by itself: announcements may be lost
                raise redis.ConnectionError("the versions subscription was reconnected")
            return True
        except (redis.RedisError, OSError):
            self._drop()
            return False

    def _apply_waiting(self) -> int:
        """Apply the announcements on the socket now; how many there were."""
        count = 0
        connection = self.subscription.connection
        while connection.can_read(timeout=0):  # a whole message, though it may come in parts
            if self._apply(self.subscription.get_message(timeout=READ_TIMEOUT_S)):
                count += 1
        return count

    def _apply_until_pong(self) -> None:
        """After a backlog (a process idle while many bumps went by, more of them perhaps
        still in Redis's buffer): read up to a PING's answer, so none is left behind."""
        subscription = self.subscription
        subscription.ping()
        while (raw := subscription.parse_response(block=False, timeout=READ_TIMEOUT_S)) is not None:
            if raw == "PONG" or (isinstance(raw, list) and raw[:1] == ["pong"]):  # RESP3, RESP2
                return
            self._apply(subscription.handle_message(raw))
        raise redis.TimeoutError("no answer to the versions subscription's PING")

    def _apply(self, message: dict | None) -> bool:
        if message is None or message["type"] != "message":
            return False
        key, _, version = message["data"].partition(" ")
        self.known[key] = (version, time.monotonic())
        self.changes += 1
        return True

    def _subscribe(self) -> None:
        # A client of its own: no retries (a lost connection is a fallback to Redis, not a
        # wait on the caller's thread), named for CLIENT LIST.
        self.client = redis.Redis.from_url(  # kept: a collected client closes its connections
            self.url, decode_responses=True, retry=Retry(NoBackoff(), 0),
            client_name=f"versions-mirror-{os.getpid()}",
            socket_connect_timeout=READ_TIMEOUT_S, socket_timeout=READ_TIMEOUT_S,
        )  # fmt: skip
        subscription = self.client.pubsub()
        self.subscription = subscription
        self.reconnected = False
        subscription.subscribe(CHANNEL)
        subscription.connection.register_connect_callback(self._on_reconnect)
        # Trusted only once Redis confirms: bumps from then on are announced to us.
        confirmed = subscription.get_message(timeout=READ_TIMEOUT_S)
        if confirmed is None or confirmed["type"] != "subscribe":
            raise redis.ConnectionError("no confirmation of the versions subscription")

    def _on_reconnect(self, connection) -> None:
        self.reconnected = True

    def _drop(self) -> None:
        if self.subscription is not None:
            with contextlib.suppress(redis.RedisError, OSError):
                self.subscription.close()
            with contextlib.suppress(redis.RedisError, OSError):
                self.client.close()
        self.subscription = None
        self.known.clear()
        self.changes += 1
        self.retry_at = time.monotonic() + RESUBSCRIBE_AFTER_S


_mirrors: dict[tuple[int, str], _Mirror] = {}


def _mirror() -> _Mirror:
    """This process's mirror (a forked child starts its own, with its own subscription)."""
    place = (os.getpid(), settings.REDIS_URL)
    mirror = _mirrors.get(place)
    if mirror is None:
        mirror = _mirrors.setdefault(place, _Mirror(settings.REDIS_URL))
    return mirror


# The tenant's runtime configuration (tools, MCP connections, provider connections and
# routes, knowledge-base links): one version per tenant, bumped by every change signal, so
# what a process built from it (a registry, the gateway's routes) is rebuilt everywhere.


def _config_key(tenant_id: int) -> str:
    prefix = settings.CACHES["default"].get("KEY_PREFIX", "")
    return f"{prefix}:tools:version:{tenant_id}"


def config_version(tenant_id: int) -> str:
    """The tenant's configuration version, shared by every process through Redis."""
    return current(_config_key(tenant_id))


def config_bump(tenant_id: int) -> None:
    bump(_config_key(tenant_id))


def config_changed(tenant_id: int) -> None:
    """For change signals: bumped now, so this process's next read in the same transaction
    sees the change, and after commit, so a process that rebuilt from not-yet-committed
    data rebuilds again."""
    config_bump(tenant_id)
    on_commit(lambda: config_bump(tenant_id))


def per_config_version(
    store: dict[int, tuple[str, T]], tenant_id: int, build: Callable[[], T]
) -> T:
    """`build()` once per tenant configuration version, kept in `store` for this process."""
    version = config_version(tenant_id)
    kept = store.get(tenant_id)
    if kept is not None and kept[0] == version:
        return kept[1]
    built = build()
    store[tenant_id] = (version, built)
    return built
