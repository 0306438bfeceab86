"""Configuration pages (/t/<tenant>/...): access by role, forms through the services,
errors in place, secrets never rendered, API keys shown once, last owner kept."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from agents.models import Agent, Crew, Run
from providers.models import ProviderConnection
from tenancy import services
from tenancy.models import (
    ApiKey,
    AuditAction,
    AuditEntry,
    Invitation,
    Membership,
    Role,
)
from tenancy.services import invitation_create
from tests.api.test_resources import Api, key_for
from tests.factories import (
    add_member,
    login,
    make_agent,
    make_connection,
    make_crew,
    make_http_tool,
    make_tool,
    make_user,
)
from tools.models import ToolDefinition

PROVIDER_KEY = "sk-stored-provider-secret-123"
TOOL_SECRET = "tool-stored-secret-456"
REMOTE_TOKEN = "remote-stored-token-789"


def url(view: str, **kwargs) -> str:
    return reverse(f"config:{view}", kwargs={"tenant_slug": "acme", **kwargs})


@pytest.fixture
def objects(trio):
    """One of each configurable object in acme, secrets included."""
    connection = make_connection(
        trio.acme, "Main", "anthropic", api_key=PROVIDER_KEY, is_default=True
    )
    agent = make_agent(
        trio.acme,
        "helper",
        kind="remote",
        remote_url="https://agents.example.com/a",
        remote_token=REMOTE_TOKEN,
    )
    crew = make_crew(trio.acme, "team", [agent])
    tool = make_http_tool(
        trio.acme,
        "lookup",
        "https://api.example.com/lookup",
        description="Look something up.",
        config={"arguments": [{"argument": "q", "to": "query"}], "auth": {"type": "bearer"}},
        secret=TOOL_SECRET,
    )
    key = ApiKey.objects.create(
        tenant=trio.acme, name="CI", prefix="ap_test1", secret_hash="0" * 64, scopes=["read"]
    )
    bob = Membership.objects.get(tenant=trio.acme, user=trio.bob)
    invitation, _ = invitation_create(
        tenant=trio.acme, invitee="dana@example.test", role=Role.MEMBER, invited_by=trio.alice
    )
    return {
        "invitation": invitation,
        "connection": connection,
        "agent": agent,
        "crew": crew,
        "tool": tool,
        "key": key,
        "membership": bob,
    }


def every_url(objects) -> list[tuple[str, str]]:
    """(method, url) of every configuration page, with acme's object ids."""
    agent, crew = objects["agent"].slug, objects["crew"].slug
    tool, connection = objects["tool"].pk, objects["connection"].pk
    key, membership = objects["key"].pk, objects["membership"].pk
    return [
        ("get", url("agents")),
        ("get", url("agent_create")),
        ("get", url("agent_edit", slug=agent)),
        ("get", url("agent_delete", slug=agent)),
        ("post", url("agent_tools")),
        ("get", url("crews")),
        ("get", url("crew_create")),
        ("get", url("crew_edit", slug=crew)),
        ("get", url("crew_delete", slug=crew)),
        ("get", url("tools")),
        ("get", url("tool_create")),
        ("get", url("tool_edit", pk=tool)),
        ("get", url("tool_delete", pk=tool)),
        ("get", url("tool_try", name="calculator")),
        ("get", url("connections")),
        ("get", url("connection_create")),
        ("get", url("connection_edit", pk=connection)),
        ("post", url("connection_test", pk=connection)),
        ("get", url("connection_delete", pk=connection)),
        ("get", url("api_keys")),
        ("post", url("api_key_create")),
        ("post", url("api_key_revoke", pk=key)),
        ("get", url("members")),
        ("post", url("member_invite")),
        ("post", url("member_invitation_revoke", pk=objects["invitation"].pk)),
        ("post", url("member_role", pk=membership)),
        ("post", url("member_remove", pk=membership)),
    ]


def test_every_page_opens_for_an_admin(client, trio, objects):
    admin = make_user("adele")
    add_member(trio.acme, admin, Role.ADMIN)
    login(client, admin)
    for method, page in every_url(objects):
        if method == "get":
            assert client.get(page).status_code == 200, page


def test_members_and_viewers_get_403_everywhere_and_nothing_changes(client, trio, objects):
    viewer = make_user("vic")
    add_member(trio.acme, viewer, Role.VIEWER)
    for user in (trio.bob, viewer):
        login(client, user)
        for method, page in every_url(objects):
            assert getattr(client, method)(page).status_code == 403, (user, page)
    assert ApiKey.objects.get(pk=objects["key"].pk).revoked_at is None
    assert Membership.objects.filter(tenant=trio.acme).count() == 3
    assert Invitation.objects.get(tenant=trio.acme).revoked_at is None


def test_another_tenants_admin_gets_404_for_this_tenants_ids(client, trio, objects):
    login(client, trio.charlie)  # owner of globex
    for method, page in every_url(objects):
        assert getattr(client, method)(page).status_code == 404, page
        own = page.replace("/t/acme/", "/t/globex/")  # globex's URLs with acme's ids
        if any(str(part) in page for part in ("helper", "team", "/edit/", "/delete/")):
            assert getattr(client, method)(own).status_code == 404, own
    assert Agent.objects.filter(pk=objects["agent"].pk).exists()


def test_configuration_links_show_for_admins_only(client, trio):
    body = login(client, trio.bob).get("/t/acme/").content.decode()
    assert url("agents") not in body
    body = login(client, trio.alice).get("/t/acme/").content.decode()
    assert url("agents") in body and url("members") in body


# -- agents ---------------------------------------------------------------------------
def agent_data(**extra) -> dict:
    data = {
        "name": "Support",
        "slug": "support",
        "description": "",
        "instructions": "Be kind.",
        "active": "on",
        "provider_connection": "",
        "model": "",
        "temperature": "",
        "kind": "orchestrator",
        "remote_url": "",
        "remote_token": "",
        "approval_policy": "flagged",
        "output_schema": "",
        "max_rounds": "10",
        "max_tool_calls": "50",
        "max_tokens_per_run": "",
        "tool_names": ["calculator"],
    }
    data.update(extra)
    return data


def test_an_admin_creates_edits_and_deletes_an_agent(client, trio):
    login(client, trio.alice)
    response = client.post(url("agent_create"), agent_data())
    assert response.status_code == 302
    agent = Agent.objects.get(tenant=trio.acme, slug="support")
    assert agent.tool_names == ["calculator"] and not agent.use_all_tools
    page = client.get(response["Location"]).content.decode()
    assert "Saved agent" in page
    assert f"{reverse('chat:index', kwargs={'tenant_slug': 'acme'})}?agent=support" in page
    response = client.post(
        url("agent_edit", slug="support"), agent_data(name="Support 2", tool_tags=["time"])
    )
    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.name == "Support 2" and agent.tool_tags == ["time"]
    assert client.post(url("agent_delete", slug="support")).status_code == 302
    assert not Agent.objects.filter(pk=agent.pk).exists()


def test_the_agent_page_sets_answering_from_tool_results_without_tools(client, trio):
    login(client, trio.alice)
    page = client.get(url("agent_create")).content.decode()
    assert 'name="results_without_tools"' in page
    client.post(url("agent_create"), agent_data(results_without_tools="on"))
    assert Agent.objects.get(tenant=trio.acme, slug="support").results_without_tools is True


def test_agent_errors_show_beside_their_fields_and_nothing_is_saved(client, trio):
    login(client, trio.alice)
    make_agent(trio.acme, "taken")
    bad = agent_data(slug="taken", output_schema="{not json", temperature="5")
    response = client.post(url("agent_create"), bad)
    assert response.status_code == 400
    body = response.content.decode()
    assert "Another agent of this workspace has this slug." in body
    assert 'id="id_output_schema_error"' in body and "Enter a valid JSON." in body
    bad = agent_data(output_schema=json.dumps({"type": "string"}), temperature="5")
    body = client.post(url("agent_create"), bad).content.decode()
    assert 'id="id_output_schema_error"' in body and "must have" in body
    assert Agent.objects.filter(tenant=trio.acme).count() == 1


def test_the_effective_tool_list_follows_the_picker(client, trio):
    login(client, trio.alice)
    partial = url("agent_tools")
    body = client.post(partial, {"tool_names": ["calculator"]}, HTTP_HX_REQUEST="true")
    text = body.content.decode()
    assert "<html" not in text and "calculator" in text and "current_time" not in text
    assert body["Vary"] and "HX-Request" in body["Vary"]
    text = client.post(partial, {"use_all_tools": "on", "tool_exclude": ["think"]}).content
    assert b"current_time" in text and b"<code>think</code>" not in text
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    text = client.post(partial, {"output_schema": schema}).content
    assert b"final_answer" in text


def test_the_remote_token_is_write_only(client, trio, objects):
    login(client, trio.alice)
    body = client.get(url("agent_edit", slug="helper")).content.decode()
    assert REMOTE_TOKEN not in body and "A token is stored." in body
    data = agent_data(
        slug="helper", name="Helper", kind="remote", remote_url="https://agents.example.com/a"
    )
    assert client.post(url("agent_edit", slug="helper"), data).status_code == 302
    objects["agent"].refresh_from_db()
    assert objects["agent"].remote_token == REMOTE_TOKEN  # blank kept it
    data["clear_remote_token"] = "on"
    client.post(url("agent_edit", slug="helper"), data)
    objects["agent"].refresh_from_db()
    assert not objects["agent"].remote_token


def test_an_agent_cannot_use_another_tenants_connection(client, trio):
    theirs = make_connection(trio.globex, "G")
    login(client, trio.alice)
    response = client.post(url("agent_create"), agent_data(provider_connection=theirs.pk))
    assert response.status_code == 400 and b"id_provider_connection_error" in response.content
    assert not Agent.objects.filter(tenant=trio.acme).exists()


# -- crews ----------------------------------------------------------------------------
def test_an_admin_builds_a_crew_with_ordered_members(client, trio):
    first, second, boss = (make_agent(trio.acme, slug) for slug in ("first", "second", "boss"))
    login(client, trio.alice)
    data = {
        "name": "Writers",
        "slug": "writers",
        "mode": "hierarchical",
        "manager": "",
        "max_delegations": "10",
        "max_depth": "3",
        "active": "on",
        f"position_{first.pk}": "2",
        f"position_{second.pk}": "1",
    }
    response = client.post(url("crew_create"), data)
    assert response.status_code == 400 and b"id_manager_error" in response.content
    assert not Crew.objects.filter(slug="writers").exists()
    response = client.post(url("crew_create"), {**data, "manager": boss.pk})
    assert response.status_code == 302
    crew = Crew.objects.get(tenant=trio.acme, slug="writers")
    assert [m.agent.slug for m in crew.members.all()] == ["second", "first"]
    assert crew.manager == boss
    body = client.get(url("crew_edit", slug="writers")).content.decode()
    assert f'name="position_{second.pk}" value="1"' in body
    assert client.post(url("crew_delete", slug="writers")).status_code == 302
    assert not Crew.objects.filter(slug="writers").exists()


# -- tools ----------------------------------------------------------------------------
def tool_data(**extra) -> dict:
    data = {
        "name": "weather",
        "description": "Weather for a city.",
        "input_schema": json.dumps(
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        ),
        "config": json.dumps(
            {
                "method": "GET",
                "url": "https://api.example.com/weather",
                "arguments": [{"argument": "city", "to": "query"}],
            }
        ),
        "output_schema": "",
        "tags": "weather, public",
        "effect": "",
        "idempotent": "unknown",
        "timeout_s": "30",
        "enabled": "on",
        "secret": "",
    }
    data.update(extra)
    return data


def test_the_tool_list_shows_built_ins_and_definitions(client, trio, objects):
    body = login(client, trio.alice).get(url("tools")).content.decode()
    assert "calculator" in body and "Built-in" in body and "lookup" in body
    assert TOOL_SECRET not in body


def test_the_tool_list_names_the_plugin_a_tool_comes_from(client, trio, sample_workflows):
    body = login(client, trio.alice).get(url("tools")).content.decode()
    row = body[body.index("<code>compound_interest</code>") :].split("</tr>")[0]
    assert "Plug-in compound_interest (sample-workflows)" in row
    row = body[body.index("<code>calculator</code>") :].split("</tr>")[0]
    assert "Built-in" in row and "Plug-in" not in row


def test_an_admin_creates_edits_and_deletes_an_http_tool(client, trio):
    login(client, trio.alice)
    response = client.post(url("tool_create"), tool_data())
    assert response.status_code == 302, response.content.decode()
    tool = ToolDefinition.objects.get(tenant=trio.acme, name="weather")
    assert tool.tags == ["weather", "public"] and tool.kind == "http"
    response = client.post(url("tool_edit", pk=tool.pk), tool_data(description="Forecast."))
    assert response.status_code == 302
    tool.refresh_from_db()
    assert tool.description == "Forecast."
    assert client.post(url("tool_delete", pk=tool.pk)).status_code == 302
    assert not ToolDefinition.objects.filter(pk=tool.pk).exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("input_schema", "{oops", "Enter a valid JSON."),
        ("input_schema", json.dumps({"type": "string"}), "must have"),
        ("input_schema", json.dumps({"type": "object", "properties": 3}), "not valid JSON Schema"),
        ("config", json.dumps({"method": "GET"}), "url"),
        ("description", "", "describe the tool for the model"),
        ("rate_limit_per_minute", "0", "calls per minute from 1 to 100,000"),
        ("rate_limit_per_minute", "100001", "calls per minute from 1 to 100,000"),
        ("rate_limit_per_minute", "lots", "Enter a whole number."),
    ],
)
def test_tool_errors_show_in_place_and_nothing_is_saved(client, trio, field, value, message):
    login(client, trio.alice)
    response = client.post(url("tool_create"), tool_data(**{field: value}))
    assert response.status_code == 400
    body = response.content.decode()
    assert f'id="id_{field}_error"' in body, body
    assert message in body
    assert not ToolDefinition.objects.filter(tenant=trio.acme).exists()


def test_inputs_from_other_tools_are_set_in_the_form_and_refused_in_place(client, trio):
    login(client, trio.alice)
    producer = tool_data(
        name="find_city",
        output_schema=json.dumps({"type": "object", "properties": {"city": {"type": "string"}}}),
    )
    assert client.post(url("tool_create"), producer).status_code == 302
    depends_on = {"city": {"from": "find_city", "path": "$.city"}}
    response = client.post(url("tool_create"), tool_data(depends_on=json.dumps(depends_on)))
    assert response.status_code == 302, response.content.decode()
    tool = ToolDefinition.objects.get(tenant=trio.acme, name="weather")
    assert tool.depends_on == depends_on
    assert "find_city" in client.get(url("tool_edit", pk=tool.pk)).content.decode()

    wrong = json.dumps({"city": {"from": "nowhere", "path": "$.city"}})
    response = client.post(url("tool_edit", pk=tool.pk), tool_data(depends_on=wrong))
    assert response.status_code == 400
    body = response.content.decode()
    assert 'id="id_depends_on_error"' in body and "unknown producer tool" in body
    tool.refresh_from_db()
    assert tool.depends_on == depends_on


def test_a_rate_limit_is_saved_from_the_form_and_shown_on_the_test_panel(client, trio):
    login(client, trio.alice)
    response = client.post(url("tool_create"), tool_data(rate_limit_per_minute="30"))
    assert response.status_code == 302, response.content.decode()
    tool = ToolDefinition.objects.get(tenant=trio.acme, name="weather")
    assert tool.rate_limit_per_minute == 30
    assert 'value="30"' in client.get(url("tool_edit", pk=tool.pk)).content.decode()
    body = client.get(url("tool_try", name="weather")).content.decode()
    assert "at most 30 calls a minute" in body
    client.post(url("tool_edit", pk=tool.pk), tool_data(rate_limit_per_minute=""))
    tool.refresh_from_db()
    assert tool.rate_limit_per_minute is None


def test_the_test_panel_honours_the_rate_limit(client, trio):
    make_tool(trio.acme, "calc", rate_limit_per_minute=1)
    login(client, trio.alice)
    page = url("tool_try", name="calc")
    arguments = {"arguments": '{"expression": "6 * 7"}'}
    assert "42" in client.post(page, arguments, HTTP_HX_REQUEST="true").content.decode()
    body = client.post(page, arguments, HTTP_HX_REQUEST="true").content.decode()
    assert "tool calc is limited to 1 calls per minute for this tenant" in body
    assert Run.objects.filter(tenant=trio.acme, tool_name="calc", status="failed").count() == 1


def test_auth_needs_a_secret_and_the_secret_is_write_only(client, trio, objects):
    login(client, trio.alice)
    config = json.dumps(
        {"method": "GET", "url": "https://api.example.com/x", "auth": {"type": "bearer"}}
    )
    response = client.post(url("tool_create"), tool_data(name="x", config=config))
    assert response.status_code == 400 and b'id="id_secret_error"' in response.content
    new_secret = "brand-new-tool-secret"
    response = client.post(
        url("tool_create"), tool_data(name="x", config=config, secret=new_secret)
    )
    assert response.status_code == 302
    assert ToolDefinition.objects.get(name="x").secret == new_secret
    for pk in (objects["tool"].pk, ToolDefinition.objects.get(name="x").pk):
        body = client.get(url("tool_edit", pk=pk)).content.decode()
        assert TOOL_SECRET not in body and new_secret not in body
        assert "A secret is stored." in body


def test_the_test_panel_runs_a_tool_and_shows_result_or_error(client, trio):
    login(client, trio.alice)
    page = url("tool_try", name="calculator")
    response = client.post(page, {"arguments": '{"expression": "6 * 7"}'}, HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert "<html" not in body and "42" in body
    run = Run.objects.get(tenant=trio.acme, tool_name="calculator")  # on the audit trail
    assert (run.status, run.initiated_by_user, run.events.get(seq=1).payload["via"]) == (
        "succeeded", trio.alice, "config"
    )  # fmt: skip
    assert f"/t/acme/runs/{run.pk}/" in body
    body = client.post(page, {"arguments": '{"expression": 3}'}, HTTP_HX_REQUEST="true").content
    assert b"Error:" in body
    body = client.post(page, {"arguments": "{nope"}, HTTP_HX_REQUEST="true").content
    assert b"Not valid JSON" in body
    assert client.get(url("tool_try", name="no_such_tool")).status_code == 404


def test_the_test_panel_past_the_members_request_budget_runs_nothing(client, trio, rates):
    rates("0/min", "100/min")
    login(client, trio.alice)
    body = client.post(
        url("tool_try", name="calculator"), {"arguments": '{"expression": "6 * 7"}'},
        HTTP_HX_REQUEST="true",
    ).content.decode()  # fmt: skip
    assert "Rate limit reached; retry in " in body and "42" not in body
    assert not Run.objects.filter(tenant=trio.acme, tool_name="calculator").exists()


def test_the_test_panel_does_not_run_a_tool_that_needs_approval(client, trio, transfer):
    login(client, trio.alice)
    body = client.post(
        url("tool_try", name="transfer"), {"arguments": '{"amount": 5}'}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "Approval pending" in body and "/t/acme/approvals/" in body
    assert transfer.requests == []  # nothing reached the bank
    run = Run.objects.get(tenant=trio.acme, tool_name="transfer")
    assert run.status == "awaiting_approval" and run.approvals.get().status == "pending"


# -- provider connections --------------------------------------------------------------
def connection_data(**extra) -> dict:
    data = {
        "name": "Claude",
        "kind": "anthropic",
        "preset": "",
        "base_url": "",
        "api_key": "",
        "default_model": "claude-x",
        "allowed_models": "",
        "extra_headers": "",
        "timeout_s": "60",
        "max_retries": "3",
    }
    data.update(extra)
    return data


def test_connection_keys_are_write_only(client, trio, objects):
    login(client, trio.alice)
    response = client.post(url("connection_create"), connection_data())
    assert response.status_code == 400 and b'id="id_api_key_error"' in response.content
    new_key = "sk-ant-new-key-000"
    response = client.post(url("connection_create"), connection_data(api_key=new_key))
    assert response.status_code == 302
    created = ProviderConnection.objects.get(tenant=trio.acme, name="Claude")
    assert created.api_key == new_key
    pages = [url("connections"), url("connection_edit", pk=created.pk)]
    pages.append(url("connection_edit", pk=objects["connection"].pk))
    for page in pages:
        body = client.get(page).content.decode()
        assert new_key not in body and PROVIDER_KEY not in body
    # Saving without a key keeps the stored one.
    edit = url("connection_edit", pk=created.pk)
    assert client.post(edit, connection_data(default_model="claude-y")).status_code == 302
    created.refresh_from_db()
    assert created.api_key == new_key and created.default_model == "claude-y"
    response = client.post(edit, connection_data(extra_headers='{"Authorization": "x"}'))
    assert response.status_code == 400 and b'id="id_extra_headers_error"' in response.content
    assert client.post(url("connection_delete", pk=created.pk)).status_code == 302
    assert not ProviderConnection.objects.filter(pk=created.pk).exists()


def test_testing_a_connection_shows_the_outcome_inline(client, trio, connection):
    login(client, trio.alice)
    response = client.post(url("connection_test", pk=connection.pk), HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert "<html" not in body and "Connected" in body and "sk-test-key" not in body
    connection.refresh_from_db()
    assert connection.health_status == "ok"


def test_a_failing_connection_test_names_the_problem(client, trio, settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    bad = make_connection(
        trio.acme,
        "Down",
        "openai",
        api_key="sk-down-secret",
        base_url="http://127.0.0.1:9/v1",
        max_retries=0,
        timeout_s=2,
    )
    login(client, trio.alice)
    body = client.post(url("connection_test", pk=bad.pk), HTTP_HX_REQUEST="true").content
    assert b"Failing" in body and b"sk-down-secret" not in body


def test_a_refused_base_url_test_shows_the_refusal_not_a_500(client, trio, settings):
    settings.EGRESS_ALLOWLIST = []
    private = make_connection(
        trio.acme, "Private", "openai", api_key="sk-private-secret",
        base_url="http://10.1.2.3/v1", max_retries=3,
    )  # fmt: skip
    login(client, trio.alice)
    inline = client.post(url("connection_test", pk=private.pk), HTTP_HX_REQUEST="true")
    assert inline.status_code == 200
    body = inline.content.decode()
    assert "This address is not allowed: " in body and "10.1.2.3" in body
    assert "sk-private-secret" not in body and "Egress" not in body
    page = client.post(url("connection_test", pk=private.pk), follow=True)
    assert page.status_code == 200 and "This address is not allowed: " in page.content.decode()


# -- API keys -------------------------------------------------------------------------
def test_an_api_key_is_shown_once_and_can_be_revoked(client, trio):
    login(client, trio.alice)
    response = client.post(url("api_key_create"), {"name": "Sync", "scopes": ["read", "run"]})
    assert response.status_code == 200
    body = response.content.decode()
    key = ApiKey.objects.get(tenant=trio.acme, name="Sync")
    full = body.split('id="new-key" type="text" class="code" value="')[1].split('"')[0]
    assert key.prefix in full and len(full) > len(key.prefix) + 20
    assert 'data-copy="#new-key"' in body
    assert "no-store" in response["Cache-Control"]
    listing = client.get(url("api_keys")).content.decode()
    assert key.prefix in listing and full not in listing and "never" in listing
    assert client.post(url("api_key_revoke", pk=key.pk)).status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert "Revoked" in client.get(url("api_keys")).content.decode()


def test_an_api_key_needs_a_scope(client, trio):
    login(client, trio.alice)
    response = client.post(url("api_key_create"), {"name": "Nothing"})
    assert response.status_code == 400 and b'id="id_scopes_error"' in response.content
    assert not ApiKey.objects.filter(tenant=trio.acme).exists()


# -- members --------------------------------------------------------------------------
def invite(client, who: str, role: str = Role.MEMBER):
    return client.post(url("member_invite"), {"invitee": who, "role": role})


def accept_link(response) -> str:
    found = re.search(
        rb'<code id="accept-url">http://testserver(/invitations/[^<]+)</code>', response.content
    )
    assert found, response.content
    return found.group(1).decode()


def test_an_admin_invites_by_username_or_email_and_the_invitee_accepts(
    client, trio, mailoutbox, django_capture_on_commit_callbacks
):
    dora, erin = make_user("dora"), make_user("erin")
    login(client, trio.alice)
    with django_capture_on_commit_callbacks(execute=True):  # the mail goes after the commit
        by_name = invite(client, "dora")
        by_mail = invite(client, "ERIN@example.test", Role.ADMIN)
    assert by_name.status_code == by_mail.status_code == 200
    assert b"Invitation created" in by_name.content
    assert by_name["Cache-Control"] == "no-store"
    assert not Membership.objects.filter(user__in=[dora, erin]).exists()  # not until accepted
    assert [m.to for m in mailoutbox] == [["dora@example.test"], ["ERIN@example.test"]]
    dora_link, erin_link = accept_link(by_name), accept_link(by_mail)
    assert dora_link in mailoutbox[0].body
    page = client.get(url("members")).content.decode()
    assert 'id="pending-invitations"' in page and "ERIN@example.test" in page

    client.logout()
    login(client, dora)
    offer = client.get(dora_link)
    assert offer.status_code == 200 and b"Acme" in offer.content
    assert client.get(erin_link).status_code == 403  # erin's: not dora's to take
    joined = client.post(dora_link, {"action": "accept"})
    assert joined.status_code == 302 and joined["Location"] == "/t/acme/"
    assert Membership.objects.get(tenant=trio.acme, user=dora).role == Role.MEMBER
    used = client.post(dora_link, {"action": "accept"})
    assert used.status_code == 410 and b"used already" in used.content

    client.logout()
    login(client, erin)
    assert client.post(erin_link, {"action": "decline"}).status_code == 302
    assert not Membership.objects.filter(user=erin).exists()
    assert client.get(erin_link).status_code == 410


def test_inviting_says_the_same_whether_or_not_the_account_exists(client, trio):
    make_user("ghost", is_active=False)
    login(client, trio.alice)
    missing = invite(client, "nobody")
    Invitation.objects.all().delete()  # so the pending list is the same for both
    inactive = invite(client, "ghost")
    assert missing.status_code == inactive.status_code == 200
    tokens = re.compile(rb'(csrfmiddlewaretoken" value="|X-CSRFToken": "|/invitations/)[^"<]+')
    same = [tokens.sub(rb"\1", r.content).replace(b"nobody", b"ghost") for r in (missing, inactive)]
    assert re.sub(rb"\d{4}-\d\d-\d\d \d\d:\d\d", b"", same[0]) == re.sub(
        rb"\d{4}-\d\d-\d\d \d\d:\d\d", b"", same[1]
    )


def test_accounts_that_must_not_join_cannot_accept(client, trio):
    root = make_user("root", is_superuser=True)
    ghost = make_user("ghost")
    login(client, trio.alice)
    refused = invite(client, "AnonymousUser")
    assert refused.status_code == 400 and b"cannot be a member" in refused.content
    root_link, ghost_link = (
        accept_link(invite(client, "root")),
        accept_link(invite(client, "ghost")),
    )
    client.logout()
    login(client, root)  # a superuser invited by a non-superuser
    response = client.post(root_link, {"action": "accept"})
    assert response.status_code == 403 and b"cannot be a member" in response.content
    client.logout()
    login(client, ghost)
    ghost.is_active = False
    ghost.save()
    assert client.post(ghost_link, {"action": "accept"}).status_code == 302  # signed out now
    assert not Membership.objects.filter(user__in=[root, ghost]).exists()


def test_bad_expired_and_revoked_links_say_so_and_change_nothing(client, trio):
    from datetime import timedelta

    from django.utils import timezone

    dora = make_user("dora")
    login(client, trio.alice)
    expired, revoked = accept_link(invite(client, "dora")), accept_link(invite(client, "dora"))
    pending = list(Invitation.objects.filter(tenant=trio.acme).order_by("pk"))
    Invitation.objects.filter(pk=pending[0].pk).update(expires_at=timezone.now() - timedelta(1))
    assert client.post(url("member_invitation_revoke", pk=pending[1].pk)).status_code == 302
    other = invitation_create(
        tenant=trio.globex, invitee="x@y.test", role="member", invited_by=None
    )
    assert client.post(url("member_invitation_revoke", pk=other[0].pk)).status_code == 404
    client.logout()
    login(client, dora)
    assert b"expired" in client.post(expired, {"action": "accept"}).content
    assert b"withdrawn" in client.post(revoked, {"action": "accept"}).content
    assert client.get("/invitations/not-a-token/").status_code == 404
    assert client.post(expired, {"action": "accept"}).status_code == 410
    assert client.post(accept_link_of(other), {"action": "nope"}).status_code == 403
    assert not Membership.objects.filter(user=dora).exists()
    assert Invitation.objects.get(pk=other[0].pk).revoked_at is None


def accept_link_of(created) -> str:
    return f"/invitations/{created[1]}/"


def test_only_owners_invite_owners(client, trio):
    adele = make_user("adele")
    add_member(trio.acme, adele, Role.ADMIN)
    login(client, adele)
    response = invite(client, "dora", Role.OWNER)
    assert response.status_code == 400 and b"Only an owner" in response.content
    assert not Invitation.objects.exists()


def test_an_admin_changes_roles_but_only_owners_touch_owners(client, trio):
    admin = make_user("adele")
    add_member(trio.acme, admin, Role.ADMIN)
    bob = Membership.objects.get(tenant=trio.acme, user=trio.bob)
    alice = Membership.objects.get(tenant=trio.acme, user=trio.alice)
    login(client, admin)
    assert client.post(url("member_role", pk=bob.pk), {"role": "viewer"}).status_code == 302
    bob.refresh_from_db()
    assert bob.role == Role.VIEWER
    response = client.post(url("member_role", pk=bob.pk), {"role": "owner"})
    assert response.status_code == 400 and b"Only an owner" in response.content
    assert client.post(url("member_remove", pk=alice.pk)).status_code == 400
    assert client.post(url("member_remove", pk=bob.pk)).status_code == 302
    assert not Membership.objects.filter(pk=bob.pk).exists()


def test_the_last_owner_cannot_be_removed_or_demoted(client, trio):
    alice = Membership.objects.get(tenant=trio.acme, user=trio.alice)
    login(client, trio.alice)
    for response in (
        client.post(url("member_remove", pk=alice.pk)),
        client.post(url("member_role", pk=alice.pk), {"role": "admin"}),
    ):
        assert response.status_code == 400
        assert b"A tenant must keep at least one owner." in response.content
    alice.refresh_from_db()
    assert alice.role == Role.OWNER


# -- a key follows its creator ----------------------------------------------------------------
def test_removing_a_member_on_the_page_revokes_the_keys_they_made_in_one_entry(client, trio):
    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)
    hers = Api(client, key_for(trio.acme, "admin", name="hers", created_by=dana))
    made = Api(client, hers.post("/api-keys", {"name": "made", "scopes": ["read"]}).json()["key"])
    bobs = Api(client, key_for(trio.acme, "read", name="bobs", created_by=trio.bob))
    membership = Membership.objects.get(tenant=trio.acme, user=dana)
    login(client, trio.alice)
    page = client.post(url("member_remove", pk=membership.pk), follow=True).content.decode()
    assert "Removed dana and revoked the API keys they made (2)." in page
    client.logout()
    assert hers.get("/agents").status_code == 401 and made.get("/agents").status_code == 401
    assert bobs.get("/agents").status_code == 200
    (entry,) = AuditEntry.objects.filter(tenant=trio.acme, action=AuditAction.MEMBER_REMOVED)
    assert sorted(k["name"] for k in entry.details["revoked_api_keys"]) == ["hers", "made"]
    assert not AuditEntry.objects.filter(action=AuditAction.API_KEY_REVOKED).exists()


def test_a_role_lowered_on_the_page_limits_the_members_keys_at_once(client, trio):
    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)
    hers = Api(client, key_for(trio.acme, "admin", name="hers", created_by=dana))
    assert hers.get("/config").status_code == 200
    membership = Membership.objects.get(tenant=trio.acme, user=dana)
    login(client, trio.alice)
    assert client.post(url("member_role", pk=membership.pk), {"role": "viewer"}).status_code == 302
    client.logout()
    assert hers.get("/config").status_code == 403
    assert hers.get("/audit-log").status_code == 403
    assert hers.post("/api-keys", {"name": "x", "scopes": ["read"]}).status_code == 403


def test_the_keys_page_says_who_made_each_key_and_what_it_acts_as(client, trio):
    dana = make_user("dana")
    add_member(trio.acme, dana, Role.ADMIN)
    hers = Api(client, key_for(trio.acme, "admin", name="hers", created_by=dana))
    hers.post("/api-keys", {"name": "made", "scopes": ["read"]})
    key_for(trio.acme, "read", name="ops")  # the operator's
    services.membership_set(tenant=trio.acme, user=dana, role=Role.MEMBER)
    page = login(client, trio.alice).get(url("api_keys")).content.decode()
    rows = {
        name: row
        for row in page.split("<tr>")[1:]
        for name in ("hers", "made", "ops")
        if f"<td>{name} " in row
    }
    assert "by dana</small>" in rows["hers"] and "as member" in rows["hers"]
    assert "by key hers (dana)</small>" in rows["made"] and "as member" in rows["made"]
    assert "by the operator</small>" in rows["ops"] and "as " not in rows["ops"]
