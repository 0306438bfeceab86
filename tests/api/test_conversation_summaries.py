"""GET /api/v1/conversations/{id}/summaries: a long conversation's summaries, the caller's
own conversation's only."""

from __future__ import annotations

from agents.models import Conversation, ConversationSummary, Message
from tests.api.test_resources import as_key, assert_error
from tests.factories import make_agent


def test_a_conversations_summaries_are_read_by_its_owner_only(client, trio):
    make_agent(trio.acme, "support")
    mine, other = as_key(client, trio.acme), as_key(client, trio.acme)
    conversation_id = mine.post("/conversations", {"agent": "support"}).json()["id"]
    conversation = Conversation.objects.get(pk=conversation_id)
    last = Message.objects.create(
        tenant=trio.acme, conversation=conversation, role="assistant", content="hello"
    )
    ConversationSummary.objects.create(
        tenant=trio.acme, conversation=conversation, last_message=last, text="They met.",
        messages_covered=2, tokens_covered=300, model="main/gpt-test",
    )  # fmt: skip

    [summary] = mine.get(f"/conversations/{conversation_id}/summaries").json()["results"]
    assert summary | {"id": 0, "created_at": ""} == {
        "id": 0, "last_message": last.pk, "previous": None, "text": "They met.",
        "messages_covered": 2, "tokens_covered": 300, "model": "main/gpt-test", "run": None,
        "call": None, "created_at": "",
    }  # fmt: skip
    assert_error(other.get(f"/conversations/{conversation_id}/summaries"), 404)
    theirs = as_key(client, trio.globex)
    assert_error(theirs.get(f"/conversations/{conversation_id}/summaries"), 404)
    refused = mine.post(f"/conversations/{conversation_id}/summaries", {"text": "x"})
    assert refused.status_code == 405
