"""A long conversation in Chromium (live server, real Celery worker, fake provider): the next
message's run summarises the older turns, and the thread shows "Earlier messages
summarised" as it happens (and where a reload has it), which opens to the summary."""

from __future__ import annotations

import pytest

from agents.models import Conversation, ConversationSummary, Message
from tests.browser.conftest import assert_accessible
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def tab(axe_tab):
    return axe_tab


def test_a_long_conversation_is_compacted_and_the_thread_says_so(
    trio, agent, provider_server, celery_worker_process, tab
):
    agent.compaction_threshold = 1000
    agent.save()
    chat = Conversation.objects.create(
        tenant=trio.acme, agent=agent, owner_user=trio.bob, title="Trip"
    )
    parent = None
    for n in range(3):
        for role in ("user", "assistant"):
            parent = Message.objects.create(
                tenant=trio.acme, conversation=chat, role=role, content=f"{role} {n} " + "x" * 900,
                parent=parent,
            )  # fmt: skip
    Conversation.objects.filter(pk=chat.pk).update(leaf=parent)
    provider_server.script(
        "openai", TextReply("They planned a trip to Lisbon."), TextReply("Try the Alfama.")
    )
    tab.login("bob")
    tab.goto(f"/t/acme/chat/{chat.pk}/")
    page = tab.page
    assert page.locator("details.compacted").count() == 0
    # Whether the marker arrives while the answer streams (its element aria-busy then).
    page.evaluate(
        """() => new MutationObserver((changes, observer) => {
          const marker = document.querySelector("details.compacted");
          if (!marker) return;
          window.markerWhileBusy = Boolean(document.querySelector("#thread [aria-busy=true]"));
          observer.disconnect();
        }).observe(document.getElementById("thread"), {childList: true, subtree: true})"""
    )
    field = page.get_by_label("Message")
    field.fill("Where should we stay?")
    field.press("Enter")
    page.locator(".segment:not(.streaming)", has_text="Try the Alfama.").wait_for(timeout=15_000)
    # Placed live, without a reload: where the reloaded page has it (before "user 2").
    marker = page.locator("details.compacted")
    assert marker.count() == 1 and page.evaluate("window.markerWhileBusy") is True
    where = "m => m.nextElementSibling.querySelector('.bubble').textContent.slice(0, 6)"
    assert marker.evaluate(where) == "user 2"
    marker.locator("summary").click()
    assert_accessible(tab, "a conversation summarised live, the summary open")

    summarising, answering = provider_server.requests_to("/v1/chat/completions")
    assert "user 0" in summarising.body["messages"][-1]["content"]
    assert "They planned a trip to Lisbon." in answering.body["messages"][1]["content"]
    assert ConversationSummary.objects.filter(conversation=chat).count() == 1

    page.reload()
    marker.locator("summary").wait_for()
    assert marker.count() == 1 and marker.get_attribute("open") is None
    assert marker.evaluate(where) == "user 2"
    assert "Earlier messages summarised" in marker.locator("summary").text_content()
    marker.locator("summary").click()
    marker.locator(".compacted-text", has_text="They planned a trip to Lisbon.").wait_for()
