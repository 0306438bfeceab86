"""Crew composition in the runtime, with FakeModel members."""

from __future__ import annotations

import asyncio

from agents.runtime.crew import (
    ChildOutcome,
    CrewSpec,
    delegation_tools,
    run_parallel,
    run_sequential,
)
from agents.runtime.loop import run_agent
from agents.runtime.spec import AgentSpec, RunStatus
from agents.runtime.tool_step import call_payload
from providers.runtime.fake import FakeModel
from providers.runtime.types import ModelResponse, Usage
from tests.agents.test_loop import RecordingSink
from tools.runtime.context import RunContext
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import ToolCall

CTX = RunContext(tenant_id=1, user_id=2, run_id="r1")


async def no_events(type, **payload):
    return None


def member_runner(models: dict[str, FakeModel], *, all_at_once: int = 0):
    """Runs each member as a real agent loop on its FakeModel. With `all_at_once`, each
    member first waits until that many are running (or fails after 30 s): only members
    started together get anywhere."""
    seen: list[tuple[str, str, str]] = []
    together = asyncio.Barrier(all_at_once) if all_at_once else None

    async def run_child(member, task, context, key):
        seen.append((member, context, key))
        if together is not None:
            await asyncio.wait_for(together.wait(), timeout=30)
        outcome = await run_agent(
            spec=AgentSpec(name=member, instructions=f"You are {member}.", model="m"),
            adapter=models[member],
            registry=ToolRegistry(),
            ctx=CTX,
            input=f"{task}\n\n{context}".strip(),
        )
        return ChildOutcome(outcome.status, outcome.output, outcome.error, outcome.usage, key)

    return run_child, seen


def test_sequential_threads_each_output_into_the_next_members_context():
    models = {
        "researcher": FakeModel(["Facts: water boils at 100C."]),
        "writer": FakeModel(["Boiling point: 100C."]),
    }
    run_child, seen = member_runner(models)
    spec = CrewSpec(name="c", mode="sequential", members=("researcher", "writer"))
    outcome = asyncio.run(run_sequential(spec, "Write about boiling water.", run_child, no_events))
    assert outcome.status is RunStatus.SUCCEEDED and outcome.output == "Boiling point: 100C."
    assert seen[0][1] == "" and "Facts: water boils at 100C." in seen[1][1]
    writer_input = models["writer"].requests[0].messages[-1].text
    assert "Write about boiling water." in writer_input and "researcher said" in writer_input
    assert (
        outcome.usage == models["researcher"].requests and False
    ) or outcome.usage.output_tokens > 0


def test_a_failing_member_stops_a_sequential_crew_naming_it():
    from providers.runtime.errors import AuthenticationFailed

    models = {"a": FakeModel([AuthenticationFailed("bad key")]), "b": FakeModel(["never"])}
    run_child, seen = member_runner(models)
    spec = CrewSpec(name="c", mode="sequential", members=("a", "b"))
    outcome = asyncio.run(run_sequential(spec, "task", run_child, no_events))
    assert outcome.status is RunStatus.FAILED and outcome.error.startswith("member a ended failed")
    assert [m for m, _, _ in seen] == ["a"]


def test_parallel_members_work_at_once_and_come_back_labelled():
    models = {name: FakeModel([f"{name} says hi"]) for name in ("a", "b", "c", "d")}
    run_child, seen = member_runner(models, all_at_once=4)  # one at a time never gets past
    spec = CrewSpec(name="c", mode="parallel", members=("a", "b", "c", "d"))
    outcome = asyncio.run(run_parallel(spec, "greet", run_child, no_events))
    assert outcome.status is RunStatus.SUCCEEDED and len(seen) == 4
    assert (
        outcome.output == "## a\na says hi\n\n## b\nb says hi\n\n## c\nc says hi\n\n## d\nd says hi"
    )


def test_parallel_members_combined_by_the_manager():
    models = {
        "a": FakeModel(["A: yes"]),
        "b": FakeModel(["B: no"]),
        "boss": FakeModel(["Split vote."]),
    }
    run_child, seen = member_runner(models)
    spec = CrewSpec(name="c", mode="parallel", members=("a", "b"), manager="boss")
    outcome = asyncio.run(run_parallel(spec, "vote", run_child, no_events))
    assert outcome.output == "Split vote."
    boss_context = next(context for member, context, _ in seen if member == "boss")
    assert "## a\nA: yes" in boss_context and "## b\nB: no" in boss_context


def _manager_run(manager_outputs, spec: CrewSpec, members, *, depth=0, used=0):
    run_child, seen = member_runner(members)
    tools = delegation_tools(
        spec, run_child, no_events, depth=depth, used_tokens=lambda: _const(used)
    )
    manager = FakeModel(manager_outputs)
    outcome = asyncio.run(
        run_agent(
            spec=AgentSpec(name="boss", instructions="Delegate.", model="m", max_rounds=10),
            adapter=manager,
            registry=ToolRegistry(tools),
            ctx=CTX,
            input="Do the thing.",
        )
    )
    return outcome, manager, seen


async def _const(value):
    return value


def test_the_manager_delegates_and_reads_the_answer():
    spec = CrewSpec(name="c", mode="hierarchical", members=("coder",), manager="boss")
    outcome, manager, seen = _manager_run(
        [
            ToolCall("d1", "delegate_to_coder", {"task": "write hello", "context": "in Python"}),
            "Done: print('hello')",
        ],
        spec,
        {"coder": FakeModel(["print('hello')"])},
    )
    assert outcome.status is RunStatus.SUCCEEDED and outcome.output == "Done: print('hello')"
    assert seen == [("coder", "in Python", "delegate:d1")]
    result = manager.requests[1].messages[-1]
    assert result.name == "delegate_to_coder" and "print('hello')" in result.content


def test_a_delegation_loop_is_refused():
    spec = CrewSpec(name="c", mode="hierarchical", members=("coder",), manager="boss")
    _outcome, manager, seen = _manager_run(
        [
            ToolCall("d1", "delegate_to_coder", {"task": "Write hello"}),
            ToolCall("d2", "delegate_to_coder", {"task": "write   HELLO"}),
            "ok",
        ],
        spec,
        {"coder": FakeModel(["hello"])},
    )
    assert len(seen) == 1
    assert "delegation loop" in manager.requests[2].messages[-1].content


def test_depth_count_and_budget_limits_end_runaway_delegation():
    members = {"coder": FakeModel(["a", "b"])}
    count = CrewSpec(
        name="c", mode="hierarchical", members=("coder",), manager="boss", max_delegations=1
    )
    _, manager, seen = _manager_run(
        [
            ToolCall("d1", "delegate_to_coder", {"task": "one"}),
            ToolCall("d2", "delegate_to_coder", {"task": "two"}),
            "ok",
        ],
        count,
        members,
    )
    assert (
        len(seen) == 1
        and "delegation limit (1) reached" in manager.requests[2].messages[-1].content
    )
    depth = CrewSpec(name="c", mode="hierarchical", members=("coder",), manager="boss", max_depth=2)
    _, manager, seen = _manager_run(
        [ToolCall("d1", "delegate_to_coder", {"task": "one"}), "ok"],
        depth,
        {"coder": FakeModel(["x"])},
        depth=2,
    )
    assert seen == [] and "depth limit (2)" in manager.requests[1].messages[-1].content
    budget = CrewSpec(
        name="c", mode="hierarchical", members=("coder",), manager="boss", token_budget=100
    )
    _, manager, seen = _manager_run(
        [ToolCall("d1", "delegate_to_coder", {"task": "one"}), "ok"],
        budget,
        {"coder": FakeModel(["x"])},
        used=150,
    )
    assert seen == [] and "token budget (100) is spent" in manager.requests[1].messages[-1].content


def test_a_child_waiting_for_approval_parks_the_manager():
    delegation = ToolCall("d1", "delegate_to_payer", {"task": "pay"})

    async def waiting_child(member, task, context, key):
        return ChildOutcome(RunStatus.AWAITING_APPROVAL, run_id=99)

    spec = CrewSpec(name="c", mode="hierarchical", members=("payer",), manager="boss")
    tools = delegation_tools(spec, waiting_child, no_events, depth=0, used_tokens=lambda: _const(0))
    manager = FakeModel(
        [ModelResponse(text="Asking the payer.", tool_calls=(delegation,), usage=Usage(9, 4))]
    )
    sink = RecordingSink()
    outcome = asyncio.run(
        run_agent(
            spec=AgentSpec(name="boss", instructions="", model="m"),
            adapter=manager,
            registry=ToolRegistry(tools),
            ctx=CTX,
            input="pay bob",
            sink=sink,
        )
    )
    assert outcome.status is RunStatus.AWAITING_APPROVAL
    assert [c.id for c in outcome.suspended] == ["d1"] and outcome.awaiting == []
    # What the parked run has said and spent so far; the event names the call a child's
    # approval holds up.
    assert (outcome.output, outcome.usage) == ("Asking the payer.", Usage(9, 4))
    assert sink.of("approval.required") == [{"via_child": True, **call_payload(delegation, CTX)}]
