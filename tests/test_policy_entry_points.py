"""The same rules through the entry points the first tests did not take: the chat's and the
admin's approval decisions, the config page's and the admin's reserved tool names, the
cancel rule in the service, and row-level security under concurrent requests of two
tenants against one live server."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx2
import pytest
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.test import Client

from agents import access
from agents.evaluations import dataset_save, evaluation_start
from agents.models import Agent, Approval, Conversation, Evaluation, Run
from agents.runs import run_start
from agents.services import conversation_save
from tenancy import services as tenancy
from tenancy.models import Membership, Role
from tenancy.policy import Principal
from tests import live_server
from tests.factories import add_member, login, make_agent, make_approval, make_user
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db


@pytest.fixture
def admins_only(trio) -> Agent:
    return make_agent(trio.acme, "pay", approval_deciders="admins")


def _parked_in_bobs_chat(trio, agent) -> tuple[Conversation, Approval]:
    chat = conversation_save(tenant=trio.acme, changes={"agent": agent}, owner_user=trio.bob)
    run = run_start(
        tenant=trio.acme, agent=agent, input="pay", conversation=chat,
        initiated_by=trio.bob, enqueue=False,
    )  # fmt: skip
    Run.objects.filter(pk=run.pk).update(status="awaiting_approval")
    return chat, make_approval(run, "t")


def test_the_chat_refuses_a_decision_the_agent_keeps_for_admins(trio, admins_only):
    chat, approval = _parked_in_bobs_chat(trio, admins_only)
    url = f"/t/acme/chat/{chat.pk}/approvals/{approval.pk}/"
    response = login(Client(), trio.bob).post(url, {"decision": "approve"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and "Only an admin" in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_the_admins_approve_action_follows_the_approval_authority(trio, admins_only):
    admins_only.approval_not_starter = True
    admins_only.save()
    run = run_start(tenant=trio.acme, agent=admins_only, input="x", initiated_by=trio.alice,
                    enqueue=False)  # fmt: skip
    Run.objects.filter(pk=run.pk).update(status="awaiting_approval")
    approval = make_approval(run, "t")
    login(Client(), trio.alice).post(
        "/admin/agents/approval/",
        {"action": "approve_selected", "_selected_action": [approval.pk]},
    )
    approval.refresh_from_db()
    assert approval.status == "pending"  # alice started it: someone else must decide


def test_a_built_ins_name_is_refused_by_the_config_page_and_the_admin(trio):
    body = {
        "name": "calculator", "description": "Not it.", "kind": "http",
        "input_schema": '{"type": "object"}', "config": '{"method": "GET", "url": "https://x.example/"}',
        "timeout_s": 30, "enabled": "on",
    }  # fmt: skip
    alice = login(Client(), trio.alice)
    page = alice.post("/t/acme/tools/new/", body)
    assert page.status_code == 400 and "built-in" in page.content.decode()
    admin = alice.post("/admin/tools/tooldefinition/add/", {**body, "tenant": trio.acme.pk})
    assert admin.status_code == 200 and "built-in" in admin.content.decode()
    assert not ToolDefinition.objects.exists()


def test_the_cancel_service_refuses_anyone_but_the_starter_or_an_admin(trio, admins_only):
    run = run_start(tenant=trio.acme, agent=admins_only, input="x", initiated_by=trio.alice,
                    enqueue=False)  # fmt: skip
    bob = Principal.for_initiator(trio.acme, trio.bob)
    with pytest.raises(PermissionDenied):
        access.require_cancel(bob, run)
    access.require_cancel(Principal.for_initiator(trio.acme, trio.alice), run)


def test_a_user_acts_with_their_role_in_that_tenant_only_and_a_superuser_as_its_owner(trio):
    """Principal.for_initiator, which the admin, evaluations and configuration operations
    ask: a member of another tenant only gets 404 here, so does an inactive superuser."""
    bob = Principal.for_initiator(trio.acme, trio.bob)
    assert (bob.tenant, bob.role, bob.user) == (trio.acme, Role.MEMBER, trio.bob)
    membership = Membership.objects.get(tenant=trio.acme, user=trio.bob)
    assert Principal.of_membership(membership).user == trio.bob  # (the chat's, MCP's)
    with pytest.raises(Http404):
        Principal.for_initiator(trio.acme, trio.charlie)  # globex's owner only
    dataset = dataset_save(tenant=trio.acme, changes={"name": "cases"})
    with pytest.raises(Http404):
        evaluation_start(
            tenant=trio.acme, dataset=dataset, agent=make_agent(trio.acme), by=trio.charlie,
            dispatch=False,
        )  # fmt: skip
    assert not Evaluation.objects.exists()
    root = make_user("root", is_superuser=True)
    owner = Principal.for_initiator(trio.acme, root)
    assert (owner.tenant, owner.role, owner.user) == (trio.acme, Role.OWNER, root)
    root.is_active = False
    with pytest.raises(Http404):
        Principal.for_initiator(trio.acme, root)


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_concurrent_requests_of_two_tenants_each_see_only_their_own(trio):
    """Row-level security sets the tenant per unit of work on pooled connections: with
    many requests of two tenants interleaved on one server, none sees the other's rows."""
    for tenant, prefix in ((trio.acme, "acme"), (trio.globex, "globex")):
        for i in range(3):
            make_agent(tenant, f"{prefix}-{i}", name=f"{prefix} {i}")
    keys = {
        slug: tenancy.api_key_create(tenant=tenant, name="k", scopes=["read"])[1]
        for slug, tenant in (("acme", trio.acme), ("globex", trio.globex))
    }
    with live_server.asgi_server() as base:

        def agents_of(slug: str) -> tuple[str, set[str]]:
            response = httpx2.get(
                f"{base}/api/v1/agents", headers={"Authorization": f"Bearer {keys[slug]}"},
                timeout=30,
            )  # fmt: skip
            response.raise_for_status()
            return slug, {item["slug"] for item in response.json()["results"]}

        with ThreadPoolExecutor(max_workers=16) as pool:
            answers = list(pool.map(agents_of, ["acme", "globex"] * 40))
    assert len(answers) == 80
    for slug, seen in answers:
        assert seen == {f"{slug}-{i}" for i in range(3)}, (slug, seen)


def test_a_viewer_made_key_cannot_start_what_a_member_could(trio):
    vera = make_user("vera")
    add_member(trio.acme, vera, Role.VIEWER)
    key, _ = tenancy.api_key_create(tenant=trio.acme, name="k", scopes=["run"], role="viewer")
    agent = make_agent(trio.acme, "a")
    with pytest.raises(PermissionDenied):
        run_start(tenant=trio.acme, agent=agent, input="x", initiated_by=key, enqueue=False)
