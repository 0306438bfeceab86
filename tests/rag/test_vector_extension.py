"""The first migration on an external PostgreSQL whose user is not a superuser
(rag/migrations/0001_vector_extension.py): a clear instruction while the vector extension is
missing, and no superuser needed once it is installed."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from django.conf import settings

from agentplatform.embedded import postgres_url
from tests.conftest import ROOT, subprocess_env

pytestmark = pytest.mark.integration  # starts processes

MIGRATE = [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"]


def as_superuser(statement: str, dbname: str = "postgres") -> None:
    db = settings.DATABASES["default"]
    with psycopg.connect(host=db["HOST"], user=db["USER"], dbname=dbname, autocommit=True) as c:
        c.execute(statement)


@pytest.fixture
def plain_user_database() -> Iterator[tuple[str, str, dict[str, str]]]:
    """A fresh database owned by a login role that is neither superuser nor CREATEROLE (as
    on a managed PostgreSQL), the app role an administrator made for it, and the
    environment of a process connecting as that user. All dropped afterwards."""
    suffix = uuid.uuid4().hex[:8]
    user, name, role = f"plain_{suffix}", f"plain_db_{suffix}", f"plain_app_{suffix}"
    as_superuser(f"CREATE ROLE {user} LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB")
    as_superuser(f"CREATE DATABASE {name} OWNER {user}")
    # What tenancy's RLS migration would ask for.
    as_superuser(f"CREATE ROLE {role} LOGIN PASSWORD 'chosen-by-the-dba'")
    db = settings.DATABASES["default"]
    env = {
        **subprocess_env(),
        "DATABASE_URL": postgres_url({**db, "USER": user, "NAME": name}),
        "DB_APP_ROLE": role,
        "DB_APP_PASSWORD": "chosen-by-the-dba",
    }
    try:
        yield user, name, env
    finally:
        as_superuser(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        as_superuser(f"DROP ROLE IF EXISTS {role}")
        as_superuser(f"DROP ROLE IF EXISTS {user}")


def test_migrate_names_the_statement_a_superuser_must_run_then_succeeds_without_one(
    plain_user_database,
):
    user, name, env = plain_user_database
    refused = subprocess.run(
        MIGRATE, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert refused.returncode != 0
    assert (
        f"The vector extension is not installed and user '{user}' may not create it: run "
        f"`CREATE EXTENSION vector;` as a superuser in database '{name}' once, then migrate "
        "again."
    ) in refused.stderr
    assert "Traceback" not in refused.stderr
    assert "psycopg" not in refused.stderr

    as_superuser("CREATE EXTENSION vector", dbname=name)
    done = subprocess.run(MIGRATE, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with psycopg.connect(
        host=settings.DATABASES["default"]["HOST"], user=user, dbname=name
    ) as check:
        applied = check.execute(
            "SELECT count(*) FROM django_migrations WHERE app = 'rag'"
        ).fetchone()[0]
    assert applied >= 3
