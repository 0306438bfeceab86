"""The database login of the web and worker processes (docs/security.md, "Row-level security").

Those processes log in as `DB_APP_ROLE` with `DB_APP_PASSWORD` (`rls.assume_app_role`): a
role that is neither superuser, nor owner of a table, nor BYPASSRLS, nor a member of such a
role, so the tenant policies bind every query they send, whatever the SQL (`RESET ROLE`
leaves it the same role; `SET ROLE` to the owner is refused). `migrate` runs as the owner
(DATABASE_URL's user) and keeps this login (`ensure`, after every migrate): created, able to
log in, its password set, its table privileges granted. Each process checks its login at
start (`check_process_login`) and refuses to run as anything more privileged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

import psycopg
from django.conf import settings
from django.core.management.base import CommandError
from django.db import DatabaseError, transaction

# Privileges on what migrations create later come from the default privileges.
_GRANTS = """
GRANT USAGE ON SCHEMA public TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role};
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role};
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO {role};
"""

_CREATE = """
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
    CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
  END IF;
EXCEPTION WHEN duplicate_object THEN NULL;  -- another session created it meanwhile
END $$;
"""

# What makes a login more than the app role: any of it lets SQL step around the policies.
_PRIVILEGED = """
SELECT r.rolsuper OR r.rolbypassrls
       OR EXISTS (SELECT FROM pg_roles s WHERE (s.rolsuper OR s.rolbypassrls)
                  AND s.oid <> r.oid AND pg_has_role(r.oid, s.oid, 'MEMBER'))
       OR EXISTS (SELECT FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = 'public' AND pg_has_role(r.oid, c.relowner, 'MEMBER'))
FROM pg_roles r WHERE r.rolname = %s
"""


def scram_verifier(password: str, *, salt: bytes | None = None, iterations: int = 4096) -> str:
    """PostgreSQL's SCRAM-SHA-256 verifier of `password` (RFC 5803's format): given to
    ALTER ROLE instead of the password, so no statement log can show the password."""
    salt = salt if salt is not None else os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


def ensure(connection) -> None:
    """Make DB_APP_ROLE a login for the processes, on Django `connection` (the owner's,
    while migrating): the role created if missing, LOGIN with DB_APP_PASSWORD, privileges on
    every table and sequence. A user that may not create or alter roles (an external
    PostgreSQL) gets CommandError naming the statements for an administrator, unless the
    login already works. Refuses (CommandError) a role that is privileged beyond the app's."""
    role = settings.DB_APP_ROLE
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        user = cursor.fetchone()[0]
        if user == role:
            raise CommandError(
                f"migrate runs as the owner of the tables, not as DB_APP_ROLE {role!r}: give "
                "it the DATABASE_URL of the user that owns the database."
            )
        try:
            with transaction.atomic(using=connection.alias):  # a savepoint
                cursor.execute(_CREATE.format(role=role))
                cursor.execute(
                    f"ALTER ROLE {role} LOGIN PASSWORD %s",
                    [scram_verifier(settings.DB_APP_PASSWORD)],
                )
        except DatabaseError as exc:  # insufficient_privilege: no CREATEROLE, or no ADMIN on it
            if not _login_works(connection):
                raise CommandError(  # migrate prints it without a traceback
                    f"The database user {user!r} cannot create the role {role!r} that the web "
                    "and worker processes log in as for row-level security, or set its "
                    f"password ({type(exc).__name__}). Ask a database administrator to run:\n"
                    f"    CREATE ROLE {role} LOGIN PASSWORD '<a password>';\n"
                    f"(or, if it exists: ALTER ROLE {role} LOGIN PASSWORD '<a password>';)\n"
                    "then set DB_APP_PASSWORD to that password for every process and migrate "
                    "again (or set DB_ROW_LEVEL_SECURITY=false)."
                ) from None
        cursor.execute(_GRANTS.format(role=role))
        cursor.execute(_PRIVILEGED, [role])
        if cursor.fetchone()[0]:
            raise CommandError(_privileged_message(role))


def check_process_login(raw: psycopg.Connection) -> str | None:
    """Why this process's login (on `raw`) must not serve, or None. The login must be
    DB_APP_ROLE and no more privileged than ensure() made it."""
    role = settings.DB_APP_ROLE
    user = raw.execute("SELECT session_user").fetchone()[0]
    if user != role:
        return (
            f"this process logs in to PostgreSQL as {user!r}, not as DB_APP_ROLE {role!r}, "
            "so row-level security would not bind it."
        )
    if raw.execute(_PRIVILEGED, [role]).fetchone()[0]:
        return _privileged_message(role)
    return None


def _privileged_message(role: str) -> str:
    return (
        f"DB_APP_ROLE {role!r} is a superuser, BYPASSRLS, owns tables or is a member of a role "
        "that is or does: row-level security would not bind the processes that log in as it. "
        "Give DB_APP_ROLE a role of its own (the default, agentplatform_app, is made by migrate)."
    )


def _login_works(connection) -> bool:
    """Whether DB_APP_ROLE logs in with DB_APP_PASSWORD (made by an administrator)."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.update(user=settings.DB_APP_ROLE, password=settings.DB_APP_PASSWORD)
    params.setdefault("connect_timeout", 10)
    try:
        with psycopg.connect(**params, autocommit=True):
            return True
    except psycopg.OperationalError:
        return False
