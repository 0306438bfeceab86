"""Searching message text (agents/conversations/search.py): one owner's conversations only,
best first, highlights escaped but for their marks, and the index the query uses."""

from __future__ import annotations

import pytest
from django.db import connection

from agents.conversations import message_search
from agents.models import Conversation, Message
from agents.services import conversation_save
from tenancy import services as tenancy
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def said(chat: Conversation, *texts: str, role: str = "user") -> list[Message]:
    return [
        Message.objects.create(tenant=chat.tenant, conversation=chat, role=role, content=text)
        for text in texts
    ]


@pytest.fixture
def chats(trio):
    acme_agent, globex_agent = make_agent(trio.acme, "helper"), make_agent(trio.globex, "helper")

    def chat(tenant, agent, title, **owner):
        return conversation_save(tenant=tenant, changes={"agent": agent, "title": title}, **owner)

    return {
        "bob": chat(trio.acme, acme_agent, "Bob's", owner_user=trio.bob),
        "alice": chat(trio.acme, acme_agent, "Alice's", owner_user=trio.alice),
        "charlie": chat(trio.globex, globex_agent, "Charlie's", owner_user=trio.charlie),
    }


def test_it_finds_words_in_the_owners_messages_best_first(trio, chats):
    weak, strong = said(
        chats["bob"],
        "The weather is nice. Later, much later, we may talk about zeppelins.",
        "Zeppelins! Zeppelins everywhere: a zeppelin parade.",
    )
    said(chats["bob"], "Nothing to see here.", role="assistant")
    hits = message_search(tenant=trio.acme, owner=trio.bob, query="zeppelin")
    assert [h.message_id for h in hits] == [strong.pk, weak.pk]
    assert hits[0].conversation_id == chats["bob"].pk and hits[0].conversation_title == "Bob's"
    assert "<mark>Zeppelins</mark>" in hits[0].snippet
    assert message_search(tenant=trio.acme, owner=trio.bob, query="zeppelin", limit=1)[0] == hits[0]
    assert message_search(tenant=trio.acme, owner=trio.bob, query="   ") == []
    assert message_search(tenant=trio.acme, owner=trio.bob, query="the and of") == []  # stop words
    phrase = message_search(tenant=trio.acme, owner=trio.bob, query='"zeppelin parade" -weather')
    assert [h.message_id for h in phrase] == [strong.pk]


def test_nobody_finds_another_users_or_tenants_messages(trio, chats):
    said(chats["alice"], "Alice's secret walrus plan")
    said(chats["charlie"], "Charlie's secret walrus plan")
    (mine,) = said(chats["bob"], "Bob's own walrus")
    assert [
        h.message_id for h in message_search(tenant=trio.acme, owner=trio.bob, query="walrus")
    ] == [mine.pk]
    assert [
        h.message_id for h in message_search(tenant=trio.acme, owner=trio.alice, query="walrus")
    ] != [mine.pk]
    # Charlie's tenant, asked about acme: nothing of acme's; his own tenant: only his.
    assert message_search(tenant=trio.acme, owner=trio.charlie, query="walrus") == []
    assert len(message_search(tenant=trio.globex, owner=trio.charlie, query="walrus")) == 1
    key, _ = tenancy.api_key_create(tenant=trio.acme, name="k", scopes=["read"])
    assert message_search(tenant=trio.acme, owner=key, query="walrus") == []  # owns none


def test_a_snippet_is_escaped_but_for_its_marks(trio, chats):
    attack = 'Look: <script>alert("x")</script> <img src=x onerror=alert(1)> \x02falcon\x03 falcon'
    said(chats["bob"], attack)
    (hit,) = message_search(tenant=trio.acme, owner=trio.bob, query="falcon")
    html = str(hit.snippet)
    assert "<script>" not in html and "<img" not in html
    assert "&lt;img" in html and "&quot;x&quot;" in html  # (PostgreSQL's parser drops
    # what it reads as tags; what it keeps is text, escaped)
    # Marks are ours only: the control characters the text carried are dropped.
    assert html.count("<mark>") == 2 and html.count("</mark>") == 2
    assert "\x02" not in html and "\x03" not in html
    assert html.replace("<mark>", "").replace("</mark>", "").count("<") == 0
    assert "falcon" in hit.snippet_text and "<mark>" not in hit.snippet_text


def test_the_search_uses_the_gin_index(trio, chats):
    said(chats["bob"], *(f"message number {i} about gardening" for i in range(50)))
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table: ask what it can use
        cursor.execute(
            "EXPLAIN SELECT id FROM agents_message "
            "WHERE search @@ websearch_to_tsquery('english', %s)",
            ["gardening"],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "agents_message_search" in plan
