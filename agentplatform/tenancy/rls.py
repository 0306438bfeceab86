"""PostgreSQL row-level security: the second wall between tenants (docs/security.md).

Every tenant-owned table has a policy admitting only rows whose `tenant_id` is in the
session setting `app.tenant_ids` (a PostgreSQL array literal such as `{3}`; unset or empty
admits nothing). The web and worker processes assume a role that is neither superuser nor
owner (`settings.DB_APP_ROLE`, see `assume_app_role`), so the policies apply to them;
migrations, management commands and what must span tenants run as the owner.

This module is the one home of both settings on a connection. The unit of work says what it
acts for — `tenant_scope(tenant_id)` (tasks, MCP calls), `set_request_tenants(ids)` (a request,
once it has authenticated its tenant), `owner()` (a lookup that finds the tenant, or a sweep
across tenants) — and that is kept in a context variable, because a unit of work borrows
several connections (pool checkouts, asgiref's threads, a stream's reads) and its context
follows it into each. Before every query on Django's default connection an execute wrapper
brings that connection in line with the variable, so a connection never runs a query with
what another unit of work set on it (fail closed: unset admits no rows), whichever pool
checkout or thread it came from. It sends a statement only when the connection's state
differs from what is wanted (remembered per raw connection, and sent to the raw connection:
not one of the queries Django counts): usually one `set_config` per request, nothing per
further query.
"""

from __future__ import annotations

import contextvars
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS
from django.db.backends.signals import connection_created
from django.dispatch import receiver

TENANTS_SETTING = "app.tenant_ids"
# The policy of every tenant-owned table (the migrations install it with `policy_sql`).
POLICY_NAME = "tenant_isolation"
_ALLOWED = f"tenant_id = ANY (NULLIF(current_setting('{TENANTS_SETTING}', true), '')::bigint[])"


@dataclass(frozen=True)
class Scope:
    tenant_ids: tuple[int, ...] = ()
    as_owner: bool = False


_NONE = Scope()
_OWNER = Scope(as_owner=True)
_scope: contextvars.ContextVar[Scope] = contextvars.ContextVar("rls_scope", default=_NONE)

# The role this process assumes on its connections; None = the connecting (owner) role.
_app_role: str | None = None
# What each raw connection carries: ((role, or None for the connecting one; tenants text),
# whether it was set in a transaction not known to have committed).
_state: weakref.WeakKeyDictionary[psycopg.Connection, tuple[tuple[str | None, str], bool]] = (
    weakref.WeakKeyDictionary()
)
_UNKNOWN = ("?", "?")
_IDLE = psycopg.pq.TransactionStatus.IDLE
_INERROR = psycopg.pq.TransactionStatus.INERROR


def assume_app_role() -> None:
    """Make this process's connections assume the app role (web and worker processes; call
    after django.setup(), before the first query). No-op with DB_ROW_LEVEL_SECURITY off."""
    global _app_role
    if not settings.DB_ROW_LEVEL_SECURITY:
        return
    # Taken by the first query of every connection (see _sync). Not with Django's own
    # OPTIONS["assume_role"]: with the pool, Django 5.2's configure step composes its SET ROLE
    # through a cursor of the pool itself and waits for a connection forever.
    _app_role = settings.DB_APP_ROLE


def policy_sql(table: str) -> list[str]:
    """The statements putting `table` behind the tenant policy (idempotent)."""
    return [
        f'ALTER TABLE "{table}" ENABLE ROW LEVEL SECURITY',
        f'DROP POLICY IF EXISTS {POLICY_NAME} ON "{table}"',
        f'CREATE POLICY {POLICY_NAME} ON "{table}" USING ({_ALLOWED}) WITH CHECK ({_ALLOWED})',
    ]


# -- what the unit of work acts for ---------------------------------------------------------
@contextmanager
def tenant_scope(*tenant_ids: int) -> Iterator[None]:
    """Inside, this context's queries see (and may write) the rows of `tenant_ids` only."""
    with _scoped(Scope(tenant_ids=tuple(sorted({int(t) for t in tenant_ids})))):
        yield


@contextmanager
def owner() -> Iterator[None]:
    """Inside, queries run as the owner role: no policy applies. For lookups that find the
    tenant (keyed by the signed-in user or a secret) and for work across tenants; every use
    says why."""
    with _scoped(_OWNER):
        yield


def set_request_tenants(tenant_ids: Iterable[int]) -> None:
    """For the rest of this request, act for `tenant_ids` (the authenticated tenant; an admin's
    tenants). A request cannot nest a `with`; its start and its end clear it."""
    _scope.set(Scope(tenant_ids=tuple(sorted({int(t) for t in tenant_ids}))))


def set_request_owner() -> None:
    """For the rest of this request, act as the owner (a platform superuser in the admin)."""
    _scope.set(_OWNER)


def tenant_id_of(model, pk: int) -> int | None:
    """The tenant of the row `pk` of `model`, read as the owner: a task's message names a row
    by its id alone, and the task then works in that row's tenant. One query."""
    with owner():
        return model._default_manager.filter(pk=pk).values_list("tenant_id", flat=True).first()


def current() -> Scope:
    return _scope.get()


@contextmanager
def _scoped(scope: Scope) -> Iterator[None]:
    token = _scope.set(scope)
    try:
        yield
    finally:
        _scope.reset(token)


def clear_request(**kwargs) -> None:
    """`request_started` and `request_finished`: a thread serving requests one after another
    starts each clean, and leaves none of a request's tenants to what it does next."""
    _scope.set(_NONE)


# -- bringing connections in line ----------------------------------------------------------
@receiver(connection_created)
def _on_connect(sender, connection, **kwargs) -> None:
    """Every query of this (thread's) default connection first syncs the settings; installed
    once per connection wrapper (the wrapper outlives its pool checkouts)."""
    if connection.alias == DEFAULT_DB_ALIAS and _before_query not in connection.execute_wrappers:
        connection.execute_wrappers.append(_before_query)


def _before_query(execute, sql, params, many, context):
    _sync(context["connection"].connection)
    return execute(sql, params, many, context)


def _sync(raw: psycopg.Connection) -> None:
    scope = _scope.get()
    wanted = (
        None if scope.as_owner else _app_role,
        "{" + ",".join(map(str, scope.tenant_ids)) + "}" if scope.tenant_ids else "",
    )
    status = raw.info.transaction_status
    have, tentative = _state.get(raw, ((None, ""), False))  # new: the connecting role
    if tentative and status == _IDLE:
        have = _UNKNOWN  # set in a transaction that has ended: committed or rolled back?
    if have == wanted:
        return
    if status == _INERROR:
        return  # an aborted transaction refuses every statement (the query too)
    parts, params = [], []
    if have[0] != wanted[0]:
        parts.append("set_config('role', %s, false)")
        params.append(wanted[0] or "none")  # 'none': back to the connecting role
    if have[1] != wanted[1]:
        parts.append(f"set_config('{TENANTS_SETTING}', %s, false)")
        params.append(wanted[1])
    # Session-level: Django runs in autocommit, where a SET LOCAL would last one statement.
    # Made inside a transaction, a rollback undoes it: tentative until the transaction ends.
    # (A savepoint is created by a query, so what was wanted before it is set before it; the
    # scopes nest, so a rollback to it restores what the enclosing scope set.)
    _state[raw] = (_UNKNOWN, False)
    with raw.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts), params)
    # (Outside autocommit psycopg opens the transaction with this very statement.)
    _state[raw] = (wanted, status != _IDLE or not raw.autocommit)
