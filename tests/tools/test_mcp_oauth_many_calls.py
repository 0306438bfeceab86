"""Many tool calls needing the same person's OAuth token at the moment it expires, against the
OAuth-protected MCP server of tests/fakes/oauth_mcp_server.py, whose refresh tokens rotate
(each is spent by its use): several threads, each with its own database connection (as
several workers), each making several calls at once in its event loop (as one worker's
concurrent runs). Whether the token expires by our clock or the server refuses it early
(every call then answered 401 with the old one), exactly one refresh reaches the
authorization server, and every call succeeds with the person's new token."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import async_to_sync
from django.db import connections
from django.test import Client
from django.utils import timezone

from agents.runs import atool_run_on_callers_thread
from tenancy import rls
from tests.factories import login, make_mcp_connection
from tests.fakes.oauth_mcp_server import FakeOAuthMcpServer
from tests.tools.test_mcp_oauth import connect
from tools.models import McpOAuthToken

THREADS = 6
CALLS_EACH = 4


@pytest.fixture
def server(settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    with FakeOAuthMcpServer() as fake:
        yield fake


@pytest.mark.django_db(transaction=True)  # the threads' connections see what is committed
@pytest.mark.parametrize("how", ["expires now", "refused early by the server"])
def test_concurrent_calls_needing_an_expiring_token_refresh_it_once_and_all_succeed(
    trio, server, how
):
    crm = make_mcp_connection(trio.acme, server.url, "crm", auth_mode="oauth_user")
    # (alice, an admin, connects too: her account lists the server's tools)
    for person, subject in ((trio.alice, "alice-at-crm"), (trio.bob, "bob-at-crm")):
        connect(login(Client(), person), server, f"/t/acme/mcp-accounts/{crm.pk}/connect/", subject)
    old = McpOAuthToken.objects.get(connection=crm, user=trio.bob)
    server.expire_all()  # the server takes the old access token no more
    if how == "expires now":
        McpOAuthToken.objects.filter(pk=old.pk).update(expires_at=timezone.now())
    start = threading.Barrier(THREADS)
    outcomes: list = []
    failures: list[BaseException] = []

    async def calls() -> list:
        return list(await asyncio.gather(*(
            atool_run_on_callers_thread(tenant=trio.acme, name="crm__whoami", arguments={},
                                        user=trio.bob)
            for _ in range(CALLS_EACH)
        )))  # fmt: skip

    def worker() -> None:
        try:
            with rls.tenant_scope(trio.acme.pk):
                start.wait(timeout=30)
                outcomes.extend(async_to_sync(calls)())
        except BaseException as exc:  # reported below, with the others'
            failures.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert not failures, failures
    assert [(o.error, o.result) for o in outcomes] == [(None, {"result": "bob-at-crm"})] * (
        THREADS * CALLS_EACH
    )
    assert server.refreshes == 1
    new = McpOAuthToken.objects.get(connection=crm, user=trio.bob)
    assert new.access_token != old.access_token and new.refresh_token != old.refresh_token
    if how == "expires now":  # refreshed before any call went out
        sent = {h.get("authorization") for path, h in server.requests if path == "/mcp"}
        assert f"Bearer {old.access_token}" not in sent
