"""Queueing and steering (agents.runs.steering): messages sent while a conversation's answer
works, through the real engine, the real PostgreSQL and Redis, and the fake model server."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404

from agents.conversations import conversation_fork, conversation_history
from agents.models import Message, QueuedMessage, Run, RunEvent
from agents.runs import (
    RunFinished,
    message_queue,
    publisher,
    queued_messages,
    queued_remove,
    run_cancel,
    run_start,
    run_steer,
)
from agents.runs.engine import execute_run
from agents.runs.steering import steer_key
from agents.services import conversation_save
from providers.models import ProviderKind
from providers.runtime.types import AssistantMessage, UserMessage
from tenancy.models import Role
from tests.factories import add_member, make_connection, make_user
from tests.fakes.provider_server import ErrorReply, TextReply, ToolCall, ToolCallReply


@pytest.fixture
def chat(trio, agent):
    return conversation_save(
        tenant=trio.acme, changes={"agent": agent, "title": ""}, owner_user=trio.alice
    )


def start(trio, agent, chat, text="Hello"):
    return run_start(
        tenant=trio.acme, agent=agent, input=text, conversation=chat, initiated_by=trio.alice
    )


def sent_messages(provider_server, index):
    return provider_server.requests_to("/v1/chat/completions")[index].body["messages"]


def test_a_steering_message_joins_the_loop_before_its_next_model_call(
    trio, agent, chat, provider_server, django_capture_on_commit_callbacks
):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "calculator", '{"expression": "6*7"}')]),
        TextReply("42, in French: quarante-deux."),
    )
    run = start(trio, agent, chat, "6*7?")
    execute = Run.objects.get(pk=run.pk)
    with django_capture_on_commit_callbacks(execute=True):  # (the flag, set once stored)
        steer = run_steer(tenant=trio.acme, run=execute, text="Answer in French.", by=trio.alice)
    assert steer.kind == "steer" and steer.status == "waiting"
    assert execute_run(run.pk) == "succeeded"
    # Taken at the first round (before the first model call): after the question.
    first = sent_messages(provider_server, 0)
    assert [m["content"] for m in first if m["role"] == "user"] == ["6*7?", "Answer in French."]
    steered = RunEvent.objects.get(run=run, type="run.steered").payload
    assert steered["text"] == "Answer in French." and steered["id"] == steer.pk
    steer.refresh_from_db()
    assert steer.status == "applied"
    run.refresh_from_db()
    assert run.state["steers"] == [steer.pk]
    # The conversation's messages stay a question and its answer (the thread shows the
    # steer from its event, in the turn's steps).
    rows = list(Message.objects.filter(conversation=chat).values_list("role", "content", "run"))
    assert rows == [
        ("user", "6*7?", run.pk),
        ("assistant", "42, in French: quarante-deux.", run.pk),
    ]


def test_a_later_turns_history_has_the_steer_in_its_place(
    trio, agent, chat, provider_server, django_capture_on_commit_callbacks,
    django_assert_num_queries,
):  # fmt: skip
    provider_server.script(
        "anthropic",
        ToolCallReply([ToolCall("c1", "calculator", '{"expression": "6*7"}')]),
        TextReply("Quarante-deux."),
        TextReply("Quatre-vingt-quatre."),
    )
    anthropic = make_connection(
        trio.acme, "Claude", ProviderKind.ANTHROPIC, api_key="sk-ant-test-key",
        base_url=provider_server.anthropic_base_url, max_retries=0,
    )  # fmt: skip
    agent.provider_connection, agent.model = anthropic, "claude-test"
    agent.save()
    run = start(trio, agent, chat, "6*7?")
    with django_capture_on_commit_callbacks(execute=True):
        run_steer(tenant=trio.acme, run=run, text="Answer in French.", by=trio.alice)
        run_steer(tenant=trio.acme, run=run, text="In words.", by=trio.alice)
    assert execute_run(run.pk) == "succeeded"
    answer = Message.objects.get(conversation=chat, role="assistant")
    assert answer.steers == ["Answer in French.", "In words."]
    fork = conversation_fork(tenant=trio.acme, conversation=chat, message=answer)
    assert Message.objects.get(conversation=fork, role="assistant").steers == answer.steers

    later = start(trio, agent, chat, "And twice that?")
    with django_assert_num_queries(1):
        history = conversation_history(later)
    steered = (
        "6*7?\n\n(While you worked on this, the user added: Answer in French.)"
        "\n\n(While you worked on this, the user added: In words.)"
    )
    assert history == [UserMessage(steered), AssistantMessage(text="Quarante-deux.")]
    assert execute_run(later.pk) == "succeeded"
    # Anthropic's turns alternate: the steers are in the question's turn.
    sent = provider_server.requests_to("/v1/messages")[-1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"] == [{"type": "text", "text": steered}]


def test_a_steer_after_the_last_round_becomes_the_next_turn(trio, agent, chat, provider_server):
    provider_server.script("openai", TextReply("First answer."), TextReply("Second answer."))
    run = start(trio, agent, chat, "One")
    steer = run_steer(tenant=trio.acme, run=run, text="And two?", by=trio.alice)
    publisher().delete(steer_key(run))  # as if it came while the last model call ran
    with_flag_unseen = execute_run(run.pk)
    assert with_flag_unseen == "succeeded"
    steer.refresh_from_db()
    assert (steer.kind, steer.status, steer.late) == ("turn", "started", True)
    following = steer.started_run
    assert following.input == "And two?" and following.status == "queued"
    assert execute_run(following.pk) == "succeeded"
    assert not RunEvent.objects.filter(run=run, type="run.steered").exists()


def test_queued_messages_start_in_order_one_at_a_time_whatever_ended_the_turn(
    trio, agent, chat, provider_server
):
    run = start(trio, agent, chat, "One")
    second = message_queue(tenant=trio.acme, conversation=chat, text="Two", by=trio.alice)
    third = message_queue(tenant=trio.acme, conversation=chat, text="Three", by=trio.alice)
    assert (second.status, second.run_id) == ("waiting", run.pk)
    assert [q.content for q in queued_messages(tenant=trio.acme, conversation=chat)] == [
        "Two",
        "Three",
    ]
    # Stopped before a worker took it: the next turn starts all the same.
    run_cancel(tenant=trio.acme, run=run, by=trio.alice)
    second.refresh_from_db()
    third.refresh_from_db()
    assert second.status == "started" and third.status == "waiting"
    unfinished = Run.objects.filter(conversation=chat).exclude(
        status__in=["succeeded", "failed", "cancelled", "max_rounds"]
    )
    assert list(unfinished) == [second.started_run]  # never two turns at once
    # Failed: the third starts.
    provider_server.script("openai", ErrorReply(status=400, message="bad"))
    assert execute_run(second.started_run_id) == "failed"
    third.refresh_from_db()
    assert third.status == "started" and third.started_run.input == "Three"
    # Each started turn's first event says which queued message it answers, behind which run.
    dequeued = RunEvent.objects.get(run=third.started_run, seq=1)
    assert dequeued.type == "turn.dequeued"
    assert dequeued.payload == {
        "queued": third.pk,
        "behind_run": second.started_run_id,
        "late": False,
    }


def test_with_nothing_at_work_a_queued_message_starts_at_once(trio, agent, chat):
    queued = message_queue(tenant=trio.acme, conversation=chat, text="Hi", by=trio.alice)
    assert queued.status == "started" and queued.started_run.input == "Hi"


def test_a_queued_message_can_be_taken_back_before_it_starts(trio, agent, chat):
    start(trio, agent, chat)
    queued = message_queue(tenant=trio.acme, conversation=chat, text="Later", by=trio.alice)
    queued_remove(tenant=trio.acme, conversation=chat, queued_id=queued.pk, by=trio.alice)
    assert not QueuedMessage.objects.filter(pk=queued.pk).exists()
    with pytest.raises(Http404):
        queued_remove(tenant=trio.acme, conversation=chat, queued_id=queued.pk, by=trio.alice)


def test_others_cannot_steer_or_queue_and_bad_input_changes_nothing(trio, agent, chat):
    run = start(trio, agent, chat)
    viewer = make_user("victor")
    add_member(trio.acme, viewer, Role.VIEWER)
    for who in (trio.bob, trio.charlie):  # another member's conversation; another tenant
        with pytest.raises(Http404):
            run_steer(tenant=trio.acme, run=run, text="x", by=who)
        with pytest.raises(Http404):
            message_queue(tenant=trio.acme, conversation=chat, text="x", by=who)
    with pytest.raises(Http404):
        run_steer(tenant=trio.globex, run=run, text="x", by=trio.charlie)
    for bad in ("", "   ", "x" * 100_001):
        with pytest.raises(ValidationError):
            run_steer(tenant=trio.acme, run=run, text=bad, by=trio.alice)
        with pytest.raises(ValidationError):
            message_queue(tenant=trio.acme, conversation=chat, text=bad, by=trio.alice)
    assert not QueuedMessage.objects.exists()
    run_cancel(tenant=trio.acme, run=run, by=trio.alice)
    with pytest.raises(RunFinished):
        run_steer(tenant=trio.acme, run=Run.objects.get(pk=run.pk), text="late", by=trio.alice)
    assert not QueuedMessage.objects.exists()


def test_a_viewer_may_not_queue_in_a_conversation_of_their_own(trio, agent):
    viewer = make_user("victor")
    add_member(trio.acme, viewer, Role.VIEWER)
    theirs = conversation_save(
        tenant=trio.acme, changes={"agent": agent, "title": ""}, owner_user=viewer
    )
    with pytest.raises(PermissionDenied):
        message_queue(tenant=trio.acme, conversation=theirs, text="x", by=viewer)


def test_a_queued_message_that_cannot_start_is_refused_with_the_reason(trio, agent, chat):
    run = start(trio, agent, chat)
    queued = message_queue(tenant=trio.acme, conversation=chat, text="Later", by=trio.alice)
    agent.active = False  # an admin switched the agent off meanwhile
    agent.save()
    run_cancel(tenant=trio.acme, run=run, by=trio.alice)
    queued.refresh_from_db()
    assert queued.status == "refused" and "not active" in queued.error
    assert Run.objects.filter(conversation=chat).count() == 1
    assert [q.pk for q in queued_messages(tenant=trio.acme, conversation=chat)] == [queued.pk]
    queued_remove(tenant=trio.acme, conversation=chat, queued_id=queued.pk, by=trio.alice)
    assert not QueuedMessage.objects.exists()
