"""The "remote" agent kind: the thinking happens in an external agent server, reached over
HTTP through the guarded egress with a small JSON protocol (see docs/remote-agents.md).

The platform POSTs a `query` to the agent's `remote_url`; the server answers `response`
(the run's output), `tool_call` (the platform runs the calls locally through the agent's
filtered registry and POSTs a `tool_result`, echoing the server's opaque `state`), or
`error`. Each POST is one round. Tools that need a human's approval are not run in this
version: the server gets an error result for them. A remote run interrupted mid-exchange
is not resumed (tools may already have run): it fails, and must be started again.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypedDict
from urllib.parse import urlsplit, urlunsplit

from agents.runtime.kinds import agent_kind
from agents.runtime.loop import EventSink, NullSink, _usage_payload, agent_registry, finish_run
from agents.runtime.memory import FactStore
from agents.runtime.spec import AgentSpec, RunOutcome, RunStatus
from agents.runtime.state import Checkpointer, NoCheckpoint, RunState
from agents.runtime.structured import FINAL_ANSWER
from agents.runtime.tool_step import ApprovalRule, ToolCallStep, call_payload
from providers.runtime.types import (
    AssistantMessage,
    Message,
    Usage,
    UserMessage,
)
from tools.runtime.context import REDACTED, ConfigurationError, RunContext
from tools.runtime.egress import (
    EgressError,
    EgressRefused,
    EgressResponse,
    EgressTimeout,
    GuardedHttpClient,
    ResponseTooLarge,
)
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import ToolCall

__all__ = [
    "MAX_RESPONSE_BYTES",
    "NEEDS_APPROVAL",
    "PROTOCOL_VERSION",
    "REQUEST_TIMEOUT_S",
    "TOKEN_SECRET",
    "health_url",
    "remote_agent",
    "remote_health",
]

PROTOCOL_VERSION = 1
# The secret reference (not a secret) of the optional bearer token sent to the server.
TOKEN_SECRET = "agent:remote_token"  # noqa: S105
REQUEST_TIMEOUT_S = 60.0  # per POST, including the server's thinking time
HEALTH_TIMEOUT_S = 10.0
MAX_RESPONSE_BYTES = 1_000_000
NEEDS_APPROVAL = "needs human approval, which remote agents cannot request yet"
NOT_RESUMABLE = (
    "remote agent runs cannot be resumed after an interruption (tools may already have "
    "run); start the run again"
)


class WireHistoryItem(TypedDict):
    role: str
    text: str


class WireToolResult(TypedDict):
    call_id: str
    name: str
    content: str  # the result as JSON text, or the error text (what a model reads)
    is_error: bool


class _RemoteFailure(Exception):
    """The exchange cannot go on; str(exc) is the run's error."""


@agent_kind("remote")
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
    decisions: Mapping[str, Any] | None = None,
    adapter: Any = None,
    facts: FactStore | None = None,
    context_blocks: Sequence[tuple[str, str]] = (),
    **_: Any,
) -> RunOutcome:
    """Run one agent run whose model is a remote agent server. Never raises for server,
    network or tool trouble: the outcome's status and error say what happened.

    Costs one POST per round (each bounded by REQUEST_TIMEOUT_S and MAX_RESPONSE_BYTES).
    `adapter` and `decisions` are unused: the server thinks, and nothing parks for approval.
    """
    exchange = _Exchange(
        spec=spec,
        tools=agent_registry(spec, registry, facts),
        ctx=ctx,
        egress=egress,
        sink=sink or NullSink(),
        checkpoint=checkpoint or NoCheckpoint(),
        is_cancelled=is_cancelled,
    )
    if state is not None:
        return await exchange.finish(state, RunStatus.FAILED, error=NOT_RESUMABLE)
    state = RunState(messages=[*history, UserMessage(input or "")])
    await exchange.emit("run.started", model=spec.model, agent=spec.name)
    query = {
        "type": "query",
        "protocol": PROTOCOL_VERSION,
        "run_id": ctx.run_id,
        "agent": spec.name,
        "instructions": spec.instructions,
        "context": [{"title": title, "text": text} for title, text in context_blocks],
        "input": input or "",
        "history": _history_payload(history),
        "tools": exchange.tools.definitions("openai"),
        "state": None,
    }
    try:
        return await exchange.run(state, query)
    except _RemoteFailure as exc:
        return await exchange.finish(state, RunStatus.FAILED, error=exchange.redact(str(exc)))


async def remote_health(
    url: str, egress: GuardedHttpClient, *, token: str | None = None
) -> tuple[bool, str]:
    """GET <url>/health: (True, "ok") when it answers 2xx with {"status": "ok"}, else
    (False, why). One request, at most HEALTH_TIMEOUT_S."""
    if not url:
        return False, "no remote URL is configured"
    headers = {"accept": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    try:
        response = await egress.request(
            "GET",
            health_url(url),
            headers=headers,
            timeout_s=HEALTH_TIMEOUT_S,
            max_bytes=64_000,
        )
    except EgressError as exc:
        return False, _scrub(_egress_failure(exc), token)
    if not 200 <= response.status_code < 300:
        return False, _scrub(_status_failure(response), token)
    try:
        body = response.json()
    except ValueError:
        return False, f"health answer is not JSON (HTTP {response.status_code})"
    status = body.get("status") if isinstance(body, dict) else None
    if status != "ok":
        return False, _scrub(f"health status is {_clip(repr(status), 80)}, not 'ok'", token)
    return True, "ok"


def health_url(url: str) -> str:
    """`url` with `/health` appended to its path (query kept, fragment dropped)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/health", fragment=""))


class _Exchange:
    def __init__(
        self, *, spec, tools, ctx, egress, sink, checkpoint, is_cancelled,
    ) -> None:  # fmt: skip
        self.spec: AgentSpec = spec
        self.tools: ToolRegistry = tools
        self.ctx: RunContext = ctx
        self.egress: GuardedHttpClient = egress
        self.sink: EventSink = sink
        self.checkpoint: Checkpointer = checkpoint
        self.is_cancelled = is_cancelled
        self.token = _token(ctx)
        self.headers = {"accept": "application/json"}
        if self.token:
            self.headers["authorization"] = f"Bearer {self.token}"

    async def emit(self, type: str, **payload: Any) -> None:
        await self.sink.emit(type, payload)

    def redact(self, text: str) -> str:
        return _scrub(self.ctx.secrets.redact(text), self.token)

    async def run(self, state: RunState, body: dict[str, Any]) -> RunOutcome:
        if not self.spec.remote_url:
            raise _RemoteFailure("this remote agent has no URL: an admin must set its remote URL")
        if self.egress is None:
            raise _RemoteFailure("remote agents need an egress client, and none was given")
        while True:
            if await self._cancelled():
                return await self.finish(state, RunStatus.CANCELLED, error="cancelled")
            reply = await self._post(state, body)
            over_budget = self._over_budget(state)
            if reply["type"] == "response":
                state.output = reply["text"]
                state.messages.append(AssistantMessage(text=reply["text"]))
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
            await self.checkpoint.save(state, "model_response")
            if over_budget:
                return await self.finish(state, RunStatus.FAILED, error=over_budget)
            if state.rounds >= self.spec.max_rounds:
                return await self.finish(
                    state, RunStatus.MAX_ROUNDS, error=f"stopped after {state.rounds} rounds"
                )
            if await self._cancelled():
                return await self.finish(state, RunStatus.CANCELLED, error="cancelled")
            results = await self._run_calls(state, calls)
            if state.structured_output is not None:
                state.output = json.dumps(state.structured_output)
                return await self.finish(state, RunStatus.SUCCEEDED)
            body = {
                "type": "tool_result",
                "protocol": PROTOCOL_VERSION,
                "run_id": self.ctx.run_id,
                "results": results,
                "state": reply["state"],
            }

    # -- the wire --------------------------------------------------------------------
    async def _post(self, state: RunState, body: dict[str, Any]) -> dict[str, Any]:
        """One round: send `body`, return the validated reply (response or tool_call)."""
        state.rounds += 1
        await self.emit("inference.started", round=state.rounds)
        started = time.perf_counter()
        try:
            response = await self.egress.request(
                "POST",
                self.spec.remote_url,
                headers=self.headers,
                json=body,
                timeout_s=REQUEST_TIMEOUT_S,
                max_bytes=MAX_RESPONSE_BYTES,
            )
        except EgressError as exc:
            raise _RemoteFailure(_egress_failure(exc)) from None
        reply = _parse_reply(response)
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
    async def _run_calls(self, state: RunState, calls: list[ToolCall]) -> list[WireToolResult]:
        """Take the calls through the tool-call step (agents/runtime/tool_step.py), with
        nobody to approve: a call that needs a human gets NEEDS_APPROVAL as its error.
        Results in call order."""
        step = ToolCallStep(
            registry=self.tools,
            ctx=self.ctx,
            emit=self.sink.emit,
            checkpoint=self.checkpoint,
            approval=ApprovalRule(self.spec.approval_policy),
            max_tool_calls=self.spec.max_tool_calls,
            unattended=NEEDS_APPROVAL,
        )
        await step.run(state, calls)
        messages = [state.results[call.id] for call in calls]
        state.messages.extend(messages)
        state.pending_calls, state.results, state.started = [], {}, set()
        await self.checkpoint.save(state, "tool_result")
        return [
            {"call_id": m.call_id, "name": m.name, "content": m.content, "is_error": m.is_error}
            for m in messages
        ]

    # -- finish ----------------------------------------------------------------------
    async def _cancelled(self) -> bool:
        return self.is_cancelled is not None and await self.is_cancelled()

    async def finish(self, state: RunState, status: RunStatus, *, error: str = "") -> RunOutcome:
        """As the loop finishes: checkpoint, then run.completed/failed/cancelled."""
        return await finish_run(self.checkpoint, self.emit, state, status, error=error)


# -- parsing the server's answers ---------------------------------------------------------
def _parse_reply(response: EgressResponse) -> dict[str, Any]:
    """The reply normalised to {type: response|tool_call, text, usage, calls?, state?};
    _RemoteFailure for an error reply, a non-2xx status or anything off-protocol."""
    if not 200 <= response.status_code < 300:
        raise _RemoteFailure(_status_failure(response))
    try:
        reply = response.json()
    except ValueError:
        raise _RemoteFailure(
            f"remote agent sent invalid JSON (HTTP {response.status_code})"
        ) from None
    if not isinstance(reply, dict):
        raise _RemoteFailure("remote agent sent a reply that is not a JSON object")
    kind = reply.get("type")
    if kind == "error":
        message = reply.get("message")
        shown = message if isinstance(message, str) and message else "(no message)"
        raise _RemoteFailure(f"remote agent error: {_clip(shown, 2000)}")
    if kind == "response":
        text = reply.get("text")
        if not isinstance(text, str):
            raise _RemoteFailure("remote agent sent a response without text")
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
    raise _RemoteFailure(f"remote agent sent an unknown reply type {_clip(repr(kind), 80)}")


def _parse_calls(raw: Any) -> list[ToolCall]:
    if not isinstance(raw, list) or not raw:
        raise _RemoteFailure("remote agent sent a tool_call without calls")
    calls: list[ToolCall] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise _RemoteFailure(f"remote agent sent an invalid call #{index}: not an object")
        call_id, name = item.get("id"), item.get("name")
        if not isinstance(call_id, str) or not call_id or call_id in seen:
            raise _RemoteFailure(
                f"remote agent sent an invalid call #{index}: it needs a unique string id"
            )
        if not isinstance(name, str) or not name:
            raise _RemoteFailure(f"remote agent sent an invalid call #{index}: it needs a name")
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


def _status_failure(response: EgressResponse) -> str:
    detail = ""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        for key in ("message", "error", "detail"):
            if isinstance(body.get(key), str) and body[key]:
                detail = body[key]
                break
    elif response.content and "json" not in response.headers.get("content-type", ""):
        detail = response.text.strip()
    message = f"remote agent answered HTTP {response.status_code}"
    return f"{message}: {_clip(detail, 500)}" if detail else message


def _egress_failure(exc: EgressError) -> str:
    if isinstance(exc, EgressRefused):
        return f"remote agent refused by egress policy: {exc}"
    if isinstance(exc, EgressTimeout):
        return f"remote agent did not answer in time: {exc}"
    if isinstance(exc, ResponseTooLarge):
        return f"remote agent reply too large: {exc}"
    return f"remote agent unreachable: {exc}"


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


def _scrub(text: str, token: str | None) -> str:
    return text.replace(token, REDACTED) if token else text


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
