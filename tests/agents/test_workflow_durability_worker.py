"""A workflow run under kill -9: a real prefork Celery worker runs a declared workflow, is
killed with its pool children while a step after a write is in flight, and another worker
resumes the run from its records once the dead worker's lease has expired: the recorded
write is reused, never sent again, and the run ends with the right output (the fleet and
fixtures of tests/agents/test_durability.py)."""

# ruff: noqa: F811  (the fixtures imported from the module that defines them)
from __future__ import annotations

import threading

import pytest

from agents import runs
from agents.models import Run, RunEvent, WorkflowDefinition
from tests.agents.test_durability import (  # noqa: F401  (fixtures)
    fleet,
    orders,
    resume_after_lease,
    run_queue,
    wait_until,
)
from tests.factories import make_http_tool
from tests.tools.local_server import Reply

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ORDER_AND_CHECK = {
    "input": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
    "steps": [
        {"id": "place", "tool": "place_order", "arguments": {"item": "input.item"}},
        {"id": "checked", "tool": "check", "arguments": {"q": "place.order"}},
        {"id": "result", "transform": "{order: place.order, checked: checked.checked}"},
    ],
}


def recorded_output(run: Run, path: str) -> bool:
    """Has the run's state recorded the output of the step at `path`?"""
    state = Run.objects.get(pk=run.pk).state or {}
    return path in (state.get("workflow") or {}).get("outputs", {})


def test_a_worker_killed_mid_workflow_is_resumed_and_the_recorded_write_is_not_sent_again(
    trio, orders, fleet
):
    gate = threading.Event()

    def slow(request) -> dict:  # the step after the write: in flight at the kill
        gate.wait(10)
        return {"checked": True}

    orders.route("GET", "/check", Reply(echo=slow))
    make_http_tool(trio.acme, "check", orders.url + "/check")
    workflow = WorkflowDefinition.objects.create(
        tenant=trio.acme, slug="order", name="Order", definition=ORDER_AND_CHECK
    )
    checks = lambda: [r for r in orders.requests if r.method == "GET"]  # noqa: E731
    posts = lambda: [r for r in orders.requests if r.method == "POST"]  # noqa: E731

    first = fleet.start()
    run = runs.workflow_start(tenant=trio.acme, workflow=workflow, input={"item": "widget"})
    wait_until(
        lambda: checks() and recorded_output(run, "1"),
        15,
        "the recorded write and the next step in flight",
    )
    fleet.kill(first)  # the worker and its pool die mid-workflow
    gate.set()
    run.refresh_from_db()
    assert run.status == "running" and run.lease_owner  # the dead worker still holds it
    assert len(posts()) == 1

    fleet.start()
    run = resume_after_lease(run)
    assert run.status == "succeeded", run.error
    assert run.structured_output == {"order": "created", "checked": True}
    assert run.attempts == 2
    assert len(posts()) == 1  # reused from its record: sent once
    assert posts()[0].headers["idempotency-key"] == f"{run.pk}:step_1"
    assert len(checks()) == 2  # the read in flight at the kill ran again (idempotent)
    [reused] = RunEvent.objects.filter(run=run, type="workflow.step.reused")
    assert reused.payload["path"] == "1" and reused.payload["step"] == "place"
    placed = RunEvent.objects.filter(
        run=run, type="workflow.tool.started", payload__name="place_order"
    )
    assert placed.count() == 1
