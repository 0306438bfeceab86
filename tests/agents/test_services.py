"""Run services: idempotency, cancellation, validation, and tenant isolation everywhere."""

from __future__ import annotations

import json
import threading

import pytest
import redis
from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection
from django.http import Http404
from django.test.utils import CaptureQueriesContext

from agents import runs
from agents.models import MAX_INPUT_CHARS, Conversation, Fact, Run, RunEvent
from agents.runs import start as runs_start
from agents.runs.cancellation import cancel_key
from agents.runs.channels import channel, publisher
from agents.runs.engine import execute_run
from agents.runs.writer import compiled_insert, insert_run
from tenancy import services as tenancy
from tenancy.models import AuditEntry
from tenancy.records import audit
from tests.factories import make_agent, make_approval


def test_the_same_idempotency_key_returns_the_same_run(trio, agent):
    first = runs.run_start(
        tenant=trio.acme, agent=agent, input="hi", idempotency_key="k-1", enqueue=False
    )
    again = runs.run_start(
        tenant=trio.acme, agent=agent, input="hi", idempotency_key="k-1", enqueue=False
    )
    other = runs.run_start(
        tenant=trio.acme, agent=agent, input="hi", idempotency_key="k-2", enqueue=False
    )
    assert first.pk == again.pk != other.pk
    assert Run.objects.count() == 2


def test_a_turn_is_one_insert_statement_its_message_and_the_conversations_leaf_within(trio, agent):
    """A person's turn in a conversation: the run, its audit entry (a key's), the message it
    answers and the conversation's new leaf are written by one statement; with no attachment
    ever sent in the conversation, none is read. Each row as the ORM path wrote it."""
    key, _ = tenancy.api_key_create(tenant=trio.acme, name="starter", scopes=["run"])
    chat = Conversation.objects.create(tenant=trio.acme, agent=agent, owner_api_key=key)
    with CaptureQueriesContext(connection) as queries:
        run = runs.run_start(
            tenant=trio.acme, agent=agent, input="First line\nsecond", conversation=chat,
            initiated_by=key, enqueue=False,
        )  # fmt: skip
    writes = [
        q["sql"] for q in queries if q["sql"].lstrip().startswith(("INSERT", "UPDATE", "WITH"))
    ]
    assert len(writes) == 1 and "tenancy_auditentry" in writes[0]
    reads = [q["sql"] for q in queries if "agents_attachment" in q["sql"]]
    assert len(reads) == 1 and "FOR UPDATE" in reads[0]  # (the lock's EXISTS only)
    run.refresh_from_db()
    chat.refresh_from_db()
    message = run.in_reply_to
    assert (message.role, message.content, message.run_id) == ("user", "First line\nsecond", run.pk)
    assert (message.conversation_id, message.tenant_id, message.parent_id) == (
        chat.pk,
        trio.acme.pk,
        None,
    )
    assert (chat.leaf_id, chat.title) == (message.pk, "First line")
    assert AuditEntry.objects.get(action="run.started_by_key").object_id == str(run.pk)
    run.status = "succeeded"
    run.save(update_fields=["status"])
    second = runs.run_start(
        tenant=trio.acme, agent=agent, input="Again", conversation=chat, initiated_by=key,
        enqueue=False,
    )  # fmt: skip
    chat.refresh_from_db()
    assert second.in_reply_to.parent_id == message.pk == second.in_reply_to.parent.pk
    assert (chat.leaf_id, chat.title) == (second.in_reply_to_id, "First line")


def test_a_run_started_with_a_key_is_inserted_with_its_audit_entry_in_one_statement(trio, agent):
    """No transaction block for the two: the run's INSERT carries the entry, which is what
    the audit log makes of that run (its id, its name, the key that started it)."""
    key, _ = tenancy.api_key_create(tenant=trio.acme, name="starter", scopes=["run"])
    with CaptureQueriesContext(connection) as queries:
        run = runs.run_start(
            tenant=trio.acme, agent=agent, input="hi", initiated_by=key, enqueue=False
        )
    inserts = [q["sql"] for q in queries if "INSERT" in q["sql"]]
    assert len(inserts) == 1 and "tenancy_auditentry" in inserts[0]
    (entry,) = AuditEntry.objects.filter(action="run.started_by_key")
    expected = audit.run_started_entry(run, key)  # as made for the run, its id known
    fields = [f.attname for f in AuditEntry._meta.concrete_fields if f.name not in ("id", "at")]
    assert {f: getattr(entry, f) for f in fields} == {f: getattr(expected, f) for f in fields}
    assert (entry.object_id, entry.object_repr) == (str(run.pk), str(run))
    assert entry.details == {"run": run.pk, "agent": agent.slug, "crew": None, "name": str(agent)}
    assert (entry.api_key_id, entry.tenant_id) == (key.pk, trio.acme.pk)
    assert Run.objects.get(pk=run.pk).initiated_by_api_key_id == key.pk


def test_a_new_runs_insert_sends_what_was_set_and_writes_its_defaults_as_literals(trio, agent):
    """The INSERT of a new run is the same text for every run of its shape (prepared once
    per connection), with only the values that differ from the model's defaults sent apart;
    the row is what the ORM's save writes."""
    key, _ = tenancy.api_key_create(tenant=trio.acme, name="starter", scopes=["run"])

    def started(text: str) -> Run:
        return Run(
            tenant=trio.acme, agent=agent, initiated_by_api_key=key, input=text,
            client_request={"messages": [text]}, correlation_id=text * 8,
            **runs_start.claimed_fields("host:1:owner"),
        )  # fmt: skip

    first, params = compiled_insert(started("a"))
    again, _ = compiled_insert(started("b"))
    assert first == again and "''::varchar(200)" in first  # (child_key: its default)
    assert len(params) <= 15 < len(Run._meta.local_concrete_fields)
    run = started("c")
    insert_run(run, audit.run_started_entry(run, key))
    by_orm = started("c")
    by_orm.save(force_insert=True)
    times = ("created_at", "started_at", "lease_expires_at")  # (each its own moment)
    columns = [f.attname for f in Run._meta.concrete_fields if f.name not in ("id", *times)]
    assert Run.objects.filter(pk=run.pk).values(*columns).get() == (
        Run.objects.filter(pk=by_orm.pk).values(*columns).get()
    )
    run.refresh_from_db()
    assert run.started_at < run.lease_expires_at  # (the lease: the database's clock)


def test_bad_input_is_refused_and_nothing_is_created(trio, agent):
    for text in ("", "   ", "x" * (MAX_INPUT_CHARS + 1)):
        with pytest.raises(ValidationError):
            runs.run_start(tenant=trio.acme, agent=agent, input=text, enqueue=False)
    agent.active = False
    agent.save()
    with pytest.raises(ValidationError):
        runs.run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)
    assert Run.objects.count() == 0


def test_cancelling_a_queued_run_stops_it_at_once(trio, agent):
    run = runs.run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)
    run = runs.run_cancel(tenant=trio.acme, run=run, by=None)
    assert run.status == "cancelled" and run.finished_at
    assert RunEvent.objects.get(run=run).type == "run.cancelled"
    assert execute_run(run.pk) == "not claimable"


def test_a_queued_runs_cancel_is_published_when_it_commits(
    trio, agent, django_capture_on_commit_callbacks
):
    """A stream following a queued run hears its end at once, not at its next quiet check."""
    run = runs.run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)
    client = redis.Redis.from_url(settings.REDIS_URL)
    pubsub = client.pubsub()
    pubsub.subscribe(channel(run))
    assert pubsub.get_message(timeout=10)["type"] == "subscribe"
    with django_capture_on_commit_callbacks(execute=True):
        runs.run_cancel(tenant=trio.acme, run=run, by=None)
    message = pubsub.get_message(ignore_subscribe_messages=True, timeout=10)
    pubsub.close()
    client.close()
    assert message is not None, "the cancel was stored but not published"
    assert [(e["seq"], e["type"]) for e in json.loads(message["data"])] == [(1, "run.cancelled")]


def test_a_cancel_flag_stops_an_executing_run(trio, agent, provider_server):
    run = runs.run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)
    publisher().set(cancel_key(run), 1, ex=60)  # what run_cancel sets for a running run
    assert execute_run(run.pk) == "cancelled"
    run.refresh_from_db()
    assert run.status == "cancelled" and provider_server.received == []
    assert not publisher().exists(cancel_key(run))


def test_writes_refuse_mixing_tenants(trio, agent):
    run = runs.run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)
    approval = make_approval(run, "calculator")
    theirs = make_agent(trio.globex, "spy")
    with pytest.raises(Http404):
        runs.run_start(tenant=trio.acme, agent=theirs, input="hi", enqueue=False)
    with pytest.raises(Http404):
        runs.run_cancel(tenant=trio.globex, run=run, by=None)
    with pytest.raises(Http404):
        runs.approval_decide(tenant=trio.globex, approval=approval, approved=True, by=trio.charlie)
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_memory_facts_are_stored_per_tenant_and_user(trio, agent, provider_server):
    from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

    agent.memory = True
    agent.save()
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("m1", "remember_fact", '{"fact": "Bob likes green tea."}')]),
        TextReply("Noted."),
    )
    run = runs.run_inline(tenant=trio.acme, agent=agent, input="remember", initiated_by=trio.bob)
    fact = Fact.objects.get()
    assert (fact.tenant, fact.user, fact.text, fact.source_run_id) == (
        trio.acme, trio.bob, "Bob likes green tea.", run.pk,
    )  # fmt: skip


def test_only_a_conversations_owner_takes_turns_in_it(trio, agent):
    conversation = Conversation.objects.create(tenant=trio.acme, agent=agent, owner_user=trio.alice)
    with pytest.raises(PermissionDenied):
        runs.run_start(
            tenant=trio.acme, agent=agent, input="hi", conversation=conversation,
            initiated_by=trio.bob, enqueue=False,
        )  # fmt: skip
    runs.run_start(
        tenant=trio.acme, agent=agent, input="hi", conversation=conversation,
        initiated_by=trio.alice, enqueue=False,
    )  # fmt: skip


# -- one turn at a time --------------------------------------------------------------------
def _turn(trio, agent, conversation, text: str, **kwargs) -> Run:
    return runs.run_start(
        tenant=trio.acme, agent=agent, input=text, conversation=conversation,
        initiated_by=trio.bob, enqueue=False, **kwargs,
    )  # fmt: skip


def test_a_conversation_refuses_a_turn_while_its_answer_runs(trio, agent):
    chat = Conversation.objects.create(tenant=trio.acme, agent=agent, owner_user=trio.bob)
    first = _turn(trio, agent, chat, "one")
    with pytest.raises(runs.ConversationBusy) as busy:
        _turn(trio, agent, chat, "two")
    assert busy.value.run_id == first.pk
    assert list(chat.messages.values_list("content", flat=True)) == ["one"]
    Run.objects.filter(pk=first.pk).update(status="succeeded")
    assert _turn(trio, agent, chat, "two").pk != first.pk  # finished: the next turn goes


def test_an_idempotent_replay_in_a_busy_conversation_is_the_same_run(trio, agent):
    chat = Conversation.objects.create(tenant=trio.acme, agent=agent, owner_user=trio.bob)
    first = _turn(trio, agent, chat, "one", idempotency_key="turn-1")
    assert _turn(trio, agent, chat, "one", idempotency_key="turn-1").pk == first.pk
    with pytest.raises(runs.ConversationBusy):
        _turn(trio, agent, chat, "two", idempotency_key="turn-2")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("same_key", [False, True])
def test_of_two_concurrent_turns_one_wins(trio, agent, same_key):
    """The first turn's transaction stays open while the second starts: the second waits
    for it and then sees its run (refused as busy, or replayed for the same key)."""
    from django.db import connection, transaction

    chat = Conversation.objects.create(tenant=trio.acme, agent=agent, owner_user=trio.bob)
    first_inserted, second_started = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def second() -> None:
        try:
            second_started.set()
            outcome["run"] = _turn(
                trio, agent, chat, "two", idempotency_key="k" if same_key else "k2"
            )
        except runs.ConversationBusy as exc:
            outcome["busy"] = exc
        finally:
            connection.close()

    worker = threading.Thread(target=second)
    with transaction.atomic():
        first = _turn(trio, agent, chat, "one", idempotency_key="k")
        first_inserted.set()
        worker.start()
        second_started.wait(5)
        worker.join(0.5)
        assert worker.is_alive()  # waiting on the conversation's row
    worker.join(10)
    assert Run.objects.filter(conversation=chat).count() == 1
    if same_key:
        assert outcome["run"].pk == first.pk
    else:
        assert outcome["busy"].run_id == first.pk


def test_gateway_calls_of_several_tenants_are_all_recorded_each_under_its_scope(trio):
    from django.utils import timezone

    from agents.runs import GatewayCall, record_gateway_calls
    from providers.runtime.types import Usage
    from tenancy import rls
    from tenancy import services as tenancy

    acme_key, _ = tenancy.api_key_create(tenant=trio.acme, name="a", scopes=["run"])
    globex_key, _ = tenancy.api_key_create(tenant=trio.globex, name="g", scopes=["run"])
    now = timezone.now()

    def call(key, model, **extra):
        return GatewayCall(
            api_key=key, gateway_model=model, model=model, provider="openai",
            input=extra.pop("input", "hi"), usage=extra.pop("usage", Usage(3, 2)),
            started_at=now,
        )  # fmt: skip

    with rls.tenant_scope(trio.acme.pk):  # the first caller's scope, as the recorder's task has
        record_gateway_calls(
            [
                call(acme_key, "c/a"),
                call(globex_key, "c/g"),
                call(acme_key, "c/odd", input="bad \ud800 text\x00", usage=Usage(-5, 2**40)),
            ]
        )
    with rls.owner():
        rows = {r.gateway_model: r for r in Run.objects.filter(gateway_model__startswith="c/")}
    assert set(rows) == {"c/a", "c/g", "c/odd"}
    assert rows["c/g"].tenant_id == trio.globex.pk
    assert (rows["c/odd"].input_tokens, rows["c/odd"].output_tokens) == (0, 2**31 - 1)
    assert "\x00" not in rows["c/odd"].input
