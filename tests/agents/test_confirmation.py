"""Confirmation of the exact prepared request: an HTTP tool that requires approval parks
with the request it would send; approving sends exactly that request (plus the credential);
approving with edited arguments prepares again and asks again. A real local HTTP server
records what reaches it."""

from __future__ import annotations

import json
import time

import pytest
from django.core.exceptions import ValidationError

from agents.models import Approval, Run, RunEvent
from agents.runs import approval_decide, run_start
from agents.runs.direct_calls import tool_run
from agents.runs.engine import execute_run
from tests.conftest import PAY_SECRET as SECRET
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.tools.local_server import Reply

pytestmark = pytest.mark.django_db(transaction=True)


def settle(run: Run) -> Run:
    """Execute the run here (a Celery worker of this session may take it first) and wait
    until it is parked or finished."""
    execute_run(run.pk)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run.pk)
        if run.status not in ("queued", "running"):
            return run
        time.sleep(0.02)
    return run


def parked_payment(trio, provider_server, agent, arguments: str) -> Run:
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("p1", "pay", arguments)]),
        TextReply("Done."),
    )
    run = run_start(tenant=trio.acme, agent=agent, input="pay bob", initiated_by=trio.alice)
    run = settle(run)
    assert run.status == "awaiting_approval", run.error
    return run


def everything_recorded(run: Run) -> str:
    events = list(RunEvent.objects.filter(run=run).values_list("payload", flat=True))
    approvals = list(Approval.objects.filter(run=run).values())
    return json.dumps([events, approvals, Run.objects.filter(pk=run.pk).values()[0]], default=str)


def test_the_approved_request_is_exactly_the_request_sent(trio, provider_server, agent, pay):
    run = parked_payment(trio, provider_server, agent, '{"amount": 500, "to": "bob"}')
    approval = Approval.objects.get(run=run)
    shown = approval.prepared_request
    assert shown == {
        "method": "POST",
        "url": f"{pay.url}/payments/bob",
        "headers": [
            ["X-Client", "agents"],
            ["Authorization", "Bearer ***"],
            ["Idempotency-Key", f"{run.pk}:p1"],
            ["Content-Type", "application/json"],
        ],
        "body": '{"amount":500}',
        "credential_header": "Authorization",
    }
    [event] = RunEvent.objects.filter(run=run, type="approval.required")
    assert event.payload["prepared_request"] == shown
    assert pay.requests == []  # nothing before approval

    # A worker resuming the parked run before anyone decided sends nothing either.
    Run.objects.filter(pk=run.pk).update(status="queued")
    assert settle(run).status == "awaiting_approval"
    assert pay.requests == [] and Approval.objects.filter(run=run).count() == 1

    approval_decide(tenant=trio.acme, approval=approval, approved=True, by=trio.alice)
    run = settle(run)
    assert run.status == "succeeded", run.error
    [received] = pay.requests
    assert received.method == shown["method"]
    assert pay.url + received.path == shown["url"]
    assert received.body == shown["body"].encode("utf-8")
    for name, value in shown["headers"]:
        expected = f"Bearer {SECRET}" if name == "Authorization" else value
        assert received.headers[name.lower()] == expected
    assert SECRET not in everything_recorded(run)


def test_approving_with_edited_arguments_asks_again_and_sends_only_the_new_request(
    trio, provider_server, agent, pay
):
    pay.route("POST", "/payments/carol", Reply(status=201, json={"ok": True}))
    run = parked_payment(trio, provider_server, agent, '{"amount": 500, "to": "bob"}')
    first = Approval.objects.get(run=run)

    edited = approval_decide(
        tenant=trio.acme, approval=first, approved=True, by=trio.alice,
        arguments={"amount": 50, "to": "carol"},
    )  # fmt: skip
    assert edited.status == "edited" and edited.replaced_by is not None
    second = edited.replaced_by
    assert (second.status, second.call_id, second.arguments) == (
        "pending", "p1", {"amount": 50, "to": "carol"},
    )  # fmt: skip
    assert second.prepared_request["url"] == f"{pay.url}/payments/carol"
    assert second.prepared_request["body"] == '{"amount":50}'
    assert Run.objects.get(pk=run.pk).status == "awaiting_approval"  # still parked
    events = RunEvent.objects.filter(run=run, type="approval.required").order_by("seq")
    assert [e.payload["prepared_request"]["url"] for e in events] == [
        f"{pay.url}/payments/bob", f"{pay.url}/payments/carol",
    ]  # fmt: skip
    assert pay.requests == []
    with pytest.raises(ValidationError, match="already edited"):
        approval_decide(tenant=trio.acme, approval=first, approved=True, by=trio.alice)

    approval_decide(tenant=trio.acme, approval=second, approved=True, by=trio.alice)
    assert settle(run).status == "succeeded"
    [received] = pay.requests
    assert received.path == "/payments/carol" and received.body == b'{"amount":50}'
    assert received.headers["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in everything_recorded(run)


def test_edited_arguments_that_cannot_be_prepared_are_refused_and_change_nothing(
    trio, provider_server, agent, pay
):
    run = parked_payment(trio, provider_server, agent, '{"amount": 500, "to": "bob"}')
    approval = Approval.objects.get(run=run)
    with pytest.raises(ValidationError, match="invalid arguments"):
        approval_decide(
            tenant=trio.acme, approval=approval, approved=True, by=trio.alice,
            arguments={"amount": "lots", "to": "bob"},
        )  # fmt: skip
    approval.refresh_from_db()
    assert approval.status == "pending" and approval.replaced_by is None
    assert Approval.objects.filter(run=run).count() == 1 and pay.requests == []


def test_rejecting_sends_nothing(trio, provider_server, agent, pay):
    run = parked_payment(trio, provider_server, agent, '{"amount": 500, "to": "bob"}')
    approval = Approval.objects.get(run=run)
    approval_decide(tenant=trio.acme, approval=approval, approved=False, by=trio.alice)
    assert settle(run).status == "succeeded"
    assert pay.requests == []


def test_a_call_that_cannot_be_prepared_is_not_asked_for(trio, provider_server, agent, pay):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("p1", "pay", '{"amount": "lots", "to": "bob"}')]),
        TextReply("I could not."),
    )
    run = run_start(tenant=trio.acme, agent=agent, input="pay bob", initiated_by=trio.alice)
    run = settle(run)
    assert run.status == "succeeded" and not Approval.objects.filter(run=run).exists()
    completed = RunEvent.objects.get(run=run, type="tool.completed").payload
    assert completed["error"].startswith("invalid arguments")


def test_a_direct_call_parks_with_its_request_and_sends_it_once_approved(trio, pay, settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    outcome = tool_run(tenant=trio.acme, name="pay", arguments={"amount": 7, "to": "bob"})
    assert outcome.status == "awaiting_approval" and pay.requests == []
    approval = Approval.objects.get(run_id=outcome.run_id)
    shown = approval.prepared_request
    assert shown["body"] == '{"amount":7}' and ["Authorization", "Bearer ***"] in shown["headers"]

    edited = approval_decide(
        tenant=trio.acme, approval=approval, approved=True, by=trio.alice,
        arguments={"amount": 8, "to": "bob"},
    )  # fmt: skip
    assert pay.requests == []
    second = edited.replaced_by
    approval_decide(tenant=trio.acme, approval=second, approved=True, by=trio.alice)
    run = settle(Run.objects.get(pk=outcome.run_id))
    assert run.status == "succeeded", run.error
    [received] = pay.requests
    assert received.body == second.prepared_request["body"].encode() == b'{"amount":8}'
    assert (
        received.headers["idempotency-key"]
        == dict(second.prepared_request["headers"])["Idempotency-Key"]
    )
    assert SECRET not in everything_recorded(run)
