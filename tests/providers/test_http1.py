"""providers.runtime.http1, the gateway's HTTP/1.1 client, against a scripted server on
loopback that answers each request with the bytes a test gives it (so framing, reuse and
broken answers can be exact)."""

from __future__ import annotations

import asyncio
import functools
import gzip
import time

import pytest

from providers.runtime import http1
from providers.runtime.http1 import Origin, checked_headers
from tools.runtime.egress import (
    EgressConnectError,
    EgressPolicy,
    EgressRefused,
    EgressTimeout,
    ResponseTooLarge,
)

LOOPBACK = EgressPolicy(allowlist=("127.0.0.1/32",))


def in_a_loop(test):
    @functools.wraps(test)
    def run(*args, **kwargs):
        asyncio.run(test(*args, **kwargs))

    return run


class Scripted:
    """A server whose connections each answer requests with the next of `answers` (bytes,
    or None to close the connection without a word); it records what it received and how
    many connections it accepted."""

    def __init__(self, answers: list[bytes | None], *, close_after: bool = False) -> None:
        self.answers, self.close_after = list(answers), close_after
        self.requests: list[bytes] = []
        self.connections = 0

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    async def _serve(self, reader, writer) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(
                    next(
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    )
                )
                self.requests.append(head + await reader.readexactly(length))
                answer = self.answers.pop(0)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


def ok(body: bytes = b'{"ok": true}', *extra: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in extra)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


async def post(origin: Origin, body: bytes = b"{}", headers: bytes = b"") -> tuple[int, bytes]:
    async with origin.post("/chat/completions", headers, body) as answer:
        return answer.status, await answer.read()


@in_a_loop
async def test_a_request_goes_out_as_written_and_its_connection_is_kept_for_the_next():
    async with Scripted([ok(), ok(b"second")]) as server:
        origin = Origin(server.url, policy=LOOPBACK, timeout_s=5)
        headers = checked_headers([("authorization", "Bearer k"), ("x-extra", "1")])
        assert await post(origin, b'{"a": 1}', headers) == (200, b'{"ok": true}')
        assert await post(origin) == (200, b"second")
        await origin.close()
    assert server.connections == 1
    first = server.requests[0].decode()
    assert first.startswith("POST /v1/chat/completions HTTP/1.1\r\n")
    assert "Host: 127.0.0.1:" in first and "authorization: Bearer k\r\n" in first
    assert "Content-Length: 8\r\n" in first and first.endswith('\r\n\r\n{"a": 1}')


@in_a_loop
async def test_chunked_gzip_and_read_to_close_bodies_are_read_whole():
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: t\r\n\r\n"
    )
    packed = gzip.compress(b"unpacked")
    zipped = ok(packed, "Content-Encoding: gzip")
    old = ok(b"1.0", "X: y").replace(b"HTTP/1.1", b"HTTP/1.0")
    to_close = b"HTTP/1.1 200 OK\r\n\r\nuntil the end"
    async with Scripted([chunked, zipped, old, to_close]) as server:
        origin = Origin(server.url, policy=LOOPBACK, timeout_s=5)
        assert await post(origin) == (200, b"hello world")
        assert await post(origin) == (200, b"unpacked")
        assert await post(origin) == (200, b"1.0")
        assert await post(origin) == (200, b"until the end")
        await origin.close()
    assert server.connections == 2  # an HTTP/1.0 answer's connection is not kept


@in_a_loop
async def test_a_stream_comes_piece_by_piece_as_the_server_sends_it():
    async def serve(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in (b"data: 1\n\n", b"data: 2\n\n"):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            await asyncio.sleep(0.05)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    origin = Origin(url, policy=LOOPBACK, timeout_s=5)
    seen = []
    async with origin.post("/x", b"", b"{}") as answer:
        async for piece in answer.chunks():
            seen.append((piece, time.monotonic()))
    assert [p for p, _ in seen] == [b"data: 1\n\n", b"data: 2\n\n"]
    assert seen[1][1] - seen[0][1] > 0.03  # the first came before the second was sent
    await origin.close()
    server.close()


@in_a_loop
async def test_a_kept_connection_the_server_closed_is_retried_once_on_a_new_one():
    async with Scripted([ok(), None, ok(b"again")]) as server:
        origin = Origin(server.url, policy=LOOPBACK, timeout_s=5)
        assert await post(origin) == (200, b'{"ok": true}')
        # The server reads the next request, then closes without answering (as one does
        # that closed an idle connection): the request goes once more, on a new connection.
        assert await post(origin) == (200, b"again")
        await origin.close()
    assert server.connections == 2 and len(server.requests) == 3


@in_a_loop
async def test_a_new_connection_closed_without_an_answer_is_an_error_not_a_retry():
    async with Scripted([None]) as server:
        origin = Origin(server.url, policy=LOOPBACK, timeout_s=5)
        with pytest.raises(EgressConnectError, match="failed"):
            await post(origin)
    assert server.connections == 1


@in_a_loop
async def test_connection_close_and_expiry_are_honoured(monkeypatch):
    async with Scripted([ok(b"1", "Connection: close"), ok(b"2"), ok(b"3")]) as server:
        origin = Origin(server.url, policy=LOOPBACK, timeout_s=5)
        await post(origin)
        await post(origin)  # a new connection: the first said close
        monkeypatch.setattr(http1, "IDLE_EXPIRY_S", 0.0)
        await post(origin)  # a new one again: the kept one has expired
        await origin.close()
    assert server.connections == 3


@in_a_loop
async def test_broken_or_oversized_answers_are_clear_errors(monkeypatch):
    answers = [
        b"SMTP nonsense\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X-Long: " + b"a" * 70_000 + b"\r\n\r\n",
    ]
    async with Scripted(answers, close_after=True) as server:
        origin = Origin(server.url, policy=LOOPBACK, timeout_s=5)
        for expected in ("not HTTP/1.x", "malformed body", "broke off", "content encoding"):
            with pytest.raises(http1.EgressError, match=expected):
                await post(origin)
        with pytest.raises(http1.ProtocolError, match="headers too large"):
            await post(origin)
    async with Scripted([ok(b"x" * 100)]) as server:
        origin = Origin(server.url, policy=LOOPBACK, timeout_s=5)
        async with origin.post("/x", b"", b"{}") as answer:
            with pytest.raises(ResponseTooLarge):
                await answer.read(max_bytes=50)


@in_a_loop
async def test_a_silent_server_times_out():
    async def silent(reader, writer):
        await asyncio.sleep(5)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    origin = Origin(
        f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", policy=LOOPBACK, timeout_s=0.2
    )
    with pytest.raises(EgressTimeout, match="did not answer in time"):
        await post(origin)
    server.close()


@in_a_loop
async def test_the_egress_policy_is_checked_before_connecting():
    async with Scripted([ok()]) as server:
        refused = Origin(server.url, policy=EgressPolicy(), timeout_s=5)
        with pytest.raises(EgressRefused, match="not allowed"):
            await post(refused)
        # Legacy spellings of a loopback address are the address they denote.
        port = server.url.rsplit(":", 1)[1].split("/")[0]
        with pytest.raises(EgressRefused):
            await post(Origin(f"http://2130706433:{port}", policy=EgressPolicy(), timeout_s=5))
    assert server.connections == 0
    with pytest.raises(EgressRefused, match="http"):
        Origin("ftp://example.com", policy=LOOPBACK, timeout_s=5)


def test_headers_that_could_split_a_request_are_refused():
    assert checked_headers([("a", "b")]) == b"a: b\r\n"
    for name, value in [
        ("x", "1\r\nInjected: yes"),
        ("x\r\ny", "1"),
        ("x:y", "1"),
        ("x", "nul\0"),
        ("x", "ünïcödé ✓"),
        ("", "1"),
    ]:
        with pytest.raises(ValueError, match=r"not valid|latin-1"):
            checked_headers([(name, value)])


@in_a_loop
async def test_a_compressed_answer_is_decoded_a_bounded_piece_at_a_time():
    """A few kB of gzip can decode to gigabytes: no piece is larger than READ_BYTES, so a
    caller's cap stops it before it is held."""
    import gzip

    bomb = gzip.compress(b"a" * (4 * http1.READ_BYTES))
    async with Scripted([ok(bomb, "Content-Encoding: gzip")]) as server:
        origin = Origin(server.url, policy=LOOPBACK, timeout_s=5)
        async with origin.post("/x", b"", b"{}") as answer:
            sizes = [len(piece) async for piece in answer.chunks()]
        assert max(sizes) <= http1.READ_BYTES and sum(sizes) == 4 * http1.READ_BYTES
        await origin.close()
