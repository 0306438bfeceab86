"""Rows made once for a module's tests, each test still starting from them as made.

A module whose tests each walk many requests over the same objects (every page, every
route) makes them once: `module_rows` opens a transaction of the module's that its end
rolls back, and each test runs in a savepoint of it (pytest-django's `db` nests its
transaction in this one), so what a test writes is gone before the next. What a test
leaves in Redis is not in that transaction: `forget_redis_state` undoes it at each test's
start (counters and cached values deleted, the tenants' versions moved, so nothing a
process built or counted from a test's rolled-back rows is taken for current by the next).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from django.conf import settings
from django.db import transaction

from base import versions
from lifecycle.erasure import tenant_version_keys
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


def forget_redis_state(tenant_ids: Iterable[int]) -> None:
    """Redis as new tenants would find it, for the module's `tenant_ids`: this session's
    counters and cached values deleted (budgets, rate counters; other tests' leftovers
    too), the tenants' circuit breakers deleted, their versions and the API keys' bumped
    (announced: this process's mirror moves too). One SCAN pass, a few round trips."""
    redis = versions.shared_redis(decode=True)
    ids = list(tenant_ids)
    ours = f"{settings.CACHES['default'].get('KEY_PREFIX', '')}:"
    circuits = tuple(f"ap:circuit:{tenant_id}:" for tenant_id in ids)
    stale = [
        key
        for key in redis.scan_iter(count=1000)
        if (key.startswith(ours) and ":version:" not in key) or key.startswith(circuits)
    ]
    if stale:
        redis.delete(*stale)
    for tenant_id in ids:
        for key in tenant_version_keys(tenant_id):
            versions.bump(key)
    api_keys.keys_changed()
