"""A person's memory page (agentplatform/web/memory.py) with the Django test client: what
agents remember about them, edited and deleted; anyone else's fact 404; reached from the
navigation and the account page.

acme: alice (owner), bob (member); globex: charlie.
"""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import Fact
from tenancy.models import AuditEntry
from tests.factories import login, make_agent

pytestmark = pytest.mark.django_db
PAGE = "/t/acme/memory/"


@pytest.fixture
def facts(trio):
    pal = make_agent(trio.acme, "pal", memory=True)
    return {
        "bob": Fact.objects.create(tenant=trio.acme, user=trio.bob, agent=pal, text="Bob: tea."),
        "alice": Fact.objects.create(tenant=trio.acme, user=trio.alice, text="Alice: runs."),
        "shared": Fact.objects.create(tenant=trio.acme, scope="tenant", text="Closed Sundays."),
        "globex": Fact.objects.create(tenant=trio.globex, user=trio.bob, text="Bob at Globex."),
    }


def test_a_person_sees_only_what_agents_remember_about_them_here(client: Client, trio, facts):
    login(client, trio.bob)
    page = client.get(PAGE)
    assert page.status_code == 200
    html = page.content.decode()
    assert "What agents remember about you" in html
    assert "Bob: tea." in html and "by Pal" in html
    for other in ("Alice: runs.", "Closed Sundays.", "Bob at Globex."):
        assert other not in html
    assert f'href="{PAGE}"' in html  # the navigation's link
    assert PAGE in client.get("/account/").content.decode()


def test_a_person_edits_and_deletes_their_facts_audited(client: Client, trio, facts):
    login(client, trio.bob)
    fact = facts["bob"]
    response = client.post(f"{PAGE}{fact.pk}/edit/", {"text": "Bob: coffee."})
    assert response.status_code == 302 and response.url == PAGE
    fact.refresh_from_db()
    assert fact.text == "Bob: coffee." and fact.edited_by == trio.bob and fact.embedder
    assert "Bob: coffee." in client.get(PAGE).content.decode()

    refused = client.post(f"{PAGE}{fact.pk}/edit/", {"text": "  "})
    assert refused.status_code == 400 and "cannot be empty" in refused.content.decode()
    fact.refresh_from_db()
    assert fact.text == "Bob: coffee."

    assert client.post(f"{PAGE}{fact.pk}/delete/").status_code == 302
    assert not Fact.objects.filter(pk=fact.pk).exists()
    assert list(
        AuditEntry.objects.filter(object_type="agents.fact").values_list("action", "user")
    ) == [("fact.forgotten", trio.bob.pk), ("fact.edited", trio.bob.pk)]


def test_anyone_elses_fact_is_404_on_the_page_whoever_asks(client: Client, trio, facts):
    login(client, trio.alice)  # the owner, too
    for name in ("bob", "shared", "globex"):
        fact = facts[name]
        assert client.post(f"{PAGE}{fact.pk}/edit/", {"text": "x"}).status_code == 404, name
        assert client.post(f"{PAGE}{fact.pk}/delete/").status_code == 404, name
    assert Fact.objects.count() == len(facts)
    assert client.get(f"{PAGE}{facts['alice'].pk}/delete/").status_code == 405  # POST only
    assert login(Client(), trio.charlie).get(PAGE).status_code == 404  # not acme's member
