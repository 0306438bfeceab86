"""The agent loop: reason (call the model), act (run tool calls), observe (append results),
until the model answers, a limit is hit, a human must approve, or the run is cancelled.

Everything a run needs is passed in: the adapter, the tenant's registry, a RunContext,
the state to start from, and the caller's checkpointer, event sink and cancel check. The
"act" part is the tool-call step every caller of tools shares (agents/runtime/tool_step.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from agents.runtime import tracing
from agents.runtime.claims import evidence
from agents.runtime.client_request import CLIENT_TAG, SYNTHETIC_TOOLS, platform_name
from agents.runtime.code_mode import with_code_mode
from agents.runtime.memory import FactStore, memory_tools, store_for_run
from agents.runtime.prompt import compose_system_prompt
from agents.runtime.spec import AgentSpec, Decision, RunOutcome, RunStatus
from agents.runtime.state import Checkpointer, NoCheckpoint, RunState
from agents.runtime.steering import Steering
from agents.runtime.structured import FINAL_ANSWER, final_answer_tool
from agents.runtime.tool_routing import RoundTools, ToolRouting
from agents.runtime.tool_step import ApprovalRule, ToolCallStep, call_payload, idempotent
from providers.runtime.adapter import ModelAdapter
from providers.runtime.errors import ModelBehaviorError, ProviderError
from providers.runtime.estimates import cut_usage
from providers.runtime.types import (
    AssistantMessage,
    Done,
    Message,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCallEvent,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from tools.runtime.context import RunContext
from tools.runtime.frames import Frame
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import ToolCall

CANCEL_CHECK_INTERVAL_S = 0.25
_ASK_AGAIN = ModelResponse()  # the model's output was unusable; it has been told why


@dataclass
class _Delivered:
    """What a model call's stream gave before it ended: its text and its tool calls."""

    text: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    def usage(self, request: ModelRequest) -> Usage:
        """What a call cut before its end (cancelled, broken off) is recorded at: what it
        gave, as the meter settles it (quotas.MeteredAdapter)."""
        return cut_usage(request, "".join(self.text), self.calls)


class EventSink(Protocol):
    wants_text_deltas: bool

    async def emit(self, type: str, payload: dict[str, Any]) -> None: ...


class NullSink:
    wants_text_deltas = False

    async def emit(self, type: str, payload: dict[str, Any]) -> None:
        return None


def agent_registry(
    spec: AgentSpec, registry: ToolRegistry, facts: FactStore | None = None
) -> ToolRegistry:
    """The filtered registry the agent sees, plus its synthetic tools."""
    if spec.tool_names is None and not spec.tool_tags:
        chosen = registry.filter(exclude=spec.tool_exclude)
    else:
        chosen = registry.filter(
            names=spec.tool_names or (), tags=spec.tool_tags, exclude=spec.tool_exclude
        )
    if spec.memory and facts is not None:
        for item in memory_tools(facts):
            chosen.register(item, replace=True)
    if spec.output_schema is not None:
        chosen.register(final_answer_tool(spec.output_schema), replace=True)
    if spec.client_tools:  # the platform's synthetic tools give way to the caller's names
        chosen = ToolRegistry(
            replace(item, name=platform_name(item.name, spec.client_tools))
            if item.name in SYNTHETIC_TOOLS
            else item
            for item in chosen
        )
    for item in spec.client_tools:  # (a clash with the agent's own was refused at the start)
        if not chosen.has(item.name):
            chosen.register(item)
    return chosen


async def run_agent(
    *,
    spec: AgentSpec,
    adapter: ModelAdapter,
    registry: ToolRegistry,
    ctx: RunContext,
    state: RunState | None = None,
    input: str | None = None,
    history: Sequence[Message] = (),
    conversation: Sequence[Message] | None = None,
    context_blocks: Sequence[tuple[str, str]] = (),
    decisions: Mapping[str, Decision] | None = None,
    facts: FactStore | None = None,
    sink: EventSink | None = None,
    checkpoint: Checkpointer | None = None,
    is_cancelled: Callable[[], Awaitable[bool]] | None = None,
    routing: ToolRouting | None = None,
    frame: Frame | None = None,
    steering: Steering | None = None,
) -> RunOutcome:
    """Run (or resume, when `state` is given) one agent run. Never raises for model or
    tool trouble: the outcome's status and error say what happened. `conversation`: the
    whole conversation to start from (an API caller's), instead of `history` + `input`.
    `routing`: how to offer a few of many tools each round (agents/runtime/tool_routing.py).
    `frame`: the conversation's so far, for a new run (tools/runtime/frames.py).
    `steering`: a person's messages to the running loop (agents/runtime/steering.py): its
    poll replaces the cancel check before each model call."""
    loop = _Loop(
        spec=spec,
        adapter=adapter,
        tools=agent_registry(spec, registry, store_for_run(facts, ctx)),
        ctx=ctx,
        context_blocks=context_blocks,
        decisions=dict(decisions or {}),
        sink=sink or NullSink(),
        checkpoint=checkpoint or NoCheckpoint(),
        is_cancelled=is_cancelled,
        routing=routing,
        steering=steering,
    )
    fresh = state is None
    if state is None and conversation is not None:
        state = RunState(messages=list(conversation))
    elif state is None:
        state = RunState(messages=[*history, UserMessage(input or "")])
    if fresh and frame is not None:
        state.frame = frame
    return await loop.run(state, fresh=fresh)


class _Loop:
    def __init__(
        self, *, spec, adapter, tools, ctx, context_blocks, decisions, sink, checkpoint,
        is_cancelled, routing=None, steering=None,
    ) -> None:  # fmt: skip
        self.spec: AgentSpec = spec
        self.adapter: ModelAdapter = adapter
        self.tools: ToolRegistry = tools
        self.ctx: RunContext = ctx
        # (those the registry holds as the caller's: never one of the platform's own names)
        self.client_tools = frozenset(
            t.name for t in tools if CLIENT_TAG in t.tags and t in spec.client_tools
        )
        self.final_answer = platform_name(
            FINAL_ANSWER, spec.client_tools
        )  # (the caller's may take it)
        self.total_tools = len(tools)
        self.program = None  # code mode: run_code's programs reach the tools (code_mode.py)
        offered = tools
        if spec.code_mode:
            self.program, offered = with_code_mode(
                tools, spec.code_limits, self.client_tools, final_answer=self.final_answer
            )
            routing = None  # (the model is offered run_code, not the tools themselves)
        forced = spec.tool_choice if spec.tool_choice not in ("auto", "none", "required") else ""
        self.round_tools = RoundTools(
            routing,
            offered,
            client_tools=self.client_tools,
            forced=forced,
            synthetic=[platform_name(name, spec.client_tools) for name in SYNTHETIC_TOOLS],
        )
        if self.round_tools.active:
            if routing.selection_model:
                self.round_tools.use_model(self._select_tools)
            always = tools.filter(names=sorted(self.round_tools.always))
            self.system = compose_system_prompt(spec, always, context_blocks, routed=True)
        else:
            self.system = compose_system_prompt(spec, offered, context_blocks)
        self._selection_usage = Usage()
        self.decisions: dict[str, Decision] = decisions
        self.sink: EventSink = sink
        self.checkpoint: Checkpointer = checkpoint
        self.is_cancelled = is_cancelled
        self._last_cancel_check = 0.0
        self.steering: Steering | None = steering
        self._steers_unread = False  # resumed: read once whatever the flag says

    async def emit(self, type: str, **payload: Any) -> None:
        await self.sink.emit(type, payload)

    async def run(self, state: RunState, *, fresh: bool) -> RunOutcome:
        if fresh:
            await self.emit("run.started", model=self.spec.model, agent=self.spec.name)
        self._steers_unread = not fresh
        try:
            return await self._run(state)
        except asyncio.CancelledError:
            raise
        except ProviderError as exc:
            return await self._finish(state, RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}")

    async def _run(self, state: RunState) -> RunOutcome:
        if state.finished:  # decided before an interruption: report it, call nothing
            if state.finished == RunStatus.AWAITING_CLIENT:  # (with the calls it ended on)
                last = state.messages[-1]
                calls = list(last.tool_calls) if isinstance(last, AssistantMessage) else []
                return await finish_run(
                    self.checkpoint, self.emit, state, RunStatus.AWAITING_CLIENT,
                    client_calls=calls,
                )  # fmt: skip
            return await self._finish(state, RunStatus(state.finished), error=state.error)
        while True:
            # Before each model call and each call that must not run twice; idempotent calls
            # go on (a stop asked meanwhile is seen before the model is asked again).
            acts = not state.pending_calls or not idempotent(self.tools, state.pending_calls)
            # Before a model call (no calls pending, rounds left) steering messages join.
            steers = not state.pending_calls and state.rounds < self.spec.max_rounds
            if acts and await self._round_check(state, steers=steers):
                return await self._finish(state, RunStatus.CANCELLED, error="cancelled")
            if state.pending_calls:
                awaiting, suspended = await self._resolve_pending(state)
                if awaiting or suspended:
                    return await self._park(state, awaiting, suspended)
                done = await self._after_tools(state)
                if done is not None:
                    return done
                continue  # (to the cancel check: one asked while the tools ran ends it here)
            if state.rounds >= self.spec.max_rounds:
                return await self._finish(
                    state, RunStatus.MAX_ROUNDS, error=f"stopped after {state.rounds} rounds"
                )
            response = await self._infer(state)
            if response is None:  # cancelled mid-stream
                return await self._finish(state, RunStatus.CANCELLED, error="cancelled")
            if response is _ASK_AGAIN:
                continue
            budget = self.spec.max_tokens_per_run
            used = state.usage.input_tokens + state.usage.output_tokens
            if budget is not None and used > budget:
                return await self._finish(
                    state, RunStatus.FAILED, error=f"token budget of {budget} exceeded ({used})"
                )
            if response.tool_calls and self.client_tools:
                calls = [c for c in response.tool_calls if c.name in self.client_tools]
                if calls:
                    return await self._hand_to_client(state, calls)
            if response.tool_calls:
                # No checkpoint yet: the next step saves before any call runs or parks; a
                # crash in between only asks the model again.
                state.pending_calls = list(response.tool_calls)
                continue
            if self.spec.output_schema is not None:
                state.structured_attempts += 1
                if state.structured_attempts > self.spec.structured_retries:
                    return await self._finish(
                        state, RunStatus.FAILED, error=f"no valid {self.final_answer} was given"
                    )
                state.messages.append(
                    UserMessage(f"Give your answer by calling the {self.final_answer} tool.")
                )
                await self.checkpoint.save(state, "model_response", durable=False)
                continue
            return await self._finish(state, RunStatus.SUCCEEDED)

    # -- reason ----------------------------------------------------------------------
    async def _infer(self, state: RunState) -> ModelResponse | None:
        spec = self.spec
        # A forced choice holds for the first round only (else every round would call a
        # tool again); "none" holds throughout.
        choice = spec.tool_choice if state.rounds == 0 or spec.tool_choice == "none" else "auto"
        without_tools = spec.results_without_tools and state.tool_calls  # (this run's)
        if without_tools:
            tools = [t for t in self.tools if t.name == self.final_answer]
            choice = "auto"
        else:
            offered = await self.round_tools.offered(state.messages)
            state.usage, self._selection_usage = state.usage + self._selection_usage, Usage()
            tools = offered.tools
        request = ModelRequest(
            model=spec.model,
            system=self.system,
            messages=list(state.messages),
            tools=tools,
            tool_choice=choice,
            temperature=spec.temperature,
            max_tokens=spec.max_tokens_per_response,
            stop=spec.stop,
            top_p=spec.top_p,
            seed=spec.seed,
        )
        state.rounds += 1
        if self.round_tools.active and not without_tools:
            await self.emit(
                "tools.offered",
                round=state.rounds,
                tools=[item.name for item in offered.tools],
                routed=offered.routed,
                found=offered.found,
                of=self.total_tools,
                **({"note": self.round_tools.degraded} if self.round_tools.degraded else {}),
            )
        await self.emit("inference.started", round=state.rounds)
        started = time.perf_counter()
        delivered = _Delivered()
        try:
            response = await self._call_model(request, delivered)
        except ModelBehaviorError as exc:
            state.usage = state.usage + delivered.usage(request)
            # Tell the model what went wrong, as the result of the call it botched.
            call_id = exc.call_id or f"invalid_{state.rounds}"
            bad = ToolCall(id=call_id, name=exc.name or "unknown", arguments={})
            state.messages.append(AssistantMessage(tool_calls=(bad,)))
            state.messages.append(
                ToolResultMessage(call_id, bad.name, f"error: {exc}; send valid JSON", True)
            )
            await self.emit("inference.completed", round=state.rounds, error=str(exc))
            await self.checkpoint.save(state, "model_response", durable=False)
            return _ASK_AGAIN
        except ProviderError:  # (a stream broken off: what it gave is the run's too)
            state.usage = state.usage + delivered.usage(request)
            raise
        if response is None:  # cancelled mid-stream: what the stream gave is the run's too
            state.usage = state.usage + delivered.usage(request)
            partial = "".join(delivered.text)
            if partial:  # kept: the answer so far is the stopped turn's
                state.messages.append(AssistantMessage(text=partial))
                state.output = partial
                await self.emit(
                    "inference.completed", round=state.rounds, text=partial, stopped=True
                )
            return None
        response = await self._only_offered_calls(response, tools, state)
        response = _with_unique_call_ids(response, state)
        state.usage = state.usage + response.usage
        state.messages.append(response.as_message())
        if response.text:
            state.output = response.text
        await self.emit(
            "inference.completed",
            round=state.rounds,
            text=response.text,
            tool_calls=[call_payload(c, self.ctx) for c in response.tool_calls],
            stop_reason=response.stop_reason,
            usage=_usage_payload(response.usage),
            model=response.model,
            latency_ms=round((time.perf_counter() - started) * 1000, 1),
        )
        return response

    async def _select_tools(self, prompt: str) -> str:
        """The selection step's call (tools/runtime/routing.py, select_with_model), with the
        run's adapter; its usage joins the run's. A failure leaves the ranking as it is."""
        request = ModelRequest(
            model=self.round_tools.routing.selection_model,  # type: ignore[union-attr]
            messages=[UserMessage(prompt)],
            max_tokens=200,
            temperature=0,
        )
        try:
            response = await self.adapter.complete(request)
        except ProviderError as exc:
            self.round_tools.degraded = f"the selection model failed ({exc}): ranking kept"[:300]
            return ""
        self._selection_usage = self._selection_usage + response.usage
        return response.text

    async def _only_offered_calls(
        self, response: ModelResponse, offered: list, state: RunState
    ) -> ModelResponse:
        """With `results_without_tools`, calls of tools this round did not offer are never
        run (a model may ask for one anyway, told to by a tool result): they are dropped,
        with an event naming them, and the text is the answer."""
        if not self.spec.results_without_tools or not response.tool_calls:
            return response
        names = {t.name for t in offered}
        kept = tuple(c for c in response.tool_calls if c.name in names)
        if len(kept) == len(response.tool_calls):
            return response
        dropped = [c for c in response.tool_calls if c.name not in names]
        await self.emit(
            "tool_calls.refused",
            round=state.rounds,
            reason="this agent answers from tool results without calling tools",
            tool_calls=[call_payload(c, self.ctx) for c in dropped],
        )
        return replace(response, tool_calls=kept)

    async def _call_model(
        self, request: ModelRequest, delivered: _Delivered
    ) -> ModelResponse | None:
        with tracing.model_span(self.adapter.provider, request, self.ctx) as span:
            response = await self._complete_or_stream(request, delivered)
            if response is not None:
                span.record(response)
            return response

    async def _complete_or_stream(
        self, request: ModelRequest, delivered: _Delivered
    ) -> ModelResponse | None:
        """The model's response; None when the run was cancelled mid-stream (the stream
        closed there). `delivered` gets what the stream gave, as it comes."""
        if not self.sink.wants_text_deltas:
            return await self.adapter.complete(request)
        final = None
        async with aclosing(self.adapter.stream(request)) as events:
            async for event in events:
                if isinstance(event, TextDelta):
                    delivered.text.append(event.text)
                    await self.emit("text.delta", text=event.text)
                    if await self._cancelled():
                        return None
                elif isinstance(event, ToolCallEvent):
                    delivered.calls.append(event.call)
                elif isinstance(event, Done):
                    final = event.response
        if final is None:
            raise ProviderError("the stream ended without a final response")
        return final

    # -- act -------------------------------------------------------------------------
    async def _resolve_pending(self, state: RunState) -> tuple[list[ToolCall], list[ToolCall]]:
        """Take the pending calls through the tool-call step (agents/runtime/tool_step.py);
        return those still waiting for a human, and those waiting on a child run (a
        delegation whose member waits for a human)."""
        step = ToolCallStep(
            registry=self.tools,
            ctx=self.ctx,
            emit=self.sink.emit,
            checkpoint=self.checkpoint,
            approval=ApprovalRule(self.spec.approval_policy),
            decisions=self.decisions,
            max_tool_calls=self.spec.max_tool_calls,
            program=self.program,
            final_answer=self.final_answer,
        )
        outcome = await step.run(state, state.pending_calls)
        return outcome.awaiting, outcome.suspended

    async def _after_tools(self, state: RunState) -> RunOutcome | None:
        """Append the results in call order; finish when final_answer was accepted."""
        answered = False
        for call in state.pending_calls:
            message = state.results[call.id]
            state.messages.append(message)
            if call.name == self.final_answer:
                if message.is_error:
                    state.structured_attempts += 1
                else:
                    answered = True
        # No checkpoint: the results are saved; replaying this from the last one is identical.
        state.pending_calls, state.results, state.started = [], {}, set()
        state.programs = {}
        if answered:
            state.output = json.dumps(state.structured_output)
            return await self._finish(state, RunStatus.SUCCEEDED)
        if state.structured_attempts > self.spec.structured_retries:
            return await self._finish(
                state, RunStatus.FAILED, error=f"no valid {self.final_answer} was given"
            )
        return None

    async def _park(
        self, state: RunState, awaiting: list[ToolCall], suspended: list[ToolCall]
    ) -> RunOutcome:
        await self.checkpoint.save(state, "awaiting_approval")
        for call in awaiting:
            await self.emit("approval.required", **call_payload(call, self.ctx))
        for call in suspended:
            await self.emit("approval.required", via_child=True, **call_payload(call, self.ctx))
        return RunOutcome(
            status=RunStatus.AWAITING_APPROVAL,
            output=state.output,
            usage=state.usage,
            awaiting=awaiting,
            suspended=suspended,
        )

    async def _hand_to_client(self, state: RunState, calls: list[ToolCall]) -> RunOutcome:
        """End the run with the calls the caller runs itself. Server-side calls of the same
        response are dropped, not run: their results could not reach the caller's next
        request, and the model may ask for them again there."""
        last = state.messages[-1]
        if isinstance(last, AssistantMessage) and len(last.tool_calls) != len(calls):
            state.messages[-1] = replace(last, tool_calls=tuple(calls))
        return await finish_run(
            self.checkpoint, self.emit, state, RunStatus.AWAITING_CLIENT, client_calls=calls
        )

    # -- steer -----------------------------------------------------------------------
    async def _round_check(self, state: RunState, *, steers: bool) -> bool:
        """Was a stop asked? With `steers`, steering messages waiting join the run as user
        turns first, the flag read in the stop check's round trip (no query when none wait)."""
        if self.steering is None or not steers:
            return await self._cancelled(force=True)
        self._last_cancel_check = time.monotonic()
        cancelled, waiting = await self.steering.poll()
        if cancelled:
            return True
        if waiting or self._steers_unread:
            self._steers_unread = False
            taken = await self.steering.take(state.steers)
            for steer in taken:
                state.messages.append(UserMessage(steer.text))
                state.steers.append(steer.id)
                await self.emit("run.steered", id=steer.id, text=steer.text, round=state.rounds)
            if taken:  # (a crash before it is stored: the resumed run takes them again)
                await self.checkpoint.save(state, "steered", durable=False)
        return False

    # -- finish ----------------------------------------------------------------------
    async def _cancelled(self, *, force: bool = False) -> bool:
        if self.is_cancelled is None:
            return False
        now = time.monotonic()
        if not force and now - self._last_cancel_check < CANCEL_CHECK_INTERVAL_S:
            return False
        self._last_cancel_check = now
        return await self.is_cancelled()

    async def _finish(self, state: RunState, status: RunStatus, *, error: str = "") -> RunOutcome:
        return await finish_run(self.checkpoint, self.emit, state, status, error=error)


def _usage_payload(usage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }


def _with_unique_call_ids(response: ModelResponse, state: RunState) -> ModelResponse:
    """Every call of a run gets its own id. Some servers send none, or repeat them; an
    approval decided for one call must never apply to another."""
    used = {c.id for m in state.messages if isinstance(m, AssistantMessage) for c in m.tool_calls}
    calls, changed = [], False
    for index, call in enumerate(response.tool_calls):
        if not call.id or call.id in used:
            call = replace(call, id=f"call_{state.rounds}_{index}")
            changed = True
        used.add(call.id)
        calls.append(call)
    return replace(response, tool_calls=tuple(calls)) if changed else response


async def finish_run(
    checkpoint,
    emit,
    state: RunState,
    status: RunStatus,
    *,
    error: str = "",
    client_calls: Sequence[ToolCall] = (),
) -> RunOutcome:
    """Record the final status in the checkpoint, then the terminal event. Shared by every
    agent kind, so a stream ends the same way whoever did the thinking."""
    state.finished, state.error = status.value, error
    await checkpoint.save(state, "finished")
    outcome = RunOutcome(
        status=status,
        output=state.output,
        structured_output=state.structured_output,
        usage=state.usage,
        error=error,
        client_calls=list(client_calls),
        evidence=evidence(state.messages) if status == RunStatus.SUCCEEDED else [],
    )
    payload = {
        "status": status.value,
        "output": outcome.output,
        "structured_output": outcome.structured_output,
        "usage": _usage_payload(outcome.usage),
        "rounds": state.rounds,
    }
    if client_calls:
        payload["client_tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in client_calls
        ]
    if status is RunStatus.FAILED:
        await emit("run.failed", error=error, **payload)
    elif status is RunStatus.CANCELLED:
        await emit("run.cancelled", error=error, **payload)
    else:
        await emit("run.completed", error=error, **payload)
    return outcome
