"""base/prepared.py: a run's hot statements, prepared once per connection, still Django's
cursor (row-level security's setting, the query log) and right for every tenant."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from base.prepared import prepared_cursor
from tenancy import rls
from tests.factories import make_agent

SLUGS = "SELECT slug FROM agents_agent WHERE active = %s ORDER BY slug"


@pytest.fixture
def agents(trio):
    make_agent(trio.acme, "a", name="Acme's")
    make_agent(trio.globex, "g", name="Globex's")
    return trio


def slugs() -> list[str]:
    with prepared_cursor() as cursor:
        cursor.execute(SLUGS, [True])
        return [slug for (slug,) in cursor.fetchall()]


def prepared_here(statement: str) -> int:
    """How many statements of this connection PostgreSQL holds prepared with this text."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement = %s",
            [statement.replace("%s", "$1")],
        )
        return cursor.fetchone()[0]


def test_a_statement_is_prepared_once_per_connection_and_then_run_by_name(agents):
    assert settings.DB_PREPARED_STATEMENTS
    for _ in range(3):
        assert slugs() == ["a", "g"]  # (the owner's login: no policy binds it)
    assert prepared_here(SLUGS) == 1


def test_its_plan_follows_the_tenant_each_time_it_runs(agents):
    """A prepared statement's plan is kept, but the tenant policy is read at every
    execution: runs for one tenant, then another, never see each other's rows."""
    with connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL ROLE {settings.DB_APP_ROLE}")  # as the processes log in
    for _ in range(7):  # past the custom plans PostgreSQL makes first: the generic one
        with rls.tenant_scope(agents.acme.pk):
            assert slugs() == ["a"]
    with rls.tenant_scope(agents.globex.pk):
        assert slugs() == ["g"]
    with rls.tenant_scope(agents.acme.pk, agents.globex.pk):
        assert slugs() == ["a", "g"]
    assert slugs() == []  # no scope: no rows
    assert prepared_here(SLUGS) == 1


def test_the_query_log_shows_the_statement(agents):
    with CaptureQueriesContext(connection) as queries:
        slugs()
    assert [q["sql"] for q in queries] == [SLUGS.replace("%s", "$1")]


def test_without_prepared_statements_it_is_sent_with_its_values_apart(agents):
    """DB_PREPARED_STATEMENTS off (a pooler that forgets them): nothing is prepared."""
    connection.ensure_connection()
    raw = connection.connection
    threshold, raw.prepare_threshold = raw.prepare_threshold, None
    try:
        assert slugs() == ["a", "g"]
        assert prepared_here(SLUGS) == 0
    finally:
        raw.prepare_threshold = threshold
