"""A small HTTP/1.1 keep-alive client for one origin: the gateway's pass-through to a
provider (providers.runtime.passthrough), on the guarded egress.

Why not httpx2, as everywhere else: per request its connection pool walks every pooled
connection with a readiness syscall, and its models and anyio streams cost more CPU than
the gateway adds in total; with 50 callers at once the pass-through took 36% of the web
process's CPU through httpx2 (bench/gateway.py). This does only what a pass-through needs:
POST a body, read a status, headers and a body (Content-Length, chunked, or to the close;
gzip or deflate decoded), stream that body, and keep the connection for the next request.

Every new connection resolves its host once and passes the egress policy with every
address it resolved to (tools.runtime.egress), as the guarded httpx2 clients do. Header
values are checked for CR/LF (they come from tenants' connections and callers). A reused
connection the server had closed while idle is retried once on a new one, and only when
the server had sent nothing back.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
import zlib
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from tools.runtime.egress import (
    EgressConnectError,
    EgressError,
    EgressPolicy,
    EgressRefused,
    EgressTimeout,
    ResponseTooLarge,
    default_ssl_context,
    literal_ip,
    resolve_with_getaddrinfo,
)

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024  # a non-streamed answer held in memory
IDLE_EXPIRY_S = 4.0  # under the usual 5 s of servers' keep-alive
MAX_IDLE = 100
READ_BYTES = 256 * 1024


class ProtocolError(EgressError):
    """The server's answer was not HTTP/1.x as it should be."""


@dataclass
class Head:
    version: str
    status: int
    headers: dict[str, str]  # names lower-cased; a repeated header's last value


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.idle_since = 0.0
        self.until_close = False  # a body without a length: read to the close, never reused

    def usable(self) -> bool:
        return (
            not self.writer.is_closing()
            and not self.reader.at_eof()
            and time.monotonic() - self.idle_since < IDLE_EXPIRY_S
        )

    def close(self) -> None:
        self.writer.close()


def checked_headers(headers: Iterable[tuple[str, str]]) -> bytes:
    """Header lines for a request; ValueError for a name or value that could split it."""
    lines = []
    for name, value in headers:
        if not name or any(c in name for c in "\r\n:\0 ") or any(c in value for c in "\r\n\0"):
            raise ValueError("a header name or value is not valid (CR, LF or NUL)")
        lines.append(f"{name}: {value}\r\n")
    try:
        return "".join(lines).encode("latin-1")
    except UnicodeEncodeError:
        raise ValueError("a header is not latin-1 text") from None


class Origin:
    """Keep-alive connections to the origin of `base_url`, for one event loop."""

    def __init__(self, base_url: str, *, policy: EgressPolicy, timeout_s: float) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EgressRefused("the base URL must be an http(s) URL with a host")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        default_port = self.port == (443 if self.tls else 80)
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = shown if default_port else f"{shown}:{self.port}"
        self.base_path = parts.path.rstrip("/")
        self._policy, self._timeout = policy, timeout_s
        self._idle: deque[_Connection] = deque()

    async def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    # -- connections -----------------------------------------------------------------------
    async def _connect(self) -> _Connection:
        literal = literal_ip(self.host)
        try:
            async with asyncio.timeout(self._timeout):
                if literal is not None:
                    addresses = [str(literal)]
                else:
                    addresses = await resolve_with_getaddrinfo(self.host, self.port, None)
                self._policy.check_addresses(self.host, addresses)
                failure: Exception | None = None
                for ip in addresses:
                    try:
                        reader, writer = await asyncio.open_connection(
                            ip,
                            self.port,
                            ssl=default_ssl_context() if self.tls else None,
                            server_hostname=self.host if self.tls else None,
                            limit=MAX_HEAD_BYTES,
                        )
                        return _Connection(reader, writer)
                    except (OSError, ssl.SSLError) as exc:
                        failure = exc
        except TimeoutError:
            raise EgressTimeout(f"connecting to {self.host} timed out") from None
        raise EgressConnectError(
            f"cannot connect to {self.host} ({type(failure).__name__})"
        ) from None

    def _take(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()  # the most recent: the likeliest still open
            if connection.usable():
                return connection
            connection.close()
        return None

    def _give_back(self, connection: _Connection) -> None:
        connection.idle_since = time.monotonic()
        if len(self._idle) >= MAX_IDLE:
            self._idle.popleft().close()
        self._idle.append(connection)

    # -- requests --------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def post(self, path: str, headers: bytes, body: bytes) -> AsyncIterator[Answer]:
        """POST `body` to `path` (under the base URL's path); `headers` from checked_headers.
        The answer's body is read with `Answer.read` or `Answer.chunks`; the connection goes
        back to the pool if it was read to its end."""
        request = (
            f"POST {self.base_path}{path} HTTP/1.1\r\nHost: {self.host_header}\r\n"
            f"Content-Length: {len(body)}\r\nAccept-Encoding: gzip, deflate\r\n"
        ).encode("latin-1")
        request += headers + b"\r\n" + body
        connection = self._take()
        head = None
        try:
            if connection is not None:
                try:
                    head = await self._exchange(connection, request)
                except (OSError, asyncio.IncompleteReadError) as exc:
                    if getattr(exc, "partial", b""):
                        raise
                    connection.close()  # the server closed it while idle: once more, anew
            if head is None:
                connection = await self._connect()
                head = await self._exchange(connection, request)
            answer = Answer(head, connection, self)
        except (OSError, asyncio.IncompleteReadError) as exc:
            if connection is not None:
                connection.close()
            raise EgressConnectError(
                f"the connection to {self.host} failed ({type(exc).__name__})"
            ) from None
        except BaseException:
            if connection is not None:
                connection.close()
            raise
        try:
            yield answer
        finally:
            answer._finish()

    async def _exchange(self, connection: _Connection, request: bytes) -> Head:
        connection.writer.write(request)
        try:
            async with asyncio.timeout(self._timeout):
                await connection.writer.drain()
                while True:
                    head = _parse_head(await connection.reader.readuntil(b"\r\n\r\n"))
                    if not 100 <= head.status < 200:
                        return head
        except TimeoutError:
            raise EgressTimeout(f"{self.host} did not answer in time") from None
        except asyncio.LimitOverrunError:
            raise ProtocolError(f"{self.host} sent headers too large to read") from None


async def _exactly(reader: asyncio.StreamReader, size: int, timeout: float) -> AsyncIterator[bytes]:
    """`size` bytes, as they come (never more than READ_BYTES held at once)."""
    if size < 0:
        raise ValueError("a negative length")
    while size > 0:
        async with asyncio.timeout(timeout):
            data = await reader.read(min(size, READ_BYTES))
        if not data:
            raise asyncio.IncompleteReadError(b"", size)
        size -= len(data)
        yield data


def _parse_head(raw: bytes) -> Head:
    lines = raw.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise ProtocolError("the provider's answer is not HTTP/1.x")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    return Head(version, int(code), headers)


class Answer:
    """A status and headers, and a body to read once (all of it, or chunk by chunk)."""

    def __init__(self, head: Head, connection: _Connection, origin: Origin) -> None:
        self.status, self.headers = head.status, head.headers
        self._keeps = (
            head.version == "HTTP/1.1" and "close" not in self.headers.get("connection", "").lower()
        )
        self._connection, self._origin = connection, origin
        self._done = False
        encoding = self.headers.get("content-encoding", "identity").lower()
        if encoding not in ("identity", "gzip", "deflate"):
            raise ProtocolError(f"the provider sent an unknown content encoding {encoding!r}")
        self._decoder = None if encoding == "identity" else zlib.decompressobj(wbits=47)

    async def read(self, max_bytes: int = MAX_BODY_BYTES) -> bytes:
        parts, size = [], 0
        async for piece in self.chunks():
            size += len(piece)
            if size > max_bytes:
                raise ResponseTooLarge(f"the answer is over {max_bytes} bytes")
            parts.append(piece)
        return b"".join(parts)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it comes (decoded); each wait for more is bounded by the timeout."""
        reader, timeout = self._connection.reader, self._origin._timeout
        try:
            async for raw in self._raw(reader, timeout):
                if self._decoder is None:
                    yield raw
                    continue
                # At most READ_BYTES decoded at a time: a few kB of gzip can decode to
                # gigabytes, and the caller's cap must see them come before they are held.
                piece = self._decoder.decompress(raw, READ_BYTES)
                while piece:
                    yield piece
                    piece = self._decoder.decompress(self._decoder.unconsumed_tail, READ_BYTES)
            if self._decoder:
                rest = self._decoder.flush()
                if rest:
                    yield rest
        except TimeoutError:
            raise EgressTimeout(f"{self._origin.host} stopped sending") from None
        except (OSError, asyncio.IncompleteReadError, zlib.error):
            raise EgressConnectError(f"the answer from {self._origin.host} broke off") from None
        except (ValueError, asyncio.LimitOverrunError):  # a chunk size that is not one
            raise ProtocolError(f"{self._origin.host} sent a malformed body") from None

    async def _raw(self, reader: asyncio.StreamReader, timeout: float) -> AsyncIterator[bytes]:
        if self.status in (204, 304):
            self._done = True
            return
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            while True:
                async with asyncio.timeout(timeout):
                    size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    async with asyncio.timeout(timeout):
                        while await reader.readuntil(b"\r\n") != b"\r\n":
                            pass  # trailers
                    self._done = True
                    return
                async for data in _exactly(reader, size, timeout):
                    yield data
                async with asyncio.timeout(timeout):
                    if await reader.readexactly(2) != b"\r\n":
                        raise ValueError("a chunk without its CRLF")
        length = self.headers.get("content-length")
        if length is not None:
            async for data in _exactly(reader, int(length), timeout):
                yield data
            self._done = True
            return
        self._connection.until_close = True
        while True:
            async with asyncio.timeout(timeout):
                data = await reader.read(READ_BYTES)
            if not data:
                return
            yield data

    def _finish(self) -> None:
        if self._done and self._keeps and not self._connection.until_close:
            self._origin._give_back(self._connection)
        else:
            self._connection.close()
