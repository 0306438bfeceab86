"""Workflows: deterministic composition of tool, transform and agent steps.

Control flow is code: `pipe(a, b).then(c).parallel(d, e).branch(pred, f, g)` always runs
the same steps in the same order; only agent steps are adaptive. A value flows through:
each step takes the previous step's output and returns the next value.

    weather = pipe(
        tool_step("geocode", arguments=lambda city: {"name": city}),
        tool_step("forecast", arguments=lambda place: {"lat": place["lat"], "lon": place["lon"]}),
        transform(lambda forecast: forecast["summary"]),
    )
    summary = await weather.run("Paris", WorkflowContext(registry=registry, ctx=ctx))

Everything tenant-specific (the registry, the RunContext, the event sink, model adapters)
arrives at run time in a `WorkflowContext`; a workflow object itself holds none of it, so
one can live in a module global and serve every tenant.

Every step emits `workflow.step.started` / `.completed` / `.failed` (label, input or output
summary, latency) to `WorkflowContext.sink`. The first failing step stops the workflow
with `WorkflowFailed`, whose message names the step. `workflow_tool` turns a workflow into
a Tool, so agents, REST and MCP call it like any other tool.

A tool step's call takes the tool-call step (agents/runtime/tool_step.py), as every tool
call does: its approval rule (`WorkflowContext.approval`; nobody can approve in the middle
of a workflow, so a call that needs approval is refused and fails the step; so does one that
waits for a person to connect their account, saying so), the tool's
rate limit, its events and, for a workflow run as a tool, what the call spent on models
counted as the enclosing call's.

Durable runs: every step has a path in the workflow's tree (`0`, `2.weather`, `3.then`,
`1.0`: its place among its parent's steps, a parallel's key or index, a branch's side).
Given `StepRecords` (`WorkflowContext.records`), a step whose path has a recorded output is
not run again (`workflow.step.reused`); a completed step's output is recorded; a tool step's
call keeps the id `step_<path>` and its call state (started, result), so a write that started
before a crash is never repeated (the tool-call step's rule); an agent step keeps its loop's
state, and resumes from it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from agents.runtime.loop import EventSink, NullSink, run_agent
from agents.runtime.spec import AgentSpec, RunStatus
from agents.runtime.state import NoCheckpoint, RunState
from agents.runtime.tool_step import UNKNOWN_OUTCOME, ApprovalRule, ToolCallStep
from providers.runtime.adapter import ModelAdapter
from providers.runtime.types import Usage
from tools.runtime.context import ConfigurationError, ModelTokens, RunContext, SecretAccessor
from tools.runtime.expectations import ToolExample
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Capability, Effect, Tool, ToolCall, ToolFailed

SUMMARY_CHARS = 500  # step inputs and outputs longer than this (as JSON) are truncated in events
UNATTENDED = (
    "not run: this tool needs approval, which a workflow step cannot wait for; a workflow "
    "tool whose capability declares it (requires_approval, or effect write for a tool that "
    "writes) is approved as a whole when it is called"
)

# A call that waits for a person (to connect their account to an MCP server) fails its step:
# a declared workflow's run does not park for a person (docs/workflows.md).
CANNOT_WAIT = "a workflow step cannot wait for a person to act"

FLAGGED = ApprovalRule("flagged")  # a workflow run outside a workflow tool: flagged tools wait

RegistrySource = ToolRegistry | Callable[[RunContext], ToolRegistry | Awaitable[ToolRegistry]]


class WorkflowFailed(Exception):
    """A step failed; the workflow stopped there. `str()` names the step for the reader
    (a model, when the workflow runs as a tool)."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"step {step!r} failed: {message}")
        self.step = step
        self.message = message


@dataclass(frozen=True)
class WorkflowContext:
    """What the steps of one workflow run use: passed to `Workflow.run`, never stored.

    `registry` runs tool steps and is the registry agent steps filter their tools from.
    `adapter_for(spec)` gives the model adapter of an agent step built without one.
    `approval`: which tool steps' calls need approval, and so are refused (nobody can
    approve in the middle of a workflow); a workflow tool sets it from its capability.
    """

    registry: ToolRegistry
    ctx: RunContext
    sink: EventSink | None = None
    adapter_for: Callable[[AgentSpec], ModelAdapter] | None = None
    approval: ApprovalRule = FLAGGED
    records: StepRecords | None = None  # a durable run's steps (None: nothing is kept)
    path: str = ""  # the running step's place in the workflow (set by the parent step)


SaveRecords = Callable[[dict[str, Any], bool], Awaitable[None]]


class StepRecords:
    """What a durable workflow run keeps of its steps, by path: the outputs of completed
    steps, and the call state of tool and agent steps under way. `save(document, durable)`
    stores `to_dict()` (a run's checkpoint); durable: return once it is stored. A step's
    output is recorded when it completes (one write per step, waited for unless the step is
    `replayable`), and its descendants'
    records are dropped then (the step's output covers them), as is the output of the step
    before it in its sequence (a sequence goes on from its last completed step). Outputs that
    are not JSON are not recorded: such a step (a Python transform's) runs again."""

    def __init__(self, saved: dict[str, Any] | None = None, save: SaveRecords | None = None):
        saved = saved or {}
        self.outputs: dict[str, Any] = dict(saved.get("outputs", {}))
        self.calls: dict[str, dict[str, Any]] = dict(saved.get("calls", {}))
        self.usage = Usage(*saved.get("usage", ()))  # the tokens of its steps' model calls
        # The same calls by model, to be priced at each one's: ModelTokens dicts, an agent
        # step's own calls with its agent's name (its connection is the run's to know).
        self.spent: list[dict[str, Any]] = list(saved.get("spent", []))
        self._save = save

    def spend(self, models: list[dict[str, Any]], *, counted: bool = False) -> None:
        """Keep what a step spent on models (`counted`: its tokens are in `usage` already);
        one entry per connection, agent and model."""
        for model in models:
            tokens = Usage(*(int(model.get(f) or 0) for f in _TOKEN_FIELDS))
            if not counted:
                self.usage += tokens
            key = (model.get("connection", ""), model.get("agent", ""), model.get("model", ""))
            for entry in self.spent:
                if (entry.get("connection", ""), entry.get("agent", ""), entry["model"]) == key:
                    for f in _TOKEN_FIELDS:
                        entry[f] = int(entry.get(f) or 0) + int(model.get(f) or 0)
                    break
            else:
                self.spent.append({k: v for k, v in model.items() if v != ""})

    def to_dict(self) -> dict[str, Any]:
        usage = self.usage
        spent = [
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
        ]
        return {  # copies: a save not waited for is written after later steps change them
            "outputs": dict(self.outputs),
            "calls": dict(self.calls),
            **({"usage": spent} if any(spent) else {}),
            **({"spent": self.spent} if self.spent else {}),
        }

    def output(self, path: str) -> tuple[bool, Any]:
        """(True, output) when the step at `path` completed before; else (False, None)."""
        if path in self.outputs:
            return True, self.outputs[path]
        return False, None

    async def completed(self, path: str, output: Any, *, durable: bool = True) -> None:
        try:
            json.dumps(output)
        except (TypeError, ValueError):
            return
        below = f"{path}."
        for kept in (self.outputs, self.calls):
            for key in [k for k in kept if k.startswith(below) or k == path]:
                del kept[key]
        self.outputs[path] = output
        await self.store(durable=durable)

    def resume_at(self, parent: str, count: int) -> int:
        """Where a sequence of `count` steps under `parent` goes on: its last step with a
        recorded output (reused), or its first. The steps before it are not run again."""
        for index in range(count - 1, -1, -1):
            if _path(parent, str(index)) in self.outputs:
                return index
        return 0

    def forget(self, path: str) -> None:
        """Drop a step's output (written with the next save): a later step's covers it."""
        self.outputs.pop(path, None)

    def call_state(self, path: str) -> RunState | None:
        saved = self.calls.get(path)
        return RunState.from_dict(saved) if saved is not None else None

    def checkpoint(self, path: str, *, persist: frozenset[str] | None = None) -> _CallCheckpoint:
        """A checkpointer keeping a tool or agent step's call state under `path`; stored at
        the reasons in `persist` (None: every one), else kept until the step completes."""
        return _CallCheckpoint(self, path, persist)

    async def store(self, *, durable: bool) -> None:
        if self._save is not None:
            await self._save(self.to_dict(), durable)


class _CallCheckpoint:
    def __init__(self, records: StepRecords, path: str, persist: frozenset[str] | None) -> None:
        self.records, self.path, self.persist = records, path, persist

    async def save(self, state: RunState, reason: str, *, durable: bool = True) -> None:
        self.records.calls[self.path] = state.to_dict()
        if self.persist is None or reason in self.persist:
            await self.records.store(durable=durable)


class Step:
    """One unit of a workflow: `await step.run(value, wctx)` returns the next value.
    Subclass it for a custom step; errors it raises fail the workflow at `label`."""

    label: str = "step"
    # Its output may be recorded without waiting for the write: a step that only computes
    # (a transform) is simply run again by a resume that does not find it.
    replayable: ClassVar[bool] = False

    async def run(self, value: Any, wctx: WorkflowContext) -> Any:
        raise NotImplementedError


StepLike = Step | Callable[[Any], Any]  # a plain function is a transform


# -- the steps ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolStep(Step):
    name: str
    arguments: Callable[[Any], dict[str, Any]] | None = None
    into: str | None = None
    label: str = ""  # default: the tool's name

    def __post_init__(self) -> None:
        object.__setattr__(self, "label", self.label or self.name)

    async def run(self, value: Any, wctx: WorkflowContext) -> Any:
        """One call through the tool-call step. With records (a durable run), the call is
        `step_<path>`, and its state is stored before a call that is not idempotent runs:
        after a crash, its recorded result is reused, and a call interrupted in flight is
        not repeated (it fails the step: "the outcome of this call is unknown")."""
        arguments = value if self.arguments is None else self.arguments(value)
        records = wctx.records
        state = records.call_state(wctx.path) if records is not None else None
        if state is not None:
            call = state.pending_calls[0]
        else:
            call_id = f"step_{wctx.path}" if records is not None else f"wf_{uuid.uuid4().hex[:12]}"
            call = ToolCall(id=call_id, name=self.name, arguments=arguments)
            state = RunState(pending_calls=[call])
        # The call's start is stored (durably unless the tool is idempotent), its result
        # with the step's output, in one write, once the step completes.
        checkpoint = (
            records.checkpoint(wctx.path, persist=frozenset({"tools_started"}))
            if records is not None
            else NoCheckpoint()
        )
        step = ToolCallStep(
            registry=wctx.registry,
            ctx=wctx.ctx,
            emit=_ToolEvents(wctx, self.label).emit,
            checkpoint=checkpoint,
            approval=wctx.approval,
            unattended=UNATTENDED,
            cannot_wait=CANNOT_WAIT,
        )
        outcome = await step.run(state, [call])
        result = outcome.results.get(call.id)
        if result is None:  # recorded before an interruption, not yet the step's output
            recorded = state.results[call.id]
            if recorded.is_error:
                raise WorkflowFailed(self.label, recorded.content)
            return _store(value, self.into, _recorded_value(recorded.content))
        if result.error is not None:
            if records is not None and result.error != UNKNOWN_OUTCOME:
                # It ended, failing: a resumed run calls it again. (A call interrupted in
                # flight stays recorded: it is never repeated.)
                records.calls.pop(wctx.path, None)
                await records.store(durable=True)
            raise WorkflowFailed(self.label, result.error)
        # The registry's view of the result, not the reference tokens a model is shown for
        # its ids (tools/runtime/frames.py): the workflow is code, and goes on with the ids.
        item = wctx.registry.get(self.name)
        return _store(value, self.into, item.view(result.data) if item.view else result.data)


@dataclass(frozen=True)
class Transform(Step):
    function: Callable[[Any], Any]
    label: str = ""  # default: the function's name
    replayable: ClassVar[bool] = True

    def __post_init__(self) -> None:
        name = getattr(self.function, "__name__", "<transform>")
        readable = "transform" if name.startswith("<") else name  # "<lambda>" says nothing
        object.__setattr__(self, "label", self.label or readable)

    async def run(self, value: Any, wctx: WorkflowContext) -> Any:
        return await _maybe_await(self.function(value))


@dataclass(frozen=True)
class AgentStep(Step):
    spec: AgentSpec
    adapter: ModelAdapter | None = None
    prompt: Callable[[Any], str] | None = None
    into: str | None = None
    label: str = ""  # default: the agent's name

    def __post_init__(self) -> None:
        object.__setattr__(self, "label", self.label or self.spec.name)

    async def run(self, value: Any, wctx: WorkflowContext) -> Any:
        adapter = self.adapter
        if adapter is None and wctx.adapter_for is not None:
            adapter = wctx.adapter_for(self.spec)
        if adapter is None:
            raise ConfigurationError(
                f"no model adapter for agent {self.spec.name!r}: pass adapter= to agent_step "
                "or adapter_for= to the WorkflowContext"
            )
        records = wctx.records
        state = records.call_state(wctx.path) if records is not None else None
        events = _AgentEvents(wctx.sink or NullSink(), self.label)
        outcome = await run_agent(
            spec=self.spec,
            adapter=adapter,
            registry=wctx.registry,
            ctx=wctx.ctx,
            state=state,  # a durable run's: the loop resumes where it was
            input=(self.prompt or _as_prompt)(value),
            sink=events,
            checkpoint=records.checkpoint(wctx.path) if records is not None else None,
        )
        if records is not None:  # stored with the step's output, as it completes
            records.usage += outcome.usage
            # Its tools' model calls at their models; the rest are its agent's own.
            tools = Usage()
            for model in events.tools_spent:
                tools += Usage(*(int(model.get(f) or 0) for f in _TOKEN_FIELDS))
            records.spend(events.tools_spent, counted=True)
            own = [
                max(a - b, 0) for a, b in zip(_tokens(outcome.usage), _tokens(tools), strict=True)
            ]
            if any(own):
                entry = {"agent": self.spec.name, "model": self.spec.model}
                records.spend(
                    [{**entry, **dict(zip(_TOKEN_FIELDS, own, strict=True))}], counted=True
                )
        if outcome.status is not RunStatus.SUCCEEDED:
            reason = f": {outcome.error}" if outcome.error else ""
            raise WorkflowFailed(
                self.label, f"agent {self.spec.name!r} ended {outcome.status.value}{reason}"
            )
        output = outcome.output if self.spec.output_schema is None else outcome.structured_output
        return _store(value, self.into, output)


@dataclass(frozen=True)
class Parallel(Step):
    branches: tuple[Step, ...]
    keys: tuple[str, ...] | None = None  # keyword branches: the output is a dict
    label: str = "parallel"

    async def run(self, value: Any, wctx: WorkflowContext) -> Any:
        names = self.keys or [str(i) for i in range(len(self.branches))]
        results = await _all_or_nothing(
            [
                _run_step(b, value, wctx, _path(wctx.path, name))
                for b, name in zip(self.branches, names, strict=True)
            ]
        )
        if self.keys is None:
            return results
        return dict(zip(self.keys, results, strict=True))


@dataclass(frozen=True)
class Branch(Step):
    predicate: Callable[[Any], Any]
    if_true: Step
    if_false: Step | None = None  # None: the value goes on unchanged
    label: str = "branch"

    async def run(self, value: Any, wctx: WorkflowContext) -> Any:
        taken = bool(await _maybe_await(self.predicate(value)))
        chosen = self.if_true if taken else self.if_false
        if chosen is None:
            return value
        return await _run_step(chosen, value, wctx, _path(wctx.path, "then" if taken else "else"))


@dataclass(frozen=True)
class Workflow(Step):
    """Steps run in order. Immutable: `then`, `parallel` and `branch` return a new
    Workflow. A Workflow is a Step, so workflows nest."""

    steps: tuple[Step, ...] = ()
    label: str = "workflow"

    def then(self, step: StepLike) -> Workflow:
        return replace(self, steps=(*self.steps, _as_step(step)))

    def parallel(self, *steps: StepLike, label: str = "parallel", **named: StepLike) -> Workflow:
        return self.then(parallel(*steps, label=label, **named))

    def branch(
        self,
        predicate: Callable[[Any], Any],
        if_true: StepLike,
        if_false: StepLike | None = None,
        *,
        label: str = "branch",
    ) -> Workflow:
        return self.then(branch(predicate, if_true, if_false, label=label))

    async def run(self, value: Any, wctx: WorkflowContext) -> Any:
        """Run every step on the previous one's output; raises WorkflowFailed naming the
        first step that failed (later steps do not run)."""
        records, start = wctx.records, 0
        if records is not None:  # resumed: from the last step that completed
            start = records.resume_at(wctx.path, len(self.steps))
        for index in range(start, len(self.steps)):
            value = await _run_step(self.steps[index], value, wctx, _path(wctx.path, str(index)))
            if records is not None and index > start:  # the step before is covered by this one
                records.forget(_path(wctx.path, str(index - 1)))
        return value


# -- constructors ------------------------------------------------------------------------
def pipe(*steps: StepLike, label: str = "workflow") -> Workflow:
    """A workflow running `steps` in order; plain functions become transforms."""
    return Workflow(steps=tuple(_as_step(step) for step in steps), label=label)


def tool_step(
    name: str,
    arguments: Callable[[Any], dict[str, Any]] | None = None,
    *,
    into: str | None = None,
    label: str | None = None,
) -> ToolStep:
    """Run the registry's tool `name` with `arguments(value)` (default: the value itself,
    which must then be a dict). A tool error fails the step. The output is the tool's
    result, or with `into`, the input dict plus the result under that key."""
    return ToolStep(name=name, arguments=arguments, into=into, label=label or "")


def transform(function: Callable[[Any], Any], *, label: str | None = None) -> Transform:
    """Apply a Python function (sync or async) to the value. A sync function runs on the
    event loop: keep it quick, and put blocking I/O in a tool."""
    return Transform(function=function, label=label or "")


def agent_step(
    spec: AgentSpec,
    *,
    adapter: ModelAdapter | None = None,
    prompt: Callable[[Any], str] | None = None,
    into: str | None = None,
    label: str | None = None,
) -> AgentStep:
    """Run an agent with `prompt(value)` (default: the value as text, JSON for data) as its
    input; the output is its answer (its structured output when the spec has an output
    schema). Any outcome but succeeded fails the step — including awaiting approval, so
    give workflow agents tools that need none. Without `adapter`, the WorkflowContext's
    `adapter_for(spec)` supplies one at run time. Costs the agent's model calls."""
    return AgentStep(spec=spec, adapter=adapter, prompt=prompt, into=into, label=label or "")


def parallel(*steps: StepLike, label: str = "parallel", **named: StepLike) -> Parallel:
    """Run branches concurrently on the same input. Positional branches give a list in
    their order; keyword branches give a dict by keyword (do not mix the two). The first
    failure cancels the other branches."""
    if steps and named:
        raise ValueError("give parallel branches either positionally or by keyword, not both")
    if not steps and not named:
        raise ValueError("parallel needs at least one branch")
    if named:
        return Parallel(tuple(_as_step(s) for s in named.values()), tuple(named), label)
    return Parallel(tuple(_as_step(s) for s in steps), None, label)


def branch(
    predicate: Callable[[Any], Any],
    if_true: StepLike,
    if_false: StepLike | None = None,
    *,
    label: str = "branch",
) -> Branch:
    """Run `if_true` when `predicate(value)` (sync or async) is truthy, else `if_false`
    (or pass the value on unchanged when it is None)."""
    otherwise = None if if_false is None else _as_step(if_false)
    return Branch(predicate=predicate, if_true=_as_step(if_true), if_false=otherwise, label=label)


# -- workflow as tool --------------------------------------------------------------------
_RUNNING_WORKFLOW_TOOLS: ContextVar[frozenset[str]] = ContextVar(
    "running_workflow_tools", default=frozenset()
)


def workflow_tool(
    workflow: Workflow,
    *,
    name: str,
    description: str,
    input_schema: dict[str, Any],
    registry: RegistrySource,
    output_schema: dict[str, Any] | None = None,
    capability: Capability | None = None,
    tags: frozenset[str] | set[str] = frozenset(),
    examples: tuple[dict[str, Any] | ToolExample, ...] = (),
    adapter_for: Callable[[AgentSpec], ModelAdapter] | None = None,
) -> Tool:
    """A Tool whose handler runs `workflow` on the call's (validated) arguments.

    `registry` is the registry the steps use: a ToolRegistry, or a function of the call's
    RunContext returning one (or an awaitable of one), e.g. the tenant's registry. The
    tool itself is removed from it, and a workflow tool already running in the same call
    chain refuses to start again, so workflows cannot recurse. `capability` must cover the
    strongest effect of the workflow's steps: approval policies read it, and a step whose
    tool needs more than it declares is refused (`steps_approval`). Step events go to
    the RunContext's `events` callback when there is one. A failed step becomes ToolFailed
    naming the step, which the model reads.
    """
    capability = capability or Capability()

    async def handler(arguments: dict[str, Any], ctx: RunContext) -> Any:
        running = _RUNNING_WORKFLOW_TOOLS.get()
        if name in running:
            raise ToolFailed(f"workflow {name!r} is already running in this call chain")
        token = _RUNNING_WORKFLOW_TOOLS.set(running | {name})
        try:
            steps_registry = registry(ctx) if callable(registry) else registry
            steps_registry = await _maybe_await(steps_registry)
            wctx = WorkflowContext(
                registry=steps_registry.filter(exclude=[name]),
                ctx=ctx,
                sink=_CallbackEvents(ctx.events) if ctx.events is not None else None,
                adapter_for=adapter_for,
                approval=steps_approval(capability),
            )
            return await workflow.run(arguments, wctx)
        except WorkflowFailed as exc:
            raise ToolFailed(str(exc)) from exc
        finally:
            _RUNNING_WORKFLOW_TOOLS.reset(token)

    return Tool(
        name=name,
        description=description,
        input_schema=input_schema,
        handler=handler,
        output_schema=output_schema,
        tags=frozenset({"workflow", *tags}),
        examples=tuple(e.arguments if isinstance(e, ToolExample) else e for e in examples),
        capability=capability,
        selftests=tuple(e for e in examples if isinstance(e, ToolExample)),
    )


def steps_approval(capability: Capability) -> ApprovalRule:
    """Which tool steps of a workflow tool with `capability` need an approval of their own,
    and so are refused: what the workflow declares was approved with its call wherever the
    caller's policy asks (requires_approval: every step is covered; a write: steps that
    write are, tools flagged as needing approval are not); a workflow declaring no write
    may run no tool that writes."""
    if capability.requires_approval:
        return ApprovalRule("never")
    if capability.effect in (Effect.WRITE, Effect.DESTRUCTIVE):
        return ApprovalRule("flagged")
    return ApprovalRule("writes")


# -- internals ---------------------------------------------------------------------------
async def _run_step(step: Step, value: Any, wctx: WorkflowContext, path: str) -> Any:
    """Run the step at `path` between its started and completed/failed events; with records,
    a step completed before is not run again, and its output is recorded once it completes."""
    sink = wctx.sink or NullSink()
    secrets = wctx.ctx.secrets
    named = {"step": step.label, "path": path}
    if wctx.records is not None:
        done, output = wctx.records.output(path)
        if done:
            await sink.emit("workflow.step.reused", {**named, "output": _summary(output, secrets)})
            return output
    await sink.emit("workflow.step.started", {**named, "input": _summary(value, secrets)})
    started = time.perf_counter()
    try:
        output = await step.run(value, replace(wctx, path=path))
    except Exception as exc:
        failure = exc if isinstance(exc, WorkflowFailed) else WorkflowFailed(step.label, _why(exc))
        await sink.emit(
            "workflow.step.failed",
            {**named, "error": secrets.redact(str(failure)), "latency_ms": _ms(started)},
        )
        if failure is exc:
            raise
        raise failure from exc
    if wctx.records is not None:
        await wctx.records.completed(path, output, durable=not step.replayable)
    await sink.emit(
        "workflow.step.completed",
        {**named, "output": _summary(output, secrets), "latency_ms": _ms(started)},
    )
    return output


def _path(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name


def _recorded_value(content: str) -> Any:
    """A tool result as its record holds it (the text a model reads): JSON read back; text
    that is not JSON, as it is. A result recorded but not yet a step's output is rare:
    the records store it with the output."""
    try:
        return json.loads(content)
    except ValueError:
        return content


async def _all_or_nothing(coroutines: list[Coroutine[Any, Any, Any]]) -> list[Any]:
    """Results in order; the first failure cancels the rest and is raised."""
    tasks = [asyncio.ensure_future(coroutine) for coroutine in coroutines]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class _AgentEvents:
    """An agent step's events, renamed `workflow.agent.<type>` so that e.g. its
    `run.completed` is never read as the end of the run the workflow belongs to."""

    wants_text_deltas = False

    def __init__(self, sink: EventSink, step: str) -> None:
        self.sink = sink
        self.step = step
        self.tools_spent: list[dict[str, Any]] = []  # what its tools' own model calls spent

    async def emit(self, type: str, payload: dict[str, Any]) -> None:
        if type == "tool.usage":
            self.tools_spent.extend(payload["models"])
        await self.sink.emit(f"workflow.agent.{type}", {"step": self.step, **payload})


class _ToolEvents:
    """A tool step's events from the tool-call step, renamed `workflow.tool.<type>` with the
    step's label (a model's own `tool.*` events stay the run's). What the call spent on
    models, and any model call a quota refused it, become the enclosing tool call's, so the
    run that called the workflow counts them (its step takes them by that call's id)."""

    def __init__(self, wctx: WorkflowContext, step: str) -> None:
        self.wctx = wctx
        self.step = step

    async def emit(self, type: str, payload: dict[str, Any]) -> None:
        usage, enclosing = self.wctx.ctx.usage, self.wctx.ctx.call_id
        if type == "tool.usage":
            for model in payload["models"]:
                usage.add(enclosing, ModelTokens(**model))
            if self.wctx.records is not None:  # a durable run's: priced as the run's
                self.wctx.records.spend(payload["models"])
        elif type == "tool.quota_exceeded":
            usage.refuse(
                enclosing, {k: v for k, v in payload.items() if k not in ("call_id", "name")}
            )
        if self.wctx.sink is not None:
            await self.wctx.sink.emit(f"workflow.{type}", {"step": self.step, **payload})


class _CallbackEvents:
    """RunContext.events (a plain callback) as an event sink."""

    wants_text_deltas = False

    def __init__(self, callback: Callable[[str, dict[str, Any]], None]) -> None:
        self.callback = callback

    async def emit(self, type: str, payload: dict[str, Any]) -> None:
        self.callback(type, payload)


def _as_step(step: StepLike) -> Step:
    if isinstance(step, Step):
        return step
    if callable(step):
        return transform(step)
    raise TypeError(f"a workflow step is a Step or a function, not {type(step).__name__}")


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _store(value: Any, into: str | None, result: Any) -> Any:
    if into is None:
        return result
    if not isinstance(value, dict):
        raise TypeError(f"into={into!r} needs a dict input, not {type(value).__name__}")
    return {**value, into: result}


def _as_prompt(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)


def _why(exc: Exception) -> str:
    if isinstance(exc, ToolFailed):  # a message written for the reader
        return str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {exc}"


def _summary(value: Any, secrets: SecretAccessor) -> Any:
    """`value` itself when it is JSON of at most SUMMARY_CHARS; else its JSON (or repr)
    cut to that length. Known secrets are redacted either way."""
    value = secrets.redact(value)
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = secrets.redact(repr(value))
    else:
        if len(text) <= SUMMARY_CHARS:
            return value
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS] + "…"


_TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def _tokens(usage: Usage) -> tuple[int, int, int, int]:
    return (
        usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens
    )  # fmt: skip


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
