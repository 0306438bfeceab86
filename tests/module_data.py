"""Rows made once for a module's tests, each test still starting from them as made.

A module whose tests each walk many requests over the same objects (every page, every
route) makes them once: `module_rows` opens a transaction of the module's that its end
rolls back, and each test runs in a savepoint of it (pytest-django's `db` nests its
transaction in this one), so what a test writes is gone before the next. What a test
leaves in Redis is not in that transaction: `forget_redis_state` undoes it at each test's
start (the session's keys: budgets and counters deleted, versions moved, so nothing a
process built from a test's rolled-back rows is taken for current by the next).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from django.conf import settings
from django.db import transaction

from base import versions
from tenancy import api_keys

T = TypeVar("T")


@contextmanager
def module_rows(django_db_blocker, make: Callable[[], T]) -> Iterator[T]:
    """`make()`'s rows for the module's tests (a module-scoped fixture yields from this;
    it needs `django_db_setup`), rolled back at the module's end."""
    module_transaction = transaction.atomic()
    module_transaction._from_testcase = True  # durable blocks nest in it as in a TestCase
    with django_db_blocker.unblock():
        module_transaction.__enter__()
    try:
        with django_db_blocker.unblock():
            made = make()
        yield made
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            module_transaction.__exit__(None, None, None)


def forget_redis_state() -> None:
    """This session's Redis keys as a fresh set of tenants would find them: counters and
    cached values deleted, shared versions bumped (announced, so this process's mirror
    moves too). A few milliseconds."""
    redis = versions.shared_redis(decode=True)
    prefix = settings.CACHES["default"].get("KEY_PREFIX", "")
    stale = []
    for key in redis.scan_iter(match=f"{prefix}:*", count=1000):
        if ":version:" in key:
            versions.bump(key)
        else:
            stale.append(key)
    if stale:
        redis.delete(*stale)
    api_keys.keys_changed()  # (not under the session's prefix)
