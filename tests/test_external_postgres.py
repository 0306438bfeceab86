"""`migrate` on an external PostgreSQL whose user owns its database but is neither a superuser
nor allowed to create roles, as on a managed service: each statement an administrator must
run is named in turn (the vector extension: rag/migrations/0001_vector_extension.py; the
processes' login: tenancy/app_login.py), no traceback; once they have been run,
migrate succeeds without a superuser and a web process logs in as the app role."""

from __future__ import annotations

import subprocess
import sys
import uuid

import psycopg
import pytest
from django.conf import settings

from agentplatform.embedded import postgres_url
from tests import processes
from tests.conftest import ROOT, subprocess_env

pytestmark = pytest.mark.integration  # starts processes

MIGRATE = [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"]
WHO_AM_I = """
import agentplatform.asgi
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("SELECT current_user, session_user")
    print(*cursor.fetchone())
"""


def as_superuser(statement: str, dbname: str = "postgres") -> None:
    db = settings.DATABASES["default"]
    with psycopg.connect(host=db["HOST"], user=db["USER"], dbname=dbname, autocommit=True) as c:
        c.execute(statement)


def migrate(env: dict[str, str]) -> subprocess.CompletedProcess:
    return processes.run(MIGRATE, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.django_db(transaction=True)
def test_migrate_names_each_statement_an_administrator_must_run_then_succeeds_without_one():
    suffix = uuid.uuid4().hex[:8]
    user, name, role = f"plain_{suffix}", f"plain_db_{suffix}", f"plain_app_{suffix}"
    as_superuser(f"CREATE ROLE {user} LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB")
    as_superuser(f"CREATE DATABASE {name} OWNER {user}")
    db = settings.DATABASES["default"]
    env = {
        **subprocess_env(),
        "DATABASE_URL": postgres_url({**db, "USER": user, "NAME": name}),
        "DB_APP_ROLE": role,
    }
    try:
        refused = migrate(env)
        assert refused.returncode != 0
        assert (
            f"The vector extension is not installed and user '{user}' may not create it: run "
            f"`CREATE EXTENSION vector;` as a superuser in database '{name}' once, then "
            "migrate again."
        ) in refused.stderr
        assert "Traceback" not in refused.stderr and "psycopg" not in refused.stderr

        as_superuser("CREATE EXTENSION vector", dbname=name)
        refused = migrate(env)
        assert refused.returncode != 0
        assert f"CREATE ROLE {role} LOGIN PASSWORD '<a password>';" in refused.stderr
        assert "set DB_APP_PASSWORD to that password" in refused.stderr
        assert "Traceback" not in refused.stderr

        as_superuser(f"CREATE ROLE {role} LOGIN PASSWORD 'chosen-by-the-dba'")
        env["DB_APP_PASSWORD"] = "chosen-by-the-dba"
        done = migrate(env)
        assert done.returncode == 0, done.stderr
        with psycopg.connect(host=db["HOST"], user=user, dbname=name) as check:
            applied = check.execute(
                "SELECT count(*) FROM django_migrations WHERE app = 'rag'"
            ).fetchone()[0]
        assert applied >= 3
        who = processes.run(
            [sys.executable, "-c", WHO_AM_I],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout.split()
        assert who == [role, role]
    finally:
        as_superuser(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        as_superuser(f"DROP ROLE IF EXISTS {role}")
        as_superuser(f"DROP ROLE IF EXISTS {user}")
