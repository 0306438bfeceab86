"""Long conversations (agents/conversations/compaction.py): a run whose history exceeds its
agent's threshold gets the older turns as a summary the fake model really wrote, reused by
later runs and made anew (incrementally) when it no longer fits; a failed summary falls
back to the newest turns; the summarising call is recorded and held against the quotas."""

from __future__ import annotations

import pytest

from agents import quotas
from agents.models import Conversation, ConversationSummary, Message, Quota, Run, RunEvent
from agents.runs import execute_run, run_inline, run_start
from tests.fakes.provider_server import ErrorReply, TextReply

pytestmark = pytest.mark.django_db(transaction=True)

SUMMARY_HEAD = "[Summary of the earlier part of this conversation, written by the platform]"
CHAT = "/v1/chat/completions"


def said(name: str) -> str:
    """A 1,000-character message that names itself (the threshold below is 4,000)."""
    return f"<{name}> " + "x" * (1000 - len(name) - 3)


@pytest.fixture
def chat(trio, agent) -> Conversation:
    agent.compaction_threshold = 1000  # tokens: 4,000 characters
    agent.save()
    conversation = Conversation.objects.create(tenant=trio.acme, agent=agent, owner_user=trio.bob)
    for n in (1, 2, 3):
        add(trio, conversation, "user", said(f"u{n}"))
        add(trio, conversation, "assistant", said(f"a{n}"))
    return conversation


def add(trio, conversation, role: str, content: str) -> Message:
    """A message after the conversation's shown branch's last, which it becomes."""
    conversation.refresh_from_db(fields=["leaf"])
    message = Message.objects.create(
        tenant=trio.acme, conversation=conversation, role=role, content=content,
        parent_id=conversation.leaf_id,
    )  # fmt: skip
    Conversation.objects.filter(pk=conversation.pk).update(leaf=message)
    return message


def ask(trio, agent, chat, text: str) -> Run:
    run = run_inline(
        tenant=trio.acme, agent=agent, conversation=chat, input=text, initiated_by=trio.bob
    )
    assert run.status == "succeeded", run.error
    return run


def texts(request) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] != "system"]


def events(run: Run, type: str) -> list[dict]:
    return [e.payload for e in RunEvent.objects.filter(run=run, type=type).order_by("seq")]


def test_a_long_conversation_is_summarised_and_the_run_gets_summary_and_recent_turns(
    trio, agent, chat, provider_server
):
    provider_server.script(
        "openai",
        TextReply("They talked about u1, u2.", input_tokens=300, output_tokens=40),
        TextReply("Here you go."),
    )
    run = ask(trio, agent, chat, "And now?")

    summarising, answering = provider_server.requests_to(CHAT)
    [instructions] = [m for m in summarising.body["messages"] if m["role"] == "system"]
    assert "summarise" in instructions["content"]
    [transcript] = texts(summarising)  # the older turns reach the model, the recent do not
    for name in ("u1", "a1", "u2", "a2"):
        assert f"User: <{name}>" in transcript or f"Assistant: <{name}>" in transcript
    assert "<u3>" not in transcript and "<a3>" not in transcript
    assert texts(answering) == [
        f"{SUMMARY_HEAD}\nThey talked about u1, u2.",
        said("u3"),
        said("a3"),
        "And now?",
    ]

    older = list(chat.messages.order_by("id"))[:4]
    summary = ConversationSummary.objects.get(conversation=chat)
    assert summary.last_message_id == older[-1].pk and summary.previous is None
    assert (summary.text, summary.messages_covered, summary.tokens_covered) == (
        "They talked about u1, u2.",
        4,
        1000,
    )
    assert summary.run_id == run.pk and summary.model == "local-openai/gpt-test"
    [compacted] = events(run, "conversation.compacted")
    assert compacted == {
        "summary_id": summary.pk, "last_message_id": older[-1].pk, "messages_covered": 4,
        "tokens_covered": 1000, "messages": 4, "tokens": 1000, "kept_messages": 2,
        "previous_summary_id": None, "model": "local-openai/gpt-test",
        "call_run_id": summary.call_id,
    }  # fmt: skip
    # The summarising call is a run of its own: the agent's, with its usage and cost.
    call = Run.objects.get(pk=summary.call_id)
    assert (call.agent_id, call.status, call.gateway_model) == (
        agent.pk,
        "succeeded",
        "local-openai/gpt-test",
    )
    assert (call.input_tokens, call.output_tokens, call.initiated_by_user_id) == (
        300,
        40,
        trio.bob.pk,
    )
    assert call.conversation_id is None  # not a turn of the conversation
    types = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert types[:3] == ["conversation.compacting", "conversation.compacted", "run.started"]


def test_the_next_run_reuses_the_summary_without_a_model_call(trio, agent, chat, provider_server):
    provider_server.script("openai", TextReply("Summary one."), TextReply("First."))
    ask(trio, agent, chat, "And now?")
    provider_server.received.clear()

    provider_server.script("openai", TextReply("Second."))
    run = ask(trio, agent, chat, "More?")

    [answering] = provider_server.requests_to(CHAT)  # no summarising call this time
    assert texts(answering) == [
        f"{SUMMARY_HEAD}\nSummary one.",
        said("u3"),
        said("a3"),
        "And now?",
        "First.",
        "More?",
    ]
    summary = ConversationSummary.objects.get(conversation=chat)
    [reused] = events(run, "conversation.summary_reused")
    assert reused["summary_id"] == summary.pk and reused["kept_messages"] == 4
    assert not events(run, "conversation.compacted")


def test_a_summary_that_no_longer_fits_is_summarised_again_with_the_turns_after_it(
    trio, agent, chat, provider_server
):
    provider_server.script("openai", TextReply("Summary one."), TextReply("First."))
    ask(trio, agent, chat, "And now?")
    first = ConversationSummary.objects.get(conversation=chat)
    for n in (4, 5):
        add(trio, chat, "user", said(f"u{n}"))
        add(trio, chat, "assistant", said(f"a{n}"))
    provider_server.received.clear()

    provider_server.script("openai", TextReply("Summary two."), TextReply("Second."))
    run = ask(trio, agent, chat, "Still there?")

    summarising, answering = provider_server.requests_to(CHAT)
    [transcript] = texts(summarising)
    assert "Summary one." in transcript  # the earlier summary, not the turns it covers
    assert "<u1>" not in transcript and "<a2>" not in transcript
    assert "<u3>" in transcript and "<a4>" in transcript and "<u5>" not in transcript
    assert texts(answering) == [
        f"{SUMMARY_HEAD}\nSummary two.",
        said("u5"),
        said("a5"),
        "Still there?",
    ]
    second = ConversationSummary.objects.exclude(pk=first.pk).get(conversation=chat)
    assert second.previous_id == first.pk and second.run_id == run.pk
    # u1..a2 before, then u3, a3, "And now?", "First.", u4, a4
    assert second.messages_covered == 4 + 6
    [compacted] = events(run, "conversation.compacted")
    assert compacted["previous_summary_id"] == first.pk and compacted["messages"] == 6


def test_a_failed_summary_falls_back_to_the_newest_turns_and_says_so(
    trio, agent, chat, provider_server
):
    provider_server.script("openai", ErrorReply(400, "no such model"), TextReply("Answered."))
    run = ask(trio, agent, chat, "And now?")

    assert run.output == "Answered."
    _, answering = provider_server.requests_to(CHAT)  # (the first: the failed summary)
    assert texts(answering) == [said("u2"), said("a2"), said("u3"), said("a3"), "And now?"]
    assert not ConversationSummary.objects.exists()
    [failed] = events(run, "conversation.compaction_failed")
    assert failed["error"].startswith("BadRequest") and failed["kept_messages"] == 4
    assert failed["left_out_messages"] == 2
    call = Run.objects.get(agent=agent, gateway_model="local-openai/gpt-test")
    assert call.status == "failed" and call.error.startswith("BadRequest")


def test_a_resumed_run_that_failed_to_summarise_does_not_ask_again(
    trio, agent, chat, provider_server
):
    run = run_start(
        tenant=trio.acme, agent=agent, conversation=chat, input="And now?",
        initiated_by=trio.bob, enqueue=False,
    )  # fmt: skip
    RunEvent.objects.create(  # what its first attempt wrote before its worker died
        tenant=trio.acme, run=run, seq=1, type="conversation.compaction_failed", payload={}
    )
    Run.objects.filter(pk=run.pk).update(last_seq=1, attempts=1)  # the claim makes it 2
    provider_server.script("openai", TextReply("Answered."))

    assert execute_run(run.pk) == "succeeded"
    [answering] = provider_server.requests_to(CHAT)
    assert texts(answering)[0] == said("u2")
    assert RunEvent.objects.filter(run=run, type="conversation.compaction_failed").count() == 1


def test_the_summarising_call_is_held_against_the_quotas(trio, agent, chat, provider_server):
    quota = Quota.objects.create(
        tenant=trio.acme, scope="agent", agent=agent, metric="tokens", period="day", limit=100_000
    )
    provider_server.script(
        "openai",
        TextReply("Summary.", input_tokens=300, output_tokens=40),
        TextReply("Answered.", input_tokens=50, output_tokens=5),
    )
    run = ask(trio, agent, chat, "And now?")
    assert quotas.used(quota) == 300 + 40 + run.input_tokens + run.output_tokens == 395
    # A counter rebuilt from the runs counts it too (the call is the agent's run).
    [rule] = quotas.tenant_rules(trio.acme.pk)
    midnight = run.created_at.replace(hour=0, minute=0, second=0, microsecond=0)
    assert quotas.recorded_usage(rule, midnight) == 395


def test_a_quota_that_refuses_the_summary_asks_no_model_and_the_run_goes_on(
    trio, agent, chat, provider_server
):
    Quota.objects.create(tenant=trio.acme, scope="tenant", metric="tokens", period="day", limit=100)
    run = run_inline(
        tenant=trio.acme, agent=agent, conversation=chat, input="?", initiated_by=trio.bob
    )
    [failed] = events(run, "conversation.compaction_failed")
    assert failed["error"].startswith("QuotaExceeded: Quota exceeded: the daily limit")
    assert provider_server.requests_to(CHAT) == []  # neither call reached the model
    assert not Run.objects.filter(gateway_model="local-openai/gpt-test").exists()
    # The run itself went on to its own call, which the same limit refused.
    assert run.status == "failed" and "Quota exceeded" in run.error


def test_a_short_conversation_is_read_in_one_query_as_before(
    trio, agent, provider_server, django_assert_num_queries
):
    from agents.conversations import CompactionSettings, run_history

    chat = Conversation.objects.create(tenant=trio.acme, agent=agent, owner_user=trio.bob)
    add(trio, chat, "user", "hello")
    add(trio, chat, "assistant", "hi")
    run = run_start(
        tenant=trio.acme,
        agent=agent,
        conversation=chat,
        input="?",
        initiated_by=trio.bob,
        enqueue=False,
    )
    own = CompactionSettings.of(agent)
    with django_assert_num_queries(1):
        history = run_history(run, compaction=own, connection=None, model="gpt-test")
    assert history.compaction is None and [t.text for t in history.turns] == ["hello", "hi"]


def test_another_branch_does_not_take_a_summary_of_messages_it_lacks(
    trio, agent, chat, provider_server
):
    """A summary applies to a history holding the last message it covers: a branch that
    does not hold it (an edit of an earlier message) does not take it."""
    from agents.conversations import CompactionSettings, run_history

    _, a1, _, a2 = list(chat.messages.order_by("id"))[:4]
    ConversationSummary.objects.create(
        tenant=trio.acme, conversation=chat, last_message=a2, text="S", messages_covered=4,
        tokens_covered=1000, model="m",
    )  # fmt: skip
    run = run_start(
        tenant=trio.acme, agent=agent, conversation=chat, input="?", initiated_by=trio.bob,
        enqueue=False,
    )  # fmt: skip
    own = CompactionSettings.of(agent)
    assert run_history(run, compaction=own, connection=None, model="m").reused is not None
    Run.objects.filter(pk=run.pk).update(status="succeeded")

    Conversation.objects.filter(pk=chat.pk).update(leaf=a1)  # u2 edited: a branch from a1
    for name in ("u2b", "a2b", "u3b", "a3b"):
        add(trio, chat, "user" if name[0] == "u" else "assistant", said(name))
    other = run_start(
        tenant=trio.acme, agent=agent, conversation=chat, input="?", initiated_by=trio.bob,
        enqueue=False,
    )  # fmt: skip
    planned = run_history(other, compaction=own, connection=None, model="m")
    assert planned.reused is None
    assert [t.text for t in planned.turns] == [said(n) for n in ("u2b", "a2b", "u3b", "a3b")]


def test_the_summarising_call_is_a_chat_span_of_the_runs_trace(trio, agent, chat, provider_server):
    from agents.runtime import tracing
    from tests.fakes.otlp_collector import OtlpCollector

    collector = OtlpCollector()
    tracing.install_otlp(collector.url, service_name="test")
    try:
        provider_server.script(
            "openai",
            TextReply("Summary.", input_tokens=300, output_tokens=40),
            TextReply("Answered."),
        )
        run = ask(trio, agent, chat, "And now?")
        tracing.uninstall()  # flushes the batch
        [root] = collector.named("invoke_agent assistant")
        chats = collector.named("chat gpt-test")
        [summarising] = [c for c in chats if "agentplatform.operation" in c.attributes]
        assert len(chats) == 2
        assert summarising.attributes["agentplatform.operation"] == "conversation.compaction"
        assert summarising.attributes["agentplatform.run.id"] == str(run.pk)
        assert summarising.attributes["gen_ai.usage.input_tokens"] == 300
        assert summarising.parent_span_id == root.span_id  # within the run's trace
        assert b"<u1>" not in b"".join(collector.bodies)  # no conversation text leaves
    finally:
        tracing.uninstall()
        collector.close()


def test_a_turn_with_an_image_gets_the_summary_and_keeps_its_image(
    trio, agent, chat, provider_server
):
    from agents.conversations import attachment_upload
    from tests.agents.test_attachments import PNG

    image = attachment_upload(
        tenant=trio.acme, conversation=chat, by=trio.bob, name="cat.png", data=PNG
    )
    run = run_start(
        tenant=trio.acme, agent=agent, conversation=chat, input="And this?",
        initiated_by=trio.bob, attachments=[image.pk],
    )  # fmt: skip
    provider_server.script("openai", TextReply("Summary."), TextReply("A cat."))
    assert execute_run(run.pk) == "succeeded"

    _, answering = provider_server.requests_to(CHAT)
    sent = [m for m in answering.body["messages"] if m["role"] != "system"]
    assert sent[0]["content"] == f"{SUMMARY_HEAD}\nSummary."
    assert [m["content"] for m in sent[1:3]] == [said("u3"), said("a3")]
    last = sent[-1]["content"]
    assert last[0] == {"type": "text", "text": "And this?"}
    assert last[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert len(sent) == 4
