"""The chat's controls around the thread: each answer's menu (verdict and rating folded
away, the rating fetched when it opens), the header's "New chat with…" picker, the new chat's
focused message field."""

from __future__ import annotations

import pytest
from guardian.shortcuts import assign_perm

from agents.models import Conversation, Message, Run
from agents.runs import run_start
from agents.services import conversation_save
from tenancy.models import Role
from tests.factories import add_member, login, make_agent, make_crew, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def bobs_chat(trio) -> Conversation:
    assistant = make_agent(trio.acme, "assistant")
    return conversation_save(
        tenant=trio.acme, changes={"agent": assistant, "title": "Plans"}, owner_user=trio.bob
    )


def page_of(client, chat: Conversation) -> str:
    return client.get(f"/t/acme/chat/{chat.pk}/").content.decode()


def turn(trio, chat: Conversation, **ending) -> Run:
    run = run_start(
        tenant=trio.acme, agent=chat.agent, input="hi", conversation=chat, initiated_by=trio.bob
    )
    if ending:
        Run.objects.filter(pk=run.pk).update(**ending)
        Message.objects.create(
            tenant=trio.acme, conversation=chat, role="assistant", content="hello", run=run
        )
    return run


def test_an_answers_verdict_and_rating_sit_in_its_menu_the_rating_loaded_on_opening(
    client, trio, bobs_chat
):
    run = turn(trio, bobs_chat, status="succeeded", output="hello", claim={"summary": "Said hi."})
    body = page_of(login(client, trio.bob), bobs_chat)
    menu_start = body.index(f'<details class="msg-menu" id="run-{run.pk}-menu" data-menu>')
    menu = body[menu_start : body.index("</details>", body.index("msg-menu-panel", menu_start))]
    assert "Rate or verify this answer" in menu
    assert f'id="verdict-{run.pk}"' in menu and 'value="verified"' in menu
    assert f'id="feedback-{run.pk}"' in menu
    assert 'hx-trigger="toggle once from:closest details"' in menu
    assert 'hx-trigger="load"' not in body  # nothing fetched per answer on page load


def test_a_running_answer_has_its_stop_and_no_menu_yet(client, trio, bobs_chat):
    run = turn(trio, bobs_chat)
    body = page_of(login(client, trio.bob), bobs_chat)
    assert f'id="run-{run.pk}-menu"' not in body
    assert f'action="/t/acme/chat/{bobs_chat.pk}/runs/{run.pk}/cancel/"' in body


def test_the_picker_offers_what_the_user_may_use(client, trio, bobs_chat):
    make_agent(trio.acme, "translator")
    make_agent(trio.acme, "retired", active=False)
    secret = make_agent(trio.acme, "secret")
    assign_perm("agents.use_agent", make_user("carol"), secret)
    make_crew(trio.acme, "team", [bobs_chat.agent])
    body = page_of(login(client, trio.bob), bobs_chat)
    assert "New chat with…" in body
    for kind, slug in [("agent", "assistant"), ("agent", "translator"), ("crew", "team")]:
        assert f'href="/t/acme/chat/?{kind}={slug}"' in body, slug
    for slug in ("retired", "secret"):
        assert f"?agent={slug}" not in body, slug


def test_a_viewer_gets_no_picker(client, trio, bobs_chat):
    viewer = make_user("vic")
    add_member(trio.acme, viewer, Role.VIEWER)
    chat = conversation_save(
        tenant=trio.acme, changes={"agent": bobs_chat.agent, "title": "Mine"}, owner_user=viewer
    )
    assert "New chat with…" not in page_of(login(client, viewer), chat)


def test_a_chosen_agents_new_chat_focuses_the_message(client, trio, bobs_chat):
    login(client, trio.bob)
    chosen = client.get("/t/acme/chat/?agent=assistant").content.decode()
    assert 'data-enter-sends aria-describedby="new-help" autofocus' in chosen
    assert "autofocus" not in client.get("/t/acme/chat/").content.decode()
