"""`/v1/messages` with a gateway model: on an Anthropic connection passed through as it
came (`forward`, the caller's `anthropic-version` and `anthropic-beta` headers passed on);
on an OpenAI or OpenAI-compatible connection translated to Chat Completions and back.

The request is read as the agent path reads it (`messages_wire.chat_body`) and sent through
the connection's ChatPassthrough; the completion comes back as a `message` (text and
`tool_use` blocks, `stop_reason`, usage), its chunks as Messages events. A `stop_sequence`
stop cannot be told from `end_turn` in a completion's `finish_reason` (`stop` for both): it
is said as `end_turn`.

A provider's non-200 answer is the caller's error, in Messages' shape
(`call.provider_refusal`); the call is recorded as the gateway's others are. A model alias
falls back across its pairs as on the other endpoints (`call.Call.send`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from agentplatform.event_streams import SseJsonReader, event_stream_response
from agentplatform.v1.chat_request import check_sampling
from agentplatform.v1.chat_wire import ChunkTally, content_text, first_choice
from agentplatform.v1.endpoint import parsed
from agentplatform.v1.gateway.call import Call, any_route, chat_for, sent_or_refused
from agentplatform.v1.gateway.forward import forward
from agentplatform.v1.messages_wire import chat_body, message_object, messages_event, tool_use_id
from providers.gateway_routes import GatewayRoute
from providers.runtime.passthrough import MessagesPassthrough, token_count
from tenancy.authentication import ApiClient


async def gateway_messages(
    request: HttpRequest, body: dict[str, Any], client: ApiClient
) -> HttpResponse:
    """`/v1/messages` with a gateway model (to an Anthropic connection, the caller's
    `anthropic-version` and `anthropic-beta` headers passed on)."""
    route = await any_route(client, body["model"])
    if isinstance(route.passthrough, MessagesPassthrough):
        return await forward(request, body, client, route, messages_headers(request))
    return await messages_through_chat(request, body, client, route)


def messages_headers(request: HttpRequest) -> dict[str, str]:
    """The caller's `anthropic-version` and `anthropic-beta` headers, passed on to an
    Anthropic connection."""
    return {
        name: request.headers[name]
        for name in ("anthropic-version", "anthropic-beta")
        if request.headers.get(name) and request.headers[name].isascii()
    }


_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                 "function_call": "tool_use", "content_filter": "refusal"}  # fmt: skip


def chat_of_messages(body: dict[str, Any]) -> dict[str, Any]:
    """The Chat Completions body sent for a Messages `body` (without `stream`: the
    pass-through sets it; `chat_for` adapts it to each connection)."""
    chat = chat_body(body)  # (its shape checked: `stream` too)
    chat.pop("stream", None)
    for message in chat["messages"]:
        if message.get("role") == "assistant":  # (None fields are not every service's)
            for name in ("content", "tool_calls"):
                if message.get(name) is None:
                    message.pop(name, None)
            message.setdefault("content", "")
    check_sampling(chat)
    return chat


async def messages_through_chat(
    request: HttpRequest, body: dict[str, Any], client: ApiClient, route: GatewayRoute
) -> HttpResponse:
    model = body["model"]
    chat = await parsed(chat_of_messages, body, size=len(request.body))
    call = await Call.begun(client, model, route, chat)
    stream = body.get("stream") is True

    def payload_of(target: GatewayRoute) -> dict[str, Any]:
        sent = chat_for(target, chat)
        return {**sent, "stream_options": {"include_usage": True}} if stream else sent

    answered = await sent_or_refused(call, payload_of, stream=stream)
    ids = f"msg_{uuid.uuid4().hex}"
    if answered.rest is None:
        return JsonResponse(message_of_completion(answered.forwarded.answer, ids, model))
    events = messages_events(answered.first, call.relayed(answered), ids, model)
    return event_stream_response(events)


def message_of_completion(answer: dict[str, Any], id: str, model: str) -> dict[str, Any]:
    """A provider's `chat.completion` as a Messages `message`."""
    choice, message = first_choice(answer)
    content: list[dict[str, Any]] = []
    text = content_text(message.get("content"))
    if text:
        content.append({"type": "text", "text": text})
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            content.append(
                _tool_use(call.get("id"), function.get("name"), function.get("arguments"))
            )
    return message_object(
        id,
        model,
        content,
        stop_reason=_stop_reason(choice.get("finish_reason"), content),
        usage=_messages_usage(answer.get("usage")),
    )


def _tool_use(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    try:
        value = json.loads(arguments) if isinstance(arguments, str) and arguments else {}
    except (ValueError, RecursionError):
        value = {}
    return {
        "type": "tool_use",
        "id": call_id if isinstance(call_id, str) and call_id else tool_use_id(),
        "name": name if isinstance(name, str) else "",
        "input": value if isinstance(value, dict) else {},
    }


def _stop_reason(finish_reason: Any, content: list[dict[str, Any]] | None = None) -> str:
    if content and any(block["type"] == "tool_use" for block in content):
        return "tool_use"
    return (
        _STOP_REASONS.get(finish_reason, "end_turn")
        if isinstance(finish_reason, str)
        else "end_turn"
    )


def _messages_usage(raw: Any) -> dict[str, int]:
    """Chat Completions usage as Messages usage (whose input tokens leave out the cached)."""
    if not isinstance(raw, dict):
        return {"input_tokens": 0, "output_tokens": 0}
    details = raw.get("prompt_tokens_details")
    prompt = token_count(raw.get("prompt_tokens"))
    cached = min(
        token_count(details.get("cached_tokens")) if isinstance(details, dict) else 0, prompt
    )
    usage = {
        "input_tokens": prompt - cached,
        "output_tokens": token_count(raw.get("completion_tokens")),
    }
    if cached:
        usage["cache_read_input_tokens"] = cached
    return usage


@dataclass
class _Blocks(ChunkTally):
    """The content blocks a chunk stream has opened: the text one's index, and each tool
    call's (by the call's index in the chunks)."""

    count: int = 0
    text: int | None = None
    open: int | None = None
    calls: dict[Any, int] = field(default_factory=dict)
    nameless: dict[Any, tuple[str, list[str]]] = field(default_factory=dict)

    def close(self) -> bytes:
        if self.open is None:
            return b""
        index, self.open = self.open, None
        return messages_event("content_block_stop", index=index)

    def start(self, block: dict[str, Any]) -> tuple[int, bytes]:
        out = self.close()
        index, self.count = self.count, self.count + 1
        self.open = index
        return index, out + messages_event("content_block_start", index=index, content_block=block)


async def messages_events(
    first: bytes, stream: AsyncIterator[bytes], id: str, model: str
) -> AsyncIterator[bytes]:
    """The provider's chunk stream (`first`, then `stream`, closed when this is) as
    Messages events. A stream that ends without a finish reason, or with an error chunk,
    ends with an `error` event."""
    reader, blocks = SseJsonReader(), _Blocks()
    yield messages_event("message_start", message=message_object(id, model, []))
    async with aclosing(stream):
        piece: bytes | None = first
        while piece is not None:
            out = b"".join(_from_chunk(chunk, blocks) for chunk in reader.feed(piece))
            if out:
                yield out
            if blocks.error:
                break
            piece = await anext(stream, None)
    if blocks.error is None:
        out = b"".join(_from_chunk(chunk, blocks) for chunk in reader.feed(b"\n\n"))
        for key, (call_id, pieces) in list(blocks.nameless.items()):  # (never named)
            out += _open_call(blocks, key, call_id, "", "".join(pieces))
        yield out
        if blocks.finish_reason is None:
            blocks.error = "The provider's stream ended before its answer was complete."
    if blocks.error is not None:
        yield messages_event("error", error={"type": "api_error", "message": blocks.error})
        return
    usage = _messages_usage(blocks.usage)
    reason = "tool_use" if blocks.calls else _stop_reason(blocks.finish_reason)
    yield (
        blocks.close()
        + messages_event(
            "message_delta",
            delta={"stop_reason": reason, "stop_sequence": None},
            usage=usage,
        )
        + messages_event("message_stop")
    )


def _from_chunk(chunk: dict[str, Any], blocks: _Blocks) -> bytes:
    delta = blocks.delta_of(chunk)
    if delta is None:
        return b""
    out = b""
    content = delta.get("content")
    if isinstance(content, str) and content:
        if blocks.text is None or blocks.open != blocks.text:
            blocks.text, opened = blocks.start({"type": "text", "text": ""})
            out += opened
        text_delta = {"type": "text_delta", "text": content}
        out += messages_event("content_block_delta", index=blocks.text, delta=text_delta)
    calls = delta.get("tool_calls")
    for position, piece in enumerate(calls if isinstance(calls, list) else []):
        if isinstance(piece, dict):
            out += _call_piece(piece, position, blocks)
    return out


def _call_piece(piece: dict[str, Any], position: int, blocks: _Blocks) -> bytes:
    """A tool call's delta: its block opened once its name is known, then its arguments."""
    index = piece.get("index")
    key = index if isinstance(index, int) and not isinstance(index, bool) else position
    function = piece.get("function") if isinstance(piece.get("function"), dict) else {}
    arguments = function.get("arguments")
    arguments = arguments if isinstance(arguments, str) else ""
    if key in blocks.calls:
        return _arguments(blocks.calls[key], arguments)
    call_id, earlier = blocks.nameless.pop(key, (None, []))
    if call_id is None:
        call_id = piece["id"] if isinstance(piece.get("id"), str) and piece["id"] else tool_use_id()
    name = function.get("name")
    if not isinstance(name, str) or not name:
        blocks.nameless[key] = (call_id, [*earlier, arguments])
        return b""
    return _open_call(blocks, key, call_id, name, "".join([*earlier, arguments]))


def _open_call(blocks: _Blocks, key: Any, call_id: str, name: str, arguments: str) -> bytes:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    index, out = blocks.start(block)
    blocks.calls[key] = index
    blocks.nameless.pop(key, None)
    return out + _arguments(index, arguments)


def _arguments(index: int, text: str) -> bytes:
    if not text:
        return b""
    delta = {"type": "input_json_delta", "partial_json": text}
    return messages_event("content_block_delta", index=index, delta=delta)
