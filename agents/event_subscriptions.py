"""One Redis subscription per event loop for every run followed on it (agents.run_reader).

A stream used to open a Redis connection of its own to subscribe to its run's channel: a
connect, a handshake and redis-py's package-version lookup per stream, a sixth of the web
process's CPU per chat in bench/api.py. Here the streams of an event loop share one pub/sub
connection: `follow(channel)` subscribes (waiting for Redis to confirm, so nothing published
afterwards is missed) and returns a queue; a reader task puts each message of the channel
(its raw data) in the queues of the streams following it, and LOST in every queue after the
connection was made again (messages may have been missed meanwhile: the stream reads the
record). `leave` unsubscribes the channel once its last stream is gone. The connection is
closed RUN_EVENTS_LINGER_S after the loop's last stream ended (a quiet web process holds no
connection; the next chat of a single user does not pay for a new one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref

import redis.asyncio
from django.conf import settings

logger = logging.getLogger(__name__)

LOST = b"lost"  # put in every queue when messages may have been missed
CONFIRM_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 1.0
RETRY_S = 0.5


class _Subscriptions:
    def __init__(self) -> None:
        self.followers: dict[bytes, set[asyncio.Queue]] = {}
        self.unconfirmed: dict[bytes, list[asyncio.Future]] = {}
        self.client: redis.asyncio.Redis | None = None
        self.pubsub = None
        self.reader: asyncio.Task | None = None
        self.closing: asyncio.TimerHandle | None = None

    async def follow(self, name: str) -> asyncio.Queue:
        channel = name.encode()
        queue: asyncio.Queue = asyncio.Queue()
        self._keep_open()
        followers = self.followers.setdefault(channel, set())
        followers.add(queue)
        waiting = self.unconfirmed.get(channel)
        if len(followers) > 1 and waiting is None:
            return queue  # already subscribed and confirmed
        confirmed = asyncio.get_running_loop().create_future()
        self.unconfirmed.setdefault(channel, []).append(confirmed)
        try:
            if waiting is None:  # the first stream of this channel: subscribe
                await self.pubsub.subscribe(channel)
                self.pubsub.connection.register_connect_callback(self._connected)
                if self.reader is None or self.reader.done():
                    self.reader = asyncio.get_running_loop().create_task(self._read())
            await asyncio.wait_for(confirmed, CONFIRM_TIMEOUT_S)
        except BaseException:
            await self.leave(name, queue)
            raise
        return queue

    async def leave(self, name: str, queue: asyncio.Queue) -> None:
        channel = name.encode()
        followers = self.followers.get(channel)
        if followers is not None:
            followers.discard(queue)
            if not followers:
                del self.followers[channel]
                self.unconfirmed.pop(channel, None)
                with contextlib.suppress(Exception):  # a dead connection forgets it anyway
                    await self.pubsub.unsubscribe(channel)
        if not self.followers:
            linger = float(settings.RUN_EVENTS_LINGER_S)
            if linger <= 0:
                await self._close()
            elif self.closing is None:
                loop = asyncio.get_running_loop()
                self.closing = loop.call_later(linger, lambda: loop.create_task(self._idle()))

    def _keep_open(self) -> None:
        if self.closing is not None:
            self.closing.cancel()
            self.closing = None
        if self.pubsub is None:
            self.client = redis.asyncio.Redis.from_url(settings.REDIS_URL)
            self.pubsub = self.client.pubsub()

    async def _idle(self) -> None:
        self.closing = None
        if not self.followers:
            await self._close()

    async def _close(self) -> None:
        reader, pubsub, client = self.reader, self.pubsub, self.client
        self.reader = self.pubsub = self.client = None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()
                await client.aclose()

    async def _read(self) -> None:
        pubsub = self.pubsub
        while True:
            try:
                message = await pubsub.get_message(timeout=READ_TIMEOUT_S)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.warning("the run events subscription failed; reconnecting", exc_info=True)
                self._lost()
                await asyncio.sleep(RETRY_S)  # the next read connects (and subscribes) again
                continue
            if message is None:
                continue
            kind, channel = message["type"], message["channel"]
            if kind == "message":
                for queue in self.followers.get(channel, ()):
                    queue.put_nowait(message["data"])
            elif kind == "subscribe":
                for confirmed in self.unconfirmed.pop(channel, ()):
                    if not confirmed.done():
                        confirmed.set_result(None)

    def _connected(self, connection) -> None:
        """Called by redis-py on every reconnection of the subscription (registered after it
        first connected), also those inside its retries, once it subscribed again."""
        self._lost()

    def _lost(self) -> None:
        for followers in self.followers.values():
            for queue in followers:
                queue.put_nowait(LOST)


_per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Subscriptions] = (
    weakref.WeakKeyDictionary()
)


def subscriptions() -> _Subscriptions:
    """The running event loop's subscriptions."""
    loop = asyncio.get_running_loop()
    found = _per_loop.get(loop)
    if found is None:
        found = _per_loop[loop] = _Subscriptions()
    return found
