"""Use grants, groups and approval authority in the web configuration pages and the
approvals inbox: the same rules the REST API and the chat follow."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import Agent, Run
from agents.runs import run_start
from tenancy.models import Role, TenantGroup
from tests.factories import add_member, login, make_agent, make_approval, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def payroll(trio) -> Agent:
    return make_agent(trio.acme, "payroll")


@pytest.fixture
def carol(trio):
    carol = make_user("carol")
    add_member(trio.acme, carol, Role.MEMBER)
    return carol


def grants_url(slug: str = "payroll", kind: str = "agents") -> str:
    return f"/t/acme/{kind}/{slug}/access/"


def may_chat(user, slug: str = "payroll") -> bool:
    return f"agent:{slug}" in login(Client(), user).get("/t/acme/chat/").content.decode()


def test_an_admin_grants_and_revokes_the_use_of_an_agent(trio, payroll, carol):
    alice = login(Client(), trio.alice)
    assert "Every member may use it" in alice.get(grants_url()).content.decode()
    carols = carol.memberships.get(tenant=trio.acme)
    granted = alice.post(grants_url(), {"action": "grant", "member": carols.pk})
    assert granted.status_code == 302
    page = alice.get(grants_url()).content.decode()
    assert "Only these members and groups" in page and "carol" in page
    assert may_chat(carol) and not may_chat(trio.bob)
    bob = login(Client(), trio.bob)
    assert bob.post("/t/acme/chat/new/", {"target": "agent:payroll"}).status_code == 403
    alice.post(grants_url(), {"action": "revoke", "member": carols.pk})
    assert may_chat(trio.bob)


def test_a_group_holds_a_grant_for_its_members(trio, payroll, carol):
    alice = login(Client(), trio.alice)
    assert alice.post("/t/acme/groups/", {"name": "Finance"}).status_code == 302
    group = TenantGroup.objects.get(tenant=trio.acme, name="Finance")
    carols = carol.memberships.get(tenant=trio.acme)
    alice.post(f"/t/acme/groups/{group.pk}/members/", {"add": carols.pk})
    assert list(group.group.user_set.all()) == [carol]
    alice.post(grants_url(), {"action": "grant", "group": group.pk})
    assert may_chat(carol) and not may_chat(trio.bob)
    duplicate = alice.post("/t/acme/groups/", {"name": "Finance"})
    assert duplicate.status_code == 400 and TenantGroup.objects.count() == 1


def test_only_admins_open_grants_and_groups_and_outsiders_get_404(trio, payroll, carol):
    bob = login(Client(), trio.bob)
    for page in (grants_url(), "/t/acme/groups/"):
        assert bob.get(page).status_code == 403
    carols = carol.memberships.get(tenant=trio.acme)
    assert bob.post(grants_url(), {"action": "grant", "member": carols.pk}).status_code == 403
    charlie = login(Client(), trio.charlie)
    assert charlie.get(grants_url()).status_code == 404
    assert login(Client(), trio.alice).get(grants_url("nope")).status_code == 404
    assert login(Client(), trio.alice).get(grants_url("payroll", "things")).status_code == 404
    assert may_chat(trio.bob)  # nothing was granted


def test_a_grant_to_another_tenants_member_is_refused(trio, payroll):
    charlies = trio.charlie.memberships.get(tenant=trio.globex)
    response = login(Client(), trio.alice).post(
        grants_url(), {"action": "grant", "member": charlies.pk}
    )
    assert response.status_code == 404 and may_chat(trio.bob)


def test_the_agent_form_sets_the_approval_authority(trio, payroll):
    alice = login(Client(), trio.alice)
    page = alice.get("/t/acme/agents/payroll/edit/").content.decode()
    assert 'name="approval_deciders"' in page and "Who may use it" in page
    data = {
        "name": "Payroll",
        "slug": "payroll",
        "kind": "orchestrator",
        "approval_policy": "flagged",
        "approval_deciders": "admins",
        "approval_not_starter": "on",
        "max_rounds": 10,
        "max_tool_calls": 50,
        "use_all_tools": "on",
        "active": "on",
    }
    assert alice.post("/t/acme/agents/payroll/edit/", data).status_code == 302
    payroll.refresh_from_db()
    assert payroll.approval_deciders == "admins" and payroll.approval_not_starter
    group_needed = alice.post(
        "/t/acme/agents/payroll/edit/", {**data, "approval_deciders": "group"}
    )
    assert group_needed.status_code == 400
    assert "name the group whose members decide" in group_needed.content.decode()


def test_the_inbox_shows_who_may_decide_and_refuses_others(trio, payroll):
    payroll.approval_deciders = "admins"
    payroll.save()
    run = run_start(tenant=trio.acme, agent=payroll, input="pay", initiated_by=trio.bob)
    Run.objects.filter(pk=run.pk).update(status="awaiting_approval")
    approval = make_approval(run, "transfer")
    bob = login(Client(), trio.bob)
    inbox = bob.get("/t/acme/approvals/").content.decode()
    assert "Only an admin can decide" in inbox and 'value="approve"' not in inbox
    decide = f"/t/acme/approvals/{approval.pk}/decide/"
    refused = bob.post(decide, {"decision": "approve"}, HTTP_HX_REQUEST="true")
    assert "Only an admin can decide" in refused.content.decode()
    approval.refresh_from_db()
    assert approval.status == "pending"
    login(Client(), trio.alice).post(decide, {"decision": "approve"})
    approval.refresh_from_db()
    assert approval.status == "approved"
