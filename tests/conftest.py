"""The owner / member / outsider trio, a real Celery worker when a test needs one, and the
test tiers.

alice owns `acme`, bob is a member of `acme`, charlie owns `globex` (an outsider to acme).

Tiers (`pytest -m fast`, `pytest -m integration`; `make test-fast`, `make test-integration`):
every test gets exactly one at collection, `integration` when it starts a process (a live
server, a Celery worker, a browser, a child Python), else `fast` (see tests/tiers.py); a
fast test that starts a process anyway fails, naming the mark it needs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings

from agentplatform.collector import freeze_what_was_loaded
from agentplatform.embedded import postgres_url
from agents.models import Agent
from tenancy.models import Role, Tenant
from tests import database_template, processes, slowest_first, tiers
from tests.factories import (
    add_member,
    make_agent,
    make_connection,
    make_http_tool,
    make_tenant,
    make_user,
)
from tests.fakes.fixtures import provider_server_fixture
from tests.sample_plugins import sample_workflows_fixture
from tests.tools.local_server import LocalServer, Reply

ROOT = Path(__file__).resolve().parent.parent

provider_server = pytest.fixture(name="provider_server")(provider_server_fixture)
sample_workflows = pytest.fixture(name="sample_workflows")(sample_workflows_fixture)


# Left in place by a transactional test's teardown: what migrate made and only post_migrate
# would make again.
_KEPT_TABLES = frozenset({"django_migrations", "django_content_type", "auth_permission"})


@pytest.fixture(scope="session", autouse=True)
def _transactional_tests_empty_only_what_they_filled():
    """A transactional test ends by emptying the tables it filled, and only those: one query
    finds the tables holding rows, then one DELETE each in one transaction with triggers off
    (`session_replication_role = replica`: no foreign-key checks, no audit-log trigger);
    content types, permissions and guardian's anonymous user stay, so post_migrate need not
    run again. Django's flush TRUNCATEs all ~110 tables and then recreates content types and
    permissions: about 250 ms per test here, against about 10 ms. (Only a superuser may turn
    triggers off; as another user, Django's flush.)

    A Celery worker or the live server of the session may still be finishing work of that
    test (a gateway call's run is recorded after its answer): a table found empty may be
    written before the others are emptied, so it looks again until it finds nothing; when
    PostgreSQL picks the emptying as a deadlock's victim, it empties again (the worker's
    transaction has gone on) rather than fail the next test's setup."""
    from django.db import connections, transaction
    from django.db.utils import OperationalError
    from django.test import TransactionTestCase
    from guardian.conf import settings as guardian_settings

    flush = TransactionTestCase._fixture_teardown

    def empty(alias: str) -> None:
        connection = connections[alias]
        quote = connection.ops.quote_name
        tables = [
            table
            for table in connection.introspection.django_table_names(
                only_existing=True, include_views=False
            )
            if table not in _KEPT_TABLES
        ]
        kept_user = [guardian_settings.ANONYMOUS_USER_NAME] if "auth_user" in tables else []
        find_filled = " UNION ALL ".join(
            f"SELECT {i} WHERE EXISTS (SELECT FROM {quote(table)}"  # noqa: S608
            + (" WHERE username <> %s)" if table == "auth_user" else ")")
            for i, table in enumerate(tables)
        )
        with connection.cursor() as cursor:
            for _round in range(5):  # until a look finds nothing (see below)
                cursor.execute(find_filled, kept_user)
                filled = [tables[i] for (i,) in cursor.fetchall()]
                if not filled:
                    return
                delete(cursor, filled)

    def delete(cursor, filled: list[str]) -> None:
        quote = cursor.db.ops.quote_name
        with transaction.atomic(using=cursor.db.alias):
            cursor.execute("SET LOCAL session_replication_role = replica")
            for table in filled:
                if table == "auth_user":
                    cursor.execute(
                        "DELETE FROM auth_user WHERE username <> %s",
                        [guardian_settings.ANONYMOUS_USER_NAME],
                    )
                else:
                    cursor.execute(f"DELETE FROM {quote(table)}")  # noqa: S608

    def is_superuser(alias: str) -> bool:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            return cursor.fetchone()[0]

    def teardown(self) -> None:
        for alias in self._databases_names(include_mirrors=False):
            if self.available_apps is not None or not is_superuser(alias):
                flush(self)
                return
            for attempt in range(5):
                try:
                    empty(alias)
                    break
                except OperationalError as exc:
                    if "deadlock detected" not in str(exc) or attempt == 4:
                        raise
                    time.sleep(0.2 * (attempt + 1))

    TransactionTestCase._fixture_teardown = teardown
    yield
    TransactionTestCase._fixture_teardown = flush


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--integration-modules-to",
        metavar="FILE",
        help="write the test files that hold integration tests to FILE, one per line "
        "(make test's fast run: its integration run then collects only those)",
    )


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        item.add_marker(tiers.tier_of(item))
    if target := config.getoption("integration_modules_to"):
        tiers.write_integration_modules(items, Path(target))


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")  # after `-m` deselects
def pytest_collection_modifyitems_slowest_first(config, items) -> None:
    """Under `--dist worksteal`, each xdist worker (they all collect the same) puts the
    slowest modules at the heads of the workers' chunks (tests/slowest_first.py)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1 and config.getoption("dist", None) == "worksteal":
        items[:] = slowest_first.ordered(items, workers, slowest_first.recorded_seconds())


_TEMPLATE_MADE_AHEAD = pytest.StashKey["threading.Thread"]()


def pytest_collection_finish(session) -> None:
    """The suite's processes allocate as the platform's do, and collect as they do
    (agentplatform/collector.py): what was loaded by now out of the collector's sight, and
    young objects collected less often. (tests/web and two more modules in 3 workers: 78-84 s
    against 99-102 s without.)"""
    freeze_what_was_loaded()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session) -> None:
    """pytest-xdist's controller makes the test database template while its workers collect
    (tests/database_template.py, `make_ahead`)."""
    from pytest_django.plugin import blocking_manager_key

    config = session.config
    if os.environ.get("PYTEST_XDIST_WORKER") or config.option.collectonly:
        return
    if not config.getoption("numprocesses", None) or blocking_manager_key not in config.stash:
        return
    unblocked = config.stash[blocking_manager_key].unblock
    config.stash[_TEMPLATE_MADE_AHEAD] = database_template.make_ahead(unblocked)


def pytest_sessionfinish(session, exitstatus) -> None:
    thread = session.config.stash.get(_TEMPLATE_MADE_AHEAD, None)
    if thread is not None and exitstatus != pytest.ExitCode.INTERRUPTED:
        thread.join()  # (long done by now, unless every worker failed at once)


@pytest.fixture(scope="session", autouse=True)
def _static_files_listed_once():
    """Each Django test client builds the middleware again, and WhiteNoise's lists every
    static file through the finders each time (WHITENOISE_USE_FINDERS): once per process
    in production, but about 15 ms per test client, a tenth of the fast tier's time. The
    first client of the session lists them; later ones reuse what it found, as long as the
    settings those files were described with are the same."""
    from whitenoise.middleware import WhiteNoiseMiddleware

    list_all = WhiteNoiseMiddleware.add_files_from_finders
    found: dict[tuple, dict] = {}

    def add_files_from_finders(self) -> None:
        key = (self.static_prefix, self.max_age, self.allow_all_origins, self.charset)
        if key not in found:
            before = dict(self.files)
            list_all(self)
            found[key] = {url: f for url, f in self.files.items() if before.get(url) is not f}
        self.files.update(found[key])

    WhiteNoiseMiddleware.add_files_from_finders = add_files_from_finders
    yield
    WhiteNoiseMiddleware.add_files_from_finders = list_all


@pytest.fixture(autouse=True)
def _fast_tests_start_no_process(request, monkeypatch):
    """Keeps the `fast` tier honest: a process started from a fast test fails it. (And
    keeps the session's Celery worker, when a run of both tiers has started it, from taking
    what a fast test sends.)"""
    if request.node.get_closest_marker("fast") is None:
        return

    def refuse(self, args, *rest, **kwargs):
        raise RuntimeError(
            f"{request.node.nodeid} is a fast test but starts a process ({args!r}): "
            "mark it @pytest.mark.integration (see tests/tiers.py)"
        )

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    if _session_worker_consumes:
        _sent_where_no_worker_listens(monkeypatch)


def _sent_where_no_worker_listens(monkeypatch) -> None:
    """In a run of both tiers at once (no `-m`; `make test` runs them apart), an integration
    test has started this process's Celery worker. It consumes the session's queues, and
    would take the runs and tasks a fast test sends and then does itself ("not claimable").
    A fast test sends them to queues of their own instead: its runs (agents.tasks.send_run
    reads the settings) and every task Celery routes to one of the worker's queues."""
    from celery import current_app

    queues = {
        name: getattr(settings, name)
        for name in ("RUNS_QUEUE", "BATCH_QUEUE", "HOUSEKEEPING_QUEUE")
    }
    elsewhere = {queue: f"{queue}-fast-tests" for queue in queues.values()}
    # The settings (the routes too, which tests compare with them) are set on the object
    # behind django.conf.settings and undone there: through django.conf.settings, an undo
    # made while the test's `settings` fixture overrides something would land in that
    # override, and the rest of the session would keep the fast tests' queues.
    routes = {
        task: {**route, "queue": elsewhere.get(route.get("queue"), route.get("queue"))}
        for task, route in settings.CELERY_TASK_ROUTES.items()
    }
    changes = {name: elsewhere[queue] for name, queue in queues.items()}
    behind = settings._wrapped
    for name, value in {**changes, "CELERY_TASK_ROUTES": routes}.items():
        monkeypatch.setattr(behind, name, value)
        monkeypatch.delitem(settings.__dict__, name, raising=False)  # LazySettings' cache
    amqp = current_app.amqp
    router = amqp.router

    class Elsewhere:
        def route(self, *args, **kwargs):
            found = router.route(*args, **kwargs)
            if found.get("queue") is not None and found["queue"].name in elsewhere:
                found = {**found, "queue": amqp.queues[elsewhere[found["queue"].name]]}
            return found

    monkeypatch.setattr(amqp, "router", Elsewhere())


@dataclass
class Trio:
    acme: Tenant
    globex: Tenant
    alice: object
    bob: object
    charlie: object


def make_trio() -> Trio:
    alice, bob, charlie = make_user("alice"), make_user("bob"), make_user("charlie")
    acme = make_tenant("acme", owner=alice)
    add_member(acme, bob, Role.MEMBER)
    globex = make_tenant("globex", owner=charlie)
    return Trio(acme=acme, globex=globex, alice=alice, bob=bob, charlie=charlie)


@pytest.fixture
def trio(db) -> Trio:
    return make_trio()


@pytest.fixture
def rates(monkeypatch):
    """`rates(per_key, per_tenant)`: this test's request budgets (tenancy/request_budgets.py,
    in DRF's "600/min" form; None: none) in this process."""
    from tenancy import request_budgets

    def set_rates(api_key: str | None, tenant: str | None) -> None:
        for cls in (request_budgets.ApiKeyRateThrottle, request_budgets.TenantRateThrottle):
            monkeypatch.setattr(cls, "THROTTLE_RATES", {"api_key": api_key, "tenant": tenant})

    return set_rates


def subprocess_env(database_name: str | None = None) -> dict[str, str]:
    """Environment for a child process on the same Postgres/Redis as this test session."""
    db = settings.DATABASES["default"]
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=postgres_url({**db, "NAME": database_name or db["NAME"]}),
        REDIS_URL=settings.REDIS_URL,
        SECRET_KEY=settings.SECRET_KEY,
        FIELD_ENCRYPTION_KEYS=",".join(settings.FIELD_ENCRYPTION_KEYS),
        PYTHONPATH=str(ROOT),
        EGRESS_ALLOWLIST="127.0.0.1/32",  # the local fake servers tests point tools at
    )
    return env


@pytest.fixture(scope="session")
def django_db_setup(
    request, django_test_environment, django_db_blocker, django_db_modify_db_settings
):
    """pytest-django's, with the test database copied from a migrated template when one
    is there (tests/database_template.py)."""
    from django.test.utils import setup_databases, teardown_databases
    from pytest_django.fixtures import _get_databases_for_setup

    aliases, serialized_aliases = _get_databases_for_setup(request.session.items)
    with django_db_blocker.unblock(), database_template.copied_or_saved():
        databases = setup_databases(
            verbosity=0,
            interactive=False,
            keepdb=True,  # the copy, when there is one (a database of its own per session)
            aliases=aliases,
            serialized_aliases=serialized_aliases,
        )
        _commit_without_waiting_for_the_disk()
    yield
    with django_db_blocker.unblock():
        # A connection a test's thread still holds fails the DROP DATABASE ("being accessed
        # by other users"): a thread that used the ORM gives its connection back when done
        # (connections.close_all(), or sync_to_async, whose thread _close_async_connections
        # closes), or it stays lent out of the pool until the garbage collector frees it.
        teardown_databases(databases, verbosity=0)


def _commit_without_waiting_for_the_disk() -> None:
    """The test database commits without waiting for its WAL to reach the disk (about 2 ms a
    commit here): every connection to it, the servers' and workers' the tests start
    included, sees the same rows in the same order as with the wait; only a crash of
    PostgreSQL itself, which no test makes, could lose the last commits. The benchmarks keep
    the wait: they measure what production pays."""
    from django.db import connection

    with connection.cursor() as cursor:
        name = connection.ops.quote_name(connection.settings_dict["NAME"])
        cursor.execute(f"ALTER DATABASE {name} SET synchronous_commit TO off")
        cursor.execute("SET synchronous_commit TO off")  # (this connection: opened before)


_session_worker_consumes = False  # celery_worker_process has started its worker


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, django_db_blocker):
    """A real `celery worker` process on the test database and this session's queue."""
    worker = processes.spawn(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "agentplatform",
            "worker",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--pool",
            "solo",
            "--loglevel",
            "WARNING",
            "-Q",
            f"{settings.RUNS_QUEUE},{settings.BATCH_QUEUE},{settings.HOUSEKEEPING_QUEUE}",
        ],
        env=subprocess_env(settings.DATABASES["default"]["NAME"]),
        cwd=ROOT,
    )
    from agentplatform.tasks import ping

    deadline = time.monotonic() + 90  # a start takes seconds, on a loaded machine a minute
    while True:  # ready when it answers a ping task
        try:
            if ping.apply_async(expires=2).get(timeout=2) == "pong":
                break
        except Exception:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the test Celery worker did not start") from None
    global _session_worker_consumes
    _session_worker_consumes = True
    yield worker
    _session_worker_consumes = False
    worker.terminate()
    worker.wait(15)


@pytest.fixture(scope="session")
def live_server_base(django_db_setup, django_db_blocker):
    """One real `uvicorn agentplatform.asgi:application` (lifespan on) on the test database
    for the whole session, its base URL: what the API, MCP and browser tests talk to over
    loopback (`asgi_server`, `mcp_server`, `web_server`). A test that needs other settings
    starts its own (`tests.live_server.asgi_server(env)`)."""
    from tests import live_server

    with live_server.asgi_server() as base:
        yield base


@pytest.fixture(autouse=True)
def _requests_as_the_app_role(monkeypatch):
    """Requests through Django's test clients run as the app role, as in the web process,
    so in-process tests meet the tenant policies too; the rest of a test (its fixtures,
    which write rows of several tenants, and its checks) stays the owner."""
    if not settings.DB_ROW_LEVEL_SECURITY:
        return
    from django.test.client import AsyncClientHandler, ClientHandler

    from tenancy import rls

    def as_app_role(call):
        def handle(self, *args, **kwargs):
            monkeypatch.setattr(rls, "_app_role", settings.DB_APP_ROLE)
            try:
                return call(self, *args, **kwargs)
            finally:
                monkeypatch.setattr(rls, "_app_role", None)

        return handle

    def as_app_role_async(call):
        async def handle(self, *args, **kwargs):
            monkeypatch.setattr(rls, "_app_role", settings.DB_APP_ROLE)
            try:
                return await call(self, *args, **kwargs)
            finally:
                monkeypatch.setattr(rls, "_app_role", None)

        return handle

    monkeypatch.setattr(ClientHandler, "__call__", as_app_role(ClientHandler.__call__))
    monkeypatch.setattr(
        AsyncClientHandler, "__call__", as_app_role_async(AsyncClientHandler.__call__)
    )


@pytest.fixture
def connection(trio, provider_server, settings):
    """acme's default connection: OpenAI pointed at the local provider server."""
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    return make_connection(
        trio.acme,
        "Local OpenAI",
        "openai",
        api_key="sk-test-key",
        base_url=provider_server.openai_base_url,
        default_model="gpt-test",
        is_default=True,
        max_retries=0,
    )


@pytest.fixture
def agent(trio, connection) -> Agent:
    return make_agent(trio.acme, "assistant", instructions="Be brief.")


@pytest.fixture(autouse=True)
def _close_async_connections():
    """Code run through sync_to_async from asyncio.run uses asgiref's one executor thread;
    close its database connection so test databases can be dropped at the end. Handed to
    that thread directly (Django's connections are per thread), and only once it exists: a
    new thread and event loop for each of the suite's 3,500 tests cost about 2 ms each."""
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    executor = SyncToAsync.single_thread_executor
    if executor._threads:  # started by the first sync_to_async call of the session
        executor.submit(connections.close_all).result()


@pytest.fixture
def transfer(trio):
    """acme's money-transfer tool: a non-idempotent POST to a local server that needs a
    human's approval; yields the server, which records what it receives."""
    server = LocalServer()
    server.route("POST", "/transfers", Reply(status=201, json={"ok": True}))
    make_http_tool(
        trio.acme,
        "transfer",
        server.url + "/transfers",
        method="POST",
        description="Transfer money.",
        input_schema={
            "type": "object",
            "properties": {"amount": {"type": "integer"}, "to": {"type": "string"}},
            "required": ["amount"],
        },
        effect="write",
        idempotent=False,
        requires_approval=True,
    )
    yield server
    server.close()


PAY_SECRET = "sk-pay-9f8e7d6c5b4a"


@pytest.fixture
def pay(trio):
    """acme's `pay` tool: a POST with a bearer credential that requires approval; yields the
    server, which records every request it receives."""
    server = LocalServer()
    server.route("POST", "/payments/bob", Reply(status=201, json={"ok": True}))
    make_http_tool(
        trio.acme,
        "pay",
        server.url + "/payments/{to}",
        method="POST",
        description="Pay someone.",
        input_schema={
            "type": "object",
            "properties": {"amount": {"type": "integer"}, "to": {"type": "string"}},
            "required": ["amount", "to"],
        },
        config={
            "arguments": [{"argument": "to", "to": "path"}],
            "fixed": {"headers": {"X-Client": "agents"}},
            "auth": {"type": "bearer"},
        },
        secret=PAY_SECRET,
        effect="write",
        idempotent=False,
        requires_approval=True,
    )
    yield server
    server.close()
