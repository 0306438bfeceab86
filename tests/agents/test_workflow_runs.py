"""Workflow runs (agents.runs.workflows): a tenant's workflow started as a Run, executed by
the engine in this process, its steps in its events and its state, resumed from its
records without repeating a write (the same through a real worker killed with SIGKILL:
tests/agents/test_workflow_durability_worker.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.test import Client
from rest_framework.test import APIClient

from agents import runs
from agents.models import Run, RunEvent, WorkflowDefinition
from agents.runs.engine import execute_run
from tenancy import services as tenancy
from tests.factories import login, make_http_tool
from tests.fakes.provider_server import TextReply
from tests.tools.local_server import LocalServer, Reply

pytestmark = pytest.mark.django_db

ORDER_INPUT = {
    "type": "object",
    "properties": {"item": {"type": "string"}, "quantity": {"type": "integer"}},
    "required": ["item"],
}


ORDER = {
    "input": ORDER_INPUT,
    "steps": [
        {"id": "place", "tool": "place_order", "arguments": {"item": "input.item"}},
        {
            "id": "both",
            "parallel": {
                "receipt": [
                    {"id": "receipt", "transform": "join(' ', ['order', to_string(place.order)])"}
                ],
                "total": [
                    {"id": "total", "tool": "calculator", "arguments": {"expression": "'2 * 21'"}}
                ],
            },
        },
        {"id": "result", "transform": "{receipt: both.receipt, total: both.total.result}"},
    ],
}


PLACED = {"input": {"item": "widget"}, "place": {"order": 5}}  # the scope after `place`


@pytest.fixture
def orders(trio, settings) -> Iterator[LocalServer]:
    """acme's `place_order`: a non-idempotent POST that creates an order each time."""
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    server = LocalServer()
    server.route("POST", "/orders", Reply(status=201, json={"order": 7}))
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
def workflow(trio) -> WorkflowDefinition:
    return WorkflowDefinition.objects.create(
        tenant=trio.acme, slug="order", name="Order", definition=ORDER
    )


def test_a_workflow_runs_as_a_run_with_its_steps_in_its_events(trio, orders, workflow):
    run = runs.workflow_start(
        tenant=trio.acme, workflow=workflow, input={"item": "widget"}, enqueue=False
    )
    assert run.workflow_id == workflow.pk and run.status == "queued"

    assert execute_run(run.pk) == "succeeded"

    run.refresh_from_db()
    assert run.structured_output == {"receipt": "order 7", "total": 42}
    assert run.output == '{"receipt": "order 7", "total": 42}'
    assert len(orders.requests) == 1
    assert orders.requests[0].headers["idempotency-key"] == f"{run.pk}:step_1"  # stable
    events = list(RunEvent.objects.filter(run=run).order_by("seq"))
    assert events[0].type == "run.started" and events[0].payload == {"workflow": "order"}
    started = {e.payload["path"]: e.payload["step"] for e in events if "step.started" in e.type}
    assert started == {
        "0": "input", "1": "place", "2": "both", "2.0": "parallel", "2.0.receipt": "receipt",
        "2.0.receipt.0": "receipt", "2.0.total": "total", "2.0.total.0": "total", "2.1": "join",
        "3": "result", "4": "output",
    }  # fmt: skip
    completed = [e.payload["path"] for e in events if e.type == "workflow.step.completed"]
    assert sorted(completed) == sorted(started)
    assert events[-1].type == "run.completed"
    assert events[-1].payload["output"] == {"receipt": "order 7", "total": 42}
    # Every step's output was recorded as it completed; what a later one covers was dropped.
    assert set(run.state["workflow"]["outputs"]) == {"3", "4"}


def test_a_resumed_workflow_run_reuses_the_recorded_write(trio, orders, workflow):
    run = runs.workflow_start(
        tenant=trio.acme, workflow=workflow, input={"item": "widget"}, enqueue=False
    )
    # What a worker killed after the write left: the step's output in the run's state.
    Run.objects.filter(pk=run.pk).update(state={"workflow": {"outputs": {"1": PLACED}}})

    assert execute_run(run.pk) == "succeeded"

    run.refresh_from_db()
    assert orders.requests == []  # never sent again
    assert run.structured_output == {"receipt": "order 5", "total": 42}
    reused = RunEvent.objects.get(run=run, type="workflow.step.reused")
    assert reused.payload == {"step": "place", "path": "1", "output": PLACED}
    assert not RunEvent.objects.filter(run=run, type="workflow.step.started", payload__path="0")
    assert not RunEvent.objects.filter(run=run, type="run.started").exists()


def test_a_run_resumes_with_the_steps_it_began_with_whatever_the_edits_since(
    trio, orders, workflow
):
    run = runs.workflow_start(
        tenant=trio.acme, workflow=workflow, input={"item": "widget"}, enqueue=False
    )
    assert run.workflow_snapshot["definition"] == ORDER
    assert len(run.workflow_snapshot["digest"]) == 64
    Run.objects.filter(pk=run.pk).update(state={"workflow": {"outputs": {"1": PLACED}}})
    # Edited after the crash: its steps are now others, their paths another's.
    edited = {"input": ORDER_INPUT, "steps": [{"id": "only", "transform": "'edited'"}]}
    WorkflowDefinition.objects.filter(pk=workflow.pk).update(definition=edited)

    assert execute_run(run.pk) == "succeeded"

    run.refresh_from_db()
    assert run.structured_output == {"receipt": "order 5", "total": 42}  # the steps it began
    assert orders.requests == []  # and its recorded write reused
    again = runs.workflow_start(
        tenant=trio.acme, workflow=WorkflowDefinition.objects.get(pk=workflow.pk),
        input={"item": "widget"}, enqueue=False,
    )  # fmt: skip
    assert execute_run(again.pk) == "succeeded"
    assert Run.objects.get(pk=again.pk).output == "edited"  # a new run: the workflow now


def test_a_write_interrupted_in_flight_fails_the_run_rather_than_repeat_it(trio, orders, workflow):
    run = runs.workflow_start(
        tenant=trio.acme, workflow=workflow, input={"item": "widget"}, enqueue=False
    )
    call = {"id": "step_1", "name": "place_order", "arguments": {"item": "widget"}}
    interrupted = {"pending_calls": [call], "started": ["step_1"], "results": {}}
    Run.objects.filter(pk=run.pk).update(
        state={"workflow": {"outputs": {}, "calls": {"1": interrupted}}}
    )

    assert execute_run(run.pk) == "failed"

    run.refresh_from_db()
    assert orders.requests == []
    assert run.error.startswith("step 'place' failed: the outcome of this call is unknown")


def test_a_failed_step_fails_the_run_naming_it(trio, orders, workflow):
    orders.route("POST", "/orders", Reply(status=500, json={"error": "down"}))
    run = runs.workflow_start(
        tenant=trio.acme, workflow=workflow, input={"item": "widget"}, enqueue=False
    )

    assert execute_run(run.pk) == "failed"

    run.refresh_from_db()
    assert run.error.startswith("step 'place' failed")
    failed = RunEvent.objects.get(run=run, type="workflow.step.failed", payload__path="1")
    assert failed.payload["step"] == "place"
    assert RunEvent.objects.filter(run=run, type="run.failed").exists()


def test_the_input_must_fit_the_workflows_schema_and_nothing_is_written(trio, orders, workflow):
    for bad in ({"quantity": 2}, {"item": 5}, "widget", None):
        with pytest.raises(ValidationError) as refused:
            runs.workflow_start(tenant=trio.acme, workflow=workflow, input=bad)
        assert "input" in refused.value.message_dict
    assert not Run.objects.filter(workflow=workflow).exists()


def test_another_tenants_workflow_is_not_found_and_a_disabled_one_refused(trio, orders, workflow):
    with pytest.raises(Http404):
        runs.workflow_start(tenant=trio.globex, workflow=workflow, input={"item": "x"})
    workflow.enabled = False
    workflow.save()
    with pytest.raises(ValidationError):
        runs.workflow_start(tenant=trio.acme, workflow=workflow, input={"item": "x"})
    assert not Run.objects.filter(workflow=workflow).exists()


def test_a_workflow_that_does_not_compile_is_refused(trio):
    broken = WorkflowDefinition.objects.create(
        tenant=trio.acme, slug="broken", name="Broken",
        definition={"steps": [{"id": "x", "tool": "no_such_tool"}]},
    )  # fmt: skip
    with pytest.raises(ValidationError) as refused:
        runs.workflow_start(tenant=trio.acme, workflow=broken, input={})
    assert "workflow" in refused.value.message_dict


def test_who_may_start_a_workflow_and_idempotency(trio, orders, workflow):
    key, _ = tenancy.api_key_create(
        tenant=trio.acme, name="lim", scopes=["read", "run"], allowed_agents=["triage"]
    )
    with pytest.raises(PermissionDenied):
        runs.workflow_start(
            tenant=trio.acme, workflow=workflow, input={"item": "x"}, initiated_by=key
        )
    first = runs.workflow_start(
        tenant=trio.acme, workflow=workflow, input={"item": "x"}, initiated_by=trio.bob,
        idempotency_key="k1", enqueue=False,
    )  # fmt: skip
    again = runs.workflow_start(
        tenant=trio.acme, workflow=workflow, input={"item": "x"}, initiated_by=trio.bob,
        idempotency_key="k1", enqueue=False,
    )  # fmt: skip
    assert again.pk == first.pk and first.initiated_by_user_id == trio.bob.pk
    with pytest.raises(runs.IdempotencyKeyReused):
        runs.workflow_start(
            tenant=trio.acme, workflow=workflow, input={"item": "x"}, initiated_by=trio.alice,
            idempotency_key="k1",
        )  # fmt: skip


def test_the_run_page_shows_its_steps_and_rest_gives_their_events(client, trio, orders, workflow):
    run = runs.workflow_start(
        tenant=trio.acme, workflow=workflow, input={"item": "widget"}, initiated_by=trio.bob,
        enqueue=False,
    )  # fmt: skip
    Run.objects.filter(pk=run.pk).update(  # resumed: its first step reused from its record
        state={"workflow": {"outputs": {"1": PLACED}}}
    )
    assert execute_run(run.pk) == "succeeded"

    body = login(client, trio.bob).get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert "Workflow: Order" in body
    assert 'Step <code>place</code> <span class="muted">at 1</span>' in body
    assert "reused" in body and "is not run again" in body
    assert 'Step <code>receipt</code> <span class="muted">at 2.0.receipt.0</span>' in body
    assert 'class="step depth-3"' in body
    assert "Tool call <code>calculator</code>" in body  # the tool step's call, as any call's
    # A workflow's output is no agent's claim: nothing to verify, no "Outcome claim" card.
    assert Run.objects.get(pk=run.pk).claim is None and "Outcome claim" not in body

    api = login(APIClient(), trio.bob, tenant="acme")
    page = api.get(f"/api/v1/runs/{run.pk}/events").json()
    types = [e["type"] for e in page["events"]]
    assert types[0] == "workflow.step.reused" and types[-1] == "run.completed"
    assert "workflow.tool.completed" in types
    assert api.get(f"/api/v1/runs/{run.pk}").json()["workflow"] == "order"
    # Another tenant's member: 404, page and REST.
    assert login(client, trio.charlie).get(f"/t/acme/runs/{run.pk}/").status_code == 404
    charlie = login(APIClient(), trio.charlie, tenant="globex")
    assert charlie.get(f"/api/v1/runs/{run.pk}/events").status_code == 404


def test_a_cancelled_workflow_run_stops_during_its_step(trio, orders):
    gate = threading.Event()

    def slow(request) -> dict:  # a step that would not end before the cancel is read
        gate.wait(10)
        return {"checked": True}

    orders.route("GET", "/check", Reply(echo=slow))
    make_http_tool(trio.acme, "check", orders.url + "/check")
    checking = WorkflowDefinition.objects.create(
        tenant=trio.acme, slug="check", name="Check",
        definition={"steps": [
            {"id": "checked", "tool": "check", "arguments": {"q": "'x'"}},
            {"id": "placed", "tool": "place_order", "arguments": {"item": "'x'"}},
        ]},
    )  # fmt: skip
    owner = "test-owner"
    run = runs.workflow_start(
        tenant=trio.acme, workflow=checking, input={}, enqueue=False, claimed_by=owner
    )
    runs.run_cancel(tenant=trio.acme, run=run, by=None)  # running: its flag is set
    run.stored_seq = 0  # (as run_inline: a new run has stored nothing yet)
    try:
        assert execute_run(run.pk, owner=owner, claimed=run) == "cancelled"
    finally:
        gate.set()
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert RunEvent.objects.filter(run=run, type="run.cancelled").exists()
    assert not [r for r in orders.requests if r.method == "POST"]  # the next step never ran


def test_a_failed_workflow_run_is_resumed_from_its_records_and_its_failed_step_runs_again(
    trio, orders, workflow
):
    orders.route("POST", "/orders", Reply(status=500, json={"error": "down"}))
    run = runs.workflow_start(
        tenant=trio.acme, workflow=workflow, input={"item": "widget"}, initiated_by=trio.bob,
        enqueue=False,
    )  # fmt: skip
    assert execute_run(run.pk) == "failed"
    run.refresh_from_db()
    assert "0" in run.state["workflow"]["outputs"]  # the input step completed
    assert "1" not in run.state["workflow"]["calls"]  # the failed call ended: not "unknown"

    orders.route("POST", "/orders", Reply(status=201, json={"order": 7}))  # fixed
    resumed = runs.run_resume(tenant=trio.acme, run=run, by=trio.bob)
    assert resumed.status == "queued"
    assert execute_run(run.pk) == "succeeded"

    run.refresh_from_db()
    assert run.structured_output == {"receipt": "order 7", "total": 42}
    assert len(orders.requests) == 2  # the failed call, and the one after the fix
    resumed_event = RunEvent.objects.get(run=run, type="run.resumed")
    assert resumed_event.payload["workflow"] == "order" and resumed_event.payload["by"]
    assert RunEvent.objects.filter(run=run, type="workflow.step.reused", payload__path="0")


def test_a_resumed_run_whose_write_was_interrupted_fails_again_without_sending_it(
    trio, orders, workflow
):
    run = runs.workflow_start(
        tenant=trio.acme, workflow=workflow, input={"item": "widget"}, initiated_by=trio.bob,
        enqueue=False,
    )  # fmt: skip
    call = {"id": "step_1", "name": "place_order", "arguments": {"item": "widget"}}
    interrupted = {"pending_calls": [call], "started": ["step_1"], "results": {}}
    Run.objects.filter(pk=run.pk).update(state={"workflow": {"calls": {"1": interrupted}}})
    assert execute_run(run.pk) == "failed"

    runs.run_resume(tenant=trio.acme, run=Run.objects.get(pk=run.pk), by=trio.bob)
    assert execute_run(run.pk) == "failed"

    assert orders.requests == []
    assert "the outcome of this call is unknown" in Run.objects.get(pk=run.pk).error


def test_an_agent_step_runs_the_tenants_agent_and_its_tokens_are_the_runs(
    trio, agent, provider_server
):
    provider_server.script("openai", TextReply("Bonjour, Paris."))
    greeting = WorkflowDefinition.objects.create(
        tenant=trio.acme, slug="greet", name="Greet",
        definition={
            "input": {"type": "object", "properties": {"city": {"type": "string"}}},
            "steps": [{"id": "hello", "agent": "assistant", "prompt": "input.city"}],
        },
    )  # fmt: skip
    run = runs.workflow_start(
        tenant=trio.acme, workflow=greeting, input={"city": "Paris"}, enqueue=False
    )

    assert execute_run(run.pk) == "succeeded"

    run.refresh_from_db()
    assert run.output == "Bonjour, Paris."
    assert run.input_tokens > 0 and run.output_tokens > 0
    asked = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
    assert asked == {"role": "user", "content": "Paris"}
    assert RunEvent.objects.filter(run=run, type="workflow.agent.run.completed").exists()
    body = login(Client(), trio.alice).get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert "Step <code>hello</code>" in body and "Model call" in body  # the agent step's


def test_rest_starts_a_workflow_run_with_its_arguments(trio, orders, workflow):
    api = login(APIClient(), trio.bob, tenant="acme")

    def post(body, key=None):
        headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
        return api.post("/api/v1/runs", body, format="json", **headers)

    started = post({"workflow": "order", "arguments": {"item": "widget"}}, key="w1")
    assert started.status_code == 201, started.content
    body = started.json()
    assert body["workflow"] == "order" and body["status"] == "queued" and body["agent"] is None
    again = post({"workflow": "order", "arguments": {"item": "widget"}}, key="w1")
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    assert post({"workflow": "order", "arguments": {"item": "other"}}, key="w1").status_code == 409

    for bad, field in (
        ({"workflow": "order", "arguments": {"item": 5}}, "input"),  # its schema says no
        ({"workflow": "order", "input": "widget"}, "arguments"),
        ({"workflow": "order", "arguments": ["widget"]}, "arguments"),
        ({"workflow": "order", "agent": "x", "arguments": {}}, "agent"),
        ({"agent": "x", "arguments": {"item": "widget"}}, "input"),
    ):
        refused = post(bad)
        assert refused.status_code == 400, (bad, refused.content)
        assert field in refused.json()["error"]["details"], (bad, refused.json())
    assert post({"workflow": "nope", "arguments": {}}).status_code == 404
    globex = login(APIClient(), trio.charlie, tenant="globex")
    theirs = globex.post(
        "/api/v1/runs", {"workflow": "order", "arguments": {"item": "x"}}, format="json"
    )
    assert theirs.status_code == 404
    assert Run.objects.filter(workflow=workflow).count() == 1
