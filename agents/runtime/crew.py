"""Crews: agents composed sequentially, in parallel, or under a delegating manager.

Members run as child runs through a `ChildRunner` the caller provides (the platform makes
each a Run record with a parent link; tests use plain functions). A child is identified
by a stable key, so a resumed crew finds the children it already ran instead of running
them again.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agents.runtime.spec import RunOutcome, RunStatus
from providers.runtime.types import Usage
from tools.runtime.context import RunContext
from tools.runtime.tool import Capability, Effect, Suspended, Tool, ToolFailed

Mode = Literal["sequential", "parallel", "hierarchical"]


@dataclass(frozen=True)
class CrewSpec:
    name: str
    mode: Mode
    members: tuple[str, ...]  # member names (agent slugs), in order
    manager: str | None = None
    max_delegations: int = 10
    max_depth: int = 3
    token_budget: int | None = None


@dataclass(frozen=True)
class ChildOutcome:
    status: RunStatus
    output: str = ""
    error: str = ""
    usage: Usage = field(default_factory=Usage)
    run_id: Any = None


# run_child(member, task, context, key) -> ChildOutcome
ChildRunner = Callable[[str, str, str, str], Awaitable[ChildOutcome]]


def member_prompt(task: str, context: str) -> str:
    return f"{task}\n\n## Context\n{context}" if context.strip() else task


async def run_sequential(
    spec: CrewSpec, task: str, run_child: ChildRunner, emit: Callable[..., Awaitable[None]]
) -> RunOutcome:
    """Each member gets the task and the previous members' outputs; the last answers."""
    outputs: list[tuple[str, str]] = []
    usage = Usage()
    for index, member in enumerate(spec.members):
        context = "\n\n".join(f"### {name} said\n{text}" for name, text in outputs)
        child = await _child(run_child, emit, member, task, context, f"seq:{index}:{member}")
        usage = usage + child.usage
        if child.status is not RunStatus.SUCCEEDED:
            return _stopped(child, member, usage, outputs)
        outputs.append((member, child.output))
    return RunOutcome(
        status=RunStatus.SUCCEEDED, output=outputs[-1][1] if outputs else "", usage=usage
    )


async def run_parallel(
    spec: CrewSpec, task: str, run_child: ChildRunner, emit: Callable[..., Awaitable[None]]
) -> RunOutcome:
    """All members work on the task at once; the manager (if any) combines their outputs,
    otherwise they come back labelled by member."""
    children = await asyncio.gather(
        *(_child(run_child, emit, m, task, "", f"par:{m}") for m in spec.members)
    )
    usage = sum((c.usage for c in children), Usage())
    for member, child in zip(spec.members, children, strict=True):
        if child.status is not RunStatus.SUCCEEDED:
            return _stopped(child, member, usage, [])
    labelled = "\n\n".join(
        f"## {member}\n{child.output}" for member, child in zip(spec.members, children, strict=True)
    )
    if spec.manager is None:
        return RunOutcome(status=RunStatus.SUCCEEDED, output=labelled, usage=usage)
    combined = await _child(
        run_child,
        emit,
        spec.manager,
        f"Combine the members' answers into one answer to: {task}",
        labelled,
        f"combine:{spec.manager}",
    )
    usage = usage + combined.usage
    if combined.status is not RunStatus.SUCCEEDED:
        return _stopped(combined, spec.manager, usage, [])
    return RunOutcome(status=RunStatus.SUCCEEDED, output=combined.output, usage=usage)


def delegation_tools(
    spec: CrewSpec,
    run_child: ChildRunner,
    emit: Callable[..., Awaitable[None]],
    *,
    depth: int,
    used_tokens: Callable[[], Awaitable[int]],
) -> list[Tool]:
    """`delegate_to_<member>(task, context)` for the manager: each call runs the member as a
    child (keyed by the call id, so a repeated call finds the same child) and returns its
    answer. Limits: depth, number of delegations, token budget; a loop (the same member
    asked the same task again) is refused."""
    asked: dict[tuple[str, str], str] = {}
    count = {"n": 0}

    def make(member: str) -> Tool:
        async def delegate(arguments: dict, ctx: RunContext) -> Any:
            task, context = arguments["task"].strip(), arguments.get("context", "")
            key = f"delegate:{ctx.call_id}"
            signature = (member, _normalise(task))
            if asked.get(signature, key) != key:
                raise ToolFailed(
                    f"refused: {member} was already asked this task in this run (a delegation "
                    "loop); use the answer you got or change the task"
                )
            if depth >= spec.max_depth:
                raise ToolFailed(f"refused: delegation depth limit ({spec.max_depth}) reached")
            if signature not in asked:
                if count["n"] >= spec.max_delegations:
                    raise ToolFailed(
                        f"refused: delegation limit ({spec.max_delegations}) reached; answer now"
                    )
                if spec.token_budget is not None and await used_tokens() >= spec.token_budget:
                    budget = spec.token_budget
                    raise ToolFailed(f"refused: the crew's token budget ({budget}) is spent")
                count["n"] += 1
                asked[signature] = key
            child = await _child(run_child, emit, member, task, context, key)
            if child.status is RunStatus.AWAITING_APPROVAL:
                return Suspended(f"{member} is waiting for an approval", child.run_id)
            if child.status is not RunStatus.SUCCEEDED:
                raise ToolFailed(f"{member} did not finish ({child.status.value}): {child.error}")
            return {"member": member, "answer": child.output}

        return Tool(
            name=f"delegate_to_{re.sub(r'[^a-zA-Z0-9_-]', '_', member)}"[:64],
            description=f"Ask the crew member {member!r} to do a task; returns their answer.",
            input_schema={
                "type": "object",
                "properties": {
                    "task": {"type": "string", "description": "What the member should do."},
                    "context": {"type": "string", "description": "What they need to know."},
                },
                "required": ["task"],
            },
            handler=delegate,
            tags=frozenset({"synthetic", "delegation"}),
            # Idempotent by construction: a repeated call resumes the same child.
            capability=Capability(effect=Effect.NONE, idempotent=True, timeout_s=3600),
        )

    return [make(member) for member in spec.members]


async def _child(
    run_child: ChildRunner, emit, member: str, task: str, context: str, key: str
) -> ChildOutcome:
    await emit("crew.member.started", member=member, key=key)
    child = await run_child(member, task, context, key)
    await emit(
        "crew.member.completed",
        member=member,
        key=key,
        child_run_id=child.run_id,
        status=child.status.value,
        output=child.output[:2000],
        error=child.error,
    )
    return child


def _stopped(child: ChildOutcome, member: str, usage: Usage, outputs) -> RunOutcome:
    if child.status is RunStatus.AWAITING_APPROVAL:
        return RunOutcome(status=RunStatus.AWAITING_APPROVAL, usage=usage)
    status = RunStatus.CANCELLED if child.status is RunStatus.CANCELLED else RunStatus.FAILED
    return RunOutcome(
        status=status,
        output=outputs[-1][1] if outputs else "",
        usage=usage,
        error=f"member {member} ended {child.status.value}: {child.error}".strip(": "),
    )


def _normalise(task: str) -> str:
    return " ".join(task.lower().split())
