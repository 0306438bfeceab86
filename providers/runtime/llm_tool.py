"""The `llm` built-in: ask another model of the tenant's connections one question.

Pure: the connection comes from a `ConnectionLookup` the platform passes in
(`providers.services.model_connection`: the run's tenant's own connections only, read with
the tenant of the RunContext, never one the model names outside it). The request goes
through the connection's ModelAdapter, the one the agent loop uses. The tokens it spends
are reported on the context's usage meter (`RunContext.usage`); the run's tool step adds
them to the run's usage when it records the call's result, so run totals, usage pages and
token budgets count them.

Its model call is a `chat <model>` span when tracing is on (providers.runtime.tracing), a
child of the call's `execute_tool` span in a run.

Errors are this module's own sentences (ToolFailed), by the kind of provider error, never
the provider's or the SDK's text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from providers.runtime import tracing
from providers.runtime.adapter import ModelAdapter
from providers.runtime.errors import (
    ProviderError,
    QuotaRefused,
    provider_failure,
)
from providers.runtime.types import ModelRequest, ModelResponse, UserMessage
from tools.runtime.context import ModelTokens, RunContext
from tools.runtime.tool import Capability, Effect, Tool, ToolFailed

TOOL_NAME = "llm"
DEFAULT_MAX_TOKENS = 1024
MAX_MAX_TOKENS = 4096
MAX_QUESTION_CHARS = 50_000
MAX_SYSTEM_CHARS = 10_000
TIMEOUT_S = 90.0  # the whole request, the adapter's retries included

DESCRIPTION = (
    "Ask another language model one question and get its answer: a model of one of this "
    "organisation's provider connections. `connection` names the connection (default: the "
    "organisation's default one), `model` one of its models (default: the connection's "
    "default model). The question (and `system`, if given) is SENT TO THAT PROVIDER: put in "
    "only what may go there. The model sees nothing else of this conversation and has no "
    "tools; its tokens count toward this run's usage. Use it for a second opinion, a "
    "translation or a task another model does better, not for what you can answer yourself."
)
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "question": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_QUESTION_CHARS,
            "description": "The whole question, with any text the model needs to answer it.",
        },
        "connection": {
            "type": "string",
            "maxLength": 100,
            "description": "The provider connection's name (default: the organisation's "
            "default connection).",
        },
        "model": {
            "type": "string",
            "maxLength": 200,
            "description": "The model id (default: the connection's default model).",
        },
        "system": {
            "type": "string",
            "maxLength": MAX_SYSTEM_CHARS,
            "description": "Optional instructions for that model.",
        },
        "max_tokens": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_MAX_TOKENS,
            "default": DEFAULT_MAX_TOKENS,
            "description": "The most tokens the answer may have.",
        },
    },
    "required": ["question"],
    "additionalProperties": False,
}
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answer": {"type": "string"},
        "connection": {"type": "string"},
        "model": {"type": "string"},
        "truncated": {"type": "boolean"},
        "input_tokens": {"type": "integer"},
        "output_tokens": {"type": "integer"},
    },
    "required": ["answer", "connection", "model"],
}


@dataclass(frozen=True)
class ModelConnection:
    """A connection of the run's tenant, as the `llm` tool uses it."""

    name: str
    adapter: ModelAdapter
    default_model: str = ""
    allowed_models: tuple[str, ...] = ()  # empty: any
    price_kind: str = ""  # the price table of its models (a quota's cost of a call)


class ConnectionNotFound(Exception):
    """The tenant has no such connection; `known` are the names it has."""

    def __init__(self, known: Sequence[str]) -> None:
        super().__init__("no such connection")
        self.known = tuple(known)


# (the context's tenant id, the connection's name or None for the default) -> the connection
ConnectionLookup = Callable[[int | str, str | None], Awaitable[ModelConnection]]


def llm_tool(lookup: ConnectionLookup, *, timeout_s: float = TIMEOUT_S) -> Tool:
    """The `llm` tool over the connections `lookup` finds for the calling run's tenant."""

    async def handler(arguments: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        question = str(arguments.get("question", "")).strip()
        if not question:
            raise ToolFailed("question must not be empty")
        wanted = str(arguments.get("connection") or "").strip() or None
        try:
            connection = await lookup(ctx.tenant_id, wanted)
        except ConnectionNotFound as exc:
            raise ToolFailed(_not_found(wanted, exc.known)) from None
        model = str(arguments.get("model") or "").strip() or connection.default_model
        if not model:
            raise ToolFailed(
                f"connection {connection.name!r} has no default model; name one with `model`"
            )
        allowed = connection.allowed_models
        if allowed and model not in allowed:
            raise ToolFailed(
                f"model {model!r} is not allowed on connection {connection.name!r}; "
                f"allowed: {', '.join(allowed)}"
            )
        max_tokens = max(
            1, min(int(arguments.get("max_tokens") or DEFAULT_MAX_TOKENS), MAX_MAX_TOKENS)
        )
        request = ModelRequest(
            model=model,
            messages=[UserMessage(question)],
            system=str(arguments.get("system") or ""),
            max_tokens=max_tokens,
        )
        meter, held = ctx.model_calls, None
        if meter is not None:  # the run's quotas, before the provider is contacted
            try:
                held = await meter.reserve(request, price_kind=connection.price_kind)
            except QuotaRefused as exc:
                ctx.usage.refuse(ctx.call_id, _refusal(exc, connection.name, model))
                raise ToolFailed(str(exc)) from None
        response = None
        try:
            response = await _asked(connection, request, ctx, timeout_s)
        except TimeoutError:
            raise ToolFailed(
                f"model {model!r} of connection {connection.name!r} did not answer within "
                f"{timeout_s:g} s"
            ) from None
        except ProviderError as exc:
            raise ToolFailed(provider_failure(exc, connection.name, model)) from None
        finally:  # what it used (nothing, if it failed), as its `tool.usage` names it
            if meter is not None:
                await meter.settle(
                    held,
                    price_kind=connection.price_kind,
                    model=(response.model or model) if response is not None else model,
                    usage=response.usage if response is not None else None,
                    connection=connection.name,
                )
        used = response.usage
        answered_by = response.model or model
        ctx.usage.add(
            ctx.call_id,
            ModelTokens(
                connection=connection.name,
                model=answered_by,
                input_tokens=used.input_tokens,
                output_tokens=used.output_tokens,
                cache_read_tokens=used.cache_read_tokens,
                cache_write_tokens=used.cache_write_tokens,
            ),
        )
        return {
            "answer": response.text,
            "connection": connection.name,
            "model": answered_by,
            "truncated": response.stop_reason == "max_tokens",
            "input_tokens": used.input_tokens,
            "output_tokens": used.output_tokens,
        }

    return Tool(
        name=TOOL_NAME,
        description=DESCRIPTION,
        input_schema=INPUT_SCHEMA,
        output_schema=OUTPUT_SCHEMA,
        handler=handler,
        tags=frozenset({"builtin", "llm"}),
        examples=(
            {"question": "Translate into German: 'The invoice is overdue.'", "max_tokens": 200},
        ),
        # It changes nothing, and asking again is harmless; but it sends the question out.
        capability=Capability(effect=Effect.READ, idempotent=True, timeout_s=timeout_s + 10),
    )


async def _asked(
    connection: ModelConnection, request: ModelRequest, ctx: RunContext, timeout_s: float
) -> ModelResponse:
    """The model's answer, in a `chat` span (tracing on): inside the run's `execute_tool`
    span, its child. The connection's name is on it, never the question or the answer."""
    adapter = connection.adapter
    with tracing.model_span(adapter.provider, request, ctx) as span:
        span.set(**{"agentplatform.connection": connection.name})
        response = await asyncio.wait_for(adapter.complete(request), timeout_s)
        span.record(response)
        return response


def _refusal(exc: QuotaRefused, connection: str, model: str) -> dict[str, Any]:
    """The `tool.quota_exceeded` event's payload (the call id and tool name are added)."""
    return {"connection": connection, "model": model, "message": str(exc), **exc.details()}


def _not_found(wanted: str | None, known: Sequence[str]) -> str:
    names = ", ".join(repr(name) for name in known)
    if wanted is None:
        return "this organisation has no provider connection to ask"
    if not names:
        return f"no provider connection named {wanted!r}; this organisation has none"
    return f"no provider connection named {wanted!r}; this organisation's connections: {names}"
