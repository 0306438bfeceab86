"""The tool-call step: how the calls of one model response, or one direct call, are approved,
limited, started, executed and recorded. The agent loop, remote agents and every direct call
(REST `tools/{name}/execute`, MCP `tools/call`, the config and admin test pages, and a parked
call once a human decided it) take this one step, so a call is treated the same whoever
made it.

For the given calls, in this order:

1. Recorded: a call whose result is in the state is skipped — never executed twice.
2. Interrupted: a call that started before an interruption (`state.started`) and whose tool
   is not idempotent gets "the outcome of this call is unknown" — never repeated, even if
   approved.
3. Approval: a decided call follows its decision — rejected, it gets "rejected by <who>:
   <why>"; approved, it runs with the approver's arguments if edited. An undecided call that
   the `ApprovalRule` says requires approval waits: nothing is emitted, saved or executed for
   it here; the caller parks the run (or, when nobody can approve — `unattended` — the call
   gets that text as its error). A tool with a preparer (an HTTP tool) is prepared first:
   the waiting call carries the exact request it would send (`ToolCall.prepared`, shown on
   the approval), and once approved sends exactly that request; a call that cannot be
   prepared gets why as its error, without asking anyone. An approved call of such a tool
   without an approved request is never sent.
4. Call limit: calls beyond the run's `max_tool_calls` get "tool call limit reached".
5. Started: `tool.started` for each call about to run, then the checkpoint "tools_started"
   (the recorder writes those events in the checkpoint's statement), durable before any
   executes unless every one is idempotent (then written while they run).
6. Executed, concurrently, through the ToolRegistry (validation, the tool's rate limit,
   timeout, errors as results). A call refused over a rate limit has been started and
   counts toward `max_tool_calls`: a model retrying a limited tool at once still runs out.
7. Each result as it finishes: `tool.rate_limited` if the registry refused it over its
   tool's rate limit, `tool.quota_exceeded` for a model call the tool was refused over a
   quota (the `llm` built-in; agents.quotas), then into the state, the checkpoint
   "tool_result" (written while the run goes on: the next durable checkpoint and the
   outcome are stored after it), then `tool.completed` (stored with it, or after it). A
   `Suspended` result (a child run waits for a human) leaves the call pending,
   unrecorded, to be run again on resume — or, `unattended`, an error saying what the
   person must do (`suspended_refusal`: connect which account, where).

A call of a tool with `depends_on` inputs or reference arguments is completed from the run's
frame (tools/runtime/frames.py) before it is prepared or run — a producer with no result
yet run first when that is safe — or refused saying why; a result is kept in the frame when
other tools take inputs from it, and shown with reference tokens for its declared ids.

A `run_code` call (code mode, agents/runtime/code_mode.py), when the step has a `program`
runner, is neither prepared nor limited itself: its program runs, and each tool call it
makes takes this step as one call (1-7), with its own id, record and events; a call that
waits for a human leaves the run_code call pending and the run parks. Its result is
recorded as in 7, after `code.stopped` when the sandbox stopped the program (a limit, a
refused operation); a replayed program's `code.replayed` names the calls it was answered
from their records.

The refusals of 2-4 are recorded as in 7 (checkpoint, then `tool.completed`, latency 0).
A caller without durable state (a direct call records once, after the call) passes
`NoCheckpoint` and keeps the emitted events: their order is the same.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from agents.runtime import tracing
from agents.runtime.code_mode import RUN_CODE, Program
from agents.runtime.spec import ApprovalPolicy, Decision
from agents.runtime.state import Checkpointer, RunState
from agents.runtime.structured import FINAL_ANSWER
from providers.runtime.types import ToolResultMessage, Usage
from tools.runtime.context import RunContext
from tools.runtime.frames import FrameError
from tools.runtime.registry import ToolRegistry, rate_limited_payload
from tools.runtime.tool import Effect, Suspended, Tool, ToolCall, ToolFailed, ToolResult

Emit = Callable[[str, dict[str, Any]], Awaitable[None]]

NOT_CONFIRMED = (
    "not sent: this call was approved without the exact request it sends (the tool changed "
    "since it was asked for); call it again to have that request confirmed"
)
UNKNOWN_OUTCOME = (
    "the outcome of this call is unknown: it was interrupted while running and is not safe "
    "to repeat; check its effect before trying again"
)


@dataclass(frozen=True)
class ApprovalRule:
    """Which undecided calls wait for a human. flagged: tools whose capability requires
    approval; writes: those plus every write or destructive tool; never: none."""

    policy: ApprovalPolicy = "flagged"

    def requires(self, item: Tool | None) -> bool:
        if item is None or self.policy == "never":
            return False
        if item.capability.requires_approval:
            return True
        writes = item.capability.effect in (Effect.WRITE, Effect.DESTRUCTIVE)
        return self.policy == "writes" and writes


@dataclass
class StepOutcome:
    awaiting: list[ToolCall] = field(default_factory=list)  # wait for a human's decision
    suspended: list[ToolCall] = field(default_factory=list)  # wait on a child run
    results: dict[str, ToolResult] = field(default_factory=dict)  # recorded now, by call id


class ToolCallStep:
    """The step for one run (or one direct call): its tools, context, event sink, checkpoint,
    approval rule, the decisions taken so far and its call limit (None: no limit)."""

    def __init__(
        self,
        *,
        registry: ToolRegistry,
        ctx: RunContext,
        emit: Emit,
        checkpoint: Checkpointer,
        approval: ApprovalRule,
        decisions: Mapping[str, Decision] | None = None,
        max_tool_calls: int | None = None,
        unattended: str | None = None,
        cannot_wait: str = "nothing here can wait for a person",
        via: str | None = None,
        program: Program | None = None,
        final_answer: str = FINAL_ANSWER,
    ) -> None:
        self.registry = registry
        self.ctx = ctx
        self.emit = emit
        self.checkpoint = checkpoint
        self.approval = approval
        self.decisions = decisions or {}
        self.max_tool_calls = max_tool_calls
        self.unattended = unattended  # set: nobody can approve; waiting calls get this error
        self.cannot_wait = cannot_wait  # ...and a suspended call's error says why it failed
        self.via = via  # which face made a direct call, shown in its events
        self.program = program  # runs run_code calls (code mode); None: no code mode
        self.final_answer = final_answer  # the structured output's name in this run

    async def run(self, state: RunState, calls: Sequence[ToolCall]) -> StepOutcome:
        """Take `calls` (usually `state.pending_calls`) through the step; see the module."""
        outcome = StepOutcome()
        to_run: list[ToolCall] = []
        programs: list[ToolCall] = []
        for call in calls:
            if call.id in state.results:
                continue  # recorded before a restart: never run twice
            if self.program is not None and call.name == RUN_CODE:
                programs.append(call)  # (replayed when resumed: its calls are recorded)
                continue
            item = self.registry.get(call.name) if self.registry.has(call.name) else None
            decision = self.decisions.get(call.id)
            if call.id in state.started and not (item and item.capability.idempotent):
                await self._refuse(state, outcome, call, UNKNOWN_OUTCOME)
            elif decision is not None:
                arguments = call.arguments if decision.arguments is None else decision.arguments
                if not decision.approved:
                    reason = f": {decision.reason}" if decision.reason else ""
                    await self._refuse(state, outcome, call, f"rejected by {decision.by}{reason}")
                elif item and item.preparer and decision.prepared is None:
                    await self._refuse(state, outcome, call, NOT_CONFIRMED)
                elif decision.prepared is not None:  # sent exactly as approved (the registry)
                    to_run.append(replace(call, arguments=arguments, prepared=decision.prepared))
                elif filled := await self._inputs(state, outcome, call, item, arguments):
                    to_run.append(filled)
            elif self.approval.requires(item):
                if self.unattended is not None:
                    await self._refuse(state, outcome, call, self.unattended)
                elif item.preparer is None:
                    outcome.awaiting.append(call)
                elif filled := await self._inputs(state, outcome, call, item, call.arguments):
                    try:  # the human confirms the exact request it would send
                        prepared = self.registry.prepare(filled, self.ctx)
                    except ToolFailed as exc:
                        await self._refuse(state, outcome, call, str(exc))
                    else:  # (asked with the model's arguments: an edit is mapped again)
                        outcome.awaiting.append(replace(call, prepared=prepared))
            elif filled := await self._inputs(state, outcome, call, item, call.arguments):
                to_run.append(filled)
        if to_run:
            await self._execute(state, outcome, to_run)
        for call in programs:
            await self._run_program(state, outcome, call)
        return outcome

    async def _run_program(self, state: RunState, outcome: StepOutcome, call: ToolCall) -> None:
        """A run_code call: its program run (or replayed) through Program, its calls through
        this step; parked with the call it waits on, or recorded."""
        assert self.program is not None
        if call.id not in state.started:  # (a replay does not announce it again)
            state.started.add(call.id)
            await self.emit("tool.started", call_payload(call, self.ctx, self.via))
        began = time.perf_counter()
        done = await self.program.run(self, state, call)
        if done.reused:  # a replay: what it was answered from its records, never made again
            await self.emit("code.replayed", {"call_id": call.id, "reused": done.reused})
        if done.awaiting or done.suspended:
            outcome.awaiting.extend(done.awaiting or ())
            outcome.suspended.extend(done.suspended or ())
            return
        assert done.result is not None
        if done.stopped:
            stopped = {"call_id": call.id, "reason": done.stopped, "error": done.result.error}
            await self.emit("code.stopped", stopped)
        latency = (time.perf_counter() - began) * 1000
        await self._record(state, outcome, call, replace(done.result, latency_ms=latency))

    async def _inputs(
        self,
        state: RunState,
        outcome: StepOutcome,
        call: ToolCall,
        item: Tool | None,
        arguments: dict[str, Any],
    ) -> ToolCall | None:
        """The call with `arguments` completed from the run's frame (tools/runtime/frames.py):
        reference tokens mapped back, `depends_on` inputs set. A producer with no result
        yet is run first when it only reads and its inputs are among the arguments. None:
        refused, and recorded as the call's result."""
        if item is None or not (item.depends_on or item.reference_inputs):
            return replace(call, arguments=arguments)
        needs = (arguments, item.depends_on, item.reference_inputs)
        try:
            filled, missing = state.frame.inputs(*needs)
            for producer in dict.fromkeys(source.tool for _, source in missing):
                await self._produce(state, call, producer, filled)
            if missing:
                filled = state.frame.completed(*needs)
        except FrameError as exc:
            await self._refuse(state, outcome, call, str(exc))
            return None
        return replace(call, arguments=filled)

    async def _produce(
        self, state: RunState, call: ToolCall, name: str, arguments: dict[str, Any]
    ) -> None:
        """Run producer `name` for `call`'s inputs, if it is safe to without asking: it only
        reads, needs no approval, takes no inputs from others, its required inputs are all
        among `arguments`, and the run has a call left. Its result goes to the frame only
        (the model did not ask for it); its events name the call it was run for."""
        producer = self.registry.get(name) if self.registry.has(name) else None
        if producer is None or producer.depends_on or self.approval.requires(producer):
            return
        if producer.capability.effect not in (Effect.NONE, Effect.READ):
            return
        schema = producer.input_schema
        if any(r not in arguments for r in schema.get("required", ())):
            return
        if self.max_tool_calls is not None and state.tool_calls >= self.max_tool_calls:
            return
        inputs = {k: v for k, v in arguments.items() if k in schema.get("properties", {})}
        produce = ToolCall(id=f"{call.id}~{name}", name=name, arguments=inputs)
        state.tool_calls += 1
        await self.emit(
            "tool.started", {**call_payload(produce, self.ctx, self.via), "for": call.id}
        )
        result = await self._execute_one(produce)
        if result.error is None:
            state.frame.record(name, result.data)
        await self.checkpoint.save(state, "tool_result", durable=False)
        await self.emit("tool.completed", {**_completed(produce, result), "for": call.id})

    async def _execute(self, state: RunState, outcome: StepOutcome, calls: list[ToolCall]):
        if self.max_tool_calls is None:
            runnable = calls
        else:
            allowed = max(0, self.max_tool_calls - state.tool_calls)
            runnable = calls[:allowed]
            for call in calls[allowed:]:
                await self._refuse(
                    state, outcome, call,
                    f"tool call limit ({self.max_tool_calls}) reached for this run; "
                    "answer with what you have",
                )  # fmt: skip
        if not runnable:
            return
        state.tool_calls += len(runnable)
        state.started.update(call.id for call in runnable)
        for call in runnable:  # before the save: the recorder stores them with it
            await self.emit("tool.started", call_payload(call, self.ctx, self.via))
        # Stored before a call that must never run twice; idempotent ones may start while
        # their record is written (a crash before it is stored runs them again).
        durable = not idempotent(self.registry, runnable)
        await self.checkpoint.save(state, "tools_started", durable=durable)
        if len(runnable) == 1:  # the common case, without the machinery of as_completed
            [call] = runnable
            await self._finished(state, outcome, call, await self._execute_one(call))
            return

        async def one(call: ToolCall) -> tuple[ToolCall, ToolResult]:
            return call, await self._execute_one(call)

        for finished in asyncio.as_completed([one(call) for call in runnable]):
            call, result = await finished
            await self._finished(state, outcome, call, result)

    async def _execute_one(self, call: ToolCall) -> ToolResult:
        with tracing.tool_span(call, self.ctx) as span:
            result = await self.registry.execute(call, self.ctx)
            span.record(result)
            return result

    async def _finished(
        self, state: RunState, outcome: StepOutcome, call: ToolCall, result: ToolResult
    ) -> None:
        if isinstance(result.result, Suspended):
            if self.unattended is None:
                outcome.suspended.append(call)  # stays pending without a result
                if result.result.event is not None:  # what the human is asked to do
                    kind, payload = result.result.event
                    await self.emit(kind, {**payload, "call_id": call.id, "name": call.name})
                return
            error = suspended_refusal(result.result, self.cannot_wait)
            result = replace(result, result=None, error=error)
        if result.rate_limited is not None:  # before the save: stored in its statement
            await self.emit("tool.rate_limited", rate_limited_payload(call.id, result.rate_limited))
        for refusal in self.ctx.usage.take_refusals(call.id):  # a quota refused its model call
            payload = {"call_id": call.id, "name": call.name, **refusal}
            await self.emit("tool.quota_exceeded", payload)
        if spent := self.ctx.usage.take(call.id):  # models the tool asked (the `llm` built-in)
            for t in spent:
                state.usage += Usage(
                    t.input_tokens, t.output_tokens, t.cache_read_tokens, t.cache_write_tokens
                )
            models = [t.to_dict() for t in spent]  # before the save too: saved with the usage
            await self.emit("tool.usage", {"call_id": call.id, "name": call.name, "models": models})
        item = self.registry.get(call.name) if self.registry.has(call.name) else None
        if item is not None and result.error is None:
            if call.name in self._producers:
                state.frame.record(call.name, result.data)
            if item.references:  # the model sees tokens for the ids (frames.py)
                shown = state.frame.shown(result.data, item.references)
                result = replace(result, result=item.view(shown) if item.view else shown)
        await self._record(state, outcome, call, result)

    async def _refuse(
        self, state: RunState, outcome: StepOutcome, call: ToolCall, error: str
    ) -> None:
        await self._record(state, outcome, call, ToolResult(call.id, call.name, error=error))

    async def _record(
        self, state: RunState, outcome: StepOutcome, call: ToolCall, result: ToolResult
    ) -> None:
        failed = result.error is not None
        content = result.error if failed else result_text(result.result)
        state.results[call.id] = ToolResultMessage(call.id, call.name, content, failed)
        if call.name == self.final_answer and not failed:
            state.structured_output = call.arguments
        outcome.results[call.id] = result
        # The result is saved before its event: a crash between the two loses that event but
        # never the result (the model is told what the tool did, not "unknown"). Not waited
        # for: the next durable save, or the outcome, is stored after it.
        await self.checkpoint.save(state, "tool_result", durable=False)
        await self.emit("tool.completed", _completed(call, result))

    @cached_property
    def _producers(self) -> frozenset[str]:
        """The tools others take inputs from: their results are kept in the frame."""
        return frozenset(s.tool for item in self.registry for s in item.depends_on.values())


def idempotent(registry, calls: Sequence[ToolCall]) -> bool:
    """Would running every one of `calls` again change nothing (their tools say so)?"""
    for call in calls:
        item = registry.get(call.name) if registry.has(call.name) else None
        if item is None or not item.capability.idempotent:
            return False
    return True


def _completed(call: ToolCall, result: ToolResult) -> dict[str, Any]:
    return {
        "call_id": call.id,
        "name": call.name,
        "result": result.result,
        "error": result.error,
        "latency_ms": round(result.latency_ms, 3),
    }


def call_payload(call: ToolCall, ctx: RunContext, via: str | None = None) -> dict[str, Any]:
    """A call as its events show it (tool.started, approval.required, inference.completed)."""
    arguments = ctx.secrets.redact(call.arguments)
    payload = {"call_id": call.id, "name": call.name, "arguments": arguments}
    if call.prepared is not None:  # the exact request, credential masked (prepared_request.py)
        payload["prepared_request"] = call.prepared.to_dict()
    if via is not None:
        payload["via"] = via
    return payload


def result_text(result: Any) -> str:
    """A tool's result as the model reads it (and a direct call's run stores as output)."""
    if isinstance(result, str):
        return result
    return json.dumps(result, default=str, ensure_ascii=False)


def suspended_refusal(suspended: Suspended, cannot_wait: str) -> str:
    """The error of a call that waits for a person (`Suspended`) where nobody waits: what
    the person must do, from the event the call would have sent (an account to connect, at
    its link: tools/mcp_oauth), and why it did not run."""
    payload = suspended.event[1] if suspended.event is not None else {}
    if isinstance(payload.get("connect_url"), str):
        return (
            f"not run: it needs your {payload.get('connection')} account connected first, and "
            f"{cannot_wait}; connect it at {payload['connect_url']}, then try again"
        )
    return f"not run: {suspended.reason}, and {cannot_wait}"
