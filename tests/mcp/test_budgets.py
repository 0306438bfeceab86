"""Each MCP `tools/call` counts against the request budgets REST and `/v1` requests count
against (tenancy/request_budgets.py): the key's (a member's token: the member's) and the
tenant's; a listing does not. Driven by the SDK's client through the ASGI router in this
process, where the rates can be set (the live server's are the defaults)."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from django.test import AsyncClient, Client
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from agentplatform.asgi_handler import StreamingASGIHandler
from agentplatform.mcp.asgi import McpRouter
from agents.models import Run
from agents.runs import writer as run_writer
from tenancy import services as tenancy
from tenancy.sign_on import oauth
from tests.factories import login
from tests.mcp.test_resource_url import LOOPBACK, stop

# (transaction: the handlers read on other threads)
pytestmark = pytest.mark.django_db(transaction=True)

SIX_TIMES_SEVEN = {"expression": "6*7"}


def new_key(tenant) -> str:
    _, secret = tenancy.api_key_create(tenant=tenant, name="mcp", scopes=["read", "run"])
    return secret


def calls(*steps: tuple[str, str]) -> list:
    """Each (token, "list" | "call") in an MCP session of its own, in order: the tool names
    listed, or the calculator's CallToolResult."""

    async def session(http, token, step):
        http.headers["Authorization"] = f"Bearer {token}"
        async with (
            streamable_http_client(f"http://{LOOPBACK}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            if step == "list":
                return [tool.name for tool in (await client.list_tools()).tools]
            return await client.call_tool("calculator", SIX_TIMES_SEVEN)

    async def run_all() -> list:
        router = McpRouter(StreamingASGIHandler())
        try:
            transport = httpx2.ASGITransport(app=router)
            async with httpx2.AsyncClient(transport=transport, timeout=30) as http:
                return [await session(http, token, step) for token, step in steps]
        finally:
            await stop(router)
            await run_writer.aclose()  # (its lane's connection: the database is dropped at the end)

    return asyncio.run(run_all())


def assert_refused(result) -> None:
    assert result.is_error, result
    assert result.content[0].text.startswith("Rate limit reached; retry in ")
    assert result.meta["status"] == "rate_limited" and result.meta["retry_after_s"] > 0


def test_a_keys_calls_past_its_budget_are_refused_with_when_to_retry(trio, rates):
    rates("2/min", "100/min")
    key, other = new_key(trio.acme), new_key(trio.acme)
    first, second, refused, listed, others = calls(
        (key, "call"), (key, "call"), (key, "call"), (key, "list"), (other, "call")
    )
    assert not first.is_error and not second.is_error
    assert_refused(refused)
    assert "calculator" in listed  # listing is not counted
    assert not others.is_error  # its own budget
    assert Run.objects.count() == 3  # the refused call was not executed, so not recorded


def test_the_tenants_budget_is_shared_by_its_keys_and_not_by_other_tenants(trio, rates):
    rates("100/min", "2/min")
    first, second, globex = new_key(trio.acme), new_key(trio.acme), new_key(trio.globex)
    results = calls((first, "call"), (second, "call"), (first, "call"), (globex, "call"))
    assert [r.is_error for r in results] == [False, False, True, False]
    assert_refused(results[2])
    assert Run.objects.count() == 3


def test_mcp_and_v1_draw_on_the_same_budget(trio, rates):
    rates("2/min", "100/min")
    key = new_key(trio.acme)

    async def models() -> int:
        answer = await AsyncClient().get("/v1/models", headers={"Authorization": f"Bearer {key}"})
        return answer.status_code

    assert asyncio.run(models()) == 200
    within, beyond = calls((key, "call"), (key, "call"))
    assert not within.is_error
    assert_refused(beyond)
    assert asyncio.run(models()) == 429


def test_a_members_token_counts_against_the_members_budget_their_session_uses(trio, rates):
    rates("1/min", "100/min")
    client = oauth.register_client(name="SDK client", redirect_uris=["http://127.0.0.1/cb"])
    alice = oauth._issue(client, trio.alice.pk, trio.acme.pk, "password").access_token
    mine, again = calls((alice, "call"), (alice, "call"))
    assert not mine.is_error
    assert_refused(again)
    # the same member on REST (a session: per user) finds the budget spent
    session = login(Client(), trio.alice)
    assert session.get("/api/v1/agents", HTTP_X_TENANT="acme").status_code == 429
