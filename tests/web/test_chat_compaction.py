"""The thread of a long conversation: "Earlier messages summarised", expandable to the
summary the fake model wrote, before the turn whose run first used it."""

from __future__ import annotations

import asyncio
import re

import pytest

from agents.models import Conversation, ConversationSummary, Message
from agents.runs import run_inline
from tests.factories import login
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_thread_shows_earlier_messages_summarised(client, trio, agent, provider_server):
    agent.compaction_threshold = 1000
    agent.save()
    chat = Conversation.objects.create(tenant=trio.acme, agent=agent, owner_user=trio.bob)
    parent = None
    for n in range(3):
        for role in ("user", "assistant"):
            parent = Message.objects.create(
                tenant=trio.acme, conversation=chat, role=role, content=f"{role} {n} " + "x" * 900,
                parent=parent,
            )  # fmt: skip
    Conversation.objects.filter(pk=chat.pk).update(leaf=parent)
    provider_server.script(
        "openai", TextReply("They planned a <b>trip</b> to Lisbon."), TextReply("Sure.")
    )
    run = run_inline(
        tenant=trio.acme, agent=agent, conversation=chat, input="And hotels?", initiated_by=trio.bob
    )
    assert run.status == "succeeded", run.error
    summary = ConversationSummary.objects.get(conversation=chat)

    page = login(client, trio.bob).get(f"/t/acme/chat/{chat.pk}/").content.decode()

    marker = re.search(
        rf'<details class="compacted" id="summary-{summary.pk}">(.*?)</details>', page, re.S
    )
    assert marker is not None
    assert "Earlier messages summarised" in marker.group(1) and "(4 messages" in marker.group(1)
    # The model's text, escaped: never HTML.
    assert "They planned a &lt;b&gt;trip&lt;/b&gt; to Lisbon." in marker.group(1)
    # Placed after the last message it covers ("assistant 1"), before "user 2".
    assert page.index("assistant 1 ") < marker.start() < page.index("user 2 ")
    assert page.count('class="compacted"') == 1
    # The run's stream said what it was doing meanwhile.
    stream = client.get(f"/t/acme/chat/{chat.pk}/runs/{run.pk}/stream/")

    async def read() -> str:
        return b"".join([chunk async for chunk in stream.streaming_content]).decode()

    assert "Summarising earlier messages" in asyncio.run(read())
    # Another member of the tenant does not see bob's conversation, nor its summary.
    assert login(client, trio.alice).get(f"/t/acme/chat/{chat.pk}/").status_code == 404


def test_a_crews_thread_shows_earlier_messages_summarised(
    client, trio, connection, provider_server
):
    from tests.agents.test_crew_compaction import crew_in, long_chat

    crew = crew_in(trio, "sequential", compaction_threshold=1000)
    chat = long_chat(trio, crew)
    provider_server.script("openai", TextReply("They met."), TextReply("R."), TextReply("W."))
    run = run_inline(
        tenant=trio.acme, crew=crew, conversation=chat, input="And now?", initiated_by=trio.bob
    )
    assert run.status == "succeeded", run.error
    summary = ConversationSummary.objects.get(conversation=chat)

    page = login(client, trio.bob).get(f"/t/acme/chat/{chat.pk}/").content.decode()
    marker = re.search(
        rf'<details class="compacted" id="summary-{summary.pk}">(.*?)</details>', page, re.S
    )
    assert marker is not None and "They met." in marker.group(1)
    assert "(4 messages" in marker.group(1)
    assert page.index("&lt;a2&gt;") < marker.start() < page.index("&lt;u3&gt;")
