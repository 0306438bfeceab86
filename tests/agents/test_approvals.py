"""Approval end to end through a real Celery worker and Redis."""

from __future__ import annotations

import json
import time

import pytest

from agents.models import Approval, Run, RunEvent
from agents.runs import approval_decide, run_start
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)


def wait(run: Run, statuses: set[str], timeout: float = 30) -> Run:
    deadline = time.monotonic() + timeout
    while True:
        run = Run.objects.get(pk=run.pk)
        if run.status in statuses or time.monotonic() > deadline:
            return run
        time.sleep(0.05)


def test_approve_with_edited_arguments_runs_the_tool_once(
    trio, agent, provider_server, transfer, celery_worker_process
):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("t1", "transfer", '{"amount": 500, "to": "bob"}')]),
        TextReply("Sent 50 to bob."),
    )
    run = run_start(tenant=trio.acme, agent=agent, input="pay bob 500", initiated_by=trio.alice)
    run = wait(run, {"awaiting_approval", "failed", "succeeded"})
    assert run.status == "awaiting_approval", run.error
    assert transfer.requests == []  # parked, not executed
    approval = Approval.objects.get(run=run)
    assert (approval.tool_name, approval.arguments) == ("transfer", {"amount": 500, "to": "bob"})
    assert RunEvent.objects.filter(run=run, type="approval.required").exists()

    edited = approval_decide(
        tenant=trio.acme, approval=approval, approved=True, by=trio.alice,
        arguments={"amount": 50, "to": "bob"},
    )  # fmt: skip
    # An HTTP tool's request is prepared again from the edit and asked again.
    assert edited.status == "edited" and transfer.requests == []
    assert edited.replaced_by.prepared_request["body"] == '{"amount":50,"to":"bob"}'
    approval_decide(tenant=trio.acme, approval=edited.replaced_by, approved=True, by=trio.alice)
    run = wait(run, {"succeeded", "failed"})
    assert run.status == "succeeded" and run.output == "Sent 50 to bob."
    assert len(transfer.requests) == 1
    assert transfer.requests[0].json() == {"amount": 50, "to": "bob"}
    assert transfer.requests[0].headers["idempotency-key"] == f"{run.pk}:t1"
    last = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
    assert last == {"role": "tool", "tool_call_id": "t1", "content": '{"ok": true}'}
    with pytest.raises(Exception, match="already edited"):
        approval_decide(tenant=trio.acme, approval=approval, approved=False, by=trio.alice)


def test_reject_tells_the_model_who_and_why(
    trio, agent, provider_server, transfer, celery_worker_process
):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("t1", "transfer", '{"amount": 900, "to": "eve"}')]),
        TextReply("Understood, no transfer."),
    )
    run = run_start(tenant=trio.acme, agent=agent, input="pay eve 900", initiated_by=trio.alice)
    run = wait(run, {"awaiting_approval", "failed"})
    approval = Approval.objects.get(run=run)
    approval_decide(
        tenant=trio.acme, approval=approval, approved=False, by=trio.alice, reason="too risky"
    )
    run = wait(run, {"succeeded", "failed"})
    assert run.status == "succeeded" and transfer.requests == []
    last = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
    assert last["role"] == "tool" and last["content"] == "rejected by alice: too risky"
    completed = RunEvent.objects.filter(run=run, type="tool.completed").last().payload
    assert completed["error"] == "rejected by alice: too risky"
    assert json.dumps(completed)  # events stay JSON
