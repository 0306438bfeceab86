"""A stored secret stays with its destination (base/secret_destinations.py).

The attack: someone who may edit an object but never read its secret points it at a host
they control and presses "test". Every write path (REST, the configuration pages, the
admin) must refuse a new scheme, host or port unless the secret is entered again or
cleared in the same change; a new path on the same origin keeps the secret.
"""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from agents.models import Agent
from agents.services import agent_save
from base.secret_destinations import origin_change
from providers.models import ProviderConnection
from providers.services import connection_save
from tests import factories
from tests.api.test_resources import as_key, assert_error
from tests.factories import login
from tests.fakes.mcp_server import FakeMcpServer
from tests.tools.local_server import LocalServer, Reply
from tools.models import McpServerConnection, ToolDefinition
from tools.services import tool_definition_save

KEY = "sk-ant-STORED-provider-key-1"
TOOL_SECRET = "tool-STORED-secret-2"
TOKEN = "remote-STORED-token-3"
MCP_HEADER = "mcp-STORED-header-4"
HOST_MOVED = "The URL's host changed: enter the {} again, or clear it."
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


def http_config(url: str) -> dict:
    return {"url": url, "arguments": [{"argument": "q", "to": "query"}], "auth": {"type": "bearer"}}


@pytest.fixture
def attacker(settings):
    """A host the attacker controls: it records whatever reaches it."""
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    with LocalServer() as server:
        yield server


def received_secret(server: LocalServer, secret: str) -> bool:
    return any(secret in json.dumps(r.headers) + r.path for r in server.requests)


def make_connection(tenant, **extra) -> ProviderConnection:
    """A connection holding KEY."""
    fields = {"name": "Claude", "kind": "anthropic", "api_key": KEY, "max_retries": 0}
    return factories.make_connection(tenant, **{**fields, **extra})


def make_tool(tenant, url: str = "https://api.example.com/lookup") -> ToolDefinition:
    """An HTTP tool holding TOOL_SECRET."""
    return factories.make_tool(
        tenant,
        "lookup",
        kind="http",
        description="Look something up.",
        input_schema=SCHEMA,
        config=http_config(url),
        secret=TOOL_SECRET,
    )


def make_remote_agent(tenant, url: str = "https://agents.example.com/a") -> Agent:
    """A remote agent holding TOKEN."""
    return factories.make_agent(tenant, "far", kind="remote", remote_url=url, remote_token=TOKEN)


def make_mcp(tenant, url: str = "https://mcp.example.com/mcp", **extra) -> McpServerConnection:
    """An MCP server connection holding MCP_HEADER."""
    return factories.make_mcp_connection(tenant, url, auth_header=MCP_HEADER, **extra)


# -- the comparison -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        ("https://a.example/v1", "https://a.example/v2?x=1", None),
        ("https://A.example/v1", "https://a.example:443/v1", None),
        ("https://a.example/v1", "https://b.example/v1", "host"),
        ("https://a.example/v1", "http://a.example/v1", "scheme"),
        ("https://a.example/v1", "https://a.example:8443/v1", "port"),
        ("https://a.example/v1", "https://a.example.evil.test/v1", "host"),
        ("https://a.example/v1", "https://evil.test/a.example/v1", "host"),
        ("https://a.example/v1", "https://a.example:99999/v1", "port"),
    ],
)
def test_only_scheme_host_and_port_count_as_a_new_destination(before, after, changed):
    assert origin_change(before, after) == changed


# -- the rule, through the services every face calls -------------------------------------------
def test_a_new_host_needs_the_key_again_and_nothing_is_saved(trio):
    connection = make_connection(trio.acme, base_url="https://api.anthropic.com")
    with pytest.raises(ValidationError) as refused:
        connection_save(
            tenant=trio.acme, connection=connection, changes={"base_url": "https://evil.test"}
        )
    assert refused.value.message_dict == {"api_key": [HOST_MOVED.format("API key")]}
    stored = ProviderConnection.objects.get(pk=connection.pk)
    assert (stored.base_url, stored.api_key) == ("https://api.anthropic.com", KEY)


def test_the_key_entered_again_or_cleared_moves_with_the_destination(trio):
    connection = make_connection(trio.acme, kind="openai_compatible", preset="custom")
    connection.base_url = "https://a.example/v1"
    connection.save()
    # The very same key typed again is entering it: whoever types it knows it.
    changes = {"base_url": "https://b.example/v1", "api_key": KEY}
    connection_save(tenant=trio.acme, connection=connection, changes=changes)
    changes = {"base_url": "https://c.example/v1", "api_key": None}
    connection_save(tenant=trio.acme, connection=connection, changes=changes)
    stored = ProviderConnection.objects.get(pk=connection.pk)
    assert (stored.base_url, stored.api_key) == ("https://c.example/v1", None)


def test_a_default_destination_counts_too(trio):
    """A blank base URL sends the key to the service's default: another kind moves it."""
    connection = make_connection(trio.acme)
    changes = {"kind": "openai_compatible", "preset": "openrouter"}
    with pytest.raises(ValidationError) as refused:
        connection_save(tenant=trio.acme, connection=connection, changes=changes)
    assert "api_key" in refused.value.message_dict


def test_a_secret_loaded_late_or_refreshed_is_not_entered(trio):
    make_connection(trio.acme, base_url="https://api.anthropic.com")
    deferred = ProviderConnection.objects.defer("api_key").get()
    with pytest.raises(ValidationError):
        connection_save(
            tenant=trio.acme, connection=deferred, changes={"base_url": "https://evil.test"}
        )
    refreshed = ProviderConnection.objects.get()
    refreshed.api_key = "sk-typed-then-dropped"
    refreshed.refresh_from_db()
    with pytest.raises(ValidationError):
        connection_save(
            tenant=trio.acme, connection=refreshed, changes={"base_url": "https://evil.test"}
        )
    assert ProviderConnection.objects.get().base_url == "https://api.anthropic.com"


def test_a_new_path_on_the_same_host_keeps_every_secret(trio):
    connection = make_connection(trio.acme, base_url="https://api.anthropic.com")
    connection_save(
        tenant=trio.acme,
        connection=connection,
        changes={"base_url": "https://API.anthropic.com:443/proxy"},
    )
    tool = make_tool(trio.acme)
    tool_definition_save(
        tenant=trio.acme,
        definition=tool,
        changes={"config": http_config("https://api.example.com/v2/lookup")},
    )
    agent = make_remote_agent(trio.acme)
    agent_save(
        tenant=trio.acme, agent=agent, changes={"remote_url": "https://agents.example.com/b"}
    )
    mcp = make_mcp(trio.acme)
    mcp.url = "https://mcp.example.com/v2/mcp"
    mcp.full_clean()
    mcp.save()
    assert ProviderConnection.objects.get().api_key == KEY
    assert ToolDefinition.objects.get().secret == TOOL_SECRET
    assert Agent.objects.get().remote_token == TOKEN
    assert McpServerConnection.objects.get().auth_header == MCP_HEADER


def test_creating_and_objects_without_a_secret_are_unaffected(trio):
    connection = factories.make_connection(trio.acme, "Off")
    connection_save(
        tenant=trio.acme,
        connection=connection,
        changes={"kind": "openai_compatible", "preset": "custom", "base_url": "https://x.test"},
    )
    created = agent_save(
        tenant=trio.acme,
        changes={
            "slug": "new",
            "name": "New",
            "kind": "remote",
            "remote_url": "https://elsewhere.test/a",
            "remote_token": "t",
        },
    )
    assert created.pk and created.remote_token == "t"


def test_an_mcp_connection_and_a_tool_turned_built_in(trio):
    mcp = make_mcp(trio.acme)
    mcp.url = "https://evil.test/mcp"
    with pytest.raises(ValidationError) as refused:
        mcp.full_clean()
    assert refused.value.message_dict["auth_header"] == [HOST_MOVED.format("auth header")]
    # No destination at all sends the secret nowhere: allowed; pointing it anywhere later
    # is a new destination again.
    tool = make_tool(trio.acme)
    tool_definition_save(
        tenant=trio.acme,
        definition=tool,
        changes={"kind": "builtin", "config": {"builtin": "calculator"}},
    )
    with pytest.raises(ValidationError) as refused:
        tool_definition_save(
            tenant=trio.acme,
            definition=ToolDefinition.objects.get(),
            changes={"kind": "http", "config": http_config("https://evil.test/x")},
        )
    assert "secret" in refused.value.message_dict


# -- REST ------------------------------------------------------------------------------------
def test_rest_a_provider_key_does_not_follow_its_connection(
    client, trio, provider_server, attacker
):
    connection = make_connection(trio.acme, base_url=provider_server.anthropic_base_url)
    api = as_key(client, trio.acme)
    moved = api.patch(f"/provider-connections/{connection.pk}", {"base_url": attacker.url})
    details = assert_error(moved, 400)["details"]
    assert details == {"api_key": ["The URL's port changed: enter the API key again, or clear it."]}
    api.post(f"/provider-connections/{connection.pk}/test")
    assert attacker.requests == [] and provider_server.received
    assert ProviderConnection.objects.get().base_url == provider_server.anthropic_base_url
    # Entered again, the key goes where its owner sends it.
    again = api.patch(
        f"/provider-connections/{connection.pk}", {"base_url": attacker.url, "api_key": "sk-2"}
    )
    assert again.status_code == 200 and ProviderConnection.objects.get().api_key == "sk-2"
    assert not any(KEY in body for body in api.bodies)


def test_rest_a_tool_credential_does_not_follow_its_url(client, trio, attacker):
    with LocalServer() as service:
        service.route("GET", "/lookup", Reply(json={"ok": True}))
        service.route("GET", "/v2/lookup", Reply(json={"ok": 2}))
        make_tool(trio.acme, service.url + "/lookup")
        api = as_key(client, trio.acme, "read", "config", "run")
        moved = api.patch("/tools/lookup", {"config": http_config(attacker.url + "/lookup")})
        assert assert_error(moved, 400)["details"] == {
            "secret": ["The URL's port changed: enter the secret again, or clear it."]
        }
        ran = api.post("/tools/lookup/execute", {"arguments": {"q": "x"}})
        assert ran.status_code == 200 and ran.json()["result"] == {"ok": True}
        assert not received_secret(attacker, TOOL_SECRET) and attacker.requests == []
        # Same host, new path: the secret stays and still goes to the service.
        path_only = api.patch("/tools/lookup", {"config": http_config(service.url + "/v2/lookup")})
        assert path_only.status_code == 200, path_only.content
        assert api.post("/tools/lookup/execute", {"arguments": {"q": "x"}}).json()["result"] == {
            "ok": 2
        }
        assert received_secret(service, TOOL_SECRET)
    assert ToolDefinition.objects.get().secret == TOOL_SECRET
    assert not any(TOOL_SECRET in body for body in api.bodies)


def test_rest_a_remote_agents_token_does_not_follow_its_url(client, trio):
    make_remote_agent(trio.acme)
    api = as_key(client, trio.acme)
    moved = api.patch("/agents/far", {"remote_url": "https://evil.test/a"})
    assert assert_error(moved, 400)["details"] == {"remote_token": [HOST_MOVED.format("token")]}
    put = api.get("/agents/far").json()
    put.update(remote_url="https://evil.test/a")
    assert "remote_token" in assert_error(api.put("/agents/far", put), 400)["details"]
    assert Agent.objects.get().remote_url == "https://agents.example.com/a"
    cleared = api.patch("/agents/far", {"remote_url": "https://evil.test/a", "remote_token": None})
    assert cleared.status_code == 200 and cleared.json()["has_remote_token"] is False
    assert not any(TOKEN in body for body in api.bodies)


# -- the configuration pages -----------------------------------------------------------------
def config_url(view: str, **kwargs) -> str:
    return reverse(f"config:{view}", kwargs={"tenant_slug": "acme", **kwargs})


def test_pages_refuse_a_new_host_beside_the_secret_field(client, trio):
    from tests.web.test_config import agent_data, connection_data, tool_data

    connection = make_connection(trio.acme, base_url="https://api.anthropic.com")
    tool = make_tool(trio.acme)
    make_remote_agent(trio.acme)
    login(client, trio.alice)
    posts = [
        (
            config_url("connection_edit", pk=connection.pk),
            connection_data(base_url="https://evil.test"),
            "api_key",
            "API key",
        ),
        (
            config_url("tool_edit", pk=tool.pk),
            tool_data(
                name="lookup",
                input_schema=json.dumps(SCHEMA),
                config=json.dumps(http_config("https://evil.test/lookup")),
            ),
            "secret",
            "secret",
        ),
        (
            config_url("agent_edit", slug="far"),
            agent_data(
                slug="far",
                name="Far",
                kind="remote",
                remote_url="https://evil.test/a",
                tool_names=[],
            ),
            "remote_token",
            "token",
        ),
    ]
    for page, data, field, label in posts:
        response = client.post(page, data)
        body = response.content.decode()
        assert response.status_code == 400, (page, body)
        assert f'id="id_{field}_error"' in body and f"enter the {label} again" in body
        assert KEY not in body and TOOL_SECRET not in body and TOKEN not in body
    assert ProviderConnection.objects.get().base_url == "https://api.anthropic.com"
    assert ToolDefinition.objects.get().config["url"] == "https://api.example.com/lookup"
    assert Agent.objects.get().remote_url == "https://agents.example.com/a"

    # The remove-the-stored-secret box allows the move; a new path alone keeps the secret.
    agent_page = config_url("agent_edit", slug="far")
    moved = agent_data(
        slug="far", name="Far", kind="remote", remote_url="https://evil.test/a", tool_names=[]
    )
    assert client.post(agent_page, {**moved, "clear_remote_token": "on"}).status_code == 302
    assert Agent.objects.get().remote_token is None
    path_only = connection_data(base_url="https://api.anthropic.com/v2")
    assert client.post(posts[0][0], path_only).status_code == 302
    assert ProviderConnection.objects.get().api_key == KEY


# -- the admin --------------------------------------------------------------------------------
def test_admin_refuses_a_new_host_for_a_provider_and_a_tool(client, trio):
    from tests.providers.test_connections import admin_form
    from tests.tools.test_admin import form as tool_form

    connection = make_connection(trio.acme, base_url="https://api.anthropic.com")
    tool = make_tool(trio.acme)
    login(client, trio.alice)
    posts = [
        (
            f"/admin/providers/providerconnection/{connection.pk}/change/",
            admin_form(base_url="https://evil.test", api_key=""),
            "enter the API key again",
        ),
        (
            f"/admin/tools/tooldefinition/{tool.pk}/change/",
            tool_form(
                name="lookup",
                input_schema=json.dumps(SCHEMA),
                config=json.dumps(http_config("https://evil.test/lookup")),
            ),
            "enter the secret again",
        ),
    ]
    for page, data, message in posts:
        response = client.post(page, data)
        body = response.content.decode()
        assert response.status_code == 200 and message in body, body
        assert KEY not in body and TOOL_SECRET not in body
    assert ProviderConnection.objects.get().base_url == "https://api.anthropic.com"
    assert ToolDefinition.objects.get().config["url"] == "https://api.example.com/lookup"
    cleared = admin_form(base_url="https://evil.test", api_key="new-key")
    assert client.post(posts[0][0], cleared).status_code == 302
    assert ProviderConnection.objects.get().api_key == "new-key"


def test_admin_refuses_a_new_host_for_an_mcp_connection(client, trio, attacker):
    from tests.tools.test_mcp_admin import form as mcp_form

    server = FakeMcpServer(token=MCP_HEADER)
    try:
        mcp = make_mcp(trio.acme, server.url, timeout_s=5)
        login(client, trio.alice)
        page = f"/admin/tools/mcpserverconnection/{mcp.pk}/change/"
        response = client.post(page, mcp_form(attacker.url + "/mcp", auth_header=""))
        body = response.content.decode()
        assert response.status_code == 200 and "enter the auth header again" in body
        assert MCP_HEADER not in body
    finally:
        server.close()
    assert attacker.requests == []
    assert McpServerConnection.objects.get().url == server.url


def test_the_agent_admin_does_not_edit_the_remote_url(client, trio):
    """The admin's agent form has no remote fields: it cannot move the token at all."""
    from tests.agents.test_admin import agent_form

    agent = make_remote_agent(trio.acme)
    login(client, trio.alice)
    data = agent_form(slug="far", name="Far", remote_url="https://evil.test/a")
    assert client.post(f"/admin/agents/agent/{agent.pk}/change/", data).status_code == 302
    stored = Agent.objects.get()
    assert (stored.remote_url, stored.remote_token) == ("https://agents.example.com/a", TOKEN)
