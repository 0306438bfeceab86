"""Use grants and approval authority in the Django admin: the same rules and services as
the web configuration pages; another tenant's agents answer 404."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.selectors import use_grants
from tenancy.models import ApiKey
from tests.factories import login, make_agent, make_crew

pytestmark = pytest.mark.django_db


def test_a_tenant_admin_grants_and_revokes_in_the_admin(trio):
    payroll = make_agent(trio.acme, "payroll")
    alice = login(Client(), trio.alice)
    url = f"/admin/agents/agent/{payroll.pk}/access/"
    assert "Every member may use it" in alice.get(url).content.decode()
    bobs = trio.bob.memberships.get(tenant=trio.acme)
    assert alice.post(url, {"action": "grant", "member": bobs.pk}).status_code == 302
    assert use_grants(tenant=trio.acme, target=payroll)[0] == [trio.bob]
    alice.post(url, {"action": "revoke", "member": bobs.pk})
    assert use_grants(tenant=trio.acme, target=payroll) == ([], [])
    listing = alice.get("/admin/agents/agent/").content.decode()
    assert url in listing


def test_another_tenants_agent_or_member_is_refused(trio):
    theirs = make_agent(trio.globex, "spy")
    alice = login(Client(), trio.alice)
    assert alice.get(f"/admin/agents/agent/{theirs.pk}/access/").status_code in (302, 404)
    crew = make_crew(trio.acme, "team")
    charlies = trio.charlie.memberships.get(tenant=trio.globex)
    response = alice.post(
        f"/admin/agents/crew/{crew.pk}/access/", {"action": "grant", "member": charlies.pk}
    )
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert use_grants(tenant=trio.acme, target=crew) == ([], [])


def test_the_agent_admin_sets_the_approval_authority(trio):
    agent = make_agent(trio.acme, "pay")
    page = login(Client(), trio.alice).get(f"/admin/agents/agent/{agent.pk}/change/")
    body = page.content.decode()
    assert 'name="approval_deciders"' in body and 'name="approval_not_starter"' in body


def test_an_admin_made_key_keeps_its_limits_and_role(trio):
    alice = login(Client(), trio.alice)
    response = alice.post(
        "/admin/tenancy/apikey/add/",
        {"tenant": trio.acme.pk, "name": "lim", "scopes": ["read", "run"],
         "allowed_agents": "assistant", "allowed_tools": "calculator,current_time"},
    )  # fmt: skip
    assert response.status_code == 200, response.content[:500]
    key = ApiKey.objects.get(name="lim")
    assert key.allowed_agents == ["assistant"]
    assert key.allowed_tools == ["calculator", "current_time"] and key.role == "owner"
