"""MCP server connections in the tenant-scoped admin: list with status, the test page,
refresh, a write-only auth header, other tenants' connections answering 404."""

from __future__ import annotations

import pytest

from tests.factories import login, make_mcp_connection
from tests.fakes.mcp_server import FakeMcpServer
from tools.mcp_connections import mcp_connection_refresh
from tools.models import McpServerConnection

TOKEN = "hdr-S3CRET-value-77"


@pytest.fixture
def fake_mcp(settings):
    """The SDK's MCP server on a thread, in-process (tests/mcp's `mcp_server` is ours, live)."""
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    server = FakeMcpServer(token=TOKEN)
    yield server
    server.close()


@pytest.fixture
def docs(trio, fake_mcp) -> McpServerConnection:
    return make_mcp_connection(trio.acme, fake_mcp.url, auth_header=TOKEN, timeout_s=5)


def form(url: str, **overrides) -> dict:
    data = {
        "name": "docs",
        "url": url,
        "auth_header": TOKEN,
        "enabled": "on",
        "tool_prefix": "",
        "allowed_tool_names": "[]",
        "context_resource_uri": "",
        "tool_examples": "{}",
        "timeout_s": "5",
    }
    data.update(overrides)
    return data


def test_adding_a_connection_refreshes_it_and_the_header_is_write_only(client, trio, fake_mcp):
    login(client, trio.alice)
    response = client.post("/admin/tools/mcpserverconnection/add/", form(fake_mcp.url), follow=True)
    page = response.content.decode()
    connection = McpServerConnection.objects.get()
    assert connection.tenant == trio.acme and connection.tool_prefix == "docs"
    assert connection.status == "ok" and connection.tool_count == 5
    assert "Docs: 5 tools listed." in page
    assert TOKEN not in page
    change = client.get(f"/admin/tools/mcpserverconnection/{connection.pk}/change/")
    assert change.status_code == 200 and TOKEN not in change.content.decode()
    client.post(
        f"/admin/tools/mcpserverconnection/{connection.pk}/change/",
        form(fake_mcp.url, auth_header="", allowed_tool_names='["add"]'),
    )
    connection.refresh_from_db()
    assert connection.auth_header == TOKEN and connection.allowed_tool_names == ["add"]


def test_invalid_values_are_shown_in_place(client, trio):
    login(client, trio.alice)
    page = client.post(
        "/admin/tools/mcpserverconnection/add/",
        form(
            "https://example.com/mcp",
            tool_prefix="9bad",
            allowed_tool_names='"add"',
            tool_examples='{"add": [{"arguments": {}, "expect": {"regex": "(a)\\\\1"}}]}',
        ),
    ).content.decode()
    assert "lower-case letter" in page and "list of tool names" in page
    assert "add: [0]: regex" in page  # the examples' check holds in the admin too
    assert not McpServerConnection.objects.exists()


def test_the_changelist_shows_status_tools_and_errors(client, trio, docs, fake_mcp):
    mcp_connection_refresh(docs)
    login(client, trio.alice)
    page = client.get("/admin/tools/mcpserverconnection/").content.decode()
    assert "docs" in page and f"/admin/tools/mcpserverconnection/{docs.pk}/test/" in page
    assert ">5<" in page and TOKEN not in page
    fake_mcp.close()
    mcp_connection_refresh(docs)
    page = client.get("/admin/tools/mcpserverconnection/").content.decode()
    assert "tools unavailable" in page and "cannot connect" in page and TOKEN not in page


def test_the_test_page_lists_the_remote_tools_and_refresh_stores_them(client, trio, docs, fake_mcp):
    login(client, trio.alice)
    url = f"/admin/tools/mcpserverconnection/{docs.pk}/test/"
    page = client.get(url).content.decode()  # asks only: the server is not called
    assert "Connected" not in page and 'value="test"' in page and fake_mcp.requests == []
    page = client.post(url, {"action": "test"}).content.decode()
    assert "Connected: 5 tools." in page
    assert "<code>docs__add</code>" in page and TOKEN not in page
    docs.refresh_from_db()
    assert docs.status == "unknown" and docs.tools_cache == []  # testing stores nothing
    page = client.post(url).content.decode()
    assert "Refreshed: 5 tools listed." in page
    docs.refresh_from_db()
    assert docs.status == "ok" and docs.tool_count == 5


def test_the_refresh_action(client, trio, docs):
    login(client, trio.alice)
    response = client.post(
        "/admin/tools/mcpserverconnection/",
        {"action": "refresh_connections", "_selected_action": [docs.pk]},
        follow=True,
    )
    assert "Docs: 5 tools listed." in response.content.decode()
    docs.refresh_from_db()
    assert docs.status == "ok"


def test_another_tenants_connection_is_404(client, trio, docs):
    login(client, trio.charlie)
    assert client.get(f"/admin/tools/mcpserverconnection/{docs.pk}/test/").status_code == 404
    assert client.post(f"/admin/tools/mcpserverconnection/{docs.pk}/test/").status_code == 404
    assert client.get(f"/admin/tools/mcpserverconnection/{docs.pk}/change/").status_code == 404
    listing = client.get("/admin/tools/mcpserverconnection/").content.decode()
    assert f"/admin/tools/mcpserverconnection/{docs.pk}/" not in listing
    docs.refresh_from_db()
    assert docs.status == "unknown"
