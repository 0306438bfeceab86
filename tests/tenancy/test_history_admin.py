"""Configuration versions in the Django admin: admin saves (with a crew's inline members)
are versions, the objects' History button shows them, restore is an action, all scoped."""

from __future__ import annotations

from agents.services import agent_save, crew_save
from tenancy.models import ConfigVersion
from tenancy.records import history
from tests.agents.test_admin import agent_form
from tests.factories import login, make_agent

SECRET = "sk-admin-history-secret-555"


def test_an_admin_change_is_a_version_by_that_user(client, trio):
    agent = agent_save(tenant=trio.acme, changes={"slug": "assistant", "name": "Assistant"})
    login(client, trio.alice)
    url = f"/admin/agents/agent/{agent.pk}/change/"
    response = client.post(url, agent_form(instructions="From the admin."))
    assert response.status_code == 302, response.content
    latest = history.versions(trio.acme, agent).first()
    assert latest.number == 2 and latest.user == trio.alice
    assert latest.changes["instructions"] == ["", "From the admin."]


def test_a_crews_inline_members_are_in_its_version(client, trio):
    one, two = make_agent(trio.acme, "one"), make_agent(trio.acme, "two")
    crew = crew_save(tenant=trio.acme, changes={"slug": "team", "name": "Team"}, members=[one])
    login(client, trio.alice)
    page = client.get(f"/admin/agents/crew/{crew.pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() or "" for name in form.fields}
    data = {k: v for k, v in data.items() if v != "" or k in ("description",)}
    prefix = "members"
    member_pk = crew.members.get().pk
    data.update(
        {
            f"{prefix}-TOTAL_FORMS": "2",
            f"{prefix}-INITIAL_FORMS": "1",
            f"{prefix}-0-id": str(member_pk),
            f"{prefix}-0-crew": str(crew.pk),
            f"{prefix}-0-agent": str(one.pk),
            f"{prefix}-0-position": "0",
            f"{prefix}-1-crew": str(crew.pk),
            f"{prefix}-1-agent": str(two.pk),
            f"{prefix}-1-position": "1",
        }
    )
    response = client.post(f"/admin/agents/crew/{crew.pk}/change/", data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    latest = history.versions(trio.acme, crew).first()
    assert latest.snapshot["parts"]["members"] == ["one", "two"]
    assert latest.changes == {"members": [["one"], ["one", "two"]]}


def test_the_history_button_shows_the_versions_and_restore_is_an_action(client, trio):
    agent = agent_save(tenant=trio.acme, changes={"slug": "a", "name": "A", "instructions": "1"})
    agent_save(tenant=trio.acme, agent=agent, changes={"instructions": "2"})
    login(client, trio.alice)
    button = client.get(f"/admin/agents/agent/{agent.pk}/history/")
    assert button.status_code == 302
    listing = client.get(button["Location"]).content.decode()
    first = ConfigVersion.objects.get(object_id=agent.pk, number=1)
    assert f"/admin/tenancy/configversion/{first.pk}/change/" in listing
    detail = client.get(f"/admin/tenancy/configversion/{first.pk}/change/").content.decode()
    assert "instructions" in detail
    done = client.post(
        "/admin/tenancy/configversion/",
        {"action": "restore_version", "_selected_action": [first.pk], "index": 0},
        follow=True,
    )
    assert "Restored version 1" in done.content.decode()
    agent.refresh_from_db()
    assert agent.instructions == "1"
    assert history.versions(trio.acme, agent).first().restored_from == 1


def test_versions_are_read_only_scoped_and_secret_free(client, trio):
    from providers.services import connection_save

    conn = connection_save(
        tenant=trio.acme, changes={"name": "C", "kind": "anthropic", "api_key": SECRET}
    )
    version = history.versions(trio.acme, conn).get()
    login(client, trio.alice)
    page = client.get(f"/admin/tenancy/configversion/{version.pk}/change/").content.decode()
    assert "[set]" in page and SECRET not in page
    assert client.post(f"/admin/tenancy/configversion/{version.pk}/delete/").status_code == 403
    login(client, trio.charlie)  # globex's owner
    assert client.get(f"/admin/tenancy/configversion/{version.pk}/change/").status_code in (
        302,
        404,
    )
    listing = client.get("/admin/tenancy/configversion/").content.decode()
    assert f"/admin/tenancy/configversion/{version.pk}/" not in listing
