"""Direct tool calls recorded as runs; approval-gated ones park and finish after a decision."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import async_to_sync
from django.http import Http404

from agentplatform.tenancy import services as tenancy
from agents.execution import execute_run
from agents.models import Approval, Run, RunEvent
from agents.services import approval_decide
from agents.tool_runs import atool_run
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def key(trio):
    key, _ = tenancy.api_key_create(tenant=trio.acme, name="mcp", scopes=["read", "run"])
    return key


def call(tenant, name, arguments, **who):
    return async_to_sync(atool_run)(tenant=tenant, name=name, arguments=arguments, **who)


def event_types(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def finish(run: Run) -> Run:
    """Execute the decided run here; a Celery worker of this session may take it first."""
    execute_run(run.pk)
    deadline = time.monotonic() + 10
    while not (run := Run.objects.get(pk=run.pk)).is_terminal and time.monotonic() < deadline:
        time.sleep(0.02)
    return run


def gated_calculator(tenant) -> None:
    ToolDefinition.objects.create(
        tenant=tenant, name="gated_calc", kind="builtin", config={"builtin": "calculator"},
        requires_approval=True,
    )  # fmt: skip


def test_a_call_is_executed_and_recorded(trio, key):
    outcome = call(trio.acme, "calculator", {"expression": "6*7"}, api_key=key, via="mcp")
    assert (outcome.status, outcome.result, outcome.error) == ("succeeded", {"result": 42}, None)
    run = Run.objects.get(pk=outcome.run.pk)
    assert (run.tenant_id, run.tool_name, run.agent_id, run.status) == (
        trio.acme.pk, "calculator", None, "succeeded"
    )  # fmt: skip
    assert run.initiated_by_api_key_id == key.pk
    assert (run.input, run.output) == ('{"expression": "6*7"}', '{"result": 42}')
    assert event_types(run) == ["tool.started", "tool.completed"]
    assert RunEvent.objects.get(run=run, seq=1).payload["via"] == "mcp"


def test_bad_arguments_fail_the_run_with_the_reason(trio, key):
    outcome = call(trio.acme, "calculator", {"nope": 1}, api_key=key)
    assert outcome.status == "failed" and "expression" in outcome.error
    run = Run.objects.get(pk=outcome.run.pk)
    assert run.status == "failed" and run.error == outcome.error


def test_an_unknown_or_other_tenants_tool_is_a_404(trio, key):
    ToolDefinition.objects.create(
        tenant=trio.globex, name="globex_calc", kind="builtin", config={"builtin": "calculator"}
    )
    with pytest.raises(Http404):
        call(trio.acme, "globex_calc", {"expression": "1"}, api_key=key)
    with pytest.raises(Http404):
        call(trio.acme, "nope", {}, api_key=key)
    assert not Run.objects.filter(tenant=trio.acme).exists()


def test_an_approval_gated_call_parks_then_runs_once_with_the_edited_arguments(trio, key):
    gated_calculator(trio.acme)
    outcome = call(trio.acme, "gated_calc", {"expression": "1+1"}, api_key=key)
    assert outcome.status == "awaiting_approval" and outcome.result is None
    approval = Approval.objects.get(run=outcome.run)
    assert f"/api/v1/runs/{outcome.run.pk}/approvals/{approval.pk}" in outcome.decide_at
    assert Run.objects.get(pk=outcome.run.pk).status == "awaiting_approval"
    assert event_types(outcome.run) == ["approval.required"]

    approval_decide(
        tenant=trio.acme, approval=approval, approved=True, by=trio.alice,
        arguments={"expression": "6*7"},
    )  # fmt: skip
    run = finish(outcome.run)
    assert (run.status, run.output) == ("succeeded", '{"result": 42}')
    assert event_types(run) == [
        "approval.required", "tool.started", "tool.completed", "run.completed"
    ]  # fmt: skip
    execute_run(run.pk)  # a second delivery does nothing
    assert len(event_types(run)) == 4


def test_a_rejected_call_fails_with_who_and_why(trio, key):
    gated_calculator(trio.acme)
    outcome = call(trio.acme, "gated_calc", {"expression": "1+1"}, api_key=key)
    approval = Approval.objects.get(run=outcome.run)
    approval_decide(
        tenant=trio.acme, approval=approval, approved=False, by=trio.alice, reason="not today"
    )
    run = finish(outcome.run)
    assert (run.status, run.error) == ("failed", "rejected by alice: not today")
    assert "tool.started" not in event_types(run)


def test_concurrent_calls_are_recorded_together_and_each_waits_for_its_own(trio, key, monkeypatch):
    import asyncio

    from agents import tool_runs

    batches: list[int] = []
    real = tool_runs.insert_runs_with_events

    def counted(items):  # the real write, counted
        batches.append(len(items))
        real(items)

    monkeypatch.setattr(tool_runs, "insert_runs_with_events", counted)

    async def many():
        return await asyncio.gather(
            *(
                tool_runs.atool_run(
                    tenant=trio.acme, name="calculator", arguments={"expression": f"{n}+1"},
                    api_key=key, via="mcp",
                )
                for n in range(20)
            )
        )  # fmt: skip

    outcomes = async_to_sync(many)()
    assert [o.result for o in outcomes] == [{"result": n + 1} for n in range(20)]
    assert sum(batches) == 20 and len(batches) < 20  # grouped, none lost
    runs = Run.objects.filter(pk__in=[o.run.pk for o in outcomes])
    assert runs.count() == 20
    assert {r.output for r in runs} == {f'{{"result": {n + 1}}}' for n in range(20)}
    assert RunEvent.objects.filter(run__in=runs).count() == 40
