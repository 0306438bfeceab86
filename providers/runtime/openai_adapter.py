"""OpenAI Chat Completions (and any OpenAI-compatible server) through the official SDK."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import httpx2
import openai

from providers.runtime.clients import PerLoop
from providers.runtime.errors import ModelBehaviorError, ProviderError
from providers.runtime.estimates import counted_usage
from providers.runtime.parsing import parse_call
from providers.runtime.presets import PRESETS, Preset
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
OPENAI_ERRORS = (openai.OpenAIError, EgressError)
_STOP = {"stop": "end", "tool_calls": "tool_calls", "function_call": "tool_calls",
         "length": "max_tokens", "content_filter": "other"}  # fmt: skip


class OpenAIAdapter:
    provider = "openai"

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None = None,
        preset: str = "openai",
        timeout_s: float = 60.0,
        headers: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        http_client: Callable[..., httpx2.AsyncClient] | None = None,
    ) -> None:
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
        self.preset: Preset = PRESETS[preset]
        self.base_url = base_url or self.preset.base_url
        if not self.base_url:
            raise ValueError("an OpenAI-compatible connection needs a base URL")
        self.provider = "openai" if preset == "openai" else f"openai_compatible:{preset}"
        self._api_key = api_key
        self.retry = retry or RetryPolicy()
        self._label = self.preset.label
        self._clients = PerLoop(
            lambda: openai.AsyncOpenAI(
                # Local servers need no key, but the SDK insists on one.
                api_key=api_key or "not-needed",
                base_url=self.base_url,
                timeout=timeout_s,
                max_retries=0,  # one retry policy: ours
                default_headers=dict(headers or {}),
                http_client=(http_client or httpx2.AsyncClient)(timeout=timeout_s),
            ),
            close=lambda client: client.close(),
        )

    def __repr__(self) -> str:
        return f"OpenAIAdapter(preset={self.preset.name!r}, base_url={self.base_url!r})"

    async def _client(self) -> openai.AsyncOpenAI:
        return await self._clients.get()

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        messages = to_openai_messages(request.messages)
        if request.system:
            messages.insert(0, {"role": "system", "content": request.system})
        params: dict[str, Any] = {
            "model": request.model,
            "messages": messages,
            self.preset.max_tokens_field: request.max_tokens,
        }
        if request.tools:
            params["tools"] = [definition_for(t, Format.OPENAI) for t in request.tools]
            params["tool_choice"] = self._tool_choice(request.tool_choice)
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.stop:
            params["stop"] = list(request.stop)
        if request.top_p is not None:
            params["top_p"] = request.top_p
        if request.seed is not None:
            params["seed"] = request.seed
        return params

    def _tool_choice(self, choice: str) -> Any:
        if choice in ("auto", "none"):
            return choice
        if choice == "required":
            return "required" if self.preset.tool_choice_required else "auto"
        return {"type": "function", "function": {"name": choice}}

    def _error(self, exc: Exception) -> ProviderError:
        return map_error(exc, provider=self._label, api_key=self._api_key)

    async def _create(self, **params):
        try:
            return await (await self._client()).chat.completions.create(**params)
        except OPENAI_ERRORS as exc:
            raise self._error(exc) from None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        completion = await self.retry.run(lambda: self._create(**self._params(request)))
        if not completion.choices:
            raise ModelBehaviorError(f"{self._label} returned no choices")
        choice = completion.choices[0]
        message = choice.message
        calls = tuple(
            parse_call(c.id, c.function.name, c.function.arguments or "")
            for c in message.tool_calls or ()
            if c.type == "function"
        )
        text = message.content or ""
        usage = _usage(completion.usage)
        return ModelResponse(
            text=text,
            tool_calls=calls,
            stop_reason=_STOP.get(choice.finish_reason or "", "other"),  # type: ignore[arg-type]
            usage=usage if usage is not None else counted_usage(request, text, calls),
            model=completion.model,
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        params = self._params(request)
        params["stream"] = True
        if self.preset.stream_usage:
            params["stream_options"] = {"include_usage": True}
        chunks = await self.retry.run(lambda: self._create(**params))
        text: list[str] = []
        calls: list[ToolCall] = []
        pending: dict[int, dict[str, Any]] = {}  # index -> id, name, argument pieces
        model, stop, usage = request.model, "other", None

        def finish(index: int) -> ToolCall:
            part = pending.pop(index)
            call = parse_call(part["id"], part["name"], "".join(part["args"]))
            calls.append(call)
            return call

        try:
            async for chunk in chunks:
                model = chunk.model or model
                if chunk.usage is not None:
                    usage = _usage(chunk.usage)
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                    yield TextDelta(delta.content)
                for piece in delta.tool_calls or ():
                    if piece.index not in pending:
                        # A new index means every earlier call is complete.
                        for index in sorted(i for i in pending if i < piece.index):
                            yield ToolCallEvent(finish(index))
                        pending[piece.index] = {"id": piece.id or "", "name": "", "args": []}
                    part = pending[piece.index]
                    if piece.id:
                        part["id"] = piece.id
                    if piece.function is not None:
                        part["name"] += piece.function.name or ""
                        part["args"].append(piece.function.arguments or "")
                if choice.finish_reason:
                    stop = _STOP.get(choice.finish_reason, "other")
                    for index in sorted(pending):
                        yield ToolCallEvent(finish(index))
        except OPENAI_ERRORS as exc:
            raise self._error(exc) from None
        except ValueError:  # the SDK's json.loads of an event
            raise ModelBehaviorError(
                f"{self._label} sent a stream event that is not JSON"
            ) from None
        for index in sorted(pending):  # a stream cut before its finish_reason
            yield ToolCallEvent(finish(index))
        if usage is None:  # a service that counts nothing (stream_usage off, or not honoured)
            usage = counted_usage(request, "".join(text), calls)
        yield UsageEvent(usage)
        yield Done(ModelResponse("".join(text), tuple(calls), stop, usage, model))  # type: ignore[arg-type]

    async def embed(
        self, texts: Sequence[str], *, model: str, dimensions: int | None = None
    ) -> list[list[float]]:
        return (await self.embeddings(texts, model=model, dimensions=dimensions))[0]

    async def embeddings(
        self, texts: Sequence[str], *, model: str, dimensions: int | None = None
    ) -> tuple[list[list[float]], int]:
        """The vectors, in order, and the input tokens the provider counted."""
        if not self.preset.embeddings:
            raise ProviderError(f"{self._label} offers no embeddings endpoint")
        params: dict[str, Any] = {"model": model, "input": list(texts)}
        if dimensions is not None:
            params["dimensions"] = dimensions

        async def call():
            try:
                return await (await self._client()).embeddings.create(**params)
            except OPENAI_ERRORS as exc:
                raise self._error(exc) from None

        result = await self.retry.run(call)
        vectors = [item.embedding for item in sorted(result.data, key=lambda d: d.index)]
        usage = getattr(result, "usage", None)
        return vectors, (getattr(usage, "prompt_tokens", None) or 0)

    async def list_models(self) -> list[str]:
        try:
            page = await (await self._client()).models.list()
        except OPENAI_ERRORS as exc:
            raise self._error(exc) from None
        return [model.id for model in page.data]


def _usage(usage) -> Usage | None:
    """The provider's count, or None when it sent none."""
    if usage is None:
        return None
    details = getattr(usage, "prompt_tokens_details", None)
    cached = (getattr(details, "cached_tokens", None) or 0) if details else 0
    return Usage(
        input_tokens=(usage.prompt_tokens or 0) - cached,
        output_tokens=usage.completion_tokens or 0,
        cache_read_tokens=cached,
    )


def to_openai_messages(messages: Sequence[Message]) -> list[dict]:
    out: list[dict] = []
    for message in messages:
        if isinstance(message, UserMessage) and message.images:
            parts: list[dict[str, Any]] = [{"type": "text", "text": message.text}]
            parts += [
                {"type": "image_url", "image_url": {"url": f"data:{i.media_type};base64,{i.data}"}}
                for i in message.images
            ]
            out.append({"role": "user", "content": parts})
        elif isinstance(message, UserMessage):
            out.append({"role": "user", "content": message.text})
        elif isinstance(message, AssistantMessage):
            turn: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            if message.tool_calls:
                turn["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                    }
                    for c in message.tool_calls
                ]
            out.append(turn)
        elif isinstance(message, ToolResultMessage):
            out.append(
                {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
            )
        else:
            raise ProviderError(f"unknown message type {type(message).__name__}")
    return out
