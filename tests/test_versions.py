"""Versions mirrored in each process from Redis pub/sub: read without a round trip, and as
current as a read from Redis (real embedded Redis; the other process is a client of its own)."""

from __future__ import annotations

import os
import threading
import uuid

import pytest
import redis
from django.conf import settings

from base import versions


@pytest.fixture
def key() -> str:
    return f"test:version:{uuid.uuid4().hex}"


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """The keys read from Redis (the real reads, recorded)."""
    seen: list[str] = []
    real = versions._read

    def recorded(key: str) -> str:
        seen.append(key)
        return real(key)

    monkeypatch.setattr(versions, "_read", recorded)
    return seen


def elsewhere() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, decode_responses=True)


def bump_in_another_process(key: str) -> str:
    """What `bump` does in another process: SET and announce, on a connection of its own."""
    value = uuid.uuid4().hex[:16]
    with elsewhere() as client:
        pipe = client.pipeline(transaction=True)
        pipe.set(key, value)
        pipe.publish(versions.CHANNEL, f"{key} {value}")
        pipe.execute()
    return value


def test_a_version_is_read_once_then_from_the_mirror(key, reads):
    first = versions.current(key)
    assert [versions.current(key) for _ in range(50)] == [first] * 50
    assert reads == [key]
    with elsewhere() as client:
        assert client.get(key) == first


def test_a_bump_in_another_process_is_seen_by_the_very_next_read(key, reads):
    versions.current(key)
    for _ in range(20):  # no sleep between the bump and the read
        bumped = bump_in_another_process(key)
        assert versions.current(key) == bumped
    assert reads == [key]  # learnt from the announcements, not read again


def test_a_bump_here_is_seen_at_once(key):
    before = versions.current(key)
    versions.bump(key)
    after = versions.current(key)
    with elsewhere() as client:
        assert after == client.get(key) != before


def test_a_lost_subscription_falls_back_to_redis_then_subscribes_again(key, reads, monkeypatch):
    monkeypatch.setattr(versions, "RESUBSCRIBE_AFTER_S", 0.0)
    versions.current(key)
    with elsewhere() as client:  # Redis drops this process's subscription (as on a restart)
        ours = [c for c in client.client_list() if c["name"] == f"versions-mirror-{os.getpid()}"]
        assert len(ours) == 1
        client.client_kill_filter(_id=ours[0]["id"])
    missed = bump_in_another_process(key)  # announced while nobody of ours listened
    assert versions.current(key) == missed  # read from Redis: the mirror was distrusted
    assert reads == [key, key]
    assert versions.current(key) == missed  # subscribed again; the mirror starts empty
    assert reads == [key, key, key]
    bumped = bump_in_another_process(key)
    assert versions.current(key) == bumped
    assert reads == [key, key, key]  # mirrored again


def test_a_mirrored_version_is_read_again_after_trust_s(key, reads, monkeypatch):
    versions.current(key)
    monkeypatch.setattr(versions, "TRUST_S", 0.0)
    versions.current(key)
    assert reads == [key, key]


def test_a_backlog_of_announcements_is_read_to_its_end(key, reads, monkeypatch):
    monkeypatch.setattr(versions, "BACKLOG", 3)  # from 3 on, read up to a PING's answer
    pongs = []
    real = versions._Mirror._apply_until_pong
    monkeypatch.setattr(
        versions._Mirror, "_apply_until_pong", lambda self: pongs.append(1) or real(self)
    )
    versions.current(key)
    last = [bump_in_another_process(key) for _ in range(10)][-1]
    assert versions.current(key) == last
    assert pongs == [1] and reads == [key]  # still mirrored: the subscription was kept


def test_bumps_held_stay_in_their_context_then_are_dropped_or_announced(key):
    """`held()`: what a transaction that may roll back bumps (a configuration import)."""
    before = versions.current(key)
    seen_elsewhere = []
    with pytest.raises(RuntimeError), versions.held():  # ended by an exception: dropped
        versions.bump(key)
        inside = versions.current(key)
        with versions.held():  # nested: the outer one's
            assert versions.current(key) == inside
            versions.bump(key)
        inside = versions.current(key)
        thread = threading.Thread(target=lambda: seen_elsewhere.append(versions.current(key)))
        thread.start()
        thread.join()
        assert inside != before and versions.current(key) == inside
        with elsewhere() as client:
            assert client.get(key) == before  # not in Redis
        raise RuntimeError("rolled back")
    assert seen_elsewhere == [before]
    assert versions.current(key) == before  # never current again
    with versions.held():  # ended normally: bumped for everyone at its end
        versions.bump(key)
        inside = versions.current(key)
        with elsewhere() as client:
            assert client.get(key) == before
    after = versions.current(key)
    with elsewhere() as client:
        assert client.get(key) == after
    assert after not in (before, inside)
