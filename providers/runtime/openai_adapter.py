"""OpenAI Chat Completions (and any OpenAI-compatible server).

Chat Completions (a stream, every run's, or a whole answer) go through
providers.runtime.http1 and are read as JSON here; embeddings and the model list through
the official SDK. Why: the SDK builds a pydantic object for every chunk and transforms every
request, about a third of a runs worker's CPU per chat in bench/api.py, for objects the
adapter only reads a few fields of.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import httpx2
import openai

from providers.runtime.clients import PerLoop
from providers.runtime.errors import (
    BadRequest,
    ModelBehaviorError,
    ProviderError,
    ProviderUnavailable,
)
from providers.runtime.estimates import counted_usage
from providers.runtime.http1 import Answer, Origin, checked_headers
from providers.runtime.parsing import parse_call
from providers.runtime.passthrough import chat_usage
from providers.runtime.presets import PRESETS, Preset
from providers.runtime.retry import RetryPolicy
from providers.runtime.sdk_errors import body_detail, map_error, redact, status_error
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
    UsageEvent,
    UserMessage,
)
from tools.runtime.egress import (
    SDK_MAX_RESPONSE_BYTES,
    EgressError,
    EgressPolicy,
    ResponseTooLarge,
)
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
        egress: EgressPolicy | None = None,
    ) -> None:
        """`http_client`: the SDK's client (a guarded one: tools.runtime.egress); `egress`:
        the policy of the streams' connections. Without them, as an unguarded client, any
        address."""
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
        self.max_response_bytes = SDK_MAX_RESPONSE_BYTES  # a stream's, decoded
        policy = egress or EgressPolicy(allowlist=("0.0.0.0/0", "::/0"))
        self._origins = PerLoop(
            lambda: Origin(self.base_url, policy=policy, timeout_s=timeout_s),
            close=lambda origin: origin.close(),
        )
        fixed = {"content-type": "application/json", "user-agent": "agentplatform"}
        fixed |= {name.lower(): value for name, value in (headers or {}).items()}
        if api_key:
            fixed["authorization"] = f"Bearer {api_key}"
        try:
            self._header_lines: bytes | None = checked_headers(fixed.items())
        except ValueError:
            self._header_lines = None  # said at each call: the connection's headers are bad

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

    async def complete(self, request: ModelRequest) -> ModelResponse:
        body = json.dumps(self._params(request)).encode()
        completion = await self.retry.run(lambda: self._answer(body))
        try:
            choice = completion["choices"][0]
            message = choice.get("message") or {}
            calls = tuple(
                parse_call(c["id"], c["function"]["name"], c["function"].get("arguments") or "")
                for c in message.get("tool_calls") or ()
                if c.get("type", "function") == "function"
            )
            text = message.get("content") or ""
            raw = completion.get("usage")
            usage = chat_usage(raw) if isinstance(raw, dict) else None
            stop = _STOP.get(choice.get("finish_reason") or "", "other")
            model = completion.get("model") or request.model
        except (IndexError, KeyError, AttributeError, TypeError):
            raise ModelBehaviorError(f"{self._label} returned no choices") from None
        return ModelResponse(
            text=text,
            tool_calls=calls,
            stop_reason=stop,  # type: ignore[arg-type]
            usage=usage if usage is not None else counted_usage(request, text, calls),
            model=model,
        )

    async def _answer(self, body: bytes) -> dict[str, Any]:
        """A whole answer's JSON."""
        stack, answer = await self._post(body)
        try:
            content = await answer.read(self.max_response_bytes)
        except EgressError as exc:
            raise self._error(exc) from None
        finally:
            await stack.aclose()
        try:
            completion = json.loads(content)
        except ValueError:
            raise ModelBehaviorError(f"{self._label} answered with something not JSON") from None
        if not isinstance(completion, dict):
            raise ModelBehaviorError(f"{self._label} returned no choices")
        return completion

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        params = self._params(request)
        params["stream"] = True
        if self.preset.stream_usage:
            params["stream_options"] = {"include_usage": True}
        body = json.dumps(params).encode()
        stack, answer = await self.retry.run(lambda: self._post(body))
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
            async for chunk in self._chunks(answer):
                model = chunk.get("model") or model
                if isinstance(chunk.get("usage"), dict):
                    usage = chat_usage(chunk["usage"])
                choices = chunk.get("choices")
                if not choices or not isinstance(choices[0], dict):
                    continue
                choice = choices[0]
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    text.append(delta["content"])
                    yield TextDelta(delta["content"])
                for piece in delta.get("tool_calls") or ():
                    index = piece.get("index", 0)
                    if index not in pending:
                        # A new index means every earlier call is complete.
                        for earlier in sorted(i for i in pending if i < index):
                            yield ToolCallEvent(finish(earlier))
                        pending[index] = {"id": piece.get("id") or "", "name": "", "args": []}
                    part = pending[index]
                    if piece.get("id"):
                        part["id"] = piece["id"]
                    function = piece.get("function") or {}
                    part["name"] += function.get("name") or ""
                    part["args"].append(function.get("arguments") or "")
                if choice.get("finish_reason"):
                    stop = _STOP.get(choice["finish_reason"], "other")
                    for index in sorted(pending):
                        yield ToolCallEvent(finish(index))
        except EgressError as exc:
            raise self._error(exc) from None
        except (AttributeError, TypeError):  # a chunk not shaped as Chat Completions' are
            raise ModelBehaviorError(
                f"{self._label} sent a stream event of another shape"
            ) from None
        finally:
            await stack.aclose()
        for index in sorted(pending):  # a stream cut before its finish_reason
            yield ToolCallEvent(finish(index))
        if usage is None:  # a service that counts nothing (stream_usage off, or not honoured)
            usage = counted_usage(request, "".join(text), calls)
        yield UsageEvent(usage)
        yield Done(ModelResponse("".join(text), tuple(calls), stop, usage, model))  # type: ignore[arg-type]

    @property
    def _shapeless(self) -> str:
        return f"{self._label} sent a stream event of another shape"

    async def _post(self, body: bytes) -> tuple[contextlib.AsyncExitStack, Answer]:
        """The answer to a Chat Completions request, once the server said 200 (its body to
        read, then the stack to close); else the error its answer says."""
        if self._header_lines is None:
            raise BadRequest(f"{self._label}: the connection's extra headers are not valid")
        origin = await self._origins.get()
        stack = contextlib.AsyncExitStack()
        try:
            answer = await stack.enter_async_context(
                origin.post("/chat/completions", self._header_lines, body)
            )
            if answer.status != 200:
                detail = body_detail(await answer.read())
                raise status_error(
                    answer.status, detail, answer.headers, provider=self._label,
                    api_key=self._api_key,
                )  # fmt: skip
        except EgressError as exc:
            await stack.aclose()
            raise self._error(exc) from None
        except BaseException:
            await stack.aclose()
            raise
        return stack, answer

    async def _chunks(self, answer: Answer) -> AsyncIterator[dict[str, Any]]:
        """The JSON of each server-sent event's data, to `[DONE]` or the end."""
        pending, received = b"", 0
        async for piece in answer.chunks():
            received += len(piece)
            if received > self.max_response_bytes:  # (the SDK's guarded client's cap)
                raise ResponseTooLarge(f"response larger than {self.max_response_bytes} bytes")
            pending += piece.replace(b"\r\n", b"\n")
            *events, pending = pending.split(b"\n\n")
            for event in events:
                chunk = self._chunk(event)
                if chunk is not None:
                    yield chunk
        chunk = self._chunk(pending)  # a last event without its blank line
        if chunk is not None:
            yield chunk

    def _chunk(self, event: bytes) -> dict[str, Any] | None:
        data = _event_data(event)
        if data is None or data == b"[DONE]":
            return None
        try:
            chunk = json.loads(data)
        except ValueError:
            raise ModelBehaviorError(
                f"{self._label} sent a stream event that is not JSON"
            ) from None
        if not isinstance(chunk, dict):
            raise ModelBehaviorError(self._shapeless)
        if "error" in chunk:  # an error in the middle of the stream
            detail = body_detail(data)
            raise ProviderUnavailable(redact(f"{self._label} call failed: {detail}", self._api_key))
        return chunk

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


def _event_data(event: bytes) -> bytes | None:
    """A server-sent event's data (its `data:` lines joined), or None if it has none."""
    lines = [
        line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")
    ]
    return b"\n".join(lines) if lines else None


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
