"""MCP server connections in the configuration pages (/t/<tenant>/mcp-connections/), against
a real MCP server over HTTP on 127.0.0.1: create (refreshed on save), edit with the auth
header write-only, test and refresh (htmx partials and plain POSTs), validation in place,
delete, access by role; and the agent page naming its context providers with their
capability domains and health."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from rag.models import KnowledgeBase
from tests.factories import login, make_agent, make_mcp_connection
from tests.fakes.mcp_server import FakeMcpServer
from tools.mcp_connections import mcp_connection_refresh
from tools.models import McpServerConnection

TOKEN = "mcp-s3cret-token-42"
HTMX = {"HTTP_HX_REQUEST": "true"}


def url(view: str, **kwargs) -> str:
    return reverse(f"config:{view}", kwargs={"tenant_slug": "acme", **kwargs})


@pytest.fixture
def fake_mcp(settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    server = FakeMcpServer(token=TOKEN)
    yield server
    server.close()


@pytest.fixture
def admin(client, trio) -> Client:
    return login(client, trio.alice)


def form_data(fake_mcp, **extra) -> dict:
    return {
        "name": "docs",
        "url": fake_mcp.url,
        "auth_header": TOKEN,
        "enabled": "on",
        "tool_prefix": "",
        "allowed_tool_names": "",
        "context_resource_uri": "context://handbook",
        "timeout_s": "5",
        "domains": ["knowledge", "calendar"],
        **extra,
    }


def test_an_admin_creates_a_connection_that_is_refreshed_on_save(admin, trio, fake_mcp):
    assert admin.get(url("mcp_connections")).status_code == 200
    assert admin.get(url("mcp_connection_create")).status_code == 200
    examples = '{"echo": [{"arguments": {"text": "hi"}, "expect": {"contains": "hi"}}]}'
    response = admin.post(
        url("mcp_connection_create"), form_data(fake_mcp, tool_examples=examples), follow=True
    )
    assert response.status_code == 200
    page = response.content.decode()
    connection = McpServerConnection.objects.get(tenant=trio.acme)
    assert connection.auth_header == TOKEN and connection.tool_prefix == "docs"
    assert connection.domains == ["knowledge", "calendar"]
    assert connection.tool_examples["echo"][0]["arguments"] == {"text": "hi"}
    assert connection.status == "ok" and connection.tool_count >= 4
    assert "tools listed" in page and "Calendar" in page and "OK" in page
    edit = admin.get(url("mcp_connection_edit", pk=connection.pk)).content.decode()
    assert "An auth header is stored." in edit
    assert TOKEN not in page and TOKEN not in edit


def test_saving_keeps_the_header_unless_cleared_and_it_never_follows_the_url(admin, trio, fake_mcp):
    connection = make_mcp_connection(trio.acme, fake_mcp.url, auth_header=TOKEN, enabled=False)
    data = form_data(fake_mcp, auth_header="")
    data.pop("enabled")
    assert admin.post(url("mcp_connection_edit", pk=connection.pk), data).status_code == 302
    connection.refresh_from_db()
    assert connection.auth_header == TOKEN  # blank keeps it
    moved = admin.post(
        url("mcp_connection_edit", pk=connection.pk),
        {**data, "url": "https://elsewhere.example/mcp"},
    )
    assert moved.status_code == 400
    assert "auth header" in moved.content.decode()
    connection.refresh_from_db()
    assert connection.url == fake_mcp.url
    cleared = admin.post(
        url("mcp_connection_edit", pk=connection.pk),
        {**data, "url": "https://elsewhere.example/mcp", "clear_auth_header": "on"},
    )
    assert cleared.status_code == 302
    connection.refresh_from_db()
    assert connection.auth_header is None and connection.url == "https://elsewhere.example/mcp"


def test_invalid_input_is_shown_beside_its_field_and_saves_nothing(admin, fake_mcp):
    response = admin.post(
        url("mcp_connection_create"),
        form_data(
            fake_mcp,
            url="https://user:pw@crm.example/mcp",
            timeout_s="0",
            tool_examples='{"echo": [{"arguments": {}, "expect": {"regex": "(a)\\\\1"}}]}',
        ),
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "regex" in page
    assert "credentials in the URL" in page
    assert "Between 0 and 300 seconds" in page
    unknown = admin.post(url("mcp_connection_create"), form_data(fake_mcp, domains=["weather"]))
    assert unknown.status_code == 400
    assert not McpServerConnection.objects.exists()


def test_test_and_refresh_answer_in_place(admin, trio, fake_mcp):
    connection = make_mcp_connection(trio.acme, fake_mcp.url, auth_header=TOKEN, timeout_s=5)
    tested = admin.post(url("mcp_connection_test", pk=connection.pk), **HTMX)
    assert tested.status_code == 200
    body = tested.content.decode()
    assert f'id="mcp-check-{connection.pk}"' in body and "Connected:" in body and "echo" in body
    assert "<html" not in body
    connection.refresh_from_db()
    assert connection.status == "unknown"  # a test stores nothing

    refreshed = admin.post(url("mcp_connection_refresh", pk=connection.pk), **HTMX)
    body = refreshed.content.decode()
    assert f'id="mcp-health-{connection.pk}"' in body and "OK" in body
    connection.refresh_from_db()
    assert connection.status == "ok"

    plain = admin.post(url("mcp_connection_refresh", pk=connection.pk), follow=True)
    assert "tools listed" in plain.content.decode()
    assert admin.get(url("mcp_connection_test", pk=connection.pk)).status_code == 405


def test_a_failing_server_is_shown_failing_with_a_clean_reason(admin, trio, fake_mcp):
    connection = make_mcp_connection(
        trio.acme, fake_mcp.url, auth_header="wrong-token-abcdef", timeout_s=5
    )
    response = admin.post(url("mcp_connection_refresh", pk=connection.pk), **HTMX)
    body = response.content.decode()
    assert "Failing" in body
    assert "the server refused the credentials (HTTP 401)" in body
    assert "wrong-token-abcdef" not in body
    listing = admin.get(url("mcp_connections")).content.decode()
    assert "the server refused the credentials (HTTP 401)" in listing


def test_delete_asks_then_deletes(admin, trio):
    connection = make_mcp_connection(trio.acme, "https://crm.example/mcp", "crm")
    assert admin.get(url("mcp_connection_delete", pk=connection.pk)).status_code == 200
    assert admin.post(url("mcp_connection_delete", pk=connection.pk)).status_code == 302
    assert not McpServerConnection.objects.exists()


def test_members_get_403_and_other_tenants_404(client, trio):
    connection = make_mcp_connection(trio.acme, "https://crm.example/mcp", "crm")
    login(client, trio.bob)  # a member of acme
    for view in ("mcp_connections", "mcp_connection_create"):
        assert client.get(url(view)).status_code == 403
    assert client.post(url("mcp_connection_refresh", pk=connection.pk)).status_code == 403
    theirs = make_mcp_connection(trio.globex, "https://crm.example/mcp", "crm")
    login(client, trio.alice)
    for view in ("mcp_connection_edit", "mcp_connection_delete"):
        assert client.get(url(view, pk=theirs.pk)).status_code == 404
    for view in ("mcp_connection_test", "mcp_connection_refresh", "mcp_connection_delete"):
        assert client.post(url(view, pk=theirs.pk)).status_code == 404
    assert McpServerConnection.objects.filter(pk=theirs.pk).exists()


def test_the_agent_page_names_its_context_providers_with_domains_and_health(admin, trio, fake_mcp):
    connection = make_mcp_connection(
        trio.acme, fake_mcp.url, "crm", auth_header=TOKEN, timeout_s=5,
        domains=["people", "organizations"],
    )  # fmt: skip
    mcp_connection_refresh(connection)
    agent = make_agent(trio.acme, "helper", use_all_tools=False, tool_tags=["context:crm"])
    handbook = KnowledgeBase.objects.create(
        tenant=trio.acme, slug="handbook", name="Handbook", embedder="lexical"
    )
    handbook.agents.add(agent)
    page = admin.get(url("agent_edit", slug="helper")).content.decode()
    assert "Context providers" in page
    assert "crm" in page and "People" in page and "Organizations" in page
    assert "crm__add" in page
    assert "Handbook" in page and "Knowledge base" in page and "Documents" in page
    assert "not checked yet" in page  # the knowledge base's health before its first check
    unlinked = make_agent(trio.acme, "plain", use_all_tools=False, tool_names=["calculator"])
    assert (
        "Context providers" not in admin.get(url("agent_edit", slug=unlinked.slug)).content.decode()
    )
