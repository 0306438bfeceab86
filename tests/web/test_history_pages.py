"""History pages (/t/<tenant>/history/<kind>/<pk>/...): versions from web saves, diffs,
restore with its checks, access per role, no secret in the HTML, and the run page's links
to the versions a run used."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from agents.models import Agent
from agents.runs import run_inline
from agents.services import agent_save
from providers.models import ProviderConnection
from providers.services import connection_save
from tenancy.models import ConfigVersion, Role
from tenancy.records import history
from tests.factories import add_member, login, make_user
from tests.web.test_config import agent_data, connection_data
from tools.services import tool_definition_delete, tool_definition_save

PROVIDER_KEY = "sk-history-provider-secret-321"


def url(view: str, **kwargs) -> str:
    return reverse(f"config:{view}", kwargs={"tenant_slug": "acme", **kwargs})


@pytest.fixture
def edited(client, trio) -> Agent:
    """An agent created and edited by alice through the pages: versions 1 and 2."""
    login(client, trio.alice)
    assert client.post(url("agent_create"), agent_data()).status_code == 302
    edit = url("agent_edit", slug="support")
    assert client.post(edit, agent_data(instructions="Be very kind.")).status_code == 302
    return Agent.objects.get(tenant=trio.acme, slug="support")


def test_web_saves_are_listed_with_who_and_what_changed(client, trio, edited):
    page = client.get(url("history", kind="agents", pk=edited.pk)).content.decode()
    assert "v1" in page and "v2" in page and "(current)" in page
    assert "Be kind." in page and "Be very kind." in page
    assert "alice" in page
    assert (
        url("history", kind="agents", pk=edited.pk)
        in client.get(url("agent_edit", slug="support")).content.decode()
    )


def test_a_version_page_shows_its_diff_and_settings_and_a_confirmed_restore(client, edited):
    body = client.get(url("history_version", kind="agents", pk=edited.pk, number=1))
    page = body.content.decode()
    assert "version 1" in page and "Restore this version" in page and "<details" in page
    latest = client.get(url("history_version", kind="agents", pk=edited.pk, number=2))
    assert "This is the current version." in latest.content.decode()


def test_restoring_saves_the_old_settings_as_a_new_version(client, edited):
    restore = url("history_restore", kind="agents", pk=edited.pk, number=1)
    assert client.get(restore).status_code == 405  # only a POST restores
    response = client.post(restore, follow=True)
    assert "Restored version 1" in response.content.decode()
    edited.refresh_from_db()
    assert edited.instructions == "Be kind."
    latest = history.versions(edited.tenant, edited).first()
    assert latest.number == 3 and latest.restored_from == 1 and latest.actor_label == "alice"


def test_a_restore_the_compiler_refuses_now_says_why_and_changes_nothing(client, trio):
    tool = tool_definition_save(
        tenant=trio.acme,
        changes={"name": "adder", "kind": "builtin", "config": {"builtin": "calculator"}},
    )
    agent = agent_save(
        tenant=trio.acme, changes={"slug": "a", "name": "A", "tool_names": ["adder"]}
    )
    agent_save(tenant=trio.acme, agent=agent, changes={"tool_names": []})
    tool_definition_delete(tenant=trio.acme, definition=tool)
    login(client, trio.alice)
    restore = url("history_restore", kind="agents", pk=agent.pk, number=1)
    page = client.post(restore, follow=True).content.decode()
    assert "Version 1 cannot be restored" in page and "adder" in page
    agent.refresh_from_db()
    assert agent.tool_names == [] and ConfigVersion.objects.filter(object_id=agent.pk).count() == 2


def test_connection_history_never_shows_its_key(client, trio):
    login(client, trio.alice)
    created = client.post(url("connection_create"), connection_data(api_key=PROVIDER_KEY))
    assert created.status_code == 302
    conn = ProviderConnection.objects.get(tenant=trio.acme, name="Claude")
    edit = url("connection_edit", pk=conn.pk)
    assert client.post(edit, connection_data(default_model="claude-y")).status_code == 302
    pages = [
        url("history", kind="provider-connections", pk=conn.pk),
        url("history_version", kind="provider-connections", pk=conn.pk, number=1),
        url("history_version", kind="provider-connections", pk=conn.pk, number=2),
    ]
    for page in pages:
        body = client.get(page).content.decode()
        assert PROVIDER_KEY not in body
    assert "[set]" in client.get(pages[1]).content.decode()
    client.post(url("history_restore", kind="provider-connections", pk=conn.pk, number=1))
    conn.refresh_from_db()
    assert conn.default_model == "claude-x" and conn.api_key == PROVIDER_KEY


def test_members_and_viewers_get_403_outsiders_404_anonymous_the_login(client, trio, edited):
    viewer = make_user("vic")
    add_member(trio.acme, viewer, Role.VIEWER)
    pages = [
        ("get", url("history", kind="agents", pk=edited.pk)),
        ("get", url("history_version", kind="agents", pk=edited.pk, number=1)),
        ("post", url("history_restore", kind="agents", pk=edited.pk, number=1)),
    ]
    for user, status in ((trio.bob, 403), (viewer, 403), (trio.charlie, 404)):
        login(client, user)
        for method, page in pages:
            assert getattr(client, method)(page).status_code == status, (user, page)
    anonymous = Client()
    for method, page in pages:
        assert getattr(anonymous, method)(page).status_code == 302
    # globex's admin naming acme's agent under globex: 404 too.
    login(client, trio.charlie)
    own = url("history", kind="agents", pk=edited.pk).replace("/t/acme/", "/t/globex/")
    assert client.get(own).status_code == 404
    edited.refresh_from_db()
    assert edited.instructions == "Be very kind."


def test_unknown_kinds_and_versions_are_404(client, trio, edited):
    for page in (
        url("history", kind="runs", pk=edited.pk),
        url("history", kind="agents", pk=edited.pk + 999),
        url("history_version", kind="agents", pk=edited.pk, number=9),
        url("history_version", kind="agents", pk=edited.pk, number=99999999999999999999),
        url("history", kind="agents", pk=99999999999999999999),
    ):
        assert client.get(page).status_code == 404, page


@pytest.mark.django_db
def test_the_run_page_links_the_versions_it_used(client, trio, connection, provider_server):
    tool = tool_definition_save(
        tenant=trio.acme,
        changes={"name": "adder", "kind": "builtin", "config": {"builtin": "calculator"}},
    )
    connection_save(tenant=trio.acme, connection=connection, changes={"timeout_s": 30.0})
    agent = agent_save(
        tenant=trio.acme, changes={"slug": "calc", "name": "Calc", "tool_names": ["adder"]}
    )
    agent_save(tenant=trio.acme, agent=agent, changes={"instructions": "Add."})
    run = run_inline(tenant=trio.acme, agent=agent, input="hi", initiated_by=trio.bob)
    assert run.status == "succeeded", run.error
    run.refresh_from_db()
    assert run.config_versions == {
        "agents.agent": [[agent.pk, 2]],
        "providers.providerconnection": [[connection.pk, 1]],
        "tools.tooldefinition": [[tool.pk, 1]],
    }
    page = login(client, trio.alice).get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert url("history_version", kind="agents", pk=agent.pk, number=2) in page
    assert url("history_version", kind="tools", pk=tool.pk, number=1) in page
    assert url("history_version", kind="provider-connections", pk=connection.pk, number=1) in page
    # bob (a member) sees which versions, without links to pages he may not open.
    page = login(client, trio.bob).get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert "agent Calc v2" in page and "/history/" not in page


def test_related_objects_show_by_name_in_the_diff(client, trio):
    main = connection_save(tenant=trio.acme, changes={"name": "Main", "kind": "offline"})
    agent = agent_save(tenant=trio.acme, changes={"slug": "a", "name": "A"})
    agent_save(tenant=trio.acme, agent=agent, changes={"provider_connection": main})
    login(client, trio.alice)
    page = client.get(url("history", kind="agents", pk=agent.pk)).content.decode()
    assert f"Main (#{main.pk})" in page
    pk = main.pk
    main.delete()
    page = client.get(url("history_version", kind="agents", pk=agent.pk, number=2))
    assert f"#{pk} (deleted)" in page.content.decode()
