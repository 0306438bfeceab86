"""Long conversations with a crew (agents/conversations/compaction.py, as an agent's): a
sequential or parallel crew's run whose history exceeds the crew's threshold gives its
members the older turns as a summary the fake model really wrote, then the recent turns;
later runs reuse it; a failed summary falls back to the newest turns; a hierarchical crew's
settings take precedence over its manager's."""

from __future__ import annotations

import pytest

from agents import quotas
from agents.models import (
    Approval,
    Conversation,
    ConversationSummary,
    Crew,
    Quota,
    Run,
    RunEvent,
)
from agents.runs import approval_decide, execute_run, run_inline, run_start
from tests.agents.test_compaction import SUMMARY_HEAD, add, events, said
from tests.factories import make_agent, make_connection, make_crew
from tests.fakes.provider_server import ErrorReply, TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = "/v1/chat/completions"


def long_chat(trio, crew: Crew) -> Conversation:
    """Six 1,000-character messages: 1,500 tokens, above the crew's 1,000."""
    conversation = Conversation.objects.create(tenant=trio.acme, crew=crew, owner_user=trio.bob)
    for n in (1, 2, 3):
        add(trio, conversation, "user", said(f"u{n}"))
        add(trio, conversation, "assistant", said(f"a{n}"))
    return conversation


def crew_in(trio, mode: str, **fields) -> Crew:
    researcher = make_agent(trio.acme, "researcher", instructions="You research.")
    writer = make_agent(trio.acme, "writer", instructions="You write.")
    return make_crew(trio.acme, f"{mode}-crew", [researcher, writer], mode=mode, **fields)


def ask(trio, crew, chat, text: str) -> Run:
    run = run_inline(
        tenant=trio.acme, crew=crew, conversation=chat, input=text, initiated_by=trio.bob
    )
    assert run.status == "succeeded", run.error
    return run


def prompts(provider_server) -> list[str]:
    """The last user message of each member's call (its task), in the order received."""
    return [r.body["messages"][-1]["content"] for r in provider_server.requests_to(CHAT)]


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_a_crew_in_a_long_conversation_gives_its_members_a_summary_and_the_recent_turns(
    trio, connection, provider_server, mode
):
    crew = crew_in(trio, mode, compaction_threshold=1000)
    chat = long_chat(trio, crew)
    quota = Quota.objects.create(
        tenant=trio.acme, scope="tenant", metric="tokens", period="day", limit=100_000
    )
    provider_server.script(
        "openai",
        TextReply("They talked about u1, u2.", input_tokens=300, output_tokens=40),
        TextReply("Found."),
        TextReply("Written."),
    )
    run = ask(trio, crew, chat, "And now?")

    summarising, *members = provider_server.requests_to(CHAT)
    assert summarising.body["model"] == "gpt-test"  # the tenant's default connection's
    [transcript] = [m["content"] for m in summarising.body["messages"] if m["role"] == "user"]
    assert "<u1>" in transcript and "<a2>" in transcript and "<u3>" not in transcript
    assert len(members) == 2
    for prompt in prompts(provider_server)[1:]:
        assert f"User: {SUMMARY_HEAD}\nThey talked about u1, u2." in prompt
        assert f"User: {said('u3')}\nAssistant: {said('a3')}" in prompt
        assert "<u1>" not in prompt and "<a2>" not in prompt
        assert prompt.index("They talked") < prompt.index("<u3>") < prompt.index("And now?")

    summary = ConversationSummary.objects.get(conversation=chat)
    assert (summary.run_id, summary.messages_covered, summary.model) == (
        run.pk,
        4,
        "local-openai/gpt-test",
    )
    types = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert types[:3] == ["conversation.compacting", "conversation.compacted", "run.started"]
    [compacted] = events(run, "conversation.compacted")
    assert compacted["summary_id"] == summary.pk and compacted["kept_messages"] == 2
    # The summarising call: a run of its own, the tenant's and member's (a crew is no agent).
    call = Run.objects.get(pk=summary.call_id)
    assert (call.agent_id, call.crew_id, call.status, call.initiated_by_user_id) == (
        None,
        None,
        "succeeded",
        trio.bob.pk,
    )
    assert (call.input_tokens, call.output_tokens) == (300, 40)
    run.refresh_from_db()
    assert quotas.used(quota) == 340 + run.input_tokens + run.output_tokens
    # The members are runs without a conversation: they summarise nothing themselves.
    for child in Run.objects.filter(parent=run):
        assert not RunEvent.objects.filter(run=child, type__startswith="conversation.").exists()


def test_the_crews_next_run_reuses_the_summary_without_a_model_call(
    trio, connection, provider_server
):
    crew = crew_in(trio, "sequential", compaction_threshold=1000)
    chat = long_chat(trio, crew)
    provider_server.script("openai", TextReply("Summary one."), TextReply("R."), TextReply("W."))
    ask(trio, crew, chat, "And now?")
    provider_server.received.clear()

    provider_server.script("openai", TextReply("R2."), TextReply("W2."))
    run = ask(trio, crew, chat, "More?")

    assert len(provider_server.requests_to(CHAT)) == 2  # the members only
    for prompt in prompts(provider_server):
        assert f"User: {SUMMARY_HEAD}\nSummary one." in prompt
        assert "Assistant: W.\n\n## Now\nMore?" in prompt
    summary = ConversationSummary.objects.get(conversation=chat)
    [reused] = events(run, "conversation.summary_reused")
    assert reused["summary_id"] == summary.pk and reused["kept_messages"] == 4
    assert not events(run, "conversation.compacting")


def test_a_crews_failed_summary_falls_back_to_the_newest_turns_and_says_so(
    trio, connection, provider_server
):
    crew = crew_in(trio, "sequential", compaction_threshold=1000)
    chat = long_chat(trio, crew)
    provider_server.script(
        "openai", ErrorReply(400, "no such model"), TextReply("R."), TextReply("W.")
    )
    run = ask(trio, crew, chat, "And now?")

    assert run.output == "W."
    for prompt in prompts(provider_server)[1:]:
        assert SUMMARY_HEAD not in prompt and "<u1>" not in prompt and "<a1>" not in prompt
        assert f"User: {said('u2')}" in prompt and f"Assistant: {said('a3')}" in prompt
    assert not ConversationSummary.objects.exists()
    [failed] = events(run, "conversation.compaction_failed")
    assert failed["error"].startswith("BadRequest")
    assert (failed["kept_messages"], failed["left_out_messages"]) == (4, 2)
    call = Run.objects.get(gateway_model="local-openai/gpt-test", parent=None, crew=None)
    assert call.status == "failed" and call.agent_id is None


def test_a_resumed_crew_run_that_failed_to_summarise_does_not_ask_again(
    trio, connection, provider_server
):
    crew = crew_in(trio, "sequential", compaction_threshold=1000)
    chat = long_chat(trio, crew)
    run = run_start(
        tenant=trio.acme, crew=crew, conversation=chat, input="And now?",
        initiated_by=trio.bob, enqueue=False,
    )  # fmt: skip
    RunEvent.objects.create(  # what its first attempt wrote before its worker died
        tenant=trio.acme, run=run, seq=1, type="conversation.compaction_failed", payload={}
    )
    Run.objects.filter(pk=run.pk).update(last_seq=1, attempts=1)  # the claim makes it 2
    provider_server.script("openai", TextReply("R."), TextReply("W."))

    assert execute_run(run.pk) == "succeeded"
    first = prompts(provider_server)[0]
    assert len(provider_server.requests_to(CHAT)) == 2  # no summarising call
    assert f"User: {said('u2')}" in first and "<u1>" not in first
    assert RunEvent.objects.filter(run=run, type__startswith="conversation.").count() == 1


def test_a_crew_run_resumed_after_a_members_approval_does_not_summarise_again(
    trio, connection, provider_server, transfer
):
    payer = make_agent(trio.acme, "payer", instructions="You pay.")
    writer = make_agent(trio.acme, "writer", instructions="You write.")
    crew = make_crew(trio.acme, "pay-crew", [payer, writer], compaction_threshold=1000)
    chat = long_chat(trio, crew)
    provider_server.script(
        "openai",
        TextReply("Summary."),
        ToolCallReply([ToolCall("t1", "transfer", '{"amount": 50}')]),
    )
    run = run_inline(
        tenant=trio.acme, crew=crew, conversation=chat, input="Pay 50.", initiated_by=trio.bob
    )
    assert run.status == "awaiting_approval", run.error
    child = Run.objects.get(parent=run)
    approval = Approval.objects.get(run=child)
    provider_server.script("openai", TextReply("Paid."))
    approval_decide(tenant=trio.acme, approval=approval, approved=True, by=trio.alice)
    assert execute_run(child.pk) == "succeeded"

    provider_server.script("openai", TextReply("Written."))
    assert execute_run(run.pk) == "succeeded"  # woken by its member: a second attempt
    requests = provider_server.requests_to(CHAT)
    assert len(requests) == 4  # the summary, the payer's two calls, the writer's
    assert f"User: {SUMMARY_HEAD}\nSummary." in prompts(provider_server)[-1]
    assert ConversationSummary.objects.filter(conversation=chat).count() == 1
    assert len(events(run, "conversation.compacting")) == 1
    assert len(events(run, "conversation.compacted")) == 1
    assert len(events(run, "conversation.summary_reused")) == 1  # by the second attempt


def test_a_crews_own_summarising_connection_and_model(trio, connection, provider_server):
    mini = make_connection(
        trio.acme, "Mini", "openai", api_key="sk-mini", base_url=provider_server.openai_base_url,
        default_model="gpt-mini", max_retries=0,
    )  # fmt: skip
    crew = crew_in(trio, "sequential", compaction_threshold=1000, compaction_connection=mini)
    chat = long_chat(trio, crew)
    provider_server.script("openai", TextReply("S."), TextReply("R."), TextReply("W."))
    ask(trio, crew, chat, "And now?")
    summarising = provider_server.requests_to(CHAT)[0]
    assert summarising.body["model"] == "gpt-mini"  # that connection's default
    assert ConversationSummary.objects.get(conversation=chat).model == "mini/gpt-mini"


def test_a_hierarchical_crews_settings_take_precedence_over_its_managers(
    trio, connection, provider_server
):
    boss = make_agent(trio.acme, "boss", instructions="You delegate.", compaction_model="gpt-x")
    crew = make_crew(
        trio.acme, "managed", [make_agent(trio.acme, "writer")], mode="hierarchical",
        manager=boss, compaction_threshold=1000,
    )  # fmt: skip
    chat = long_chat(trio, crew)  # within the manager's own threshold (the default, 8,000)
    provider_server.script("openai", TextReply("Summary."), TextReply("Done myself."))
    run = ask(trio, crew, chat, "And now?")

    summarising, answering = provider_server.requests_to(CHAT)
    assert summarising.body["model"] == "gpt-x"  # unset on the crew: the manager's
    texts = [m["content"] for m in answering.body["messages"] if m["role"] != "system"]
    assert texts[0] == f"{SUMMARY_HEAD}\nSummary."
    summary = ConversationSummary.objects.get(conversation=chat)
    assert summary.run_id == run.pk
    assert Run.objects.get(pk=summary.call_id).agent_id == boss.pk  # the manager's call
