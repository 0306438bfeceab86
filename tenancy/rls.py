"""PostgreSQL row-level security: the second wall between tenants (docs/security.md).

Every tenant-owned table has a policy admitting only rows whose `tenant_id` is in the
session setting `app.tenant_ids` (a PostgreSQL array literal such as `{3}`; `*` admits every
tenant; unset or empty admits nothing). The web and worker processes log in as a role that is
neither superuser nor owner nor BYPASSRLS (`settings.DB_APP_ROLE`, see `assume_app_role` and
`app_login`), so the policies bind them; migrations and management commands log in as the
owner, whom no policy binds.

This module is the one home of that setting on a connection. The unit of work says what it
acts for — `tenant_scope(tenant_id)` (tasks, MCP calls), `set_request_tenants(ids)` (a request,
once it has authenticated its tenant), `owner()` (a lookup that finds the tenant, or a sweep
across tenants: every tenant) — and that is kept in a context variable, because a unit of work
borrows several connections (pool checkouts, asgiref's threads, a stream's reads) and its
context follows it into each. Before every query on Django's default connection an execute
wrapper brings that connection in line with the variable, so a connection never runs a query
with what another unit of work set on it (fail closed: unset admits no rows), whichever pool
checkout or thread it came from. It sends a statement only when the connection's state
differs from what is wanted (remembered per raw connection, and sent to the raw connection:
not one of the queries Django counts), in one pipeline with the query (no round trip of
its own): a few `set_config` per request (its session, its tenant's lookup, the tenant's
own queries), nothing per further query in the same scope.

The setting itself is what SQL run by an attacker (an injection) could still change: it
could widen its own scope to every tenant's rows. It could not leave the role, change a
table, a policy or a trigger, or read the server's files (docs/security.md, "Limits").
"""

from __future__ import annotations

import contextvars
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.signals import connection_created
from django.dispatch import receiver

TENANTS_SETTING = "app.tenant_ids"
EVERY_TENANT = "*"
# The policy of every tenant-owned table (the migrations install it with `policy_sql`). Each
# current_setting is a scalar subquery, evaluated once per statement (an InitPlan), not per
# row: a filter three times cheaper per row than the bare OR; `*` is kept out of the array
# cast. Unlike the former `tenant_id = ANY (...)` alone, the policy is no index condition, so
# a query must carry its own tenant filter or key (every selector does) to avoid a scan.
POLICY_NAME = "tenant_isolation"
_SETTING = f"current_setting('{TENANTS_SETTING}', true)"
_ALLOWED = (
    f"((SELECT {_SETTING}) = '{EVERY_TENANT}' OR tenant_id = ANY ((SELECT "
    f"NULLIF(NULLIF({_SETTING}, ''), '{EVERY_TENANT}'))::bigint[]))"
)


@dataclass(frozen=True)
class Scope:
    tenant_ids: tuple[int, ...] = ()
    as_owner: bool = False


_NONE = Scope()
_OWNER = Scope(as_owner=True)
_scope: contextvars.ContextVar[Scope] = contextvars.ContextVar("rls_scope", default=_NONE)

# A role that connections logged in as the owner switch to with SET ROLE; None: stay the
# login. Production processes log in as the app role instead (assume_app_role) and leave it
# None; the test process sets it around requests it serves in-process (tests/conftest.py).
_app_role: str | None = None
# What each raw connection carries: ((role, or None for the login; tenants text),
# whether it was set in a transaction not known to have committed).
_state: weakref.WeakKeyDictionary[psycopg.Connection, tuple[tuple[str | None, str], bool]] = (
    weakref.WeakKeyDictionary()
)
_UNKNOWN = ("?", "?")
_IDLE = psycopg.pq.TransactionStatus.IDLE
_INERROR = psycopg.pq.TransactionStatus.INERROR


def assume_app_role() -> None:
    """Make this process (a web process, a worker) log in as the app role from now on: its
    connections, the pool's included, use DB_APP_ROLE and DB_APP_PASSWORD (a DATABASE_URL
    that names the app role already keeps its own password). Call after django.setup(),
    before the first query; a connection or pool opened before is closed. No-op with
    DB_ROW_LEVEL_SECURITY off."""
    if not settings.DB_ROW_LEVEL_SECURITY:
        return
    database = connections[DEFAULT_DB_ALIAS]
    login = database.settings_dict  # the one dict every thread's wrapper shares
    if login["USER"] != settings.DB_APP_ROLE:
        login["USER"] = settings.DB_APP_ROLE
        login["PASSWORD"] = settings.DB_APP_PASSWORD
    database.close()
    if login.get("OPTIONS", {}).get("pool"):
        database.close_pool()  # made (if at all) with the owner's login


def policy_sql(table: str) -> list[str]:
    """The statements putting `table` behind the tenant policy (idempotent)."""
    return [
        f'ALTER TABLE "{table}" ENABLE ROW LEVEL SECURITY',
        f'DROP POLICY IF EXISTS {POLICY_NAME} ON "{table}"',
        f'CREATE POLICY {POLICY_NAME} ON "{table}" USING ({_ALLOWED}) WITH CHECK ({_ALLOWED})',
    ]


def tenant_tables(apps) -> list[str]:
    """The tables of `apps`' models with a `tenant` foreign key (a migration's historical
    apps, or django.apps.apps)."""
    return sorted(
        model._meta.db_table
        for model in apps.get_models()
        if any(
            field.name == "tenant"
            and field.many_to_one
            and field.related_model._meta.label_lower == "tenancy.tenant"
            for field in model._meta.get_fields()
        )
    )


# -- what the unit of work acts for ---------------------------------------------------------
@contextmanager
def tenant_scope(*tenant_ids: int) -> Iterator[None]:
    """Inside, this context's queries see (and may write) the rows of `tenant_ids` only."""
    with _scoped(Scope(tenant_ids=tuple(sorted({int(t) for t in tenant_ids})))):
        yield


@contextmanager
def owner() -> Iterator[None]:
    """Inside, queries act for every tenant (the owner's view of the data; the login stays
    the app role). For lookups that find the tenant (keyed by the signed-in user or a
    secret) and for work across tenants; every use says why."""
    with _scoped(_OWNER):
        yield


def set_request_tenants(tenant_ids: Iterable[int]) -> None:
    """For the rest of this request, act for `tenant_ids` (the authenticated tenant; an admin's
    tenants). A request cannot nest a `with`; its start and its end clear it."""
    _scope.set(Scope(tenant_ids=tuple(sorted({int(t) for t in tenant_ids}))))


def set_request_owner() -> None:
    """For the rest of this request, act for every tenant (a platform superuser in the
    admin)."""
    _scope.set(_OWNER)


def tenant_id_of(model, pk: int) -> int | None:
    """The tenant of the row `pk` of `model`, read for every tenant: a task's message names a row
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
    """The connection brought in line, then the query: both in one round trip (a pipeline)
    when the query may go in one; a server-side cursor's DECLARE and a string of several
    statements may not, and go after the setting's own statement."""
    raw = context["connection"].connection
    change = _change(raw)
    if change is None:
        return execute(sql, params, many, context)
    setting, args, wanted, tentative = change
    _state[raw] = (_UNKNOWN, False)  # until both are through: an error leaves it unknown
    if isinstance(context["cursor"].cursor, psycopg.ServerCursor) or ";" in str(sql):
        with raw.cursor() as cursor:
            cursor.execute(setting, args)
        _state[raw] = (wanted, tentative)
        return execute(sql, params, many, context)
    # The query's results are read at the pipeline's end, its errors raised there: as
    # Django's own (an IntegrityError, not psycopg's), as they would be from the query.
    with context["connection"].wrap_database_errors, raw.pipeline(), raw.cursor() as cursor:
        cursor.execute(setting, args)
        result = execute(sql, params, many, context)
    _state[raw] = (wanted, tentative)
    return result


def _change(raw: psycopg.Connection) -> tuple[str, list[str], tuple[str | None, str], bool] | None:
    """The statement bringing `raw` in line with this context's scope and role, the state it
    sets and whether that is tentative (set in a transaction); None when in line already."""
    scope = _scope.get()
    if scope.as_owner:
        tenants = EVERY_TENANT
    else:
        tenants = "{" + ",".join(map(str, scope.tenant_ids)) + "}" if scope.tenant_ids else ""
    wanted = (_app_role, tenants)
    status = raw.info.transaction_status
    have, tentative = _state.get(raw, ((None, ""), False))  # new: the login, no setting
    if tentative and status == _IDLE:
        have = _UNKNOWN  # set in a transaction that has ended: committed or rolled back?
    if have == wanted:
        return None
    if status == _INERROR:
        return None  # an aborted transaction refuses every statement (the query too)
    parts, params = [], []
    if have[0] != wanted[0]:
        parts.append("set_config('role', %s, false)")
        params.append(wanted[0] or "none")  # 'none': back to the login role
    if have[1] != wanted[1]:
        parts.append(f"set_config('{TENANTS_SETTING}', %s, false)")
        params.append(wanted[1])
    # Session-level: Django runs in autocommit, where a SET LOCAL would last one statement.
    # Made inside a transaction, a rollback undoes it: tentative until the transaction ends.
    # (A savepoint is created by a query, so what was wanted before it is set before it; the
    # scopes nest, so a rollback to it restores what the enclosing scope set.)
    # (Outside autocommit psycopg opens the transaction with this very statement.)
    return "SELECT " + ", ".join(parts), params, wanted, status != _IDLE or not raw.autocommit
