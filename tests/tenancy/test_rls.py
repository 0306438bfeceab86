"""Row-level security, the second wall (tenancy/rls.py), tested with raw SQL
as the app role, and the processes' roles.

The pytest process itself connects as the owner (its fixtures write rows of several
tenants); the tests here take the app role inside their transaction with SET LOCAL ROLE,
and the web and worker subprocesses assume it as in production.
"""

from __future__ import annotations

import sys
import uuid

import psycopg
import pytest
from django.apps import apps
from django.conf import settings
from django.db import connection, transaction
from django.db.utils import DataError, IntegrityError, ProgrammingError

from agents.models import Agent
from tenancy import app_login, rls
from tenancy.models import Tenant
from tests import processes
from tests.conftest import ROOT, subprocess_env
from tests.factories import make_agent

ROLE = settings.DB_APP_ROLE


def tenant_tables() -> set[str]:
    return {
        model._meta.db_table
        for model in apps.get_models()
        if any(
            field.name == "tenant" and field.many_to_one and field.related_model is Tenant
            for field in model._meta.get_fields()
        )
    }


@pytest.fixture
def agents(trio):
    make_agent(trio.acme, "a", name="Acme's")
    make_agent(trio.globex, "g", name="Globex's")
    return trio


def as_app_role(cursor, tenant_ids: str | None) -> None:
    """This transaction as the app role, acting for `tenant_ids` (an array literal)."""
    cursor.execute(f"SET LOCAL ROLE {ROLE}")
    if tenant_ids is not None:
        cursor.execute("SELECT set_config('app.tenant_ids', %s, true)", [tenant_ids])


def visible_slugs(cursor) -> set[str]:
    cursor.execute("SELECT slug FROM agents_agent")
    return {row[0] for row in cursor.fetchall()}


def test_the_tenant_setting_shows_that_tenants_rows_only(agents):
    with connection.cursor() as cursor:
        as_app_role(cursor, f"{{{agents.acme.pk}}}")
        assert visible_slugs(cursor) == {"a"}
        cursor.execute("SELECT count(*) FROM agents_agent WHERE tenant_id = %s", [agents.globex.pk])
        assert cursor.fetchone()[0] == 0


def test_unset_or_empty_shows_nothing(agents):
    with connection.cursor() as cursor:
        as_app_role(cursor, None)
        assert visible_slugs(cursor) == set()
        cursor.execute("SELECT set_config('app.tenant_ids', '', true)")
        assert visible_slugs(cursor) == set()


def test_several_tenants_for_an_admin_of_both(agents):
    with connection.cursor() as cursor:
        as_app_role(cursor, f"{{{agents.acme.pk},{agents.globex.pk}}}")
        assert visible_slugs(cursor) == {"a", "g"}


def test_inserting_another_tenants_row_fails(agents):
    columns = ", ".join(
        f.column for f in Agent._meta.concrete_fields if f.column not in ("id", "tenant_id", "slug")
    )
    with connection.cursor() as cursor:
        as_app_role(cursor, f"{{{agents.acme.pk}}}")
        with pytest.raises(ProgrammingError, match="row-level security"), transaction.atomic():
            cursor.execute(
                f"INSERT INTO agents_agent (tenant_id, slug, {columns}) "  # noqa: S608
                f"SELECT %s, 'x', {columns} FROM agents_agent",
                [agents.globex.pk],
            )
        cursor.execute(
            f"INSERT INTO agents_agent (tenant_id, slug, {columns}) "  # noqa: S608
            f"SELECT %s, 'x', {columns} FROM agents_agent",
            [agents.acme.pk],
        )
        assert cursor.rowcount == 1  # its own tenant's: allowed


def test_moving_a_row_to_another_tenant_fails_and_theirs_cannot_be_touched(agents):
    with connection.cursor() as cursor:
        as_app_role(cursor, f"{{{agents.acme.pk}}}")
        with pytest.raises(ProgrammingError, match="row-level security"), transaction.atomic():
            cursor.execute("UPDATE agents_agent SET tenant_id = %s", [agents.globex.pk])
        cursor.execute("UPDATE agents_agent SET name = 'mine' WHERE slug = 'g'")
        assert cursor.rowcount == 0
        cursor.execute("DELETE FROM agents_agent WHERE slug = 'g'")
        assert cursor.rowcount == 0
        cursor.execute("RESET ROLE")
    assert Agent.objects.get(slug="g").name == "Globex's"


def test_every_tenant_owned_table_has_the_policy(db):
    tables = tenant_tables()
    assert {"agents_run", "tenancy_membership", "rag_chunk", "scoping_project"} <= tables
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_policies p ON p.tablename = c.relname "
            "WHERE c.relrowsecurity AND p.policyname = %s AND p.qual LIKE %s "
            "AND p.with_check LIKE %s",
            [rls.POLICY_NAME, "%app.tenant_ids%", "%app.tenant_ids%"],
        )
        protected = {row[0] for row in cursor.fetchall()}
    assert tables - protected == set(), "tenant tables without the policy (see rls.policy_sql)"


def test_the_app_role_is_a_login_neither_superuser_nor_owner_nor_bypassing(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT rolsuper, rolbypassrls, rolcanlogin FROM pg_roles WHERE rolname = %s", [ROLE]
        )
        assert cursor.fetchone() == (False, False, True)
        cursor.execute(app_login._PRIVILEGED, [ROLE])  # nor a member of such a role
        assert cursor.fetchone()[0] is False
        cursor.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tableowner = %s",
            [ROLE],
        )
        assert cursor.fetchone()[0] == 0


def test_tenant_scope_and_owner_set_this_connection(agents, monkeypatch):
    """The module on Django's own connection, in this (owner) process made to assume the
    app role: a scope shows its tenant's rows, no scope none, owner() all."""
    # No scope to begin with: a request made in-process earlier in this thread (through
    # Django's test client, say: schemathesis) leaves its tenants' scope set after it.
    rls.clear_request()
    monkeypatch.setattr(rls, "_app_role", ROLE)
    connection.ensure_connection()
    monkeypatch.setitem(rls._state, connection.connection, ((None, ""), True))  # as it is
    try:
        assert set(Agent.objects.values_list("slug", flat=True)) == set()
        with rls.tenant_scope(agents.globex.pk):
            assert set(Agent.objects.values_list("slug", flat=True)) == {"g"}
            with rls.owner():
                assert set(Agent.objects.values_list("slug", flat=True)) == {"a", "g"}
            assert Agent.objects.filter(tenant=agents.acme).count() == 0
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_user, current_setting('app.tenant_ids', true)")
            assert cursor.fetchone() == (ROLE, "")
    finally:
        with rls.owner(), connection.cursor() as cursor:
            cursor.execute("SELECT 1")  # back to the owner for the rest of the test


def test_tenant_id_of_reads_as_owner(agents, monkeypatch):
    agent = Agent.objects.get(slug="g")
    monkeypatch.setattr(rls, "_app_role", ROLE)
    connection.ensure_connection()
    monkeypatch.setitem(rls._state, connection.connection, ((None, ""), True))
    with rls.tenant_scope(agents.acme.pk):
        assert rls.tenant_id_of(Agent, agent.pk) == agents.globex.pk
        assert not Agent.objects.filter(pk=agent.pk).exists()
    with rls.owner(), connection.cursor() as cursor:
        cursor.execute("SELECT 1")


@pytest.fixture
def as_the_app(agents, monkeypatch):
    """This process's Django connection made to assume the app role, no scope set yet; back
    to the owner after."""
    rls.clear_request()
    monkeypatch.setattr(rls, "_app_role", ROLE)
    connection.ensure_connection()
    monkeypatch.setitem(rls._state, connection.connection, ((None, ""), True))
    yield agents
    with rls.owner(), connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def test_a_query_sent_with_the_setting_fails_as_djangos_and_the_setting_is_sent_again(
    as_the_app,
):
    """The setting and the query go in one round trip: the query's error is Django's own,
    and the setting, undone with it, is sent again with the next query."""
    acme = as_the_app.acme
    with rls.tenant_scope(acme.pk):
        with pytest.raises(IntegrityError), transaction.atomic():
            make_agent(acme, "a")  # acme has an "a": the first query of the scope fails
        assert set(Agent.objects.values_list("slug", flat=True)) == {"a"}
    with rls.tenant_scope(as_the_app.globex.pk):
        assert Agent.objects.create(tenant=as_the_app.globex, slug="g2", name="G2").pk
        assert set(Agent.objects.values_list("slug", flat=True)) == {"g", "g2"}
    # An error that comes after the sending (the pipeline's end may be where it is read).
    with rls.owner(), connection.cursor() as cursor, pytest.raises(DataError), transaction.atomic():
        cursor.execute("SELECT 1 / (SELECT 0 FROM pg_sleep(0.05))")


def test_a_server_side_cursor_or_several_statements_get_the_setting_first(as_the_app):
    """Queries that cannot go in a pipeline (a server-side cursor's DECLARE, a string of
    several statements) still run with the scope's setting, sent just before them."""
    with rls.tenant_scope(as_the_app.globex.pk):
        assert [a.slug for a in Agent.objects.iterator(chunk_size=10)] == ["g"]
    with rls.tenant_scope(as_the_app.acme.pk), connection.cursor() as cursor:
        cursor.execute("SELECT 1; SELECT slug FROM agents_agent")
        cursor.nextset()
        assert cursor.fetchall() == [("a",)]


WHO_AM_I = """
import {module}
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("SELECT current_user, session_user")
    print(*cursor.fetchone())
"""


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("module", ["agentplatform.asgi", "agentplatform.wsgi"])
@pytest.mark.integration
def test_web_processes_run_as_the_app_role(module):
    output = processes.run(
        [sys.executable, "-c", WHO_AM_I.format(module=module)],
        env=subprocess_env(settings.DATABASES["default"]["NAME"]),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert output == [ROLE, ROLE]  # logged in as the app role: nothing to RESET back to


@pytest.mark.django_db(transaction=True)
def test_the_worker_logs_in_as_the_app_role(celery_worker_process):
    from agentplatform.tasks import database_role

    assert database_role.delay().get(timeout=20) == [ROLE, ROLE]


def test_a_management_command_runs_as_the_owner(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user = session_user")
        assert cursor.fetchone()[0] is True


def app_connection(**overrides) -> psycopg.Connection:
    """A raw connection logged in as the web and worker processes log in."""
    db = settings.DATABASES["default"]
    params = dict(
        host=db["HOST"],
        port=db["PORT"] or None,
        dbname=db["NAME"],
        user=ROLE,
        password=settings.DB_APP_PASSWORD,
        autocommit=True,
    )
    return psycopg.connect(**{**params, **overrides})


@pytest.mark.django_db(transaction=True)
def test_the_app_login_cannot_leave_its_role_or_read_another_tenants_rows(agents):
    """Whatever SQL it runs (an injection's), the login stays bound by the policies; only
    the tenant setting itself (docs/security.md, "Limits") widens what it sees."""
    with app_connection() as raw:
        raw.execute("SELECT set_config('app.tenant_ids', %s, false)", [f"{{{agents.acme.pk}}}"])

        def slugs() -> set[str]:
            return {row[0] for row in raw.execute("SELECT slug FROM agents_agent")}

        assert raw.execute("SELECT current_user, session_user").fetchone() == (ROLE, ROLE)
        assert slugs() == {"a"}
        raw.execute("RESET ROLE")  # nothing to go back to: it logged in as the app role
        raw.execute("RESET SESSION AUTHORIZATION")
        assert raw.execute("SELECT current_user").fetchone() == (ROLE,)
        assert slugs() == {"a"}
        for escape in (
            "SET ROLE postgres",
            "SET SESSION AUTHORIZATION postgres",
            "ALTER TABLE agents_agent DISABLE ROW LEVEL SECURITY",
            "ALTER TABLE agents_agent NO FORCE ROW LEVEL SECURITY",
            f"DROP POLICY {rls.POLICY_NAME} ON agents_agent",
            "ALTER ROLE CURRENT_USER BYPASSRLS",
            "COPY (SELECT 1) TO PROGRAM 'true'",
            "SELECT pg_read_file('pg_hba.conf')",
            "CREATE TABLE public.intruder (i int)",  # nor make objects of its own
            "CREATE SCHEMA intruder",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                raw.execute(escape)
        assert slugs() == {"a"}
        raw.execute("SELECT set_config('app.tenant_ids', '', false)")
        assert slugs() == set()
        # The documented limit: the setting is the connection's own, so SQL that sets it
        # sees what it names.
        raw.execute("SELECT set_config('app.tenant_ids', '*', false)")
        assert slugs() == {"a", "g"}


@pytest.mark.django_db(transaction=True)
def test_the_app_login_needs_its_password(agents):
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        app_connection(password="not-" + settings.DB_APP_PASSWORD).close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("environment", "refusal"),
    [
        ({"DB_APP_PASSWORD": "a-wrong-password"}, "PostgreSQL refused the login of DB_APP_ROLE"),
        ({"DB_APP_ROLE": "postgres"}, "is a superuser, BYPASSRLS, owns tables"),
    ],
    ids=["wrong-password", "privileged-role"],
)
@pytest.mark.integration
def test_a_process_whose_login_policies_would_not_bind_refuses_to_start(environment, refusal):
    started = processes.run(
        [sys.executable, "-c", "import agentplatform.wsgi"],
        env={**subprocess_env(settings.DATABASES["default"]["NAME"]), **environment},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 1
    assert f"Start-up check failed: {refusal}" in started.stderr or refusal in started.stderr
    assert "Traceback" not in started.stderr
    assert environment.get("DB_APP_PASSWORD", "unset") not in started.stderr


def session_cookie(user) -> dict[str, str]:
    """A signed-in session of `user`, stored in the test database, for a live server."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return {settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value}


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_every_face_of_a_live_web_process_queries_as_the_app_login(agents):
    """REST, /v1 and MCP with a key, the web pages with a member's session and the admin
    with the operator's (acting for every tenant): each is served, and every connection the
    web process opened logged in as the app role. The server's connections are told apart
    by libpq's PGAPPNAME, which our code does not set."""
    import httpx2
    from django.contrib.auth import get_user_model

    from tenancy.services import api_key_create
    from tests.live_server import start_asgi_server

    _, key = api_key_create(tenant=agents.acme, name="faces", scopes=["admin"])
    operator = get_user_model().objects.create_superuser("op", "op@example.test", "x" * 12)
    name = f"rls-faces-{uuid.uuid4().hex[:8]}"
    server = start_asgi_server({"PGAPPNAME": name})
    bearer = {"Authorization": f"Bearer {key}"}
    mcp = {**bearer, "Accept": "application/json, text/event-stream"}
    try:
        with httpx2.Client(base_url=server.base, timeout=30) as http:
            assert http.get("/api/v1/agents", headers=bearer).status_code == 200
            models = http.get("/v1/models", headers=bearer)
            assert models.status_code == 200
            assert "a" in {m["id"] for m in models.json()["data"]}
            listed = http.post(
                "/mcp",
                headers=mcp,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            )
            assert listed.status_code == 200, listed.text
        with httpx2.Client(base_url=server.base, cookies=session_cookie(agents.alice)) as web:
            assert web.get("/t/acme/", timeout=30).status_code == 200
        with httpx2.Client(base_url=server.base, cookies=session_cookie(operator)) as admin:
            page = admin.get("/admin/agents/agent/", timeout=30)
            assert page.status_code == 200
            assert "Acme&#x27;s" in page.text and "Globex&#x27;s" in page.text
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT DISTINCT usename FROM pg_stat_activity WHERE application_name = %s",
                [name],
            )
            logins = {row[0] for row in cursor.fetchall()}
    finally:
        server.stop()
    assert logins == {ROLE}
