"""Resuming a failed run (agents.runs.resume): which runs, who may, one resume of two, and
what the resumed run does — executed in this process on the local provider server (the
same through a real Celery worker: tests/agents/test_resume_worker.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from django.core.exceptions import PermissionDenied
from django.db import connections
from django.http import Http404
from django.test import Client

from agents import runs
from agents.models import Message, Run, RunEvent
from agents.runs.engine import execute_run
from agents.runtime.spec import RunStatus
from agents.services import conversation_save
from tenancy import services as tenancy
from tenancy.policy import Principal
from tenancy.records import history
from tests.factories import login, make_agent, make_http_tool
from tests.fakes.provider_server import ErrorReply, TextReply, ToolCall, ToolCallReply
from tests.tools.local_server import LocalServer, Reply

pytestmark = pytest.mark.django_db

ORDER = '{"item": "widget"}'


@pytest.fixture
def orders(trio) -> Iterator[LocalServer]:
    """acme's `place_order`: a non-idempotent POST that creates an order each time."""
    server = LocalServer()
    server.route("POST", "/orders", Reply(status=201, json={"order": "created"}))
    make_http_tool(
        trio.acme,
        "place_order",
        server.url + "/orders",
        method="POST",
        input_schema={"type": "object", "properties": {"item": {"type": "string"}}},
        effect="write",
        idempotent=False,
    )
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def trusted_agent(agent):
    agent.approval_policy = "never"  # the write runs without parking for a human
    agent.save()
    return agent


def failed_after_a_write(trio, agent, provider_server, **start) -> Run:
    """A run that placed an order, then failed: its provider answered 500 (no retries
    left on the connection)."""
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("call_1", "place_order", ORDER)]),
        ErrorReply(500, "upstream is down"),
    )
    start.setdefault("initiated_by", trio.alice)
    run = runs.run_start(tenant=trio.acme, agent=agent, input="Order a widget.", enqueue=False,
                         **start)  # fmt: skip
    assert execute_run(run.pk) == "failed"
    run.refresh_from_db()
    return run


def test_a_failed_run_resumed_goes_on_from_its_checkpoint_and_repeats_no_write(
    trio, trusted_agent, provider_server, orders, connection, django_capture_on_commit_callbacks
):
    history.record(trusted_agent)  # its first version, as saving it through a face records
    run = failed_after_a_write(trio, trusted_agent, provider_server)
    assert run.status == "failed" and "ProviderUnavailable" in run.error
    assert len(orders.requests) == 1
    assert run.config_versions["agents.agent"] == [[trusted_agent.pk, 1]]

    # The admin fixes the agent: another model (recorded as the configuration used now).
    trusted_agent.model = "gpt-fixed"
    trusted_agent.save()
    history.record(trusted_agent)
    provider_server.script("openai", TextReply("Ordered."))
    with django_capture_on_commit_callbacks(execute=False) as sent:
        resumed = runs.run_resume(tenant=trio.acme, run=run, by=trio.alice)
    assert resumed.status == "queued" and resumed.error == "" and resumed.finished_at is None
    assert resumed.attempts == 0 and len(sent) == 2  # the event published, the run sent
    event = RunEvent.objects.get(run=run, type="run.resumed").payload
    assert event["by"] == "alice" and event["from_checkpoint"] is True
    assert "HTTP 500" in event["error"]
    assert event["previous_config_versions"]["agents.agent"] == [[trusted_agent.pk, 1]]
    assert event["config_versions"]["agents.agent"] == [[trusted_agent.pk, 2]]

    assert execute_run(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.output == "Ordered." and run.model == "gpt-fixed"
    assert run.config_versions["agents.agent"] == [[trusted_agent.pk, 2]]  # as it ran now
    assert len(orders.requests) == 1  # the recorded result was reused: no second order
    last = provider_server.requests_to("/v1/chat/completions")[-1].body
    assert last["model"] == "gpt-fixed"
    assert last["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"order": "created"}',
    }
    types = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert types.count("run.started") == 1 and types.count("tool.started") == 1
    assert types.index("run.failed") < types.index("run.resumed") < len(types) - 1
    assert types[-1] == "run.completed"


def test_a_run_that_failed_before_its_first_checkpoint_starts_over(trio, provider_server, request):
    """A run whose tenant had no provider connection (the admin's to add) starts from its
    input once one is added."""
    agent = make_agent(trio.acme, "assistant")
    run = runs.run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False,
                         initiated_by=trio.alice)  # fmt: skip
    assert execute_run(run.pk) == "failed"
    run.refresh_from_db()
    assert run.state is None and "no provider connection" in run.error

    request.getfixturevalue("connection")  # the admin adds one
    provider_server.script("openai", TextReply("Hello."))
    runs.run_resume(tenant=trio.acme, run=run, by=trio.alice)
    assert RunEvent.objects.get(run=run, type="run.resumed").payload["from_checkpoint"] is False
    assert execute_run(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.output == "Hello." and run.provider == "openai" and run.error == ""
    types = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert types[:3] == ["run.failed", "run.resumed", "run.started"]


@pytest.mark.parametrize(
    "status", ["queued", "running", "awaiting_approval", "succeeded", "cancelled", "max_rounds"]
)
def test_only_a_failed_run_can_be_resumed(trio, agent, status):
    run = runs.run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False,
                         initiated_by=trio.alice)  # fmt: skip
    Run.objects.filter(pk=run.pk).update(status=status)
    run.refresh_from_db()
    with pytest.raises(runs.RunNotResumable, match=f"This run is {status}: only a failed run"):
        runs.run_resume(tenant=trio.acme, run=run, by=trio.alice)
    run.refresh_from_db()
    assert run.status == status and not RunEvent.objects.filter(run=run).exists()


def test_who_may_resume_the_starter_or_an_admin_never_another_tenant(trio, agent):
    bobs = runs.run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False,
                          initiated_by=trio.bob)  # fmt: skip
    alices = runs.run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False,
                            initiated_by=trio.alice)  # fmt: skip
    Run.objects.filter(pk__in=[bobs.pk, alices.pk]).update(status="failed", error="down")
    bobs.refresh_from_db()
    alices.refresh_from_db()
    with pytest.raises(PermissionDenied, match="starter or an admin"):
        runs.run_resume(tenant=trio.acme, run=alices, by=trio.bob)  # a member, not its starter
    with pytest.raises(Http404):
        runs.run_resume(tenant=trio.globex, run=bobs, by=trio.charlie)  # another tenant's
    with pytest.raises(Http404):
        runs.run_resume(tenant=trio.acme, run=bobs, by=trio.charlie)  # not a member
    reader, _ = tenancy.api_key_create(tenant=trio.acme, name="reader", scopes=["read"])
    with pytest.raises(PermissionDenied):
        runs.run_resume(tenant=trio.acme, run=bobs, by=reader)  # no `run` scope
    assert Run.objects.filter(status="failed").count() == 2
    assert not RunEvent.objects.filter(type="run.resumed").exists()

    assert runs.run_resume(tenant=trio.acme, run=bobs, by=trio.bob).status == "queued"
    assert runs.run_resume(tenant=trio.acme, run=alices, by=trio.alice).status == "queued"


def test_a_starter_who_lost_the_use_of_the_agent_may_not_resume(trio, agent):
    run = runs.run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False,
                         initiated_by=trio.bob)  # fmt: skip
    Run.objects.filter(pk=run.pk).update(status="failed", error="down")
    run.refresh_from_db()
    agent.active = False
    agent.save()
    with pytest.raises(PermissionDenied):
        runs.run_resume(tenant=trio.acme, run=run, by=trio.bob)
    assert runs.may_resume(Principal.for_initiator(trio.acme, trio.bob), run) is False


@pytest.mark.django_db(transaction=True)
def test_of_two_resumes_at_once_one_wins_the_other_is_refused(trio, agent):
    run = runs.run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False,
                         initiated_by=trio.alice)  # fmt: skip
    Run.objects.filter(pk=run.pk).update(status="failed", error="down")
    run.refresh_from_db()
    start = threading.Barrier(2)
    outcomes: list[str] = []

    def resume() -> None:
        try:
            start.wait(timeout=10)
            runs.run_resume(tenant=trio.acme, run=run, by=trio.alice)
            outcomes.append("resumed")
        except runs.RunNotResumable as exc:
            outcomes.append(exc.messages[0])
        finally:
            connections.close_all()

    threads = [threading.Thread(target=resume) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == [
        "This run is queued: only a failed run can be resumed.",
        "resumed",
    ]
    assert RunEvent.objects.filter(run=run, type="run.resumed").count() == 1


def test_a_failed_answer_in_a_chat_is_resumed_in_its_place(
    trio, trusted_agent, provider_server, orders
):
    chat = conversation_save(
        tenant=trio.acme, changes={"agent": trusted_agent}, owner_user=trio.alice
    )
    run = failed_after_a_write(trio, trusted_agent, provider_server, conversation=chat)
    chat.refresh_from_db()
    failed_answer = Message.objects.get(run=run, role="assistant")
    assert chat.leaf_id == failed_answer.pk  # the error, shown as the turn's answer

    provider_server.script("openai", TextReply("Ordered."))
    runs.run_resume(tenant=trio.acme, run=run, by=trio.alice)
    chat.refresh_from_db()
    assert chat.leaf_id == run.in_reply_to_id  # the question, until the new answer lands
    assert execute_run(run.pk) == "succeeded"
    chat.refresh_from_db()
    answer = chat.leaf
    assert answer.content == "Ordered." and answer.parent_id == run.in_reply_to_id
    assert Message.objects.filter(pk=failed_answer.pk).exists()  # an earlier version
    assert len(orders.requests) == 1
    page = login(Client(), trio.alice).get(f"/t/acme/chat/{chat.pk}/")
    assert page.status_code == 200 and "Ordered." in page.content.decode()


def test_a_chat_that_went_on_refuses_to_resume_its_earlier_failure(
    trio, trusted_agent, provider_server, orders
):
    chat = conversation_save(
        tenant=trio.acme, changes={"agent": trusted_agent}, owner_user=trio.alice
    )
    run = failed_after_a_write(trio, trusted_agent, provider_server, conversation=chat)
    provider_server.script("openai", TextReply("Next answer."))
    later = runs.run_start(tenant=trio.acme, agent=trusted_agent, input="And now?",
                           conversation=chat, initiated_by=trio.alice, enqueue=False)  # fmt: skip
    with pytest.raises(runs.RunNotResumable, match="Another answer"):
        runs.run_resume(tenant=trio.acme, run=run, by=trio.alice)  # while it runs
    assert execute_run(later.pk) == "succeeded"
    with pytest.raises(runs.RunNotResumable, match="went on after this answer"):
        runs.run_resume(tenant=trio.acme, run=run, by=trio.alice)
    assert Run.objects.get(pk=run.pk).status == RunStatus.FAILED


@pytest.mark.django_db(transaction=True)
def test_a_replay_from_the_start_goes_on_past_a_resumed_failure(trio, agent, provider_server):
    """A follower from seq 0 of a resumed run reads its failure, the resume and the ending
    (the stream does not stop at the first `run.failed`); a failure not resumed ends it."""
    provider_server.script("openai", ErrorReply(500, "down"))
    run = runs.run_start(tenant=trio.acme, agent=agent, input="hi", initiated_by=trio.alice,
                         enqueue=False)  # fmt: skip
    assert execute_run(run.pk) == "failed"
    ended = asyncio.run(asyncio.wait_for(collect(run), timeout=10))
    assert ended[-1]["type"] == "run.failed"

    provider_server.script("openai", TextReply("Back."))
    runs.run_resume(tenant=trio.acme, run=run, by=trio.alice)
    assert execute_run(run.pk) == "succeeded"
    events = asyncio.run(asyncio.wait_for(collect(run), timeout=10))
    types = [e["type"] for e in events]
    assert types[: len(ended) + 1] == [e["type"] for e in ended] + ["run.resumed"]
    assert types[-1] == "run.completed"


async def collect(run: Run) -> list[dict]:
    return [event async for event in runs.iter_run_events(run, 0)]
