"""MCP server connections over REST (`/api/v1/mcp-connections`), against a real MCP server
(the SDK's MCPServer on 127.0.0.1, over HTTP): CRUD with the admin's validation, the
write-only auth header, test and refresh, the access policy, other tenants' ids, and the
tool list reporting MCP tools as kind `mcp`."""

from __future__ import annotations

import pytest

from tests.api.test_resources import Api, as_key, assert_error, key_for
from tests.factories import make_mcp_connection
from tests.fakes.mcp_server import FakeMcpServer
from tools.models import McpServerConnection

TOKEN = "mcp-s3cret-token-42"


@pytest.fixture
def fake_mcp(settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    server = FakeMcpServer(token=TOKEN)
    yield server
    server.close()


def test_create_test_refresh_and_read_back_without_the_header(client, trio, fake_mcp):
    api = as_key(client, trio.acme, "read", "config")
    created = api.post(
        "/mcp-connections",
        {
            "name": "docs",
            "url": fake_mcp.url,
            "auth_header": TOKEN,
            "timeout_s": 5,
            "domains": ["knowledge", "documents"],
        },
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["has_auth_header"] is True and "auth_header" not in body
    assert body["tool_prefix"] == "docs" and body["domains"] == ["knowledge", "documents"]
    assert body["health"] == {"status": "unknown", "reason": "", "checked_at": None}
    pk = body["id"]

    tested = api.post(f"/mcp-connections/{pk}/test")
    assert tested.status_code == 200
    assert tested.json()["ok"] is True
    assert set(tested.json()["tools"]) >= {"add", "echo"}
    assert tested.json()["connection"]["status"] == "unknown"  # a test stores nothing

    refreshed = api.post(f"/mcp-connections/{pk}/refresh")
    assert refreshed.status_code == 200 and refreshed.json()["ok"] is True
    assert refreshed.json()["connection"]["health"]["status"] == "ok"
    assert "add" in refreshed.json()["connection"]["tools"]

    tools = api.get("/tools", {"kind": "mcp"}).json()["results"]
    assert {t["name"] for t in tools} >= {"docs__add", "docs__echo"}
    add = next(t for t in tools if t["name"] == "docs__add")
    assert add["kind"] == "mcp"
    assert add["provider"] == {
        "kind": "mcp", "id": pk, "name": "docs", "domains": ["knowledge", "documents"],
    }  # fmt: skip
    calculator = api.get("/tools/calculator").json()
    assert calculator["kind"] == "builtin" and calculator["provider"] is None
    assert api.get("/tools/docs__add").json()["kind"] == "mcp"

    listed = api.get("/mcp-connections").json()["results"]
    assert [c["name"] for c in listed] == ["docs"]
    assert api.get("/mcp-connections", {"domain": "calendar"}).json()["results"] == []
    assert TOKEN not in "".join(api.bodies)


def test_a_refresh_that_fails_says_why_in_our_words(client, trio, fake_mcp):
    connection = make_mcp_connection(trio.acme, fake_mcp.url, auth_header="wrong-token-123456")
    api = as_key(client, trio.acme, "read", "config")
    answer = api.post(f"/mcp-connections/{connection.pk}/refresh").json()
    assert answer["ok"] is False
    reason = f"{fake_mcp.url}: the server refused the credentials (HTTP 401)"
    assert answer["connection"]["health"]["status"] == "failing"
    assert answer["connection"]["health"]["reason"] == reason
    assert "wrong-token-123456" not in "".join(api.bodies)


def test_the_admins_validation_applies(client, trio):
    api = as_key(client, trio.acme, "read", "config")
    bad = api.post("/mcp-connections", {"name": "x", "url": "https://user:pw@crm.example/mcp"})
    assert "url" in assert_error(bad, 400)["details"]
    unknown = api.post(
        "/mcp-connections", {"name": "x", "url": "https://crm.example/mcp", "domains": ["weather"]}
    )
    assert "domains" in assert_error(unknown, 400)["details"]
    twice = api.post(
        "/mcp-connections",
        {"name": "x", "url": "https://crm.example/mcp", "domains": ["tasks", "tasks"]},
    )
    assert "domains" in assert_error(twice, 400)["details"]
    assert not McpServerConnection.objects.exists()

    created = api.post(
        "/mcp-connections",
        {"name": "crm", "url": "https://crm.example/mcp", "auth_header": "tok-123456789"},
    )
    assert created.status_code == 201
    pk = created.json()["id"]
    # The header may not follow the URL to another host unless given again (or cleared).
    moved = api.patch(f"/mcp-connections/{pk}", {"url": "https://evil.example/mcp"})
    assert "auth_header" in assert_error(moved, 400)["details"]
    kept = api.patch(f"/mcp-connections/{pk}", {"timeout_s": 10})
    assert kept.status_code == 200 and kept.json()["has_auth_header"] is True
    cleared = api.patch(
        f"/mcp-connections/{pk}", {"url": "https://other.example/mcp", "auth_header": None}
    )
    assert cleared.status_code == 200 and cleared.json()["has_auth_header"] is False
    twice = api.post("/mcp-connections", {"name": "crm", "url": "https://crm.example/mcp"})
    assert twice.status_code in (400, 409)
    assert api.delete(f"/mcp-connections/{pk}").status_code == 204
    assert not McpServerConnection.objects.filter(pk=pk).exists()


def test_reads_need_read_config_and_writes_change_config(client, trio):
    connection = make_mcp_connection(trio.acme, "https://crm.example/mcp", "crm")
    reader = as_key(client, trio.acme, "read")
    assert reader.get("/mcp-connections").status_code == 200
    assert reader.get(f"/mcp-connections/{connection.pk}").status_code == 200
    assert_error(reader.post("/mcp-connections", {"name": "y", "url": "https://y.example"}), 403)
    assert_error(reader.post(f"/mcp-connections/{connection.pk}/test"), 403)
    assert_error(reader.post(f"/mcp-connections/{connection.pk}/refresh"), 403)
    assert_error(reader.delete(f"/mcp-connections/{connection.pk}"), 403)
    member = Api(client, tenant_header="acme")
    client.force_login(trio.bob)
    assert member.get("/mcp-connections").status_code == 200
    assert_error(member.post(f"/mcp-connections/{connection.pk}/refresh"), 403)


def test_another_tenants_connection_answers_404(client, trio):
    theirs = make_mcp_connection(trio.globex, "https://crm.example/mcp", "crm")
    api = Api(client, key_for(trio.acme, "read", "config"))
    for response in (
        api.get(f"/mcp-connections/{theirs.pk}"),
        api.patch(f"/mcp-connections/{theirs.pk}", {"timeout_s": 1}),
        api.post(f"/mcp-connections/{theirs.pk}/test"),
        api.post(f"/mcp-connections/{theirs.pk}/refresh"),
        api.delete(f"/mcp-connections/{theirs.pk}"),
    ):
        assert_error(response, 404)
    assert api.get("/mcp-connections").json()["results"] == []
    assert McpServerConnection.objects.filter(pk=theirs.pk, timeout_s=30).exists()


def test_an_agents_context_providers_name_domains_health_and_tools(client, trio, fake_mcp):
    from rag.models import KnowledgeBase
    from tests.factories import make_agent
    from tools.mcp_connections import mcp_connection_refresh

    connection = make_mcp_connection(
        trio.acme, fake_mcp.url, "crm", auth_header=TOKEN, timeout_s=5, domains=["people"]
    )
    mcp_connection_refresh(connection)
    agent = make_agent(trio.acme, "helper", use_all_tools=False, tool_names=["crm__add"])
    handbook = KnowledgeBase.objects.create(
        tenant=trio.acme, slug="handbook", name="Handbook", embedder="lexical"
    )
    handbook.agents.add(agent)
    api = as_key(client, trio.acme, "read")
    providers = api.get("/agents/helper/context-providers").json()
    assert providers[0]["kind"] == "mcp" and providers[0]["name"] == "crm"
    assert providers[0]["domains"] == ["people"] and providers[0]["tools"] == ["crm__add"]
    assert providers[0]["health"]["status"] == "ok"
    assert providers[1] == {
        "kind": "knowledge_base", "id": handbook.pk, "name": "Handbook",
        "domains": ["knowledge", "documents"], "tools": ["file_read", "knowledge_search"],
        "health": {"status": "unknown", "reason": "", "checked_at": None},
    }  # fmt: skip
    make_agent(trio.acme, "plain", use_all_tools=False, tool_names=["calculator"])
    assert api.get("/agents/plain/context-providers").json() == []
    theirs = make_agent(trio.globex, "secret")
    assert_error(api.get(f"/agents/{theirs.slug}/context-providers"), 404)
