"""The chat pages through Django's test client: tenant isolation, ownership, roles, guardian
restrictions, CSRF, escaping. The live stream and the browser behaviour are in
tests/browser/test_chat.py."""

from __future__ import annotations

import asyncio
import re

import pytest
from django.test import Client
from guardian.shortcuts import assign_perm

from agents.conversations import attachment_upload, conversation_history
from agents.models import Agent, Approval, Conversation, Message, QueuedMessage, Run, RunEvent
from agents.runs import run_start
from agents.runs.engine import execute_run
from agents.services import conversation_save
from providers.runtime.types import AssistantMessage, UserMessage
from tenancy.models import Role
from tests.conftest import PAY_SECRET
from tests.factories import add_member, login, make_agent, make_approval, make_crew, make_user
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db


@pytest.fixture
def assistant(trio) -> Agent:
    return make_agent(trio.acme, "assistant")


@pytest.fixture
def bobs_chat(trio, assistant) -> Conversation:
    return conversation_save(
        tenant=trio.acme, changes={"agent": assistant, "title": "Bob's plans"}, owner_user=trio.bob
    )


def url(chat: Conversation, suffix: str = "") -> str:
    return f"/t/{chat.tenant.slug}/chat/{chat.pk}/{suffix}"


def bobs_turn(trio, chat: Conversation, text: str) -> Run:
    """bob asks `text` in his conversation `chat` (a queued run answers)."""
    return run_start(
        tenant=trio.acme, agent=chat.agent, input=text, conversation=chat, initiated_by=trio.bob
    )


def test_a_member_sees_their_conversations_and_the_new_chat_form(client, trio, bobs_chat):
    body = login(client, trio.bob).get("/t/acme/chat/").content.decode()
    assert "Bob&#x27;s plans" in body
    assert 'value="agent:assistant"' in body
    assert 'name="target"' in body


def test_another_tenants_conversation_answers_404(client, trio, bobs_chat):
    login(client, trio.charlie)  # owner of globex, outsider to acme
    assert client.get(url(bobs_chat)).status_code == 404
    # Through charlie's own tenant too: the conversation is not globex's.
    assert client.get(f"/t/globex/chat/{bobs_chat.pk}/").status_code == 404
    assert client.post(f"/t/globex/chat/{bobs_chat.pk}/send/", {"message": "hi"}).status_code == 404


def test_another_users_conversation_answers_404_even_to_the_owner(client, trio, bobs_chat):
    login(client, trio.alice)  # acme's owner, but not the conversation's
    for suffix in ("", "rename/", "delete/"):
        assert client.get(url(bobs_chat, suffix)).status_code == 404, suffix
    for suffix in ("send/", "regenerate/", "rename/", "delete/"):
        assert (
            client.post(url(bobs_chat, suffix), {"message": "x", "title": "x"}).status_code == 404
        )
    assert Conversation.objects.filter(pk=bobs_chat.pk, title="Bob's plans").exists()
    assert not Message.objects.exists()


def test_the_conversation_list_shows_only_the_users_own(client, trio, assistant, bobs_chat):
    conversation_save(
        tenant=trio.acme,
        changes={"agent": assistant, "title": "Alice's secret"},
        owner_user=trio.alice,
    )
    body = login(client, trio.bob).get("/t/acme/chat/").content.decode()
    assert "Alice" not in body


def test_search_filters_by_title_and_answers_htmx_with_the_list_only(client, trio, assistant):
    for title in ("Quarterly report", "Holiday plans"):
        conversation_save(
            tenant=trio.acme, changes={"agent": assistant, "title": title}, owner_user=trio.bob
        )
    login(client, trio.bob)
    response = client.get(
        "/t/acme/chat/?q=report", headers={"HX-Request": "true", "HX-Target": "conversation-list"}
    )
    body = response.content.decode()
    assert "Quarterly report" in body and "Holiday" not in body
    assert "<html" not in body and 'id="conversation-list"' in body
    assert "HX-Request" in response["Vary"]


def test_sending_starts_a_run_in_the_conversation(client, trio, bobs_chat):
    response = login(client, trio.bob).post(url(bobs_chat, "send/"), {"message": "Hello there"})
    assert response.status_code == 302
    run = Run.objects.get(conversation=bobs_chat)
    assert run.input == "Hello there" and run.initiated_by_user == trio.bob
    assert run.agent.slug == "assistant" and run.status == "queued"


def test_a_chat_turn_records_the_limits_it_ran_under(client, trio, agent, provider_server):
    agent.max_rounds, agent.max_tool_calls = 2, 3
    agent.save()
    chat = conversation_save(tenant=trio.acme, changes={"agent": agent}, owner_user=trio.bob)
    provider_server.script("openai", TextReply("Hello."))
    login(client, trio.bob).post(url(chat, "send/"), {"message": "Hi"})
    run = Run.objects.get(conversation=chat)
    assert execute_run(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.limits == {
        "max_rounds": 2,
        "max_tool_calls": 3,
        "max_tokens_per_run": None,
        "max_tokens_per_response": 1024,
    }


def test_sending_with_htmx_answers_the_new_turn_with_its_stream(client, trio, bobs_chat):
    response = login(client, trio.bob).post(
        url(bobs_chat, "send/"), {"message": "Hi"}, headers={"HX-Request": "true"}
    )
    run = Run.objects.get(conversation=bobs_chat)
    body = response.content.decode()
    assert f'id="run-{run.pk}"' in body and f"runs/{run.pk}/stream/?after=0" in body


def test_a_second_message_is_queued_behind_the_running_answer(client, trio, bobs_chat):
    login(client, trio.bob)
    client.post(url(bobs_chat, "send/"), {"message": "one"})
    response = client.post(
        url(bobs_chat, "send/"), {"message": "two"}, headers={"HX-Request": "true"}
    )
    queued = QueuedMessage.objects.get(conversation=bobs_chat)
    assert response["HX-Retarget"] == "#queued" and "X-Chat-Status" not in response
    assert f'id="queued-{queued.pk}"' in response.content.decode()
    assert Run.objects.filter(conversation=bobs_chat).count() == 1
    page = client.get(url(bobs_chat)).content.decode()
    assert "Queued" in page and "two" in page and "Steer" in page


def test_steer_and_remove_from_the_page(client, trio, bobs_chat):
    run = bobs_turn(trio, bobs_chat, "one")
    login(client, trio.bob)
    response = client.post(
        url(bobs_chat, "steer/"), {"message": "shorter"}, headers={"HX-Request": "true"}
    )
    steer = QueuedMessage.objects.get(run=run)
    assert steer.kind == "steer" and f'id="queued-{steer.pk}"' in response.content.decode()
    queued = client.post(
        url(bobs_chat, "send/"), {"message": "two"}, headers={"HX-Request": "true"}
    )
    assert queued.status_code == 200
    item = QueuedMessage.objects.get(kind="turn")
    removed = client.post(
        url(bobs_chat, f"queued/{item.pk}/remove/"), headers={"HX-Request": "true"}
    )
    assert removed.status_code == 200 and removed.content == b""
    assert not QueuedMessage.objects.filter(pk=item.pk).exists()
    # Another member, a viewer: 404 and 403; nothing changes.
    other = login(Client(), trio.alice)
    assert other.post(url(bobs_chat, "steer/"), {"message": "x"}).status_code == 404
    assert other.post(url(bobs_chat, f"queued/{steer.pk}/remove/")).status_code == 404
    viewer = make_user("vic")
    add_member(trio.acme, viewer, Role.VIEWER)
    assert login(Client(), viewer).post(url(bobs_chat, "steer/"), {"message": "x"}).status_code in (
        403,
        404,
    )
    empty = client.post(url(bobs_chat, "steer/"), {"message": " "}, headers={"HX-Request": "true"})
    assert empty["X-Chat-Status"] == "400"
    assert QueuedMessage.objects.count() == 1


def test_a_steer_after_the_answer_ended_is_the_next_turn_and_says_so(client, trio, bobs_chat):
    run = bobs_turn(trio, bobs_chat, "one")
    Run.objects.filter(pk=run.pk).update(status="succeeded")
    response = login(client, trio.bob).post(
        url(bobs_chat, "steer/"), {"message": "and two"}, headers={"HX-Request": "true"}
    )
    following = Run.objects.filter(conversation=bobs_chat).exclude(pk=run.pk).get()
    assert following.input == "and two" and "next turn" in response["X-Chat-Info"]
    assert response["HX-Retarget"] == "#thread"
    assert f'id="run-{following.pk}"' in response.content.decode()


def test_turns_past_the_members_request_budget_are_refused_and_start_nothing(
    client, trio, bobs_chat, rates
):
    rates("2/min", "100/min")  # per user, as their REST requests
    login(client, trio.bob)
    client.post(url(bobs_chat, "send/"), {"message": "one"})
    client.post(url(bobs_chat, "send/"), {"message": "two"})  # (queued behind the first)
    refused = client.post(
        url(bobs_chat, "send/"), {"message": "three"}, headers={"HX-Request": "true"}
    )
    assert refused["X-Chat-Status"] == "429"
    assert "Rate limit reached; retry in " in refused.content.decode()
    assert Run.objects.filter(conversation=bobs_chat).count() == 1
    assert list(QueuedMessage.objects.values_list("content", flat=True)) == ["two"]
    first = Run.objects.get(conversation=bobs_chat)
    edited = client.post(
        url(bobs_chat, f"messages/{first.in_reply_to_id}/edit/"),
        {"message": "one, again"},
        headers={"HX-Request": "true"},
    )
    assert edited["X-Chat-Status"] == "429"
    assert Run.objects.filter(conversation=bobs_chat).count() == 1
    new = client.post("/t/acme/chat/new/", {"target": "agent:assistant", "message": "four"})
    assert new.status_code == 429 and "Rate limit reached" in new.content.decode()
    assert "four" in new.content.decode()  # the text comes back in the form
    assert Conversation.objects.filter(owner_user=trio.bob).count() == 1
    alices = login(Client(), trio.alice).post(
        "/t/acme/chat/new/", {"target": "agent:assistant", "message": "five"}
    )
    assert alices.status_code == 302  # a budget of her own


def test_new_chat_creates_a_conversation_and_its_first_run(client, trio, assistant):
    response = login(client, trio.bob).post(
        "/t/acme/chat/new/", {"target": "agent:assistant", "message": "Plan my week"}
    )
    chat = Conversation.objects.get(owner_user=trio.bob)
    assert response["Location"] == url(chat)
    assert chat.title == "Plan my week" and chat.runs.get().input == "Plan my week"


def test_the_agent_query_parameter_preselects_it(client, trio, assistant):
    make_agent(trio.acme, "writer")
    body = login(client, trio.bob).get("/t/acme/chat/?agent=writer").content.decode()
    assert 'value="agent:writer" selected' in body
    assert 'value="agent:assistant" selected' not in body


def test_a_viewer_reads_but_cannot_send(client, trio, assistant):
    viewer = make_user("vera")
    add_member(trio.acme, viewer, Role.VIEWER)
    chat = conversation_save(tenant=trio.acme, changes={"agent": assistant}, owner_user=viewer)
    login(client, viewer)
    page = client.get(url(chat))
    assert page.status_code == 200 and "Viewers cannot send" in page.content.decode()
    assert 'id="composer"' not in page.content.decode()
    assert client.post(url(chat, "send/"), {"message": "hi"}).status_code == 403
    assert client.post("/t/acme/chat/new/", {"target": "agent:assistant"}).status_code == 403
    assert client.post(url(chat, "delete/")).status_code == 403
    assert not Run.objects.exists()


def test_a_restricted_agent_is_usable_only_by_holders_and_admins(client, trio, assistant):
    secret = make_agent(trio.acme, "payroll")
    carol = make_user("carol")
    add_member(trio.acme, carol, Role.MEMBER)
    assign_perm("agents.use_agent", carol, secret)  # now only carol (and admins) may use it

    bob_page = login(client, trio.bob).get("/t/acme/chat/").content.decode()
    assert "agent:payroll" not in bob_page and "agent:assistant" in bob_page
    assert client.post("/t/acme/chat/new/", {"target": "agent:payroll"}).status_code == 403
    assert not Conversation.objects.exists()

    assert "agent:payroll" in login(Client(), carol).get("/t/acme/chat/").content.decode()
    assert "agent:payroll" in login(Client(), trio.alice).get("/t/acme/chat/").content.decode()


def test_a_restriction_added_later_stops_an_existing_conversation(
    client, trio, assistant, bobs_chat
):
    assign_perm("agents.use_agent", trio.alice, assistant)
    login(client, trio.bob)
    assert client.post(url(bobs_chat, "send/"), {"message": "hi"}).status_code == 403
    assert "not available to you" in client.get(url(bobs_chat)).content.decode()


def test_a_restricted_crew_is_hidden_from_others(client, trio, assistant):
    make_crew(trio.acme, "open", name="Open crew")
    closed = make_crew(trio.acme, "closed", name="Closed crew")
    assign_perm("agents.use_crew", trio.alice, closed)
    body = login(client, trio.bob).get("/t/acme/chat/").content.decode()
    assert "crew:open" in body and "crew:closed" not in body


def test_posts_need_a_csrf_token(trio, bobs_chat):
    client = login(Client(enforce_csrf_checks=True), trio.bob)
    assert client.post(url(bobs_chat, "send/"), {"message": "hi"}).status_code == 403
    assert client.post("/t/acme/chat/new/", {"target": "agent:assistant"}).status_code == 403
    assert client.post(url(bobs_chat, "delete/")).status_code == 403
    token = client.get(url(bobs_chat)).cookies["csrftoken"].value
    response = client.post(
        url(bobs_chat, "send/"), {"message": "hi"}, headers={"X-CSRFToken": token}
    )
    assert response.status_code == 302 and Run.objects.count() == 1


def test_rename_and_delete(client, trio, bobs_chat):
    login(client, trio.bob)
    response = client.post(
        url(bobs_chat, "rename/"), {"title": "Renamed"}, headers={"HX-Request": "true"}
    )
    assert "Renamed" in response.content.decode() and 'id="conv-' in response.content.decode()
    assert "Delete “Renamed”?" in client.get(url(bobs_chat, "delete/")).content.decode()
    assert client.post(url(bobs_chat, "delete/")).status_code == 302
    assert not Conversation.objects.exists()


def test_model_output_user_input_and_tool_results_are_escaped(client, trio, bobs_chat):
    attack = "<script>alert(1)</script><img src=x onerror=alert(1)>"
    run = bobs_turn(trio, bobs_chat, attack)
    events = [
        ("inference.started", {"round": 1}),
        ("inference.completed", {"round": 1, "text": "", "tool_calls": []}),
        ("tool.started", {"call_id": "c1", "name": "echo", "arguments": {"text": attack}}),
        (
            "tool.completed",
            {
                "call_id": "c1",
                "name": "echo",
                "result": {"html": attack},
                "error": None,
                "latency_ms": 3,
            },
        ),
        ("inference.started", {"round": 2}),
        ("inference.completed", {"round": 2, "text": f"Here: {attack} **bold**"}),
        ("run.completed", {"status": "succeeded", "output": f"Here: {attack}"}),
    ]
    for seq, (type, payload) in enumerate(events, 1):
        RunEvent.objects.create(tenant=trio.acme, run=run, seq=seq, type=type, payload=payload)
    Run.objects.filter(pk=run.pk).update(status="succeeded", output=f"Here: {attack}")
    land_answer(run, attack)

    body = login(client, trio.bob).get(url(bobs_chat)).content.decode()
    thread = body[body.index('id="thread"') :]
    assert "<script>alert" not in thread and "<img" not in thread
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in thread  # user text and tool JSON, as text
    assert "<strong>bold</strong>" in thread  # markdown still renders
    assert '<pre class="json">' in thread and "&quot;html&quot;" in thread


def test_deciding_an_approval_of_the_conversations_run(client, trio, bobs_chat):
    run = bobs_turn(trio, bobs_chat, "pay")
    Run.objects.filter(pk=run.pk).update(status="awaiting_approval")
    approval = make_approval(run, "transfer", arguments={"amount": 5})
    # Not alice's conversation: 404 even for the tenant's owner.
    assert (
        login(Client(), trio.alice)
        .post(url(bobs_chat, f"approvals/{approval.pk}/"), {"decision": "approve"})
        .status_code
        == 404
    )
    login(client, trio.bob)
    page = client.get(url(bobs_chat)).content.decode()
    assert "Approval needed:" in page and 'value="approve"' in page
    response = client.post(
        url(bobs_chat, f"approvals/{approval.pk}/"),
        {"decision": "reject", "reason": "too much"},
        headers={"HX-Request": "true"},
    )
    approval.refresh_from_db()
    assert (
        approval.status == "rejected"
        and approval.reason == "too much"
        and approval.decided_by == trio.bob
    )
    assert "Rejected by bob: too much" in response.content.decode()
    again = client.post(
        url(bobs_chat, f"approvals/{approval.pk}/"),
        {"decision": "approve"},
        headers={"HX-Request": "true"},
    )
    assert again["X-Chat-Status"] == "409" and "already rejected" in again.content.decode()


def test_stop_cancels_a_queued_run(client, trio, bobs_chat):
    run = bobs_turn(trio, bobs_chat, "long")
    response = login(client, trio.bob).post(
        url(bobs_chat, f"runs/{run.pk}/cancel/"), headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    run.refresh_from_db()
    assert run.status == "cancelled"
    page = client.get(url(bobs_chat)).content.decode()
    assert "Stopped: what it produced so far is kept" in page and "Regenerate" in page


def answered(trio, chat: Conversation, question: str, answer: str, **ending) -> Run:
    """A finished turn of `chat`: the question, its run ended as `ending`, the answer."""
    run = bobs_turn(trio, chat, question)
    Run.objects.filter(pk=run.pk).update(**ending)
    land_answer(run, answer)
    return run


def land_answer(run: Run, answer: str) -> Message:
    """The run's answer joins its conversation as the engine writes it (after the message
    it answers, shown if that still is)."""
    message = Message.objects.create(
        tenant=run.tenant,
        conversation=run.conversation,
        parent_id=run.in_reply_to_id,
        role="assistant",
        content=answer,
        run=run,
    )
    Conversation.objects.filter(pk=run.conversation_id, leaf_id=run.in_reply_to_id).update(
        leaf=message
    )
    return message


def test_regenerate_answers_the_last_message_again_beside_its_answer(client, trio, bobs_chat):
    first = answered(trio, bobs_chat, "hello", "hi there", status="succeeded", output="hi there")
    failed = answered(
        trio, bobs_chat, "again?", "down", status="failed", error="ProviderUnavailable: down"
    )
    login(client, trio.bob)
    assert "provider is unavailable" in client.get(url(bobs_chat)).content.decode()

    response = client.post(url(bobs_chat, "regenerate/"), headers={"HX-Request": "true"})
    assert response.status_code == 200
    again = Run.objects.filter(conversation=bobs_chat).latest("id")
    assert again.pk != failed.pk and again.input == "again?" and again.status == "queued"
    assert again.in_reply_to_id == failed.in_reply_to_id  # the same message, answered again
    assert f'id="turn-{again.pk}"' in response.content.decode()  # replaces the failed turn
    thread = list(bobs_chat.messages.order_by("id").values_list("role", "content", "run_id"))
    assert thread == [
        ("user", "hello", first.pk),
        ("assistant", "hi there", first.pk),
        ("user", "again?", failed.pk),
        ("assistant", "down", failed.pk),
    ]  # fmt: skip: nothing is lost
    assert conversation_history(again) == [UserMessage("hello"), AssistantMessage(text="hi there")]
    page = client.get(url(bobs_chat)).content.decode()
    assert page.count('<div class="bubble">again?</div>') == 1
    assert "provider is unavailable" not in page
    failed.refresh_from_db()  # the replaced answer stays on its run
    assert (failed.status, failed.error) == ("failed", "ProviderUnavailable: down")

    refused = client.post(url(bobs_chat, "regenerate/"), headers={"HX-Request": "true"})
    assert refused["X-Chat-Status"] == "409"  # the new answer is still running
    assert Run.objects.filter(conversation=bobs_chat).count() == 3

    Run.objects.filter(pk=again.pk).update(status="succeeded", output="up again")
    land_answer(again, "up again")
    page = client.get(url(bobs_chat)).content.decode()
    assert "up again" in page and not re.search(r"\bdown\b", page)  # (not "markdown")
    assert '<span class="version-count">2 / 2</span>' in page  # the old answer a switch away


def test_regenerate_without_a_message_is_refused(client, trio, bobs_chat):
    login(client, trio.bob)
    response = client.post(url(bobs_chat, "regenerate/"), headers={"HX-Request": "true"})
    assert response["X-Chat-Status"] == "400" and "Nothing to answer again" in (
        response.content.decode()
    )
    assert not Run.objects.filter(conversation=bobs_chat).exists()


def test_the_stream_of_another_users_run_answers_404(client, trio, bobs_chat):
    run = bobs_turn(trio, bobs_chat, "hi")
    assert (
        login(client, trio.alice).get(url(bobs_chat, f"runs/{run.pk}/stream/")).status_code == 404
    )
    other = conversation_save(
        tenant=trio.acme, changes={"agent": bobs_chat.agent}, owner_user=trio.bob
    )
    # A run of another conversation through this one's URL: 404 too.
    assert login(Client(), trio.bob).get(url(other, f"runs/{run.pk}/stream/")).status_code == 404


@pytest.mark.django_db(transaction=True)  # the stream reads on threads of its own
def test_the_stream_of_a_finished_run_renders_fragments(client, trio, bobs_chat):
    run = bobs_turn(trio, bobs_chat, "hi")
    for seq, (type, payload) in enumerate(
        [
            ("inference.started", {"round": 1}),
            ("text.delta", {"text": "<b>Hel"}),
            ("inference.completed", {"round": 1, "text": "<b>Hello</b> *there*"}),
            ("run.completed", {"status": "succeeded", "output": "<b>Hello</b> *there*"}),
        ],
        1,
    ):
        RunEvent.objects.create(tenant=trio.acme, run=run, seq=seq, type=type, payload=payload)
    Run.objects.filter(pk=run.pk).update(status="succeeded")
    response = login(client, trio.bob).get(url(bobs_chat, f"runs/{run.pk}/stream/"))
    assert response["Content-Type"] == "text/event-stream"

    async def read() -> str:
        return b"".join([chunk async for chunk in response.streaming_content]).decode()

    body = asyncio.run(read())
    assert "id: 2" in body and "&amp;lt;b&amp;gt;Hel" not in body and "&lt;b&gt;Hel" in body
    assert "<em>there</em>" in body and "<b>" not in body
    assert '"op":"end"' in body


@pytest.mark.django_db(transaction=True)  # the stream reads on threads of its own
def test_a_crews_members_show_as_cards_on_the_page_and_in_the_stream(client, trio, assistant):
    crew = make_crew(trio.acme, "team")
    chat = conversation_save(tenant=trio.acme, changes={"crew": crew}, owner_user=trio.bob)
    run = run_start(
        tenant=trio.acme, crew=crew, input="plan", conversation=chat, initiated_by=trio.bob
    )
    events = [
        ("crew.member.started", {"member": "researcher", "key": "seq:0:researcher"}),
        ("crew.member.completed", {
            "member": "researcher", "key": "seq:0:researcher", "child_run_id": 1,
            "status": "succeeded", "output": "Found **three** <script>x</script> options",
            "error": "",
        }),
        ("crew.member.started", {"member": "writer", "key": "seq:1:writer"}),
        ("crew.member.completed", {
            "member": "writer", "key": "seq:1:writer", "child_run_id": 2, "status": "failed",
            "output": "", "error": "ProviderUnavailable: down",
        }),
        # a manager's delegation is a tool call: its card is the tool's, not a member's
        ("crew.member.started", {"member": "critic", "key": "delegate:call_1"}),
        ("run.failed", {"status": "failed", "error": "member writer ended failed"}),
    ]  # fmt: skip
    for seq, (type, payload) in enumerate(events, 1):
        RunEvent.objects.create(tenant=trio.acme, run=run, seq=seq, type=type, payload=payload)
    Run.objects.filter(pk=run.pk).update(status="failed", error="member writer ended failed")

    page = login(client, trio.bob).get(url(chat)).content.decode()
    thread = page[page.index('id="thread"') :]
    assert thread.count('class="tool-card member-card') == 2 and "critic" not in thread
    researcher = thread[thread.index(">researcher<") : thread.index(">writer<")]
    assert "done" in researcher and "<strong>three</strong>" in researcher
    assert "<script>x" not in researcher  # a member's answer is sanitized markdown
    writer = thread[thread.index(">writer<") :]
    assert "failed" in writer and "ProviderUnavailable: down" in writer

    response = client.get(url(chat, f"runs/{run.pk}/stream/"))

    async def read() -> str:
        return b"".join([chunk async for chunk in response.streaming_content]).decode()

    body = asyncio.run(read())
    assert body.count(f'"target":"member-{run.pk}-') == 4  # started and ended, twice
    assert "researcher is working" in body and "<strong>three</strong>" in body
    assert "critic" not in body


@pytest.mark.django_db(transaction=True)
def test_the_approval_card_shows_the_exact_request_and_an_edit_asks_again(
    client, trio, agent, provider_server, pay
):
    provider_server.script(
        "openai", ToolCallReply([ToolCall("p1", "pay", '{"amount": 500, "to": "bob"}')])
    )
    chat = conversation_save(tenant=trio.acme, changes={"agent": agent}, owner_user=trio.bob)
    run = run_start(
        tenant=trio.acme, agent=agent, input="pay", conversation=chat, initiated_by=trio.bob,
        enqueue=False,
    )  # fmt: skip
    execute_run(run.pk)
    approval = Approval.objects.get(run=run)
    login(client, trio.bob)
    page = client.get(url(chat)).content.decode()
    assert f"POST {pay.url}/payments/bob" in page and "Authorization: Bearer ***" in page
    assert "{&quot;amount&quot;:500}" in page and 'name="arguments"' in page
    assert PAY_SECRET not in page

    decide = url(chat, f"approvals/{approval.pk}/")
    hx = {"HX-Request": "true"}
    bad = client.post(decide, {"decision": "approve", "arguments": "{oops"}, headers=hx)
    assert bad["X-Chat-Status"] == "400" and "valid JSON" in bad.content.decode()
    edit = {"decision": "approve", "arguments": '{"amount": 5, "to": "bob"}'}
    response = client.post(decide, edit, headers=hx).content.decode()
    approval.refresh_from_db()
    again = approval.replaced_by
    assert approval.status == "edited" and again.status == "pending" and pay.requests == []
    assert f'id="approval-{approval.pk}"' in response and f'id="approval-{again.pk}"' in response
    assert "{&quot;amount&quot;:5}" in response and PAY_SECRET not in response
    same = {"decision": "approve", "arguments": '{"to": "bob", "amount": 5}'}  # unchanged: no edit
    client.post(url(chat, f"approvals/{again.pk}/"), same, headers=hx)
    again.refresh_from_db()
    assert again.status == "approved" and again.edited_arguments is None


def test_edited_arguments_postgres_cannot_store_are_a_clear_error_or_made_storable(
    client, trio, bobs_chat
):
    run = bobs_turn(trio, bobs_chat, "pay")
    Run.objects.filter(pk=run.pk).update(status="awaiting_approval")
    approval = make_approval(run, "transfer", arguments={"amount": 5})
    login(client, trio.bob)
    decide = url(bobs_chat, f"approvals/{approval.pk}/")
    hx = {"HX-Request": "true"}
    lone = {"decision": "approve", "arguments": '{"to": "\\ud800"}'}
    refused = client.post(decide, lone, headers=hx)
    assert refused["X-Chat-Status"] == "400" and "valid Unicode" in refused.content.decode()
    approval.refresh_from_db()
    assert approval.status == "pending"
    nul = {"decision": "approve", "arguments": '{"to": "a\\u0000b"}'}
    assert client.post(decide, nul, headers=hx).status_code == 200
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.edited_arguments == {"to": "a\ufffdb"}


@pytest.mark.django_db(transaction=True)  # the stream reads on threads of its own
def test_the_stream_shows_a_steer_and_then_the_turn_started_from_the_queue(client, trio, bobs_chat):
    run = bobs_turn(trio, bobs_chat, "one")
    steer = QueuedMessage.objects.create(
        tenant=trio.acme, conversation=bobs_chat, run=run, kind="steer", content="<i>brief</i>"
    )
    for seq, (type, payload) in enumerate(
        [
            ("run.steered", {"id": steer.pk, "text": "<i>brief</i>", "round": 0}),
            ("inference.started", {"round": 1}),
            ("inference.completed", {"round": 1, "text": "Short."}),
            ("run.completed", {"status": "succeeded", "output": "Short."}),
        ],
        1,
    ):
        RunEvent.objects.create(tenant=trio.acme, run=run, seq=seq, type=type, payload=payload)
    Run.objects.filter(pk=run.pk).update(status="succeeded")
    following = bobs_turn(trio, bobs_chat, "two")  # what finalize starts from the queue
    QueuedMessage.objects.create(
        tenant=trio.acme, conversation=bobs_chat, run=run, kind="turn", status="started",
        started_run=following, content="two", late=True,
    )  # fmt: skip
    response = login(client, trio.bob).get(url(bobs_chat, f"runs/{run.pk}/stream/"))

    async def read() -> str:
        return b"".join([chunk async for chunk in response.streaming_content]).decode()

    body = asyncio.run(read())
    assert f"steer-{steer.pk}" in body and "&lt;i&gt;brief" in body and "<i>" not in body
    assert f'"target":"queued-{steer.pk}"' in body
    assert f'"target":"turn-{following.pk}"' in body and f"runs/{following.pk}/stream/" in body
    assert "came after the agent" in body
    # Reloaded: the steer is in the first turn's steps.
    page = client.get(url(bobs_chat)).content.decode()
    assert page.count('class="turn"') == 2 and f'id="steer-{steer.pk}"' in page


@pytest.mark.django_db(transaction=True)  # the stream reads on threads of its own
def test_a_turn_from_the_queue_that_ended_before_the_stream_did_is_streamed_all_the_same(
    client, trio, bobs_chat
):
    """The queued message's run may finish (a quick model) before the web process renders the
    end of the run before it: the turn it adds still streams, from the first event, so the
    page shows its answer (it showed only the question, until a reload)."""
    run = bobs_turn(trio, bobs_chat, "one")
    RunEvent.objects.create(
        tenant=trio.acme, run=run, seq=1, type="run.completed",
        payload={"status": "cancelled", "output": ""},
    )  # fmt: skip
    Run.objects.filter(pk=run.pk).update(status="cancelled")
    following = bobs_turn(trio, bobs_chat, "two")
    QueuedMessage.objects.create(
        tenant=trio.acme, conversation=bobs_chat, run=run, kind="turn", status="started",
        started_run=following, content="two",
    )  # fmt: skip
    for seq, (type, payload) in enumerate(
        [
            ("inference.started", {"round": 1}),
            ("inference.completed", {"round": 1, "text": "The queued answer."}),
            ("run.completed", {"status": "succeeded", "output": "The queued answer."}),
        ],
        1,
    ):
        RunEvent.objects.create(
            tenant=trio.acme, run=following, seq=seq, type=type, payload=payload
        )
    Run.objects.filter(pk=following.pk).update(status="succeeded", output="The queued answer.")
    login(client, trio.bob)

    def read(path: str) -> str:
        response = client.get(path)

        async def body() -> bytes:
            return b"".join([chunk async for chunk in response.streaming_content])

        return asyncio.run(body()).decode()

    body = read(url(bobs_chat, f"runs/{run.pk}/stream/"))
    assert f'"target":"turn-{following.pk}"' in body
    assert f"runs/{following.pk}/stream/?after=0" in body  # followed, though it is over
    followed = read(url(bobs_chat, f"runs/{following.pk}/stream/?after=0"))
    assert "The queued answer." in followed and '"op":"end"' in followed


def test_files_sent_while_an_answer_works_are_refused_not_queued(client, trio, bobs_chat):
    bobs_turn(trio, bobs_chat, "one")
    attached = attachment_upload(
        tenant=trio.acme, conversation=bobs_chat, by=trio.bob, name="a.txt", data=b"a"
    )
    response = login(client, trio.bob).post(
        url(bobs_chat, "send/"),
        {"message": "two", "attachment": [attached.pk]},
        headers={"HX-Request": "true"},
    )
    assert (
        response["X-Chat-Status"] == "409"
        and "Files go with a new turn" in response.content.decode()
    )
    assert not QueuedMessage.objects.exists()
    assert Run.objects.filter(conversation=bobs_chat).count() == 1
