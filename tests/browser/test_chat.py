"""The chat in Chromium against the live server and a real Celery worker; the model is the
local fake provider (OpenAI wire format, streamed in pieces)."""

from __future__ import annotations

import time

import pytest

from agents.models import Conversation, Run
from agents.services import conversation_save
from tests.factories import make_agent, make_crew, make_http_tool
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.tools.local_server import LocalServer, Reply

pytestmark = pytest.mark.django_db(transaction=True)

ATTACK = "<script>alert(1)</script> <img src=x onerror=alert(1)>"


def start_chat(tab, message: str) -> int:
    """From the chat index: pick the assistant (preselected by ?agent=), type, press Enter."""
    tab.goto("/t/acme/chat/?agent=assistant")
    assert tab.page.get_by_label("Chat with").input_value() == "agent:assistant"
    field = tab.page.get_by_label("Message")
    field.fill(message)
    field.press("Enter")
    tab.page.wait_for_url(lambda url: url.rstrip("/").split("/")[-1].isdigit())
    return Run.objects.filter(conversation__owner_user__username="bob").latest("pk").pk


def segment_lengths_until(tab, selector: str, done_selector: str, timeout: float = 15) -> list[int]:
    """Distinct lengths of the text in `selector`, sampled until `done_selector` shows."""
    seen: list[int] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = (
            tab.page.locator(selector).text_content() if tab.page.locator(selector).count() else ""
        )
        if text and (not seen or seen[-1] != len(text)):
            seen.append(len(text))
        if tab.page.locator(done_selector).count():
            return seen
        time.sleep(0.05)
    raise AssertionError(f"{done_selector} never showed; lengths seen: {seen}")


def test_a_chat_streams_shows_a_tool_and_an_approval_and_resumes_after_reload(
    trio, agent, transfer, provider_server, celery_worker_process, tab
):
    provider_server.script(
        "openai",
        ToolCallReply(
            [ToolCall("c1", "calculator", '{"expression": "2+3"}')],
            text="Let me work out the amount first, then ask to transfer it.",
            chunk_delay_s=0.4,
        ),
        ToolCallReply([ToolCall("c2", "transfer", '{"amount": 5, "to": "bob"}')]),
        TextReply("Done: I transferred **5** to bob. Anything else?", chunk_delay_s=1.2),
    )
    tab.login("bob")
    run_id = start_chat(tab, "Please send 5 to bob")
    page = tab.page

    # 1. The first round's text grows in several increments while the run goes on.
    lengths = segment_lengths_until(tab, f"#run-{run_id}-seg-1", ".tool-card.done")
    assert len(lengths) >= 2, lengths
    # While the answer works, the composer queues, steers and stops (test_chat_steering.py).
    assert page.get_by_role("button", name="Steer").is_visible()

    # 2. The tool card: collapsed, with name, arguments, result and latency.
    card = page.locator(".tool-card", has_text="calculator")
    assert card.get_attribute("open") is None
    card.locator("summary").click()
    assert '"expression": "2+3"' in card.locator("pre").first.text_content()
    assert "5" in card.locator("pre").nth(1).text_content()
    assert "ms" in card.locator(".tool-latency").text_content()

    # 3. The approval card; approve it; the run goes on live in the same page.
    approval = page.locator(".approval-card", has_text="transfer")
    approval.wait_for()
    assert "Approval needed" in approval.text_content()
    approval.get_by_role("button", name="Approve").click()
    page.locator(".approval-card.approved", has_text="Approved by bob").wait_for()

    # 4. Mid-stream reload: the page shows what was said so far and keeps receiving.
    final = f"#run-{run_id}-seg-3"
    page.locator(final).wait_for()
    deadline = time.monotonic() + 10
    while not (page.locator(final).text_content() or "") and time.monotonic() < deadline:
        time.sleep(0.05)
    before = page.locator(final).text_content()
    assert before and Run.objects.get(pk=run_id).status == "running"
    page.reload()
    after_reload = page.locator(final).text_content()
    assert after_reload and after_reload.startswith(before[:3]), (before, after_reload)
    page.locator(f"{final}:not(.streaming) strong", has_text="5").wait_for(timeout=15_000)
    assert "Done: I transferred 5 to bob. Anything else?" in page.locator(final).text_content()
    assert page.get_by_label("Message").is_enabled()
    # The round's text is complete at its inference.completed event; the run's end (its
    # footer, Regenerate) comes with the terminal event, once the record is committed.
    page.get_by_role("button", name="Regenerate").wait_for(timeout=15_000)
    assert Run.objects.get(pk=run_id).status == "succeeded"
    assert [r.json() for r in transfer.requests] == [{"amount": 5, "to": "bob"}]
    tab.screenshot("chat")
    tab.assert_clean()


def test_regenerate_replaces_the_answer_in_place(
    trio, agent, provider_server, celery_worker_process, tab
):
    provider_server.script("openai", TextReply("The first answer."), TextReply("A better one."))
    tab.login("bob")
    first = start_chat(tab, "Say something")
    page = tab.page
    page.locator(f"#run-{first}-seg-1:not(.streaming)", has_text="The first answer.").wait_for()
    page.get_by_role("button", name="Regenerate").click()
    page.locator(".segment:not(.streaming)", has_text="A better one.").wait_for()
    page.get_by_role("button", name="Regenerate").wait_for()

    def one_question_and_the_new_answer() -> None:
        assert page.locator(".msg.user").count() == 1
        assert page.locator(".msg.user .bubble").text_content().strip() == "Say something"
        assert "The first answer." not in page.locator("#thread").text_content()
        assert "A better one." in page.locator("#thread").text_content()

    one_question_and_the_new_answer()
    page.reload()
    one_question_and_the_new_answer()
    assert page.locator(".version-count").text_content() == "2 / 2"  # the first, a switch away
    second = Run.objects.filter(conversation__owner_user__username="bob").latest("pk")
    assert second.pk != first and second.status == "succeeded"
    assert Run.objects.get(pk=first).output == "The first answer."  # kept on its run
    tab.assert_clean()


def test_a_crews_members_show_their_progress_then_the_answer(
    trio, agent, provider_server, celery_worker_process, tab
):
    members = [make_agent(trio.acme, slug) for slug in ("researcher", "writer")]
    make_crew(trio.acme, "team", members)
    provider_server.script(
        "openai",
        TextReply("Three options found.", chunk_delay_s=0.5),
        TextReply("Pick **the second** one.", chunk_delay_s=0.5),
    )
    tab.login("bob")
    tab.goto("/t/acme/chat/?crew=team")
    tab.page.get_by_label("Message").fill("What should I pick?")
    tab.page.get_by_label("Message").press("Enter")
    page = tab.page
    page.locator(".member-card.running", has_text="researcher").wait_for()
    page.locator(".member-card.done", has_text="writer").wait_for(timeout=15_000)
    researcher = page.locator(".member-card", has_text="researcher")
    assert "done" in researcher.locator(".tool-status").text_content()
    researcher.locator("summary").click()
    assert "Three options found." in researcher.text_content()
    page.locator(".answer strong", has_text="the second").wait_for()
    tab.screenshot("crew_chat")
    tab.assert_clean()


def test_html_in_messages_and_tool_results_renders_as_text(
    trio, agent, provider_server, celery_worker_process, tab
):
    server = LocalServer()
    server.route("GET", "/echo", Reply(json={"html": ATTACK}))
    make_http_tool(
        trio.acme,
        "echo",
        server.url + "/echo",
        description="Echo HTML.",
        input_schema={"type": "object", "properties": {}},
        effect="read",
        idempotent=True,
    )
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "echo", "{}")], text=f"Calling {ATTACK}"),
        TextReply(f"It said {ATTACK}", chunk_delay_s=0.2),
    )
    dialogs: list[str] = []
    tab.page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    try:
        tab.login("bob")
        run_id = start_chat(tab, ATTACK)
        page = tab.page
        page.locator(f"#run-{run_id}-seg-2:not(.streaming)").wait_for(timeout=15_000)
        thread = page.locator("#thread")
        assert thread.locator("img").count() == 0 and thread.locator("script").count() == 0
        assert ATTACK.replace(" ", "") in thread.text_content().replace(" ", "").replace("\n", "")
        page.locator(".tool-card", has_text="echo").locator("summary").click()
        assert (
            "<img src=x onerror=alert(1)>" in page.locator(".tool-card pre").nth(1).text_content()
        )
        page.reload()  # the stored rendering is as safe as the live one
        assert page.locator("#thread img, #thread script").count() == 0
        assert dialogs == []
        tab.assert_clean()
    finally:
        server.close()


def test_another_tenants_conversation_answers_404(trio, agent, tab):
    chat = conversation_save(
        tenant=trio.acme, changes={"agent": agent, "title": "Private"}, owner_user=trio.bob
    )
    tab.login("charlie")
    assert tab.goto(f"/t/acme/chat/{chat.pk}/").status == 404
    assert tab.goto(f"/t/globex/chat/{chat.pk}/").status == 404
    assert "Private" not in tab.page.content()
    tab.page.context.clear_cookies()
    tab.login("alice")  # acme's owner: still not her conversation
    assert tab.goto(f"/t/acme/chat/{chat.pk}/").status == 404
    tab.assert_clean()


def test_conversations_are_searched_renamed_and_deleted(trio, agent, tab):
    for title in ("Quarterly report", "Holiday plans"):
        conversation_save(
            tenant=trio.acme, changes={"agent": agent, "title": title}, owner_user=trio.bob
        )
    tab.login("bob")
    tab.goto("/t/acme/chat/")
    page = tab.page
    page.get_by_label("Search conversations").press_sequentially("quart")
    page.locator("#conversation-list", has_not_text="Holiday").wait_for()
    assert page.locator(".conversation-item").count() == 1
    page.get_by_role("link", name="Rename Quarterly report").click()
    page.get_by_label("New title").fill("Q3 report")
    page.get_by_role("button", name="Save").click()
    page.get_by_role("link", name="Q3 report", exact=True).wait_for()
    page.get_by_role("link", name="Delete Q3 report").click()
    page.get_by_role("button", name="Delete conversation").click()
    page.wait_for_url(f"{tab.base}/t/acme/chat/")
    assert list(Conversation.objects.values_list("title", flat=True)) == ["Holiday plans"]
    tab.page.set_viewport_size({"width": 390, "height": 800})
    tab.screenshot("chat-narrow")
    tab.assert_clean()


def test_a_message_is_edited_its_old_branch_switched_back_to_forked_and_searched(
    trio, agent, provider_server, celery_worker_process, tab
):
    provider_server.script(
        "openai", TextReply("Lisbon has trams."), TextReply("Porto has port wine.")
    )
    tab.login("bob")
    first = start_chat(tab, "Plan a trip to Lisbon")
    page = tab.page
    page.locator(f"#run-{first}-seg-1:not(.streaming)", has_text="Lisbon has trams.").wait_for()
    page.get_by_role("button", name="Regenerate").wait_for()

    # Arrow up in the empty composer opens the last message's Edit, with its text.
    page.get_by_label("Message", exact=True).press("ArrowUp")
    edit = page.get_by_label("New version")
    assert edit.is_visible() and edit.input_value() == "Plan a trip to Lisbon"
    edit.fill("Plan a trip to Porto")
    edit.press("Enter")
    page.locator(".segment:not(.streaming)", has_text="Porto has port wine.").wait_for()
    assert "Lisbon" not in page.locator("#thread").text_content()
    versions = page.get_by_role("form", name="Versions")
    assert versions.locator(".version-count").text_content() == "2 / 2"

    # The old version and its answer are one click away.
    versions.get_by_role("button", name="Previous version").click()
    page.locator(".answer, .segment", has_text="Lisbon has trams.").first.wait_for()
    assert page.get_by_role("form", name="Versions").locator(".version-count").text_content() == (
        "1 / 2"
    )
    assert "Porto" not in page.locator("#thread").text_content()

    # Fork from the Lisbon answer: a new conversation with that branch; this one stays.
    chat = Conversation.objects.get(pk=Run.objects.get(pk=first).conversation_id)
    answer = chat.messages.get(content="Lisbon has trams.")
    page.locator(f"#message-{answer.pk}").get_by_role("button", name="Fork from here").click()
    page.locator("#chat-title", has_text="(fork)").wait_for()
    assert "Lisbon has trams." in page.locator("#thread").text_content()
    fork = Conversation.objects.exclude(pk=chat.pk).get()
    assert fork.owner_user == trio.bob and chat.messages.count() == 4

    # Search a word from a message body: the hit, highlighted, opens its conversation there.
    page.get_by_label("Search conversations").press_sequentially("trams")
    hits = page.get_by_role("list", name="Search hits")
    hits.locator("mark", has_text="trams").first.wait_for()
    assert hits.locator("li").count() == 2  # the original's answer and the fork's copy
    hits.locator(f'a[href*="/chat/{chat.pk}/?at={answer.pk}"]').click()
    page.wait_for_url(f"**/chat/{chat.pk}/?at={answer.pk}#message-{answer.pk}")
    assert "Lisbon has trams." in page.locator("#thread").text_content()
    tab.screenshot("chat-branches")
    tab.assert_clean()
