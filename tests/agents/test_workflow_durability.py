"""Durable workflows (agents/runtime/workflow.py, StepRecords): every step has a path, a
completed step is not run again on resume, a tool step's call keeps its id, and a write
interrupted in flight is never repeated. No database: the records' store is a list of
the documents saved, the "crash" an exception no step catches."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agents.runtime.tool_step import UNKNOWN_OUTCOME, ApprovalRule
from agents.runtime.workflow import (
    StepRecords,
    Workflow,
    WorkflowContext,
    WorkflowFailed,
    agent_step,
    branch,
    parallel,
    pipe,
    tool_step,
)
from providers.runtime.fake import FakeModel
from tests.agents.test_workflow import CTX, RecordingSink, make_spec
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Capability, Effect, Tool, ToolCall

ANY_OBJECT = {"type": "object"}


class Crash(BaseException):
    """The process dying: nothing in a step catches it."""


class Store:
    """Where a run keeps its records: each save, in order (`durable` noted)."""

    def __init__(self) -> None:
        self.saved: list[tuple[dict[str, Any], bool]] = []

    async def save(self, document: dict[str, Any], durable: bool) -> None:
        self.saved.append((_copy(document), durable))

    @property
    def last(self) -> dict[str, Any] | None:
        return self.saved[-1][0] if self.saved else None


def _copy(document: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(document))


class Orders:
    """A write tool that creates an order each time it runs; `crash_at` makes the n-th call
    (1-based) die after creating its order, before returning."""

    def __init__(self, crash_at: int | None = None) -> None:
        self.created: list[dict[str, Any]] = []
        self.crash_at = crash_at

    def tool(self) -> Tool:
        async def place(arguments: dict[str, Any], ctx) -> dict[str, Any]:
            self.created.append(arguments)
            if len(self.created) == self.crash_at:
                raise Crash()
            return {"order": len(self.created), "item": arguments["item"]}

        return Tool(
            "place_order",
            "Place an order.",
            ANY_OBJECT,
            place,
            capability=Capability(effect=Effect.WRITE, idempotent=False),
        )


def run(
    workflow: Workflow,
    value: Any,
    *,
    registry: ToolRegistry,
    records: StepRecords,
    sink: RecordingSink | None = None,
) -> Any:
    context = WorkflowContext(
        registry=registry,
        ctx=CTX,
        sink=sink,
        records=records,
        approval=ApprovalRule("never"),
    )
    return asyncio.run(workflow.run(value, context))


def test_every_step_has_a_path_in_the_workflow_tree() -> None:
    workflow = pipe(
        lambda v: v + 1,
        parallel(twice=lambda v: v * 2, thrice=lambda v: v * 3),
        branch(lambda v: v["twice"] > 2, pipe(lambda v: v["thrice"]), None),
    )
    sink = RecordingSink()

    assert run(workflow, 1, registry=ToolRegistry(), records=StepRecords(), sink=sink) == 6

    paths = [p["path"] for p in sink.of("workflow.step.started")]
    assert paths == ["0", "1", "1.twice", "1.thrice", "2", "2.then", "2.then.0"]


def test_a_resumed_workflow_reuses_completed_steps_and_never_repeats_the_write() -> None:
    orders, store, attempts = Orders(), Store(), []

    def check(value: dict[str, Any]) -> dict[str, Any]:
        attempts.append(value)
        if len(attempts) == 1:
            raise Crash()  # the worker dies after the write, during the next step
        return {**value, "checked": True}

    workflow = pipe(tool_step("place_order"), check)
    registry = ToolRegistry([orders.tool()])
    with pytest.raises(Crash):
        run(workflow, {"item": "widget"}, registry=registry, records=StepRecords(save=store.save))
    assert len(orders.created) == 1
    assert store.last["outputs"]["0"] == {"order": 1, "item": "widget"}

    sink = RecordingSink()
    resumed = StepRecords(store.last, save=store.save)
    output = run(workflow, {"item": "widget"}, registry=registry, records=resumed, sink=sink)

    assert output == {"order": 1, "item": "widget", "checked": True}
    assert len(orders.created) == 1  # the write ran once
    assert sink.of("workflow.step.reused") == [
        {"step": "place_order", "path": "0", "output": {"order": 1, "item": "widget"}}
    ]
    assert [p["path"] for p in sink.of("workflow.step.started")] == ["1"]


def test_a_write_interrupted_in_flight_is_not_repeated_and_fails_its_step() -> None:
    orders, store = Orders(crash_at=1), Store()
    workflow = pipe(tool_step("place_order"))
    registry = ToolRegistry([orders.tool()])
    with pytest.raises(Crash):
        run(workflow, {"item": "widget"}, registry=registry, records=StepRecords(save=store.save))
    # Its start was stored, durably, before the tool ran; with its stable call id.
    started, durable = store.saved[-1]
    assert durable is True
    assert started["calls"]["0"]["started"] == ["step_0"]

    with pytest.raises(WorkflowFailed) as failed:
        run(workflow, {"item": "widget"}, registry=registry, records=StepRecords(started))

    assert len(orders.created) == 1
    assert failed.value.step == "place_order" and failed.value.message == UNKNOWN_OUTCOME


def test_an_idempotent_call_interrupted_in_flight_runs_again_with_the_same_call_id() -> None:
    seen: list[str] = []

    async def lookup(arguments: dict[str, Any], ctx) -> dict[str, Any]:
        seen.append(ctx.call_id)
        if len(seen) == 1:
            raise Crash()
        return {"found": True}

    tool = Tool("lookup", "Look up.", ANY_OBJECT, lookup, capability=Capability(idempotent=True))
    store = Store()
    workflow = pipe(lambda v: v, tool_step("lookup"))
    with pytest.raises(Crash):
        run(workflow, {}, registry=ToolRegistry([tool]), records=StepRecords(save=store.save))

    resumed = StepRecords(store.last)
    assert run(workflow, {}, registry=ToolRegistry([tool]), records=resumed) == {"found": True}
    assert seen == ["step_1", "step_1"]


def test_a_completed_parallel_branch_is_not_run_again_when_its_sibling_failed() -> None:
    orders, store, tries = Orders(), Store(), []

    async def flaky(value: Any) -> str:
        await asyncio.sleep(0.01)  # after the write's branch has completed
        tries.append(value)
        if len(tries) == 1:
            raise Crash()
        return "ok"

    workflow = pipe(parallel(order=tool_step("place_order"), other=flaky))
    registry = ToolRegistry([orders.tool()])
    with pytest.raises(Crash):
        run(workflow, {"item": "x"}, registry=registry, records=StepRecords(save=store.save))

    output = run(workflow, {"item": "x"}, registry=registry, records=StepRecords(store.last))
    assert output == {"order": {"order": 1, "item": "x"}, "other": "ok"}
    assert len(orders.created) == 1


def test_completed_steps_drop_the_records_they_cover() -> None:
    store = Store()
    workflow = pipe(pipe(lambda v: v + 1, lambda v: v * 2), lambda v: v - 1)

    records = StepRecords(save=store.save)
    assert run(workflow, 1, registry=ToolRegistry(), records=records) == 3
    # Saved as each completed: the nested steps' outputs went with their parent's...
    assert store.last == {"outputs": {"0": 4, "1": 3}, "calls": {}}
    # ...and the step before the last one goes with the next save: the last one covers it.
    assert records.to_dict() == {"outputs": {"1": 3}, "calls": {}}


def test_an_agent_step_resumes_its_loop_from_its_state_without_repeating_its_write() -> None:
    orders, store = Orders(), Store()
    model = FakeModel(
        [ToolCall(id="c1", name="place_order", arguments={"item": "widget"}), Crash(), "Ordered."]
    )
    workflow = pipe(agent_step(make_spec(tool_names=("place_order",)), adapter=model), str.upper)
    registry = ToolRegistry([orders.tool()])
    with pytest.raises(Crash):  # the process dies on the agent's second model call
        run(workflow, "Order a widget.", registry=registry, records=StepRecords(save=store.save))
    assert len(orders.created) == 1

    resumed = StepRecords(store.last, save=store.save)
    assert run(workflow, "Order a widget.", registry=registry, records=resumed) == "ORDERED."
    assert len(orders.created) == 1  # its loop went on from its state: the call is recorded
    assert len(model.requests) == 3
