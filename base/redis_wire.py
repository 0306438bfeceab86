"""One Redis connection spoken to directly from an event loop: a command's bytes written,
its reply read. For the hottest round trips there are: the /v1 budget count (one Lua script
per moment, base.rate_counters), where redis-py's asyncio client costs about 0.25
ms of CPU per command and a thread hop to its sync client about 0.15 ms, against 0.05 ms
here (bench/gateway.py; the budget is on every gateway call's path); and the subscription a
web process's streams share (agents.runs.subscriptions: `connect`, `send`, `reply`), which
subscribes, reads and unsubscribes for every /v1 chat. Everything else uses redis-py.

Not a general client: RESP2 replies, one command at a time (the caller serialises), no
retry (a count sent twice would count twice: a failed call fails, and the next one
connects again).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from redis.connection import parse_url

TIMEOUT_S = 5.0
Q = TypeVar("Q")
A = TypeVar("A")


class RedisReplyError(Exception):
    """Redis answered with an error (`str(exc)` is its text, e.g. "NOSCRIPT ...")."""


class RedisWire:
    def __init__(self, url: str) -> None:
        self._options = parse_url(url)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def call(self, *args: Any) -> Any:
        """Send one command and return its reply: int, bytes, None or a list of them."""
        try:
            async with asyncio.timeout(TIMEOUT_S):
                if self._writer is None:
                    await self._connect()
                return await self._exchange(args)
        except RedisReplyError:
            raise
        except BaseException:
            self.close()  # the stream may be mid-reply: never read it again
            raise

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    # -- a subscription's connection: commands written, their replies and the messages read
    # by one reader, in the order Redis sends them.
    async def connect(self) -> None:
        """Open the connection (AUTH, SELECT) unless it is open."""
        if self._writer is None:
            try:
                async with asyncio.timeout(TIMEOUT_S):
                    await self._connect()
            except BaseException:
                self.close()
                raise

    def send(self, *args: Any) -> None:
        """Write one command without waiting for its reply (`reply` reads it)."""
        if self._writer is None:
            raise ConnectionError("not connected")
        self._writer.write(_command(args))

    async def reply(self) -> Any:
        """The next reply or pushed message; ConnectionError once the connection is gone."""
        if self._reader is None:
            raise ConnectionError("not connected")
        return await self._reply()

    async def _connect(self) -> None:
        options = self._options
        if "path" in options:
            self._reader, self._writer = await asyncio.open_unix_connection(options["path"])
        else:
            context = None
            if getattr(options.get("connection_class"), "__name__", "") == "SSLConnection":
                context = ssl.create_default_context()
                if options.get("ssl_cert_reqs") == "none":
                    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            self._reader, self._writer = await asyncio.open_connection(
                options.get("host", "localhost"), options.get("port", 6379), ssl=context
            )
        if options.get("password"):
            credentials = [options["username"]] if options.get("username") else []
            await self._exchange(("AUTH", *credentials, options["password"]))
        if options.get("db"):
            await self._exchange(("SELECT", options["db"]))

    async def _exchange(self, args) -> Any:
        assert self._writer is not None
        self._writer.write(_command(args))
        return await self._reply()

    async def _reply(self) -> Any:
        assert self._reader is not None
        line = await self._reader.readuntil(b"\r\n")
        kind, rest = line[:1], line[1:-2]
        if kind == b":":
            return int(rest)
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RedisReplyError(rest.decode("utf-8", "replace"))
        if kind == b"$":
            size = int(rest)
            return None if size < 0 else (await self._reader.readexactly(size + 2))[:-2]
        if kind == b"*":
            size = int(rest)
            return None if size < 0 else [await self._reply() for _ in range(size)]
        raise ConnectionError(f"Redis sent an unreadable reply: {line[:40]!r}")


class Batched(Generic[Q, A]):
    """The requests of one event loop that take turns on one connection: those asked while
    a round trip is on its way go together in the next one. `send(redis, requests)` makes
    that round trip and answers each request, in order; its failure fails all of them."""

    def __init__(self, url: str, send: Callable[[RedisWire, list[Q]], Awaitable[list[A]]]) -> None:
        self.redis = RedisWire(url)
        self._send = send
        self._waiting: list[tuple[Q, asyncio.Future]] = []
        self._draining: asyncio.Task | None = None

    async def ask(self, request: Q) -> A:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._waiting.append((request, future))
        if self._draining is None:
            self._draining = loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                try:
                    answers = await self._send(self.redis, [request for request, _ in batch])
                except Exception as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, future), answer in zip(batch, answers, strict=True):
                    if not future.done():  # (a caller that went away)
                        future.set_result(answer)
        finally:
            self._draining = None


def _command(args) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)
