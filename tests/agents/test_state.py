"""RunState, checkpoints and resuming (agents/runtime/state.py with the loop).

A resumed run must never execute a recorded call again, and must not repeat a
non-idempotent call whose outcome is unknown.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agents.runtime.loop import run_agent
from agents.runtime.spec import AgentSpec, Decision, RunOutcome, RunStatus
from agents.runtime.state import RunState
from providers.runtime.fake import FakeModel
from providers.runtime.types import AssistantMessage, ToolResultMessage, Usage, UserMessage
from tools.runtime.context import RunContext
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Capability, Effect, Tool, ToolCall

CTX = RunContext(tenant_id=1, user_id=7, run_id="run_1")
SPEC = AgentSpec(name="clerk", instructions="Do the task.", model="fake-model")
UNKNOWN_OUTCOME = "the outcome of this call is unknown"


class SavingCheckpointer:
    """Stores `state.to_dict()` on every save; `crash_on` raises after storing that reason."""

    def __init__(self, crash_on: str | None = None) -> None:
        self.saves: list[tuple[str, dict[str, Any]]] = []
        self.crash_on = crash_on

    async def save(self, state: RunState, reason: str, *, durable: bool = True) -> None:
        self.saves.append((reason, json.loads(json.dumps(state.to_dict()))))
        if reason == self.crash_on:
            raise WorkerCrashed(reason)

    def reasons(self) -> list[str]:
        return [reason for reason, _ in self.saves]

    def last_state(self) -> RunState:
        return RunState.from_dict(self.saves[-1][1])


class WorkerCrashed(Exception):
    pass


class Counter:
    """A tool handler counting its executions."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def __call__(self, arguments: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        self.calls.append(arguments)
        return {"ok": True, "n": len(self.calls)}


def counted_tool(name: str, counter: Counter, **capability: Any) -> Tool:
    return Tool(
        name=name,
        description=f"The {name} tool.",
        input_schema={"type": "object"},
        handler=counter,
        capability=Capability(**capability),
    )


def run(
    model: FakeModel,
    registry: ToolRegistry,
    *,
    state: RunState | None = None,
    spec: AgentSpec = SPEC,
    **kwargs: Any,
) -> RunOutcome:
    return asyncio.run(
        run_agent(
            spec=spec,
            adapter=model,
            registry=registry,
            ctx=CTX,
            state=state,
            input=None if state else "do it",
            **kwargs,
        )
    )


def interrupted_state(call: ToolCall, **overrides: Any) -> RunState:
    """A state saved after "tools_started" for `call`, before its result was recorded."""
    values: dict[str, Any] = {
        "messages": [UserMessage("do it"), AssistantMessage(tool_calls=(call,))],
        "pending_calls": [call],
        "started": {call.id},
        "rounds": 1,
        "tool_calls": 1,
    }
    values.update(overrides)
    return RunState(**values)


# -- resuming ------------------------------------------------------------------------------


def test_an_interrupted_idempotent_call_is_run_again_on_resume():
    counter = Counter()
    call = ToolCall("c1", "lookup", {"q": "x"})
    model = FakeModel(["found it"])

    outcome = run(
        model,
        ToolRegistry([counted_tool("lookup", counter, idempotent=True)]),
        state=interrupted_state(call),
    )

    assert outcome.status is RunStatus.SUCCEEDED
    assert counter.calls == [{"q": "x"}]
    result = model.requests[0].messages[-1]
    assert result == ToolResultMessage("c1", "lookup", '{"ok": true, "n": 1}', False)


def test_an_interrupted_non_idempotent_call_is_not_repeated_and_the_model_is_told():
    counter = Counter()
    call = ToolCall("c1", "charge_card", {"cents": 500})
    model = FakeModel(["I will check the payment first."])

    outcome = run(
        model,
        ToolRegistry([counted_tool("charge_card", counter, effect=Effect.WRITE, idempotent=False)]),
        state=interrupted_state(call),
    )

    assert outcome.status is RunStatus.SUCCEEDED
    assert counter.calls == []
    result = model.requests[0].messages[-1]
    assert result.call_id == "c1" and result.is_error
    assert result.content.startswith(UNKNOWN_OUTCOME)


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_call_with_a_recorded_result_is_never_executed_again(idempotent):
    counter = Counter()
    call = ToolCall("c1", "charge_card", {"cents": 500})
    recorded = ToolResultMessage("c1", "charge_card", '{"ok": true, "n": 1}')
    model = FakeModel(["Charged."])

    outcome = run(
        model,
        ToolRegistry([counted_tool("charge_card", counter, idempotent=idempotent)]),
        state=interrupted_state(call, results={"c1": recorded}),
    )

    assert outcome.status is RunStatus.SUCCEEDED
    assert counter.calls == []
    assert model.requests[0].messages[-1] == recorded


def test_a_run_resumed_after_a_crash_does_not_repeat_a_recorded_call():
    counter = Counter()
    registry = ToolRegistry([counted_tool("charge_card", counter, idempotent=False)])
    crashing = SavingCheckpointer(crash_on="tool_result")

    with pytest.raises(WorkerCrashed):
        run(
            FakeModel([ToolCall("c1", "charge_card", {"cents": 500})]),
            registry,
            checkpoint=crashing,
        )
    assert counter.calls == [{"cents": 500}]

    model = FakeModel(["Charged once."])
    outcome = run(model, registry, state=crashing.last_state())

    assert outcome.status is RunStatus.SUCCEEDED
    assert counter.calls == [{"cents": 500}]
    assert model.requests[0].messages[-1].content == '{"ok": true, "n": 1}'


def test_an_approved_non_idempotent_call_interrupted_while_running_is_not_repeated():
    counter = Counter()
    registry = ToolRegistry(
        [
            counted_tool(
                "send_money", counter, effect=Effect.WRITE, idempotent=False, requires_approval=True
            )
        ]
    )
    call = ToolCall("c1", "send_money", {"cents": 500})
    model = FakeModel(["Checking whether the transfer went through."])

    outcome = run(
        model,
        registry,
        state=interrupted_state(call),  # approved, started, then the worker died
        decisions={"c1": Decision(approved=True, by="alice")},
    )

    assert outcome.status is RunStatus.SUCCEEDED
    assert counter.calls == []  # fails today: the money is sent a second time
    assert model.requests[0].messages[-1].content.startswith(UNKNOWN_OUTCOME)


# -- checkpoints ---------------------------------------------------------------------------


def test_checkpoints_are_saved_in_order_and_hold_what_each_step_recorded():
    counter = Counter()
    registry = ToolRegistry([counted_tool("lookup", counter)])
    checkpoint = SavingCheckpointer()
    model = FakeModel([ToolCall("c1", "lookup", {"q": "x"}), "done"])

    outcome = run(model, registry, checkpoint=checkpoint)

    assert outcome.status is RunStatus.SUCCEEDED
    reasons = checkpoint.reasons()
    # Saved before each side effect; the model response alone is not (a crash there only
    # asks the model again), nor the bookkeeping after the results.
    assert reasons == ["tools_started", "tool_result", "finished"]
    saved = {r: s for r, s in reversed(checkpoint.saves)}  # the first save of each reason
    assert saved["tools_started"]["pending_calls"] == [
        {"id": "c1", "name": "lookup", "arguments": {"q": "x"}}
    ]
    assert saved["tools_started"]["started"] == ["c1"]
    assert saved["tools_started"]["results"] == {}
    assert saved["tool_result"]["results"]["c1"]["content"] == '{"ok": true, "n": 1}'
    final = RunState.from_dict(checkpoint.saves[-1][1])
    assert final.pending_calls == [] and final.results == {} and final.started == set()
    assert final.output == "done"
    assert final.usage == outcome.usage


def test_a_parked_run_saves_before_it_returns():
    counter = Counter()
    registry = ToolRegistry([counted_tool("delete_all", counter, requires_approval=True)])
    checkpoint = SavingCheckpointer()

    outcome = run(FakeModel([ToolCall("c1", "delete_all", {})]), registry, checkpoint=checkpoint)

    assert outcome.status is RunStatus.AWAITING_APPROVAL
    assert checkpoint.reasons() == ["awaiting_approval"]


# -- serialisation -------------------------------------------------------------------------


def test_run_state_round_trips_through_json_with_every_message_kind():
    call = ToolCall("c1", "lookup", {"q": "x", "nested": {"list": [1, 2.5, None, True]}})
    other = ToolCall("c2", "send", {"to": "ann"})
    state = RunState(
        messages=[
            UserMessage("find x"),
            AssistantMessage(text="Looking.", tool_calls=(call,)),
            ToolResultMessage("c1", "lookup", '{"found": 1}'),
            AssistantMessage(text="Sending.", tool_calls=(call, other)),
            ToolResultMessage("c1", "lookup", "timed out after 5 s", is_error=True),
            AssistantMessage(text="Plain answer."),
        ],
        pending_calls=[call, other],
        results={"c1": ToolResultMessage("c1", "lookup", "boom", is_error=True)},
        started={"c2", "c1"},
        rounds=3,
        tool_calls=4,
        usage=Usage(input_tokens=10, output_tokens=5, cache_read_tokens=3, cache_write_tokens=2),
        output="Plain answer.",
        structured_output={"city": "Paris", "temp_c": 21.5},
        structured_attempts=1,
    )

    data = json.loads(json.dumps(state.to_dict()))

    assert RunState.from_dict(data) == state
    assert data["started"] == ["c1", "c2"]


def test_an_empty_dict_is_a_fresh_state():
    assert RunState.from_dict({}) == RunState()
    assert RunState.from_dict(RunState().to_dict()) == RunState()


def test_a_finished_state_resumes_without_calling_the_model():
    import asyncio as _asyncio

    from agents.runtime.loop import run_agent as _run
    from agents.runtime.spec import AgentSpec as _Spec
    from agents.runtime.state import RunState as _State
    from providers.runtime.fake import FakeModel as _Fake
    from tools.runtime.context import RunContext as _Ctx
    from tools.runtime.registry import ToolRegistry as _Registry

    state = _State(output="done before the crash", finished="succeeded")
    model = _Fake([])
    outcome = _asyncio.run(
        _run(spec=_Spec(name="a", instructions="", model="m"), adapter=model,
             registry=_Registry(), ctx=_Ctx(tenant_id=1), state=state)
    )  # fmt: skip
    assert outcome.status.value == "succeeded" and outcome.output == "done before the crash"
    assert model.requests == []


def test_repeated_or_missing_call_ids_are_made_unique_so_decisions_never_carry_over():
    import asyncio as _asyncio

    from agents.runtime.loop import run_agent as _run
    from agents.runtime.spec import AgentSpec as _Spec
    from agents.runtime.spec import Decision as _Decision
    from providers.runtime.fake import FakeModel as _Fake
    from tools.runtime.context import RunContext as _Ctx
    from tools.runtime.registry import ToolRegistry as _Registry
    from tools.runtime.tool import Capability as _Cap
    from tools.runtime.tool import Tool as _Tool
    from tools.runtime.tool import ToolCall as _Call

    paid = []

    async def pay(arguments, ctx):
        paid.append(arguments["amount"])
        return {"ok": True}

    tool = _Tool(
        name="pay", description="Pay.", handler=pay, capability=_Cap(requires_approval=True),
        input_schema={"type": "object", "properties": {"amount": {"type": "integer"}}},
    )  # fmt: skip
    saved = {}

    class Keep:
        async def save(self, state, reason, *, durable=True):
            saved["state"] = state.to_dict()

    model = _Fake([_Call("x", "pay", {"amount": 1}), _Call("x", "pay", {"amount": 1000}), "ok"])
    spec, registry, ctx = (
        _Spec(name="a", instructions="", model="m"),
        _Registry([tool]),
        _Ctx(tenant_id=1),
    )
    first = _asyncio.run(
        _run(spec=spec, adapter=model, registry=registry, ctx=ctx, input="pay", checkpoint=Keep())
    )
    assert first.awaiting[0].id == "x"
    from agents.runtime.state import RunState as _State

    second = _asyncio.run(
        _run(spec=spec, adapter=model, registry=registry, ctx=ctx, checkpoint=Keep(),
             state=_State.from_dict(saved["state"]), decisions={"x": _Decision(True, "alice")})
    )  # fmt: skip
    assert paid == [1]  # the approved call only
    assert second.status.value == "awaiting_approval" and second.awaiting[0].id != "x"
