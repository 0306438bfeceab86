"""Data migrations whose state before lies too far back to migrate to in a test (Django
renders the project's states backwards: rolling agents back past 0024 took 30 s), run in
place instead: their own SQL, imported from the migration, on rows written as that state
left them (the columns it fills empty), in today's tables, which still have the columns it
reads and writes. Fast tier: the test's transaction holds only its own rows.

- agents 0024: a conversation's messages become one thread, its last message its leaf, a
  run's first user message what it answered (lost, an old conversation shows nothing: its
  thread is read from its leaf);
- agents 0027: an answer carries the steering messages its run took.
"""

from __future__ import annotations

import importlib

import pytest
from django.db import connection

from agents.models import Conversation, Message, QueuedMessage, Run
from tests.factories import make_agent

pytestmark = pytest.mark.django_db

BRANCHES = importlib.import_module("agents.migrations.0024_conversation_branches")
STEERS = importlib.import_module("agents.migrations.0027_answer_steers")


def run_sql(sql: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql)


def old_conversation(tenant, agent, title: str) -> tuple[Conversation, Run, list[int]]:
    """A conversation as written before 0024: messages with no parent, no leaf, its run
    answering nothing."""
    chat = Conversation.objects.create(tenant=tenant, agent=agent, title=title)
    run = Run.objects.create(tenant=tenant, agent=agent, conversation=chat)
    said = [
        Message.objects.create(tenant=tenant, conversation=chat, role=role, run=run,
                               content=f"{title} {n}").pk
        for n, role in enumerate(("user", "assistant", "user", "assistant"))
    ]  # fmt: skip
    Message.objects.filter(pk__in=said).update(parent=None)
    Conversation.objects.filter(pk=chat.pk).update(leaf=None)
    Run.objects.filter(pk=run.pk).update(in_reply_to=None)
    return chat, run, said


def test_old_conversations_become_one_thread_each_with_its_leaf(trio):
    agent = make_agent(trio.acme)
    first, first_run, one = old_conversation(trio.acme, agent, "first")
    second, second_run, two = old_conversation(trio.globex, make_agent(trio.globex), "second")
    empty = Conversation.objects.create(tenant=trio.acme, agent=agent, title="empty")

    run_sql(BRANCHES.THREADED)

    for chat, said in ((first, one), (second, two)):
        chat.refresh_from_db()
        assert chat.leaf_id == said[-1]
        parents = dict(Message.objects.filter(pk__in=said).values_list("pk", "parent_id"))
        assert parents == {said[0]: None, said[1]: said[0], said[2]: said[1], said[3]: said[2]}
    empty.refresh_from_db()
    assert empty.leaf_id is None
    first_run.refresh_from_db()
    second_run.refresh_from_db()
    assert (first_run.in_reply_to_id, second_run.in_reply_to_id) == (one[0], two[0])


def test_answers_get_the_steers_their_run_applied(trio):
    agent = make_agent(trio.acme)
    chat, run, said = old_conversation(trio.acme, agent, "steered")
    _, _, plain = old_conversation(trio.acme, agent, "plain")
    for content, status in (("shorter, please", "applied"), ("in French", "refused")):
        QueuedMessage.objects.create(
            tenant=trio.acme, conversation=chat, run=run, kind="steer", status=status,
            content=content,
        )  # fmt: skip
    Message.objects.filter(pk__in=said + plain).update(steers=[])

    run_sql(STEERS.FILLED)

    steers = dict(Message.objects.filter(pk__in=said).values_list("pk", "steers"))
    assert steers == {said[0]: [], said[1]: ["shorter, please"], said[2]: [],
                      said[3]: ["shorter, please"]}  # fmt: skip
    assert list(Message.objects.filter(pk__in=plain).values_list("steers", flat=True)) == [[]] * 4


# -- tenancy: a migration's RunPython function, given today's apps --------------------------
KEY_ROLES = importlib.import_module("tenancy.migrations.0003_policy_keys_groups")
KEY_MAKERS = importlib.import_module("tenancy.migrations.0014_apikey_created_by_key")


def test_keys_from_before_roles_act_with_their_creators_role(trio):
    """tenancy 0003: a key made before roles acts with its creator's role now (a member's
    key must not keep an owner's authority); a key with no creator gets admin."""
    from django.apps import apps

    from tenancy import services as tenancy

    members, _ = tenancy.api_key_create(tenant=trio.acme, name="m", scopes=["admin"],
                                        created_by=trio.bob)  # fmt: skip
    owners, _ = tenancy.api_key_create(tenant=trio.acme, name="o", scopes=["admin"],
                                       created_by=trio.alice)  # fmt: skip
    orphan, _ = tenancy.api_key_create(tenant=trio.acme, name="x", scopes=["read"])
    for key in (members, owners, orphan):
        type(key).objects.filter(pk=key.pk).update(role="owner")  # the default before

    KEY_ROLES.keys_take_their_creators_role(apps, None)

    roles = {k.name: k.role for k in type(members).objects.filter(tenant=trio.acme)}
    assert roles == {"m": "member", "o": "owner", "x": "admin"}


def test_keys_made_by_keys_get_their_maker_from_the_audit_log(trio):
    """tenancy 0014: a key another key made (before the column) names that key, and the
    maker's person, as the audit log recorded them; others stay as they were."""
    from django.apps import apps

    from tenancy import services as tenancy

    maker, _ = tenancy.api_key_create(tenant=trio.acme, name="maker", scopes=["admin"],
                                      created_by=trio.alice)  # fmt: skip
    made, _ = tenancy.api_key_create(tenant=trio.acme, name="made", scopes=["read"],
                                     made_by_key=maker)  # fmt: skip
    alone, _ = tenancy.api_key_create(tenant=trio.acme, name="alone", scopes=["read"])
    ApiKey = type(maker)
    ApiKey.objects.filter(pk__in=[made.pk, alone.pk]).update(created_by=None, created_by_key=None)

    KEY_MAKERS.makers_from_the_audit_log(apps, None)

    made.refresh_from_db()
    alone.refresh_from_db()
    assert (made.created_by_key_id, made.created_by_id) == (maker.pk, trio.alice.pk)
    assert (alone.created_by_key_id, alone.created_by_id) == (None, None)
