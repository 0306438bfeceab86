"""An agent's fallbacks on its web page and in the admin (agents/fallback_forms.py): one
`connection/model` per line, unknown connections refused beside the field, members kept
out (their pages answer 403 or redirect)."""

from __future__ import annotations

from agents.fallback_forms import fallback_lines, parse_fallback_line
from agents.models import Agent
from tests.agents.test_admin import agent_form
from tests.factories import login, make_agent, make_connection
from tests.web.test_config import agent_data, url


def test_a_line_names_the_longest_connection_it_starts_with():
    names = ["Main", "Main/EU", "Backup"]
    assert parse_fallback_line("main/eu/gpt-4o", names) == {
        "connection": "Main/EU",
        "model": "gpt-4o",
    }
    assert parse_fallback_line("Backup", names) == {"connection": "Backup", "model": ""}
    assert parse_fallback_line("Other/x/y", names) == {"connection": "Other", "model": "x/y"}
    stored = [{"connection": "Backup", "model": ""}, {"connection": "Main", "model": "m/1"}]
    assert fallback_lines(stored) == "Backup\nMain/m/1"


def test_the_agent_page_sets_fallbacks_and_balancing(client, trio):
    make_connection(trio.acme, "Main", default_model="m", is_default=True)
    make_connection(trio.acme, "Backup key", default_model="b")
    login(client, trio.alice)
    page = client.get(url("agent_create")).content.decode()
    assert 'name="fallbacks"' in page and 'name="load_balancing"' in page
    data = agent_data(fallbacks="backup key/b2\nMain", load_balancing="round_robin")
    response = client.post(url("agent_create"), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    agent = Agent.objects.get(tenant=trio.acme, slug="support")
    assert agent.fallbacks == [
        {"connection": "Backup key", "model": "b2"},
        {"connection": "Main", "model": ""},
    ]
    assert agent.load_balancing == "round_robin"
    page = client.get(url("agent_edit", slug="support")).content.decode()
    assert "Backup key/b2\nMain" in page


def test_an_unknown_connection_is_an_error_beside_the_field(client, trio):
    make_connection(trio.acme, "Main", default_model="m", is_default=True)
    theirs = make_connection(trio.globex, "Theirs", default_model="x")
    login(client, trio.alice)
    response = client.post(url("agent_create"), agent_data(fallbacks=f"{theirs.name}/x"))
    assert response.status_code == 400
    body = response.content.decode()
    assert 'id="id_fallbacks_error"' in body and "unknown connection" in body
    assert not Agent.objects.filter(tenant=trio.acme).exists()


def test_a_member_cannot_open_the_agent_page(client, trio):
    make_agent(trio.acme, "helper")
    login(client, trio.bob)
    response = client.get(url("agent_edit", slug="helper"))
    assert response.status_code in (302, 403, 404)
    assert b'name="fallbacks"' not in response.content


def test_the_admin_sets_fallbacks(client, trio, agent, connection):
    make_connection(trio.acme, "Backup", default_model="b")
    login(client, trio.alice)
    change = f"/admin/agents/agent/{agent.pk}/change/"
    assert 'name="fallbacks"' in client.get(change).content.decode()
    refused = client.post(change, agent_form(fallbacks="Nowhere/x"))
    assert refused.status_code == 200
    assert "unknown connection" in str(refused.context["adminform"].form.errors["fallbacks"])
    response = client.post(change, agent_form(fallbacks="Backup", load_balancing="least_in_flight"))
    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.fallbacks == [{"connection": "Backup", "model": ""}]
    assert agent.load_balancing == "least_in_flight"


def test_another_tenants_admin_cannot_see_the_agent_in_the_admin(client, trio, agent):
    login(client, trio.charlie)
    response = client.get(f"/admin/agents/agent/{agent.pk}/change/")
    assert response.status_code in (302, 404)
    assert b"fallbacks" not in response.content
