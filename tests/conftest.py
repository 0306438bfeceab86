"""The owner / member / outsider trio, a real Celery worker when a test needs one, and the
test tiers.

alice owns `acme`, bob is a member of `acme`, charlie owns `globex` (an outsider to acme).

Tiers (`pytest -m fast`, `pytest -m integration`; `make test-fast`, `make test-integration`):
every test gets exactly one at collection. `integration` is a test that starts a process —
a live server, a Celery worker, a browser, a child Python: one under tests/browser/, one
whose own code or whose fixtures' code (however indirect) calls one of `PROCESS_STARTERS`,
or one marked `@pytest.mark.integration` (when the process is started in a helper the
scan does not read). Everything else is `fast`, and a fast test that starts a process
anyway fails, naming the mark it needs.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings

from agentplatform.embedded import postgres_url
from agentplatform.tenancy.models import Role, Tenant
from agents.models import Agent
from tests.factories import (
    add_member,
    make_agent,
    make_connection,
    make_http_tool,
    make_tenant,
    make_user,
)
from tests.fakes.fixtures import provider_server_fixture
from tests.tools.local_server import LocalServer, Reply

ROOT = Path(__file__).resolve().parent.parent

provider_server = pytest.fixture(name="provider_server")(provider_server_fixture)

# What starts a process, as the tests' code names it (called, or handed to a thread pool):
# `subprocess.*`, the live uvicorn (tests/live_server.py), the Celery worker fleet
# (tests/agents/workers.py), Chromium. The in-process fakes (provider, MCP and HTTP servers
# on threads) are none of these.
PROCESS_STARTERS = re.compile(
    r"\bsubprocess\.(?:run|Popen|call|check_call|check_output)\b|\bPopen\("
    r"|\bstart_asgi_server\b|\basgi_server\(|\bWorkerFleet\b|\bsync_playwright\b"
)
BROWSER_TESTS = ROOT / "tests" / "browser"


@functools.cache
def _starts_processes(function) -> bool:
    """Whether the code of `function` (a test or fixture of ours) calls a process starter."""
    if not getattr(function, "__module__", "").startswith("tests."):
        return False  # pytest's and plugins' fixtures
    if function.__name__ == "_fast_tests_start_no_process":
        return False  # names Popen to patch it, in every test
    try:
        return PROCESS_STARTERS.search(inspect.getsource(function)) is not None
    except (OSError, TypeError):
        return False


def _uses_processes(item: pytest.Item) -> bool:
    functions = [getattr(item, "function", None)]
    fixtures = getattr(item, "_fixtureinfo", None)  # every fixture the test gets, however indirect
    if fixtures is not None:
        functions += [defs[-1].func for defs in fixtures.name2fixturedefs.values() if defs]
    return any(_starts_processes(f) for f in functions if f is not None)


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        starts_processes = (
            item.get_closest_marker("integration") is not None
            or BROWSER_TESTS in item.path.parents
            or _uses_processes(item)
        )
        item.add_marker(pytest.mark.integration if starts_processes else pytest.mark.fast)


@pytest.fixture(autouse=True)
def _fast_tests_start_no_process(request, monkeypatch):
    """Keeps the `fast` tier honest: a process started from a fast test fails it."""
    if request.node.get_closest_marker("fast") is None:
        return

    def refuse(self, args, *rest, **kwargs):
        raise RuntimeError(
            f"{request.node.nodeid} is a fast test but starts a process ({args!r}): "
            "mark it @pytest.mark.integration (see the tiers in tests/conftest.py)"
        )

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)


@dataclass
class Trio:
    acme: Tenant
    globex: Tenant
    alice: object
    bob: object
    charlie: object


@pytest.fixture
def trio(db) -> Trio:
    alice, bob, charlie = make_user("alice"), make_user("bob"), make_user("charlie")
    acme = make_tenant("acme", owner=alice)
    add_member(acme, bob, Role.MEMBER)
    globex = make_tenant("globex", owner=charlie)
    return Trio(acme=acme, globex=globex, alice=alice, bob=bob, charlie=charlie)


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
def celery_worker_process(django_db_setup, django_db_blocker):
    """A real `celery worker` process on the test database and this session's queue."""
    worker = subprocess.Popen(
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
            settings.CELERY_TASK_DEFAULT_QUEUE,
        ],
        env=subprocess_env(settings.DATABASES["default"]["NAME"]),
        cwd=ROOT,
    )
    from agentplatform.tasks import ping

    deadline = time.monotonic() + 30
    while True:  # ready when it answers a ping task
        try:
            if ping.apply_async(expires=2).get(timeout=2) == "pong":
                break
        except Exception:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the test Celery worker did not start") from None
    yield worker
    worker.terminate()
    worker.wait(15)


@pytest.fixture(autouse=True)
def _requests_as_the_app_role(monkeypatch):
    """Requests through Django's test clients run as the app role, as in the web process,
    so in-process tests meet the tenant policies too; the rest of a test (its fixtures,
    which write rows of several tenants, and its checks) stays the owner."""
    if not settings.DB_ROW_LEVEL_SECURITY:
        return
    from django.test.client import AsyncClientHandler, ClientHandler

    from agentplatform.tenancy import rls

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
    close its database connection so test databases can be dropped at the end."""
    yield
    import asyncio
    import threading

    from asgiref.sync import sync_to_async
    from django.db import connections

    # From a thread of its own: a browser test's Playwright keeps a loop running in this one.
    closer = threading.Thread(target=asyncio.run, args=(sync_to_async(connections.close_all)(),))
    closer.start()
    closer.join()


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
