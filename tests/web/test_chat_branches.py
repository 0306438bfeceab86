"""The chat's branches and search through Django's test client: editing a message, the
versions switch, forking, the sidebar's message hits (escaped, the user's own), a hit's
branch; bad input and other people's conversations refused, nothing changed. The browser's
side is in tests/browser/test_chat.py."""

from __future__ import annotations

import pytest

from agents.conversations import attachment_upload
from agents.models import Agent, Attachment, Conversation, Message, Run
from agents.runs import run_start
from agents.services import conversation_save
from tenancy.models import Role
from tests.factories import add_member, login, make_agent, make_user
from tests.web.test_chat import land_answer

pytestmark = pytest.mark.django_db


@pytest.fixture
def assistant(trio) -> Agent:
    return make_agent(trio.acme, "assistant")


@pytest.fixture
def chat(trio, assistant) -> Conversation:
    return conversation_save(
        tenant=trio.acme, changes={"agent": assistant, "title": "Trips"}, owner_user=trio.bob
    )


def url(chat: Conversation, suffix: str = "") -> str:
    return f"/t/{chat.tenant.slug}/chat/{chat.pk}/{suffix}"


def answered(trio, chat: Conversation, question: str, answer: str) -> Run:
    run = run_start(
        tenant=trio.acme, agent=chat.agent, input=question, conversation=chat, initiated_by=trio.bob
    )
    Run.objects.filter(pk=run.pk).update(status="succeeded", output=answer)
    land_answer(run, answer)
    return run


def finish(run: Run, answer: str) -> None:
    Run.objects.filter(pk=run.pk).update(status="succeeded", output=answer)
    land_answer(Run.objects.get(pk=run.pk), answer)


def everything() -> tuple:
    return (
        list(Message.objects.order_by("id").values_list("id", "parent", "content")),
        list(Conversation.objects.order_by("id").values_list("id", "leaf", "title")),
        Run.objects.count(),
    )


def test_editing_a_message_answers_it_anew_with_a_switch_back(client, trio, chat):
    first = answered(trio, chat, "Plan Lisbon", "When?")
    answered(trio, chat, "In May", "Lovely.")
    login(client, trio.bob)
    page = client.get(url(chat)).content.decode()
    assert f'action="{url(chat, f"messages/{first.in_reply_to_id}/edit/")}"' in page
    assert "data-up-edits" in page  # arrow up in the composer opens the last Edit

    response = client.post(
        url(chat, f"messages/{first.in_reply_to_id}/edit/"), {"message": "Plan Porto"}
    )
    assert response.status_code == 302
    edited = Run.objects.latest("id")
    assert edited.input == "Plan Porto" and edited.in_reply_to.parent_id is None
    page = client.get(url(chat)).content.decode()
    assert '<div class="bubble">Plan Porto</div>' in page and "Lovely." not in page
    assert '<span class="version-count">2 / 2</span>' in page
    assert f'name="message" value="{first.in_reply_to_id}" aria-label="Previous version"' in page

    run_page = client.get(f"/t/acme/runs/{edited.pk}/").content.decode()
    at = edited.in_reply_to_id
    assert f'href="{url(chat)}?at={at}#message-{at}">message #{at}</a>' in run_page

    finish(edited, "Porto it is.")
    back = client.post(url(chat, "switch/"), {"message": first.in_reply_to_id})
    assert back.status_code == 302 and back["Location"].endswith(f"#message-{first.in_reply_to_id}")
    page = client.get(url(chat)).content.decode()
    assert "Lovely." in page and "Porto it is." not in page
    assert '<span class="version-count">1 / 2</span>' in page


def test_forking_opens_a_new_conversation_with_the_branch(client, trio, chat):
    answered(trio, chat, "Plan Lisbon", "When?")
    answered(trio, chat, "In May", "Lovely.")
    when = Message.objects.get(conversation=chat, content="When?")
    login(client, trio.bob)
    response = client.post(url(chat, "fork/"), {"message": when.pk})
    fork = Conversation.objects.latest("id")
    assert response.status_code == 302 and response["Location"] == url(fork)
    assert fork.owner_user == trio.bob and fork.title == "Trips (fork)"
    page = client.get(url(fork)).content.decode()
    assert "When?" in page and "Lovely." not in page
    assert "Lovely." in client.get(url(chat)).content.decode()  # the original as it was


def test_a_fork_past_the_attachment_limit_is_refused_clearly(client, trio, chat, settings):
    attachment = attachment_upload(
        tenant=trio.acme, conversation=chat, by=trio.bob, name="a.txt", data=b"abc" * 10
    )
    run = run_start(
        tenant=trio.acme, agent=chat.agent, input="Read it", conversation=chat,
        initiated_by=trio.bob, attachments=[attachment.pk],
    )  # fmt: skip
    settings.ATTACHMENT_TENANT_MAX_BYTES = 40  # no room for a copy
    before = everything()
    login(client, trio.bob)
    response = client.post(url(chat, "fork/"), {"message": run.in_reply_to_id}, follow=True)
    assert response.redirect_chain == [(url(chat), 302)]
    assert "would exceed" in response.content.decode()
    assert everything() == before and Attachment.objects.count() == 1


def test_the_sidebar_finds_words_in_messages_with_escaped_snippets(client, trio, chat, assistant):
    answered(trio, chat, "Tell me about <b>okapis</b>", "Okapis live in the Congo.")
    alices = conversation_save(
        tenant=trio.acme, changes={"agent": assistant, "title": "Alice's"}, owner_user=trio.alice
    )
    Message.objects.create(
        tenant=trio.acme, conversation=alices, role="user", content="Alice's okapi secret"
    )
    login(client, trio.bob)
    response = client.get(
        "/t/acme/chat/?q=okapi", headers={"HX-Request": "true", "HX-Target": "conversation-list"}
    )
    body = response.content.decode()
    assert "<b>" not in body and "okapi secret" not in body
    assert "<mark>Okapis</mark> live in the Congo" in body
    hit = Message.objects.get(content__startswith="Okapis")
    assert f'href="{url(chat)}?at={hit.pk}#message-{hit.pk}"' in body
    full = client.get("/t/acme/chat/?q=okapi").content.decode()  # without JavaScript too
    assert "<mark>Okapis</mark>" in full


def test_a_hit_on_another_branch_shows_that_branch_and_continues_it_on_request(client, trio, chat):
    first = answered(trio, chat, "Plan Lisbon", "Trams and tiles.")
    edited = run_start(
        tenant=trio.acme, agent=chat.agent, input="Plan Porto", conversation=chat,
        initiated_by=trio.bob, edit_of=first.in_reply_to,
    )  # fmt: skip
    finish(edited, "Port wine.")
    old = Message.objects.get(content="Trams and tiles.")
    login(client, trio.bob)
    page = client.get(url(chat), {"at": old.pk}).content.decode()
    assert "Trams and tiles." in page and "Port wine." not in page
    assert "another branch" in page and 'id="composer"' not in page
    assert client.get(url(chat)).content.decode().count("Port wine.") == 1  # unchanged
    client.post(url(chat, "switch/"), {"message": old.pk})
    chat.refresh_from_db()
    assert chat.leaf_id == old.pk
    assert client.get(url(chat), {"at": "x"}).status_code == 404


def test_bad_edits_forks_and_switches_are_refused_and_change_nothing(client, trio, chat):
    first = answered(trio, chat, "Hello", "Hi.")
    answer = Message.objects.get(conversation=chat, role="assistant")
    before = everything()
    login(client, trio.alice)  # the tenant's owner, not the conversation's
    for suffix, data in (
        (f"messages/{first.in_reply_to_id}/edit/", {"message": "mine"}),
        ("fork/", {"message": answer.pk}),
        ("switch/", {"message": answer.pk}),
    ):
        assert client.post(url(chat, suffix), data).status_code == 404, suffix
    assert client.get(url(chat), {"at": answer.pk}).status_code == 404
    client.logout()

    login(client, trio.bob)
    htmx = {"HX-Request": "true"}
    refused = client.post(url(chat, f"messages/{answer.pk}/edit/"), {"message": "x"}, headers=htmx)
    assert refused["X-Chat-Status"] == "400" and "Only your own messages" in refused.text
    for text in ("", "   ", "x" * 100_001):
        refused = client.post(
            url(chat, f"messages/{first.in_reply_to_id}/edit/"), {"message": text}, headers=htmx
        )
        assert refused["X-Chat-Status"] == "400"
    assert client.post(url(chat, "messages/999999/edit/"), {"message": "x"}).status_code == 404
    for data in ({"message": 999999}, {"message": "x"}, {}):
        assert client.post(url(chat, "fork/"), data).status_code == 404
        assert client.post(url(chat, "switch/"), data).status_code == 404
    assert everything() == before

    run_start(tenant=trio.acme, agent=chat.agent, input="Long", conversation=chat,
              initiated_by=trio.bob)  # fmt: skip
    busy = everything()
    refused = client.post(
        url(chat, f"messages/{first.in_reply_to_id}/edit/"), {"message": "x"}, headers=htmx
    )
    assert refused["X-Chat-Status"] == "409"
    assert everything() == busy


def test_a_viewer_reads_but_cannot_edit_fork_or_switch(client, trio, assistant):
    viewer = make_user("vera")
    add_member(trio.acme, viewer, Role.VIEWER)
    chat = conversation_save(
        tenant=trio.acme, changes={"agent": assistant, "title": "Vera's"}, owner_user=viewer
    )
    message = Message.objects.create(
        tenant=trio.acme, conversation=chat, role="user", content="Hello"
    )
    Conversation.objects.filter(pk=chat.pk).update(leaf=message)
    login(client, viewer)
    page = client.get(url(chat)).content.decode()
    assert "Hello" in page and "Fork from here" not in page and "edit-message" not in page
    for suffix in (f"messages/{message.pk}/edit/", "fork/", "switch/"):
        assert client.post(url(chat, suffix), {"message": message.pk}).status_code == 403
    assert Conversation.objects.count() == 1 and Message.objects.count() == 1


def test_a_hit_on_the_current_branch_shows_the_current_branch(client, trio, chat):
    first = answered(trio, chat, "Plan Lisbon", "Trams.")
    second = answered(trio, chat, "In May", "Lovely.")
    newer = run_start(
        tenant=trio.acme, agent=chat.agent, input="In June", conversation=chat,
        initiated_by=trio.bob, edit_of=second.in_reply_to,
    )  # fmt: skip
    finish(newer, "Hot.")
    login(client, trio.bob)
    client.post(url(chat, "switch/"), {"message": second.in_reply_to_id})  # back to May
    trams = Message.objects.get(content="Trams.", conversation=chat)
    page = client.get(url(chat), {"at": trams.pk}).content.decode()
    assert "Lovely." in page and "Hot." not in page and "another branch" not in page
    assert first.in_reply_to.parent_id is None
