"""The "remote" agent kind: the thinking happens in an external agent — a server reached over
HTTP through the guarded egress, or a command the operator allow-lists, spoken to in JSON
lines over its stdin/stdout (agents/runtime/remote_transport.py) — with a small JSON
protocol (see docs/remote-agents.md). The kind is
declared as a plug-in in pyproject.toml (agentplatform.agent_kinds).

The platform sends a `query`; the agent answers `response` (the run's output), `tool_call`
(the platform runs the calls locally through the agent's filtered registry and sends a
`tool_result`, echoing the agent's opaque `state`), or `error`. Each message is one round.

Calls that need a human's approval park the run like the tool loop's do; once decided, the
run goes on and sends their results. The message the platform owes the agent is saved
before it is sent (`RunState.remote`), with the agent's last `state`, so a run interrupted
anywhere — a worker crash, a park — resumes by running what its calls still need (never a
started call twice: see tool_step.py) and sending that message again. An agent must
therefore keep what it needs in `state`: a message sent again gets the same answer.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypedDict

from agents.runtime.loop import EventSink, NullSink, _usage_payload, agent_registry, finish_run
from agents.runtime.memory import FactStore, store_for_run
from agents.runtime.remote_transport import (
    HEALTH_TIMEOUT_S,
    MAX_RESPONSE_BYTES,
    REQUEST_TIMEOUT_S,
    CommandTransport,
    HttpTransport,
    RemoteFailure,
    Transport,
    clip,
    command_health,
    health_url,
    scrub,
)
from agents.runtime.spec import AgentSpec, Decision, RunOutcome, RunStatus
from agents.runtime.state import Checkpointer, NoCheckpoint, RunState
from agents.runtime.structured import FINAL_ANSWER
from agents.runtime.tool_step import ApprovalRule, ToolCallStep, call_payload
from providers.runtime.types import AssistantMessage, Message, Usage, UserMessage
from tools.runtime.context import ConfigurationError, RunContext
from tools.runtime.egress import GuardedHttpClient
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import ToolCall

__all__ = [
    "HEALTH_TIMEOUT_S",
    "MAX_RESPONSE_BYTES",
    "PROTOCOL_VERSION",
    "REQUEST_TIMEOUT_S",
    "TOKEN_SECRET",
    "command_health",
    "health_url",
    "remote_agent",
]

PROTOCOL_VERSION = 1
# The secret reference (not a secret) of the optional bearer token sent to the server.
TOKEN_SECRET = "agent:remote_token"  # noqa: S105


class WireHistoryItem(TypedDict):
    role: str
    text: str


class WireToolResult(TypedDict):
    call_id: str
    name: str
    content: str  # the result as JSON text, or the error text (what a model reads)
    is_error: bool


async def remote_agent(
    *,
    spec: AgentSpec,
    registry: ToolRegistry,
    ctx: RunContext,
    egress: GuardedHttpClient,
    input: str | None = None,
    history: Sequence[Message] = (),
    sink: EventSink | None = None,
    checkpoint: Checkpointer | None = None,
    state: RunState | None = None,
    is_cancelled: Callable[[], Awaitable[bool]] | None = None,
    decisions: Mapping[str, Decision] | None = None,
    adapter: Any = None,
    facts: FactStore | None = None,
    context_blocks: Sequence[tuple[str, str]] = (),
    **_: Any,
) -> RunOutcome:
    """Run (or resume, when `state` is given) one agent run whose model is a remote agent.
    Never raises for agent, network or tool trouble: the outcome's status and error say
    what happened. One message per round (each bounded by REQUEST_TIMEOUT_S and
    MAX_RESPONSE_BYTES). `adapter` is unused: the agent thinks."""
    exchange = _Exchange(
        spec=spec,
        tools=agent_registry(spec, registry, store_for_run(facts, ctx)),
        ctx=ctx,
        egress=egress,
        sink=sink or NullSink(),
        checkpoint=checkpoint or NoCheckpoint(),
        is_cancelled=is_cancelled,
        decisions=decisions or {},
    )
    if state is None:
        state = RunState(messages=[*history, UserMessage(input or "")])
        await exchange.emit("run.started", model=spec.model, agent=spec.name)
        query = _query(spec, ctx, exchange.tools, input, history, context_blocks)
        state.remote = {"state": None, "owed": query}
    try:
        return await exchange.run(state)
    except RemoteFailure as exc:
        return await exchange.finish(state, RunStatus.FAILED, error=exchange.redact(str(exc)))
    finally:
        await exchange.transport.close()


def _query(spec, ctx, tools, input, history, context_blocks) -> dict[str, Any]:
    return {
        "type": "query",
        "protocol": PROTOCOL_VERSION,
        "run_id": ctx.run_id,
        "agent": spec.name,
        "instructions": spec.instructions,
        "context": [{"title": title, "text": text} for title, text in context_blocks],
        "input": input or "",
        "history": _history_payload(history),
        "tools": tools.definitions("openai"),
        "state": None,
    }


class _Exchange:
    def __init__(
        self, *, spec, tools, ctx, egress, sink, checkpoint, is_cancelled, decisions,
    ) -> None:  # fmt: skip
        self.spec: AgentSpec = spec
        self.tools: ToolRegistry = tools
        self.ctx: RunContext = ctx
        self.sink: EventSink = sink
        self.checkpoint: Checkpointer = checkpoint
        self.is_cancelled = is_cancelled
        self.decisions: Mapping[str, Decision] = decisions
        self.token = _token(ctx)
        self.transport: Transport = _transport(spec, egress, self.token)

    async def emit(self, type: str, **payload: Any) -> None:
        await self.sink.emit(type, payload)

    def redact(self, text: str) -> str:
        return scrub(self.ctx.secrets.redact(text), self.token)

    async def run(self, state: RunState) -> RunOutcome:
        if state.finished:  # decided before an interruption: report it, send nothing
            return await self.finish(state, RunStatus(state.finished), error=state.error)
        if not self.spec.remote_url and not self.spec.remote_command_name:
            raise RemoteFailure(
                "this remote agent has neither a URL nor a command: an admin must set one"
            )
        remote = state.remote or {}
        while True:
            if await self._cancelled():
                return await self.finish(state, RunStatus.CANCELLED, error="cancelled")
            if state.pending_calls:  # the agent's calls, still to run (or to be decided)
                parked = await self._run_calls(state)
                if parked is not None:
                    return parked
                if state.structured_output is not None:
                    state.output = json.dumps(state.structured_output)
                    return await self.finish(state, RunStatus.SUCCEEDED)
                if await self._cancelled():
                    return await self.finish(state, RunStatus.CANCELLED, error="cancelled")
                remote = state.remote or {}
            body = remote.get("owed")
            if body is None:
                raise RemoteFailure("this run has nothing left to send its remote agent")
            reply = await self._round(state, body)
            over_budget = self._over_budget(state)
            if reply["type"] == "response":
                state.output = reply["text"]
                state.messages.append(AssistantMessage(text=reply["text"]))
                state.remote = {"state": remote.get("state"), "owed": None}
                await self.checkpoint.save(state, "model_response")
                if over_budget:
                    return await self.finish(state, RunStatus.FAILED, error=over_budget)
                if self.spec.output_schema is not None:
                    return await self.finish(
                        state,
                        RunStatus.FAILED,
                        error=f"the remote agent answered in text; this agent has an output "
                        f"schema, so it must call {FINAL_ANSWER}",
                    )
                return await self.finish(state, RunStatus.SUCCEEDED)
            calls: list[ToolCall] = reply["calls"]
            state.messages.append(AssistantMessage(text=reply["text"], tool_calls=tuple(calls)))
            state.pending_calls = list(calls)
            remote = state.remote = {"state": reply["state"], "owed": None}
            await self.checkpoint.save(state, "model_response")
            if over_budget:
                return await self.finish(state, RunStatus.FAILED, error=over_budget)
            if state.rounds >= self.spec.max_rounds:
                return await self.finish(
                    state, RunStatus.MAX_ROUNDS, error=f"stopped after {state.rounds} rounds"
                )

    # -- the wire --------------------------------------------------------------------
    async def _round(self, state: RunState, body: dict[str, Any]) -> dict[str, Any]:
        """One round: send `body`, return the validated reply (response or tool_call)."""
        state.rounds += 1
        await self.emit("inference.started", round=state.rounds)
        started = time.perf_counter()
        reply = _parse_reply(await self.transport.send(body))
        usage = _parse_usage(reply.get("usage"))
        state.usage = state.usage + usage
        await self.emit(
            "inference.completed",
            round=state.rounds,
            text=reply["text"],
            tool_calls=[call_payload(c, self.ctx) for c in reply.get("calls", ())],
            stop_reason="tool_calls" if reply["type"] == "tool_call" else "end",
            usage=_usage_payload(usage),
            model=self.spec.model,
            latency_ms=round((time.perf_counter() - started) * 1000, 1),
        )
        return reply

    def _over_budget(self, state: RunState) -> str:
        budget = self.spec.max_tokens_per_run
        used = state.usage.input_tokens + state.usage.output_tokens
        if budget is not None and used > budget:
            return f"token budget of {budget} exceeded ({used})"
        return ""

    # -- act -------------------------------------------------------------------------
    async def _run_calls(self, state: RunState) -> RunOutcome | None:
        """Take the pending calls through the tool-call step (agents/runtime/tool_step.py).
        Calls waiting for a human (or a crew member's) park the run: the outcome. Else the
        results, in call order, become the `tool_result` the agent is owed (saved before it
        is sent) and None."""
        calls = list(state.pending_calls)
        step = ToolCallStep(
            registry=self.tools,
            ctx=self.ctx,
            emit=self.sink.emit,
            checkpoint=self.checkpoint,
            approval=ApprovalRule(self.spec.approval_policy),
            decisions=self.decisions,
            max_tool_calls=self.spec.max_tool_calls,
        )
        outcome = await step.run(state, calls)
        if outcome.awaiting or outcome.suspended:
            await self.checkpoint.save(state, "awaiting_approval")
            for call in outcome.awaiting:
                await self.emit("approval.required", **call_payload(call, self.ctx))
            for call in outcome.suspended:
                await self.emit("approval.required", via_child=True, **call_payload(call, self.ctx))
            return RunOutcome(
                status=RunStatus.AWAITING_APPROVAL,
                output=state.output,
                usage=state.usage,
                awaiting=outcome.awaiting,
                suspended=outcome.suspended,
            )
        messages = [state.results[call.id] for call in calls]
        state.messages.extend(messages)
        state.pending_calls, state.results, state.started = [], {}, set()
        results: list[WireToolResult] = [
            {"call_id": m.call_id, "name": m.name, "content": m.content, "is_error": m.is_error}
            for m in messages
        ]
        agent_state = (state.remote or {}).get("state")
        owed = {
            "type": "tool_result",
            "protocol": PROTOCOL_VERSION,
            "run_id": self.ctx.run_id,
            "results": results,
            "state": agent_state,
        }
        state.remote = {"state": agent_state, "owed": owed}
        await self.checkpoint.save(state, "tool_result")
        return None

    # -- finish ----------------------------------------------------------------------
    async def _cancelled(self) -> bool:
        return self.is_cancelled is not None and await self.is_cancelled()

    async def finish(self, state: RunState, status: RunStatus, *, error: str = "") -> RunOutcome:
        """As the loop finishes: checkpoint, then run.completed/failed/cancelled."""
        return await finish_run(self.checkpoint, self.emit, state, status, error=error)


def _transport(spec: AgentSpec, egress: GuardedHttpClient | None, token: str | None) -> Transport:
    if spec.remote_command_name:
        return CommandTransport(
            spec.remote_command_name, spec.remote_command, user=spec.remote_command_user
        )
    if egress is None:
        return _Failing(RemoteFailure("remote agents need an egress client, and none was given"))
    return HttpTransport(spec.remote_url, egress, token)


class _Failing:
    def __init__(self, failure: RemoteFailure) -> None:
        self.failure = failure

    async def send(self, body: dict[str, Any]) -> Any:
        raise self.failure

    async def close(self) -> None:
        return None


# -- parsing the server's answers ---------------------------------------------------------
def _parse_reply(reply: Any) -> dict[str, Any]:
    """The agent's answer normalised to {type: response|tool_call, text, usage, calls?,
    state?}; RemoteFailure for an error reply or anything off-protocol."""
    if not isinstance(reply, dict):
        raise RemoteFailure("remote agent sent a reply that is not a JSON object")
    kind = reply.get("type")
    if kind == "error":
        message = reply.get("message")
        shown = message if isinstance(message, str) and message else "(no message)"
        raise RemoteFailure(f"remote agent error: {clip(shown, 2000)}")
    if kind == "response":
        text = reply.get("text")
        if not isinstance(text, str):
            raise RemoteFailure("remote agent sent a response without text")
        return {"type": "response", "text": text, "usage": reply.get("usage")}
    if kind == "tool_call":
        text = reply.get("text", "")
        return {
            "type": "tool_call",
            "text": text if isinstance(text, str) else "",
            "calls": _parse_calls(reply.get("calls")),
            "state": reply.get("state"),
            "usage": reply.get("usage"),
        }
    raise RemoteFailure(f"remote agent sent an unknown reply type {clip(repr(kind), 80)}")


def _parse_calls(raw: Any) -> list[ToolCall]:
    if not isinstance(raw, list) or not raw:
        raise RemoteFailure("remote agent sent a tool_call without calls")
    calls: list[ToolCall] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise RemoteFailure(f"remote agent sent an invalid call #{index}: not an object")
        call_id, name = item.get("id"), item.get("name")
        if not isinstance(call_id, str) or not call_id or call_id in seen:
            raise RemoteFailure(
                f"remote agent sent an invalid call #{index}: it needs a unique string id"
            )
        if not isinstance(name, str) or not name:
            raise RemoteFailure(f"remote agent sent an invalid call #{index}: it needs a name")
        arguments = item.get("arguments", {})
        if isinstance(arguments, str):  # OpenAI-style JSON text is accepted too
            # Not JSON: kept as text; the registry answers "arguments must be a JSON object".
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments) if arguments.strip() else {}
        seen.add(call_id)
        calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
    return calls


def _parse_usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()

    def count(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    return Usage(input_tokens=count("input_tokens"), output_tokens=count("output_tokens"))


# -- small pieces -----------------------------------------------------------------------
def _history_payload(history: Sequence[Message]) -> list[WireHistoryItem]:
    """User and assistant text; tool calls and results of earlier runs are left out."""
    return [
        {"role": m.role, "text": m.text}
        for m in history
        if isinstance(m, UserMessage | AssistantMessage) and m.text
    ]


def _token(ctx: RunContext) -> str | None:
    try:
        return ctx.secrets.get(TOKEN_SECRET) or None
    except ConfigurationError:
        return None
