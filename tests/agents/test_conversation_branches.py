"""A conversation's branches (agents/conversations/branches.py, agents.runs run_edit and
run_regenerate): editing and answering again keep every version, a run's history follows
only its branch, forking copies a branch; bad input changes nothing."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.http import Http404

from agents import migrations
from agents.conversations import (
    branch_shown,
    branch_switch,
    branch_versions,
    conversation_fork,
    conversation_frame,
    conversation_history,
    conversation_message,
)
from agents.models import MAX_INPUT_CHARS, Conversation, Message, Run
from agents.runs import ConversationBusy, run_edit, run_regenerate, run_start
from agents.runs.engine import execute_run
from agents.services import conversation_save
from providers.runtime.types import AssistantMessage, UserMessage
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat(trio, agent) -> Conversation:
    return conversation_save(
        tenant=trio.acme, changes={"agent": agent, "title": "Plans"}, owner_user=trio.bob
    )


def turn(trio, chat, provider_server, text: str, answer: str) -> Run:
    """bob says `text`; the model answers `answer` (executed here)."""
    run = run_start(
        tenant=trio.acme, agent=chat.agent, input=text, conversation=chat, initiated_by=trio.bob
    )
    return answered(run, provider_server, answer)


def answered(run: Run, provider_server, answer: str) -> Run:
    provider_server.script("openai", TextReply(answer))
    assert execute_run(run.pk) == "succeeded"
    run.refresh_from_db()
    return run


def shown_text(chat: Conversation) -> list[str]:
    chat.refresh_from_db()
    return [m.content for m in branch_shown(conversation=chat).messages]


def sent_to_model(provider_server) -> list[tuple[str, str]]:
    body = provider_server.requests_to("/v1/chat/completions")[-1].body
    return [(m["role"], m["content"]) for m in body["messages"] if m["role"] != "system"]


def test_an_edit_goes_on_from_a_new_version_and_the_old_branch_stays(trio, chat, provider_server):
    first = turn(trio, chat, provider_server, "Plan a trip", "Where to?")
    turn(trio, chat, provider_server, "To Rome", "Rome it is.")
    question = first.in_reply_to

    edited = run_edit(
        tenant=trio.acme, conversation=chat, message=question, input="Plan a dinner",
        initiated_by=trio.bob,
    )  # fmt: skip
    assert edited.in_reply_to.parent_id is None and edited.in_reply_to.content == "Plan a dinner"
    assert conversation_history(edited) == []  # a first message: nothing before it
    answered(edited, provider_server, "For how many?")
    assert sent_to_model(provider_server) == [("user", "Plan a dinner")]
    assert shown_text(chat) == ["Plan a dinner", "For how many?"]

    shown = branch_shown(conversation=chat)
    switch = shown.switches[edited.in_reply_to_id]
    assert (switch.position, switch.count) == (2, 2)
    assert switch.previous_id == question.pk and switch.next_id is None
    assert shown.runs[edited.in_reply_to_id] == [edited]  # the run that answered it

    # The old branch, whole: switching to the old version shows its newest message.
    branch_switch(conversation=chat, message=question)
    assert shown_text(chat) == ["Plan a trip", "Where to?", "To Rome", "Rome it is."]
    assert Message.objects.filter(conversation=chat).count() == 6  # nothing lost
    tips = branch_versions(conversation=chat)
    assert [(t.content, t.current) for t in tips] == [
        ("Rome it is.", True), ("For how many?", False)
    ]  # fmt: skip


def test_a_runs_history_follows_only_its_branch(trio, chat, provider_server):
    turn(trio, chat, provider_server, "One", "1")
    second = turn(trio, chat, provider_server, "Two", "2")
    turn(trio, chat, provider_server, "Three", "3")
    edited = run_edit(
        tenant=trio.acme, conversation=chat, message=second.in_reply_to, input="Deux",
        initiated_by=trio.bob,
    )  # fmt: skip
    assert conversation_history(edited) == [UserMessage("One"), AssistantMessage(text="1")]
    answered(edited, provider_server, "2 bis")
    assert sent_to_model(provider_server) == [("user", "One"), ("assistant", "1"), ("user", "Deux")]

    after = turn(trio, chat, provider_server, "Four", "4")
    assert conversation_history(after) == [
        UserMessage("One"),
        AssistantMessage(text="1"),
        UserMessage("Deux"),
        AssistantMessage(text="2 bis"),
    ]  # fmt: skip: "Two", "2", "Three", "3" are another branch
    assert conversation_frame(after) is None  # no tool results on this branch


def test_answering_again_keeps_the_old_answer_as_a_version(trio, chat, provider_server):
    first = turn(trio, chat, provider_server, "Joke?", "Knock knock.")
    again = run_regenerate(tenant=trio.acme, conversation=chat, initiated_by=trio.bob)
    assert again.in_reply_to_id == first.in_reply_to_id
    chat.refresh_from_db()
    assert chat.leaf_id == first.in_reply_to_id  # shown up to the question until it lands
    answered(again, provider_server, "A pun.")
    assert shown_text(chat) == ["Joke?", "A pun."]
    answer = branch_shown(conversation=chat).messages[-1]
    switch = branch_shown(conversation=chat).switches[answer.pk]
    assert (switch.position, switch.count) == (2, 2)
    branch_switch(
        conversation=chat, message=Message.objects.get(conversation=chat, content="Knock knock.")
    )
    assert shown_text(chat) == ["Joke?", "Knock knock."]


def test_a_fork_copies_the_branch_up_to_a_message_and_leaves_the_original(
    trio, chat, provider_server
):
    turn(trio, chat, provider_server, "Plan a trip", "Where to?")
    second = turn(trio, chat, provider_server, "To Rome", "Rome it is.")
    before = list(Message.objects.filter(conversation=chat).values_list("id", "content", "parent"))
    where_to = Message.objects.get(conversation=chat, content="Where to?")

    fork = conversation_fork(tenant=trio.acme, conversation=chat, message=where_to)
    assert (fork.owner_user_id, fork.agent_id) == (trio.bob.pk, chat.agent_id)
    assert fork.title == "Plans (fork)" and fork.pk != chat.pk
    assert shown_text(fork) == ["Plan a trip", "Where to?"]
    assert (
        list(Message.objects.filter(conversation=chat).values_list("id", "content", "parent"))
        == before
    )  # the original, untouched
    assert shown_text(chat)[-1] == "Rome it is."

    in_fork = turn(trio, fork, provider_server, "To Oslo", "Oslo it is.")
    assert conversation_history(in_fork) == [
        UserMessage("Plan a trip"), AssistantMessage(text="Where to?")
    ]  # fmt: skip
    assert shown_text(chat)[-1] == "Rome it is." and second.conversation_id == chat.pk


def test_editing_refuses_bad_input_and_changes_nothing(trio, chat, provider_server, agent):
    first = turn(trio, chat, provider_server, "Hello", "Hi.")
    other = conversation_save(
        tenant=trio.acme, changes={"agent": agent, "title": "Other"}, owner_user=trio.bob
    )
    elsewhere = turn(trio, other, provider_server, "Elsewhere", "Yes.")
    answer = Message.objects.get(conversation=chat, role="assistant")
    count = Message.objects.count(), Run.objects.count()

    def edit(message, text="Hello again", who=trio.bob):
        return run_edit(
            tenant=trio.acme, conversation=chat, message=message, input=text, initiated_by=who
        )

    with pytest.raises(ValidationError, match="Only your own messages"):
        edit(answer)
    with pytest.raises(Http404):
        edit(elsewhere.in_reply_to)  # another conversation's message
    for text in ("", "   ", "x" * (MAX_INPUT_CHARS + 1)):
        with pytest.raises(ValidationError):
            edit(first.in_reply_to, text)
    with pytest.raises(Http404):
        conversation_message(conversation=chat, message_id=elsewhere.in_reply_to_id)
    with pytest.raises(Http404):
        conversation_message(conversation=chat, message_id="nope")
    with pytest.raises(Http404):
        conversation_fork(tenant=trio.acme, conversation=chat, message=elsewhere.in_reply_to)
    assert (Message.objects.count(), Run.objects.count()) == count

    busy = run_start(
        tenant=trio.acme, agent=agent, input="Long one", conversation=chat, initiated_by=trio.bob
    )
    count = Message.objects.count(), Run.objects.count()
    with pytest.raises(ConversationBusy):
        edit(first.in_reply_to)
    assert (Message.objects.count(), Run.objects.count()) == count
    chat.refresh_from_db()
    assert chat.leaf_id == busy.in_reply_to_id


def test_existing_conversations_become_one_branch_in_the_order_written(trio, chat, agent):
    """The migration's SQL on messages as they were before branches: no parents, no leaf,
    runs that do not know the message they answered."""
    (migration,) = (Path(migrations.__file__).parent).glob("*_conversation_branches.py")
    threaded = import_module(f"agents.migrations.{migration.stem}").THREADED
    other = conversation_save(tenant=trio.acme, changes={"agent": agent}, owner_user=trio.bob)
    runs = [
        Run.objects.create(tenant=trio.acme, agent=agent, conversation=chat, correlation_id="c")
        for _ in range(2)
    ]
    written = []
    for (role, text), run in zip(
        [("user", "Q1"), ("assistant", "A1"), ("user", "Q2"), ("assistant", "A2")],
        [runs[0], runs[0], runs[1], runs[1]],
        strict=True,
    ):
        written.append(
            Message.objects.create(
                tenant=trio.acme, conversation=chat, role=role, content=text, run=run
            )
        )
        Message.objects.create(tenant=trio.acme, conversation=other, role=role, content=text)
    with connection.cursor() as cursor:
        cursor.execute(threaded)
    assert shown_text(chat) == ["Q1", "A1", "Q2", "A2"]
    assert shown_text(other) == ["Q1", "A1", "Q2", "A2"]
    assert [m.parent_id for m in Message.objects.filter(conversation=chat).order_by("id")] == [
        None, *[m.pk for m in written[:-1]]
    ]  # fmt: skip
    assert [Run.objects.get(pk=r.pk).in_reply_to_id for r in runs] == [
        written[0].pk, written[2].pk
    ]  # fmt: skip
    assert conversation_history(Run.objects.get(pk=runs[1].pk)) == [
        UserMessage("Q1"), AssistantMessage(text="A1")
    ]  # fmt: skip


def test_showing_a_branch_takes_a_fixed_number_of_queries(
    trio, chat, provider_server, django_assert_num_queries
):
    for n in range(3):
        turn(trio, chat, provider_server, f"Question {n}", f"Answer {n}")
    chat.refresh_from_db()
    with django_assert_num_queries(5):
        shown = branch_shown(conversation=chat)
    assert len(shown.messages) == 6
    run = Run.objects.latest("id")
    with django_assert_num_queries(1):
        assert len(conversation_history(run)) == 4
