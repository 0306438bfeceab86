"""Runs executed from their records, against the real OpenAI SDK and the local server."""

from __future__ import annotations

import pytest

from agents.models import Message, Run, RunEvent
from agents.runs import run_inline
from providers.models import ProviderConnection
from tests.factories import make_tool
from tests.fakes.provider_server import ErrorReply, TextReply, ToolCall, ToolCallReply


def test_a_run_with_a_tool_round_is_recorded_in_full(trio, agent, provider_server):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "calculator", '{"expression": "6*7"}')], input_tokens=20),
        TextReply("It is 42.", input_tokens=30, output_tokens=4),
    )
    run = run_inline(tenant=trio.acme, agent=agent, input="6 times 7?", initiated_by=trio.alice)
    assert run.status == "succeeded" and run.output == "It is 42."
    assert (run.input_tokens, run.output_tokens) == (50, 9)
    assert run.model == "gpt-test" and run.provider == "openai"
    assert len(run.instructions_digest) == 64 and len(run.tools_digest) == 64
    assert run.started_at and run.finished_at and run.lease_owner == ""
    types = list(RunEvent.objects.filter(run=run).values_list("type", flat=True))
    # The first token of a burst is its own event; the ones right behind it are coalesced.
    types = [t for i, t in enumerate(types) if t != "text.delta" or types[i - 1] != t]
    assert types == [
        "run.started",
        "inference.started",
        "inference.completed",
        "tool.started",
        "tool.completed",
        "inference.started",
        "text.delta",
        "inference.completed",
        "run.completed",
    ]
    seqs = list(RunEvent.objects.filter(run=run).values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))  # numbered without gaps
    completed = RunEvent.objects.get(run=run, type="tool.completed").payload
    assert completed["result"] == {"result": 42} and completed["error"] is None
    second = provider_server.requests_to("/v1/chat/completions")[1].body["messages"]
    assert second[-1] == {"role": "tool", "tool_call_id": "c1", "content": '{"result": 42}'}


def test_a_tool_over_its_rate_limit_is_an_error_the_model_reads_and_an_event(
    trio, agent, provider_server
):
    make_tool(trio.acme, "calc", rate_limit_per_minute=1)
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "calc", '{"expression": "6*7"}')]),
        ToolCallReply([ToolCall("c2", "calc", '{"expression": "6*8"}')]),
        TextReply("6*7 is 42; I could not compute 6*8 yet."),
    )
    run = run_inline(tenant=trio.acme, agent=agent, input="6*7 and 6*8?")
    assert run.status == "succeeded"
    event = RunEvent.objects.get(run=run, type="tool.rate_limited")
    assert event.payload["call_id"] == "c2" and event.payload["limit"] == 1
    completed = RunEvent.objects.get(run=run, type="tool.completed", seq=event.seq + 1)
    assert completed.payload["result"] is None
    told = provider_server.requests_to("/v1/chat/completions")[2].body["messages"][-1]
    assert told["tool_call_id"] == "c2" and told["content"] == completed.payload["error"]
    assert told["content"].startswith("tool calc is limited to 1 calls per minute")


def test_a_run_records_the_limits_it_ran_under(trio, agent, provider_server):
    """`Run.limits` holds what bounded the loop: it stops at the recorded max_rounds."""
    agent.max_rounds, agent.max_tool_calls, agent.max_tokens_per_run = 2, 7, 5000
    agent.save()
    calc = ToolCallReply([ToolCall("c1", "calculator", '{"expression": "1+1"}')])
    provider_server.script("openai", calc, calc, calc)
    run = run_inline(tenant=trio.acme, agent=agent, input="Count.", initiated_by=trio.alice)
    assert run.status == "max_rounds"
    assert run.limits == {
        "max_rounds": 2,
        "max_tool_calls": 7,
        "max_tokens_per_run": 5000,
        "max_tokens_per_response": 1024,
    }
    assert len(provider_server.requests_to("/v1/chat/completions")) == 2
    assert RunEvent.objects.filter(run=run, type="tool.completed").count() == 2
    # Changing the agent afterwards leaves what the run ran under as it was.
    agent.max_rounds = 9
    agent.save()
    assert Run.objects.get(pk=run.pk).limits["max_rounds"] == 2


def test_an_agent_answering_without_tools_never_runs_the_call_a_tool_result_asked_for(
    trio, agent, provider_server
):
    """results_without_tools on a real run: the provider's second call is offered no tools,
    and the tool call it sends anyway (as an injected model would) is refused, not run."""
    agent.results_without_tools = True
    agent.save()
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "calculator", '{"expression": "6*7"}')]),
        ToolCallReply([ToolCall("c2", "calculator", '{"expression": "6*8"}')]),
    )
    run = run_inline(tenant=trio.acme, agent=agent, input="6 times 7?")
    assert run.status == "succeeded"
    first, second = provider_server.requests_to("/v1/chat/completions")
    assert first.body.get("tools") and "tools" not in second.body
    started = RunEvent.objects.filter(run=run, type="tool.started")
    assert [e.payload["name"] for e in started] == ["calculator"]  # c1 only
    refused = RunEvent.objects.get(run=run, type="tool_calls.refused").payload
    assert [c["call_id"] for c in refused["tool_calls"]] == ["c2"]


def test_the_digests_are_stable_and_follow_the_configuration(trio, agent, provider_server):
    first = run_inline(tenant=trio.acme, agent=agent, input="hi")
    second = run_inline(tenant=trio.acme, agent=agent, input="hi again")
    assert first.instructions_digest == second.instructions_digest
    assert first.tools_digest == second.tools_digest
    agent.instructions = "Be verbose."
    agent.use_all_tools, agent.tool_names = False, ["calculator"]
    agent.save()
    third = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert third.instructions_digest != first.instructions_digest
    assert third.tools_digest != first.tools_digest


def test_a_conversation_carries_history_into_the_next_run(trio, agent, provider_server):
    from agents.models import Conversation

    conversation = Conversation.objects.create(tenant=trio.acme, agent=agent, owner_user=trio.bob)
    provider_server.script("openai", TextReply("Hello Bob."), TextReply("You are Bob."))
    for text in ("I am Bob.", "Who am I?"):
        run_inline(
            tenant=trio.acme,
            agent=agent,
            input=text,
            conversation=conversation,
            initiated_by=trio.bob,
        )
    sent = provider_server.requests_to("/v1/chat/completions")[1].body["messages"]
    assert [m["content"] for m in sent[1:]] == ["I am Bob.", "Hello Bob.", "Who am I?"]
    roles = list(Message.objects.filter(conversation=conversation).values_list("role", "content"))
    assert roles == [
        ("user", "I am Bob."),
        ("assistant", "Hello Bob."),
        ("user", "Who am I?"),
        ("assistant", "You are Bob."),
    ]
    conversation.refresh_from_db()
    assert conversation.title == "I am Bob."


def test_no_connection_fails_clearly(trio, agent):
    from providers.models import ProviderConnection

    ProviderConnection.objects.all().delete()
    agent.refresh_from_db()
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert run.status == "failed" and "no provider connection" in run.error
    assert RunEvent.objects.get(run=run).type == "run.failed"


def test_provider_errors_fail_the_run_with_the_reason(trio, agent, provider_server):
    provider_server.expect_api_key("another-key")
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert run.status == "failed" and run.error.startswith("AuthenticationFailed")
    assert "sk-test-key" not in run.error
    assert Run.objects.get(pk=run.pk).finished_at is not None


def test_a_run_cannot_be_claimed_twice(trio, agent):
    from agents.runs import run_start
    from agents.runs.engine import claim

    run = run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)
    assert claim(run.pk, "first").lease_owner == "first"
    assert claim(run.pk, "second") is None  # live lease
    Run.objects.filter(pk=run.pk).update(lease_expires_at="2000-01-01T00:00:00Z")
    assert claim(run.pk, "third").lease_owner == "third"  # expired: taken over
    assert claim(10**9, "me") is None


def test_a_refused_base_url_fails_the_run_at_once_with_a_clear_message(
    trio, agent, connection, provider_server, settings
):
    settings.EGRESS_ALLOWLIST = []  # the local provider server is on loopback
    ProviderConnection.objects.filter(pk=connection.pk).update(max_retries=3)
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert run.status == "failed" and run.attempts == 1  # no retry of any kind
    assert "This address is not allowed: " in run.error and "127.0.0.1" in run.error
    assert "Egress" not in run.error and "sk-test-key" not in run.error
    failed = RunEvent.objects.get(run=run, type="run.failed")
    assert failed.payload["error"] == run.error
    assert provider_server.received == []


@pytest.mark.parametrize(
    ("reply", "error"),
    [(ErrorReply(401, "bad key"), "AuthenticationFailed"), (ErrorReply(404), "ModelNotFound")],
)
def test_configuration_errors_are_not_retried(
    trio, agent, connection, provider_server, reply, error
):
    ProviderConnection.objects.filter(pk=connection.pk).update(max_retries=3)
    provider_server.script("openai", reply)
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert run.status == "failed" and run.error.startswith(error) and run.attempts == 1
    assert len(provider_server.requests_to("/v1/chat/completions")) == 1


def test_transient_errors_are_retried(trio, agent, connection, provider_server):
    ProviderConnection.objects.filter(pk=connection.pk).update(max_retries=3)
    provider_server.script("openai", ErrorReply(503, "overloaded"), TextReply("back"))
    run = run_inline(tenant=trio.acme, agent=agent, input="hi")
    assert run.status == "succeeded" and run.output == "back"
    assert len(provider_server.requests_to("/v1/chat/completions")) == 2
