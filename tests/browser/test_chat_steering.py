"""While an answer works, in Chromium: a message sent is queued, Steer gives one to the
running agent, Esc stops it keeping what it said, and the queued message is the next turn.
The live server, a real Celery worker, the fake model server slowed down."""

from __future__ import annotations

import time

import pytest

from agents.models import Message, QueuedMessage, Run
from tests.browser.test_chat import start_chat
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(found, timeout_s: float = 10):
    deadline = time.monotonic() + timeout_s
    while (value := found()) is None:
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


def test_queue_then_steer_then_stop_and_the_queued_message_starts(
    trio, agent, provider_server, celery_worker_process, tab
):
    provider_server.script(
        "openai",
        # Round 1: slow (about 6 s), so the person queues and steers meanwhile.
        ToolCallReply(
            [ToolCall("c1", "calculator", '{"expression": "6*7"}')],
            text="Let me compute that first.",
            chunk_delay_s=1.5,
        ),
        # Round 2: a long answer, stopped after its first pieces.
        TextReply(
            "Forty-two is the answer, and here is a very long story about it.", chunk_delay_s=2
        ),
        # The queued message's turn.
        TextReply("The queued answer."),
    )
    tab.login("bob")
    first = start_chat(tab, "What is 6*7?")
    page = tab.page
    composer = page.locator("#composer")
    composer.locator("button", has_text="Steer").wait_for()  # busy: Queue / Steer / Stop

    # (a) Queue: Enter while the answer works keeps the message for the next turn.
    field = page.get_by_label("Message")
    field.fill("And what is 7*8?")
    field.press("Enter")
    queued = page.locator("#queued .queued-item.turn", has_text="And what is 7*8?")
    queued.wait_for()
    assert "Queued" in queued.text_content()
    assert field.input_value() == ""
    tab.screenshot("chat-queued")

    # (b) Steer: the agent gets it before its next model call; it joins the turn's steps.
    field.fill("Please be brief.")
    composer.get_by_role("button", name="Steer").click()
    steer = wait_for(lambda: QueuedMessage.objects.filter(kind="steer").first())
    page.locator(f"#run-{first}-steps #steer-{steer.pk}", has_text="Please be brief.").wait_for(
        timeout=20_000
    )
    assert page.locator(f"#queued-{steer.pk}").count() == 0
    second_call = provider_server.requests_to("/v1/chat/completions")[1].body["messages"]
    assert second_call[-1] == {"role": "user", "content": "Please be brief."}

    # (c) Stop with Esc once round 2 has said something: what it said stays, marked stopped.
    segment = page.locator(f"#run-{first}-seg-2")
    segment.wait_for(timeout=20_000)
    page.wait_for_function(
        f"() => (document.querySelector('#run-{first}-seg-2')?.textContent || '').length > 0",
        timeout=20_000,
    )
    field.press("Escape")
    footer = page.locator(f"#run-{first}-footer", has_text="Stopped")
    footer.wait_for(timeout=20_000)
    said = segment.text_content().strip()
    assert said.startswith("Forty-two") and "about it" not in said
    run = Run.objects.get(pk=first)
    assert run.status == "cancelled" and run.output.strip() == said
    answer = Message.objects.get(run=run, role="assistant")
    assert answer.content == run.output

    # The queued message starts as the next turn, followed live on the same page.
    page.locator(".turn .msg.user", has_text="And what is 7*8?").wait_for(timeout=20_000)
    page.locator(".segment:not(.streaming)", has_text="The queued answer.").wait_for(timeout=20_000)
    following = Run.objects.filter(conversation=run.conversation).exclude(pk=first).get()
    assert following.input == "And what is 7*8?" and following.status == "succeeded"
    assert page.locator("#queued .queued-item").count() == 0
    page.locator("#composer:not([data-busy])").wait_for()

    # Reloaded, the thread shows the same: the steer in the first turn, its stopped answer.
    page.reload()
    assert page.locator(".turn").count() == 2
    assert page.locator(f"#steer-{steer.pk}").count() == 1
    assert said in page.locator(f"#run-{first}").text_content()
    tab.screenshot("chat-steering")
    tab.assert_clean()
