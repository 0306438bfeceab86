"""A workspace's home page (agentplatform/web/home.py): what each role may chat with, one
click away; the user's own recent conversations; approvals waiting; first steps for an
admin of an empty workspace."""

from __future__ import annotations

from django.urls import reverse
from guardian.shortcuts import assign_perm

from agents.models import Conversation, Run
from tenancy.models import Role
from tests.factories import add_member, login, make_agent, make_approval, make_crew, make_user

HOME = "/t/acme/"


def chat_link(kind: str, slug: str) -> str:
    return f'href="{reverse("chat:index", kwargs={"tenant_slug": "acme"})}?{kind}={slug}"'


def conversation_link(conversation: Conversation) -> str:
    url = reverse(
        "chat:conversation", kwargs={"tenant_slug": "acme", "conversation_id": conversation.pk}
    )
    return f'href="{url}"'


def test_a_member_sees_what_they_may_chat_with_one_click_away(client, trio, agent):
    make_agent(trio.acme, "retired", active=False)
    secret = make_agent(trio.acme, "secret", description="Only for carol.")
    assign_perm("agents.use_agent", make_user("carol"), secret)  # now carol's (and admins')
    make_crew(trio.acme, "team", [agent], description="Research, then write.")
    make_agent(trio.globex, "elsewhere")
    body = login(client, trio.bob).get(HOME).content.decode()
    assert "Start a chat" in body
    assert chat_link("agent", "assistant") in body and chat_link("crew", "team") in body
    assert "Research, then write." in body
    for absent in ("retired", "secret", "elsewhere"):
        assert chat_link("agent", absent) not in body, absent
    body = login(client, trio.alice).get(HOME).content.decode()  # an owner passes use grants
    assert chat_link("agent", "secret") in body and chat_link("agent", "retired") not in body


def test_recent_conversations_are_the_users_own_newest_first(client, trio, agent):
    mine = [
        Conversation.objects.create(tenant=trio.acme, owner_user=trio.bob, agent=agent, title=t)
        for t in ("Older talk", "Newer talk")
    ]
    theirs = Conversation.objects.create(
        tenant=trio.acme, owner_user=trio.alice, agent=agent, title="Alice's plans"
    )
    body = login(client, trio.bob).get(HOME).content.decode()
    assert body.index("Newer talk") < body.index("Older talk")
    assert all(conversation_link(c) in body for c in mine)
    assert "with Assistant" in body
    assert "Alice&#x27;s plans" not in body and conversation_link(theirs) not in body


def test_a_viewer_reads_but_is_offered_nothing_to_start(client, trio, agent):
    viewer = make_user("vic")
    add_member(trio.acme, viewer, Role.VIEWER)
    chat = Conversation.objects.create(
        tenant=trio.acme, owner_user=viewer, agent=agent, title="Read me"
    )
    body = login(client, viewer).get(HOME).content.decode()
    assert "viewers cannot start chats" in body
    assert chat_link("agent", "assistant") not in body
    assert conversation_link(chat) in body


def test_an_admin_of_an_empty_workspace_gets_first_steps_a_member_is_told_to_ask(client, trio):
    body = login(client, trio.alice).get(HOME).content.decode()
    assert "no agent yet" in body
    assert reverse("config:agent_create", kwargs={"tenant_slug": "acme"}) in body
    assert reverse("config:connection_create", kwargs={"tenant_slug": "acme"}) in body
    body = login(client, trio.bob).get(HOME).content.decode()
    assert "Ask an admin" in body and "config:" not in body
    assert reverse("config:agent_create", kwargs={"tenant_slug": "acme"}) not in body


def test_approvals_waiting_for_the_user_are_announced(client, trio, agent):
    run = Run.objects.create(tenant=trio.acme, agent=agent, initiated_by_user=trio.bob)
    make_approval(run)
    approvals = reverse("activity:approvals", kwargs={"tenant_slug": "acme"})
    body = login(client, trio.bob).get(HOME).content.decode()
    assert "1 tool call waits for a decision" in body and approvals in body
    viewer = make_user("vic")
    add_member(trio.acme, viewer, Role.VIEWER)
    assert "for a decision" not in login(client, viewer).get(HOME).content.decode()


def test_the_home_reads_in_a_few_queries(client, trio, agent, django_assert_max_num_queries):
    for _ in range(5):
        Conversation.objects.create(tenant=trio.acme, owner_user=trio.bob, agent=agent)
    make_crew(trio.acme, "team", [agent])
    login(client, trio.bob)
    # session, user, membership, the workspaces; use grants per kind (three, and the content
    # type once per process), conversations, approvals
    with django_assert_max_num_queries(16):
        assert client.get(HOME).status_code == 200


def test_outsiders_get_404_and_writes_are_refused(client, trio):
    assert login(client, trio.charlie).get(HOME).status_code == 404
    assert login(client, trio.bob).post(HOME).status_code == 405
