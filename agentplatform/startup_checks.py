"""What every web and worker process checks before it serves.

A process started with the wrong FIELD_ENCRYPTION_KEYS would otherwise come up healthy and
fail each run that needs a stored secret, minutes later, with an error far from its cause.
So a process reads back what is stored, and refuses to start when it cannot decrypt it. It
also refuses a database login that row-level security would not bind.

Web processes run the checks in the ASGI lifespan startup (`checked_at_startup`, so uvicorn
needs `--lifespan on`), workers in Celery's `worker_init` (agentplatform/celery.py,
before the pool forks). Management commands, migrations and tests do not run them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import psycopg
from cryptography.fernet import InvalidToken
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from base import encryption
from base.stream_reads import stream_read
from tenancy import app_login, rls

logger = logging.getLogger(__name__)


class StartupCheckFailed(ImproperlyConfigured):
    """The process must not start; the message says what the operator must change."""


def check_encryption_keys() -> None:
    """Decrypt the newest and the oldest stored value of every encrypted column with
    FIELD_ENCRYPTION_KEYS; raise StartupCheckFailed naming the columns that fail (never a
    key or a value). An empty or not yet migrated database passes.

    Costs one connection of its own (not the pool's, which a worker must not open before
    it forks), acting for every tenant, and one query per encrypted column. An unreachable
    database is logged and passes: the process's own connections will report it."""
    with _own_connection() as raw:
        if raw is not None:
            _check_encryption_keys(raw)


def check_database_login() -> None:
    """With row-level security on, this process must log in as DB_APP_ROLE, and that role
    must be no more than the app's (tenancy/app_login.py): else
    StartupCheckFailed saying why. A login the server refuses (the password, a role migrate
    has not made yet) fails too, naming the setting; an unreachable database passes."""
    if not settings.DB_ROW_LEVEL_SECURITY:
        return
    with _own_connection() as raw:
        if raw is not None:
            problem = app_login.check_process_login(raw)
            if problem is not None:
                raise StartupCheckFailed(f"Refusing to start: {problem}")


@contextlib.contextmanager
def _own_connection() -> Iterator[psycopg.Connection | None]:
    """A connection with this process's login, acting for every tenant; None when the
    database cannot be reached (logged)."""
    params = connection.get_connection_params()
    params.setdefault("connect_timeout", 10)
    try:
        raw = psycopg.connect(**params, autocommit=True)
    except psycopg.OperationalError as exc:
        if _login_refused(exc):
            raise StartupCheckFailed(
                f"PostgreSQL refused the login of DB_APP_ROLE {settings.DB_APP_ROLE!r} "
                "(row-level security binds the web and worker processes to it): run "
                "`manage.py migrate`, which makes it, and give every process the same "
                "SECRET_KEY, or DB_APP_PASSWORD if set. Refusing to start."
            ) from None
        logger.warning("Start-up checks skipped: database unreachable.")
        yield None
        return
    with raw:
        raw.execute("SELECT set_config(%s, %s, false)", [rls.TENANTS_SETTING, rls.EVERY_TENANT])
        yield raw


def _login_refused(exc: psycopg.OperationalError) -> bool:
    """Whether the server refused this process's app login (not merely unreachable)."""
    if not settings.DB_ROW_LEVEL_SECURITY:
        return False
    if exc.sqlstate is not None:
        return exc.sqlstate.startswith("28")  # invalid authorization / password
    # libpq reports a refused password before a session exists: no SQLSTATE, only its text.
    text = str(exc)
    return "password authentication failed" in text or "not permitted to log in" in text


def _check_encryption_keys(raw: psycopg.Connection) -> None:
    multi = encryption.fernet()
    undecryptable: list[str] = []
    for model, names in encryption.encrypted_fields():
        for name in names:
            for token in _newest_and_oldest(raw, model, name):
                try:
                    multi.decrypt(token.encode())
                except InvalidToken:
                    undecryptable.append(f"{model._meta.label}.{name}")
                    break
    if undecryptable:
        raise StartupCheckFailed(
            "Stored secrets cannot be decrypted with FIELD_ENCRYPTION_KEYS "
            f"({', '.join(undecryptable)}): this process was given other keys than those "
            "that encrypted them. Give every web and worker process the same "
            "FIELD_ENCRYPTION_KEYS (newest first; keep an old key until `manage.py "
            "reencrypt_secrets` has run). Refusing to start."
        )


def _newest_and_oldest(raw: psycopg.Connection, model, name: str) -> list[str]:
    table = connection.ops.quote_name(model._meta.db_table)
    column = connection.ops.quote_name(model._meta.get_field(name).column)
    pk = connection.ops.quote_name(model._meta.pk.column)
    one = f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL ORDER BY {pk}"  # noqa: S608
    try:
        rows = raw.execute(f"({one} DESC LIMIT 1) UNION ALL ({one} LIMIT 1)").fetchall()
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn):
        return []  # not migrated yet: nothing stored
    return [value for (value,) in rows]


def run_startup_checks() -> None:
    """Every check; raises StartupCheckFailed on the first that fails."""
    check_database_login()
    check_encryption_keys()


def exit_unless_ready() -> None:
    """For a process's start: run the checks, and exit with their message (status 1, no
    traceback) when one fails."""
    try:
        run_startup_checks()
    except StartupCheckFailed as exc:
        raise SystemExit(f"Start-up check failed: {exc}") from None


def checked_at_startup(app: ASGIApp) -> ASGIApp:
    """`app`, whose lifespan startup first runs the checks; when one fails the server is
    told `lifespan.startup.failed` with the message (uvicorn logs it and exits)."""

    async def checked(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return
        startup = await receive()
        try:
            await stream_read(run_startup_checks)()
        except StartupCheckFailed as exc:
            await send({"type": "lifespan.startup.failed", "message": str(exc)})
            return
        pending: list[Message] = [startup]

        async def replay() -> Message:
            return pending.pop() if pending else await receive()

        await app(scope, replay, send)

    return checked
