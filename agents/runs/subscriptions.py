"""One Redis subscription per event loop for every run followed on it (agents.runs.reader).

A stream used to open a Redis connection of its own to subscribe to its run's channel: a
connect, a handshake and redis-py's package-version lookup per stream, a sixth of the web
process's CPU per chat in bench/api.py. Here the streams of an event loop share one pub/sub
connection: `follow(channel)` subscribes (waiting for Redis to confirm, so nothing published
afterwards is missed) and returns a queue; a reader task puts each message of the channel
(its raw data) in the queues of the streams following it, and LOST in every queue after the
connection was made again (messages may have been missed meanwhile: the stream reads the
record). `leave` unsubscribes the channel once its last stream is gone. The connection is
closed RUN_EVENTS_LINGER_S after the loop's last stream ended (a quiet web process holds
no connection; the next chat of a single user does not pay for a new one), and when its
loop shuts down.

The connection is spoken to directly (base.redis_wire): a command is written
without waiting, and the one reader takes every reply and message in turn. Through
redis-py's asyncio pub/sub, a chat's subscribe, messages and unsubscribe cost the web
process about 0.4 ms of CPU (a loop of follow, five messages, leave); here about 0.1.

Early delivery: the stream of a request that has its own process execute the run it
follows (agents.runs.worker.Nearby) asks `follow(..., early=True)` and gets each
event as the run's writer makes it (`deliver_early`), before it is stored and published:
that is most of the way to the first token. Only such a stream may see an event before it
is stored, since it cannot resume from a Last-Event-ID (it lives and dies with the process
that executes the run). The events that end an attempt (terminal, `approval.required`)
never come early: only through Redis, once the outcome is committed (agents.runs.writer);
if an attempt ends unfinished, `rewind` tells the stream the last stored event, so it
reads the record from there (the next attempt continues from it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from base.redis_wire import RedisReplyError, RedisWire

logger = logging.getLogger(__name__)

LOST = b"lost"  # put in every queue when messages may have been missed


@dataclass(frozen=True)
class Rewind:
    """In an early follower's queue: events after `seq` it was given were not stored."""

    seq: int


CONFIRM_TIMEOUT_S = 5.0
RETRY_S = 0.5


class _Subscriptions:
    def __init__(self) -> None:
        self.followers: dict[bytes, set[asyncio.Queue]] = {}
        self.early: dict[bytes, set[asyncio.Queue]] = {}  # also given events as they are made
        self.unconfirmed: dict[bytes, list[asyncio.Future]] = {}
        self.replies_due: dict[bytes, int] = {}  # SUBSCRIBEs sent, not yet answered
        self.connecting = asyncio.Lock()  # one connect at a time
        self.wire: RedisWire | None = None  # the connection, while there is one
        self.reader: asyncio.Task | None = None
        self.empty_since: float | None = None

    async def follow(self, name: str, *, early: bool = False) -> asyncio.Queue:
        """A queue of the channel's messages, once Redis confirmed the subscription; with
        `early`, also of the events a writer on this loop makes (see the module's doc)."""
        channel = name.encode()
        queue: asyncio.Queue = asyncio.Queue()
        if early:
            self.early.setdefault(channel, set()).add(queue)
        self.empty_since = None
        followers = self.followers.setdefault(channel, set())
        followers.add(queue)
        first = len(followers) == 1
        if not first and channel not in self.unconfirmed:
            return queue  # already subscribed and confirmed
        confirmed = asyncio.get_running_loop().create_future()
        self.unconfirmed.setdefault(channel, []).append(confirmed)
        try:
            async with asyncio.timeout(CONFIRM_TIMEOUT_S):
                if first:
                    wire = await self._connected()
                    self.replies_due[channel] = self.replies_due.get(channel, 0) + 1
                    with contextlib.suppress(OSError):  # (reconnecting: it subscribes it too)
                        wire.send(b"SUBSCRIBE", channel)
                await confirmed
        except BaseException:
            await self.leave(name, queue)
            raise
        return queue

    async def leave(self, name: str, queue: asyncio.Queue) -> None:
        channel = name.encode()
        early = self.early.get(channel)
        if early is not None:
            early.discard(queue)
            if not early:
                del self.early[channel]
        followers = self.followers.get(channel)
        if followers is not None:
            followers.discard(queue)
            if not followers:
                del self.followers[channel]
                self.unconfirmed.pop(channel, None)
                if self.wire is not None:
                    with contextlib.suppress(Exception):  # a dead connection forgets it anyway
                        self.wire.send(b"UNSUBSCRIBE", channel)
        if not self.followers:
            self.empty_since = time.monotonic()
            linger = float(settings.RUN_EVENTS_LINGER_S)
            if linger <= 0:
                self._detach()  # the next stream opens another
            else:
                asyncio.get_running_loop().call_later(linger, self._close_if_idle)

    def following(self) -> int:
        """How many streams follow runs on this loop now."""
        return sum(len(queues) for queues in self.followers.values())

    async def _connected(self) -> RedisWire:
        """The connection, opened (and its reader started) if there is none."""
        async with self.connecting:
            if self.wire is None:
                wire = RedisWire(settings.REDIS_URL)
                await wire.connect()
                self.wire = wire
                self.reader = asyncio.get_running_loop().create_task(self._read(wire))
            return self.wire

    def _close_if_idle(self) -> None:
        linger = float(settings.RUN_EVENTS_LINGER_S)
        if self.empty_since is not None and time.monotonic() - self.empty_since >= linger:
            self._detach()

    def _detach(self) -> None:
        """Close the connection (its reader ends); the next stream opens another."""
        wire, self.wire, self.reader = self.wire, None, None
        if wire is not None:
            wire.close()
        self.replies_due.clear()
        for waiting in self.unconfirmed.values():
            for confirmed in waiting:
                confirmed.cancel()
        self.unconfirmed.clear()

    async def _read(self, wire: RedisWire) -> None:
        try:
            while self.wire is wire:
                try:
                    message = await wire.reply()
                except Exception:  # (a reply cut off by a close shows as anything)
                    if self.wire is not wire:
                        return  # closed on purpose
                    logger.warning("the run events subscription failed; reconnecting")
                    wire.close()
                    await asyncio.sleep(RETRY_S)
                    await self._subscribe_again(wire)
                    continue
                self._handle(message)
        finally:
            wire.close()  # (the loop shutting down, or closed on purpose)
            if self.wire is wire:  # keep nothing that holds the loop (the hub is per loop)
                self._detach()

    async def _subscribe_again(self, wire: RedisWire) -> None:
        """Connect again and subscribe to every followed channel; what was published
        meanwhile is lost: every stream is told to read the record."""
        try:
            await wire.connect()
        except (OSError, EOFError, RedisReplyError):
            return  # the next read fails at once, and tries again
        self.replies_due = {channel: 1 for channel in self.followers}
        if self.followers:
            wire.send(b"SUBSCRIBE", *self.followers)
        for followers in self.followers.values():
            for queue in followers:
                queue.put_nowait(LOST)

    def _handle(self, message: list) -> None:
        kind, channel = message[0], message[1]
        if kind == b"message":
            for queue in self.followers.get(channel, ()):
                queue.put_nowait(message[2])
        elif kind == b"subscribe":
            due = self.replies_due.get(channel, 0) - 1
            if due > 0:
                self.replies_due[channel] = due  # an earlier SUBSCRIBE's answer
                return
            self.replies_due.pop(channel, None)
            for confirmed in self.unconfirmed.pop(channel, ()):
                if not confirmed.done():
                    confirmed.set_result(None)


_per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Subscriptions] = (
    weakref.WeakKeyDictionary()
)


def deliver_early(channel: bytes, message: Callable[[], str]) -> None:
    """An event to the early followers of `channel` on this loop; `message()` makes it (as
    published), only when someone follows: a worker's runs have no such followers."""
    queues = _early_followers(channel)
    if queues:
        data = message()
        for queue in queues:
            queue.put_nowait(data)


def rewind(channel: bytes, seq: int) -> None:
    """Tell the early followers of `channel` on this loop that only events up to `seq` are
    stored."""
    for queue in _early_followers(channel):
        queue.put_nowait(Rewind(seq))


def _early_followers(channel: bytes) -> set[asyncio.Queue]:
    hub = _per_loop.get(asyncio.get_running_loop())
    return hub.early.get(channel, set()) if hub is not None else set()


def subscriptions() -> _Subscriptions:
    """The running event loop's subscriptions."""
    loop = asyncio.get_running_loop()
    found = _per_loop.get(loop)
    if found is None:
        found = _per_loop[loop] = _Subscriptions()
    return found
