"""The thread of a long conversation: "Earlier messages summarised", expandable to the
summary the fake model wrote, before the turn whose run first used it — on the page and in
the run's live stream alike; a summary that could not be made says older messages were left
out; a reload while the run summarises says so."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from agents.models import Conversation, ConversationSummary, Message, Run, RunEvent
from agents.runs import run_inline, run_start
from tests.factories import login
from tests.fakes.provider_server import ErrorReply, TextReply

pytestmark = pytest.mark.django_db(transaction=True)


def long_chat(trio, agent) -> Conversation:
    """bob's conversation of three turns, about 700 tokens each, of an agent that summarises
    above 1000."""
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
    return chat


def stream_ops(client, chat: Conversation, run: Run) -> list[dict]:
    """The ops of the run's live stream (finished: all of them, then it ends)."""
    stream = client.get(f"/t/acme/chat/{chat.pk}/runs/{run.pk}/stream/")

    async def read() -> str:
        return b"".join([chunk async for chunk in stream.streaming_content]).decode()

    messages = re.findall(r"^data: (.*)$", asyncio.run(read()), re.M)
    return [op for data in messages for op in json.loads(data)["ops"]]


def test_the_thread_shows_earlier_messages_summarised(client, trio, agent, provider_server):
    chat = long_chat(trio, agent)
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
    ops = stream_ops(client, chat, run)
    statuses = [op["html"] for op in ops if op.get("target") == f"run-{run.pk}-state"]
    assert "Summarising earlier messages…" in statuses[0]
    # ... then the marker, as the reloaded page renders it, placed live where that page has it.
    (place,) = [op for op in ops if op["op"] == "place"]
    assert place["target"] == f"summary-{summary.pk}"
    assert place["html"].strip() == marker.group(0)
    assert place["after"] == f"message-{summary.last_message_id}"
    assert 'role="status">Earlier messages summarised.' in statuses[1]
    # The next run reuses it: the stream places the same marker (replacing it, on this page).
    provider_server.script("openai", TextReply("Try the Alfama."))
    again = run_inline(
        tenant=trio.acme, agent=agent, conversation=chat, input="Where?", initiated_by=trio.bob
    )
    assert again.events.filter(type="conversation.summary_reused").exists()
    places = [op for op in stream_ops(client, chat, again) if op["op"] == "place"]
    assert places == [place]
    # Another member of the tenant does not see bob's conversation, nor its summary.
    alice = login(client, trio.alice)
    assert alice.get(f"/t/acme/chat/{chat.pk}/").status_code == 404
    assert alice.get(f"/t/acme/chat/{chat.pk}/runs/{run.pk}/stream/").status_code == 404


def test_a_failed_summary_says_older_messages_were_left_out(client, trio, agent, provider_server):
    """The summarising call fails: the run answers from the newest turns, and both the live
    stream and the reloaded page say that older messages were left out — not why (the
    provider's words stay in the run's record)."""
    chat = long_chat(trio, agent)
    provider_server.script(
        "openai", ErrorReply(400, "the provider's own words"), TextReply("Sure.")
    )
    run = run_inline(
        tenant=trio.acme, agent=agent, conversation=chat, input="And hotels?", initiated_by=trio.bob
    )
    assert run.status == "succeeded", run.error
    assert not ConversationSummary.objects.filter(conversation=chat).exists()
    left_out = run.events.get(type="conversation.compaction_failed").payload["left_out_messages"]
    assert left_out > 0

    bob = login(client, trio.bob)
    page = bob.get(f"/t/acme/chat/{chat.pk}/").content.decode()
    notice = (
        f'<p class="left-out" id="run-{run.pk}-left-out" role="note">Earlier messages could not '
        f"be summarised: {left_out} older messages were left out of this answer.</p>"
    )
    assert page.count(notice) == 1 and 'class="compacted"' not in page
    assert "provider&#x27;s own words" not in page and "provider's own words" not in page

    ops = stream_ops(bob, chat, run)
    appended = [op for op in ops if op["op"] == "append" and op["html"] == notice]
    assert appended and appended[0]["target"] == f"run-{run.pk}-steps"
    assert not any("own words" in json.dumps(op) for op in ops)


def test_a_reload_while_the_run_summarises_says_so(client, trio, agent):
    chat = Conversation.objects.create(tenant=trio.acme, agent=agent, owner_user=trio.bob)
    run = run_start(
        tenant=trio.acme, agent=agent, input="And hotels?", conversation=chat, initiated_by=trio.bob
    )  # (queued: no worker takes it here)
    Run.objects.filter(pk=run.pk).update(status="running")
    payload = {"messages": 4, "model": "openai/gpt"}
    RunEvent.objects.create(
        tenant=trio.acme, run=run, seq=1, type="conversation.compacting", payload=payload
    )
    page = login(client, trio.bob).get(f"/t/acme/chat/{chat.pk}/").content.decode()
    state = f'<p class="run-state" id="run-{run.pk}-state" role="status">'
    assert f"{state}Summarising earlier messages…</p>" in page
    assert 'data-stream-url="' in page and "?after=1" in page  # the stream goes on from there


def test_a_crews_thread_shows_earlier_messages_summarised(
    client, trio, connection, provider_server
):
    from tests.agents.test_crew_compaction import crew_in
    from tests.agents.test_crew_compaction import long_chat as long_crew_chat

    crew = crew_in(trio, "sequential", compaction_threshold=1000)
    chat = long_crew_chat(trio, crew)
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
