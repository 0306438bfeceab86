"""Anthropic Messages API through the official SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import anthropic
import httpx2

from providers.runtime.clients import PerLoop
from providers.runtime.errors import ModelBehaviorError, ProviderError
from providers.runtime.estimates import counted_usage
from providers.runtime.parsing import parse_call
from providers.runtime.retry import RetryPolicy
from providers.runtime.sdk_errors import map_error
from providers.runtime.types import (
    AssistantMessage,
    Done,
    Message,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
    ToolResultMessage,
    Usage,
    UsageEvent,
    UserMessage,
)
from tools.runtime.egress import EgressError
from tools.runtime.formats import Format, definition_for
from tools.runtime.tool import ToolCall

# What an SDK call may raise: the guarded transport's own errors pass through unwrapped.
ANTHROPIC_ERRORS = (anthropic.AnthropicError, EgressError)
_STOP = {"end_turn": "end", "tool_use": "tool_calls", "max_tokens": "max_tokens",
         "stop_sequence": "stop_sequence"}  # fmt: skip


class AnthropicAdapter:
    provider = "anthropic"

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout_s: float = 60.0,
        headers: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        http_client: Callable[..., httpx2.AsyncClient] | None = None,
    ) -> None:
        self._api_key = api_key
        self.base_url = base_url
        self.retry = retry or RetryPolicy()
        self._clients = PerLoop(
            lambda: anthropic.AsyncAnthropic(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout_s,
                max_retries=0,  # one retry policy: ours
                default_headers=dict(headers or {}),
                http_client=(http_client or httpx2.AsyncClient)(timeout=timeout_s),
            ),
            close=lambda client: client.close(),
        )

    def __repr__(self) -> str:
        return f"AnthropicAdapter(base_url={self.base_url!r})"

    async def _client(self) -> anthropic.AsyncAnthropic:
        return await self._clients.get()

    # -- requests ------------------------------------------------------------------
    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": to_anthropic_messages(request.messages),
        }
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = [definition_for(t, Format.ANTHROPIC) for t in request.tools]
            params["tool_choice"] = _tool_choice(request.tool_choice)
        # The Messages API (anthropic SDK 2.x) takes no temperature, top_p or seed: an
        # agent's or caller's sampling options do not apply to Anthropic connections.
        if request.stop:
            params["stop_sequences"] = list(request.stop)
        return params

    async def _call(self, **params):
        try:
            return await (await self._client()).messages.create(**params)
        except ANTHROPIC_ERRORS as exc:
            raise map_error(exc, provider="Anthropic", api_key=self._api_key) from None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        message = await self.retry.run(lambda: self._call(**self._params(request)))
        text, calls = [], []
        for block in message.content:
            if block.type == "text":
                text.append(block.text)
            elif block.type == "tool_use":
                if not isinstance(block.input, dict):
                    raise ModelBehaviorError(
                        f"arguments for {block.name} are not a JSON object",
                        call_id=block.id, name=block.name, raw=str(block.input),
                    )  # fmt: skip
                calls.append(ToolCall(id=block.id, name=block.name, arguments=block.input))
        return ModelResponse(
            text="".join(text),
            tool_calls=tuple(calls),
            stop_reason=_STOP.get(message.stop_reason or "", "other"),
            usage=_usage(message.usage),
            model=message.model,
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        params = self._params(request)
        events = await self.retry.run(lambda: self._call(**params, stream=True))
        text: list[str] = []
        calls: list[ToolCall] = []
        blocks: dict[int, dict[str, Any]] = {}
        model, stop, usage = request.model, "other", Usage()
        started = counted = False  # message_start (the input's count), message_delta (output's)
        try:
            async for event in events:
                kind = event.type
                if kind == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        text.append(delta.text)
                        yield TextDelta(delta.text)
                    elif delta.type == "input_json_delta":
                        blocks[event.index]["json"].append(delta.partial_json)
                elif kind == "content_block_start":
                    block = event.content_block
                    if block.type == "tool_use":
                        blocks[event.index] = {"id": block.id, "name": block.name, "json": []}
                elif kind == "content_block_stop":
                    block = blocks.pop(event.index, None)
                    if block is not None:
                        call = parse_call(block["id"], block["name"], "".join(block["json"]))
                        calls.append(call)
                        yield ToolCallEvent(call)
                elif kind == "message_start":
                    model, started = event.message.model, True
                    usage = _usage(event.message.usage)
                elif kind == "message_delta":
                    stop, counted = _STOP.get(event.delta.stop_reason or "", "other"), True
                    usage = Usage(
                        usage.input_tokens,
                        event.usage.output_tokens or 0,
                        usage.cache_read_tokens,
                        usage.cache_write_tokens,
                    )
        except ANTHROPIC_ERRORS as exc:
            raise map_error(exc, provider="Anthropic", api_key=self._api_key) from None
        if not counted:  # it ended before the output's count: what it gave is counted
            estimate = counted_usage(request, "".join(text), calls)
            usage = Usage(
                usage.input_tokens if started else estimate.input_tokens,
                max(usage.output_tokens, estimate.output_tokens),
                usage.cache_read_tokens,
                usage.cache_write_tokens,
            )
        yield UsageEvent(usage)
        yield Done(
            ModelResponse("".join(text), tuple(calls), stop, usage, model)  # type: ignore[arg-type]
        )

    async def list_models(self) -> list[str]:
        try:
            page = await (await self._client()).models.list()
        except ANTHROPIC_ERRORS as exc:
            raise map_error(exc, provider="Anthropic", api_key=self._api_key) from None
        return [model.id for model in page.data]


def _usage(usage) -> Usage:
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_read_tokens=getattr(usage, "cache_read_input_tokens", None) or 0,
        cache_write_tokens=getattr(usage, "cache_creation_input_tokens", None) or 0,
    )


def _tool_choice(choice: str) -> dict[str, str]:
    if choice == "auto":
        return {"type": "auto"}
    if choice == "none":
        return {"type": "none"}
    if choice == "required":
        return {"type": "any"}
    return {"type": "tool", "name": choice}


def to_anthropic_messages(messages: list[Message] | tuple[Message, ...]) -> list[dict]:
    """Neutral messages -> Messages API turns. Tool results go back as tool_result blocks
    in a user turn; consecutive turns of one role are merged, as the API requires."""
    turns: list[dict] = []

    def add(role: str, blocks: list[dict]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for message in messages:
        if isinstance(message, UserMessage):
            images = [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": i.media_type, "data": i.data},
                }
                for i in message.images
            ]  # (before the text, as Anthropic advises)
            text = [{"type": "text", "text": message.text}] if message.text or not images else []
            add("user", [*images, *text])
        elif isinstance(message, AssistantMessage):
            blocks: list[dict] = [{"type": "text", "text": message.text}] if message.text else []
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in message.tool_calls
            ]
            add("assistant", blocks)
        elif isinstance(message, ToolResultMessage):
            block = {
                "type": "tool_result",
                "tool_use_id": message.call_id,
                "content": message.content,
            }
            if message.is_error:
                block["is_error"] = True
            add("user", [block])
        else:
            raise ProviderError(f"unknown message type {type(message).__name__}")
    return turns
