"""`/v1/chat/completions` with a gateway model: on a Chat Completions connection passed
through as it came (`forward`); on an Anthropic connection translated to Messages and back.

System and developer messages become `system`, tool calls `tool_use` blocks, tool messages
`tool_result` blocks, data-URL images base64 image blocks; `max_tokens` is
GATEWAY_DEFAULT_MAX_TOKENS when absent (Anthropic requires one, and the call is held for
it); `response_format` other than `text`, and `n` above 1, are 400s (not expressible). The
message comes back as a `chat.completion`, its events as chunks (the usage chunk only with
`stream_options.include_usage`).

A provider's non-200 answer is the caller's error, in Chat Completions' shape
(`call.provider_refusal`); the call is recorded as the gateway's others are. A model alias
falls back across its pairs as on the other endpoints (`call.Call.send`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from agentplatform.event_streams import SseJsonReader, event_stream_response, sse_message
from agentplatform.v1.chat_request import check_sampling
from agentplatform.v1.chat_wire import (
    completion_chunk,
    completion_object,
    provider_failure,
    unreadable_answer,
)
from agentplatform.v1.endpoint import OpenAIError, parsed
from agentplatform.v1.gateway.call import Call, any_route, sent_or_refused
from agentplatform.v1.gateway.forward import forward
from agentplatform.v1.messages_wire import tool_use_id
from agentplatform.v1.shapes.base import BadRequest
from providers.gateway_routes import GatewayRoute
from providers.runtime.passthrough import MessagesPassthrough, token_count
from tenancy.authentication import ApiClient


async def gateway_chat(
    request: HttpRequest, body: dict[str, Any], client: ApiClient
) -> HttpResponse:
    """`/v1/chat/completions` with a gateway model; `client` is the caller's checked key."""
    route = await any_route(client, body["model"])
    if isinstance(route.passthrough, MessagesPassthrough):
        return await chat_through_messages(request, body, client, route)
    return await forward(request, body, client, route)


_FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                   "tool_use": "tool_calls", "refusal": "content_filter",
                   "pause_turn": "stop"}  # fmt: skip
_NOT_EXPRESSIBLE = (
    "`response_format` {kind} cannot be sent to an Anthropic connection's model; ask for "
    "the JSON in the prompt, or call a tool with the schema as its input_schema."
)


def messages_of_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The Messages body sent for a Chat Completions `body` (without `stream`)."""
    if body.get("stream") not in (None, True, False):
        raise BadRequest("`stream` must be a boolean.", "stream")
    check_sampling(body)
    format = body.get("response_format")
    if format is not None:
        kind = format.get("type") if isinstance(format, dict) else None
        if kind != "text":
            raise BadRequest(
                _NOT_EXPRESSIBLE.format(
                    kind=f"`{kind}`" if isinstance(kind, str) else "of this kind"
                ),
                "response_format",
            )
    if body.get("n") not in (None, 1):
        raise BadRequest("`n` must be 1 for an Anthropic connection's model.", "n")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("`messages` must be a non-empty list.", "messages")
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for index, message in enumerate(raw):
        param = f"messages[{index}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role in ("system", "developer"):
            system.append(_plain_text(message.get("content"), f"{param}.content"))
            continue
        if role == "user":
            blocks = _user_blocks(message.get("content"), f"{param}.content")
        elif role == "assistant":
            blocks = _assistant_blocks(message, param)
        elif role == "tool":
            blocks = [_tool_result(message, param)]
            role = "user"
        else:
            raise BadRequest(
                "Each message's `role` must be system, developer, user, assistant or tool.",
                f"{param}.role",
            )
        if turns and turns[-1]["role"] == role:  # (one turn a side, results first)
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    sent: dict[str, Any] = {"model": body.get("model"), "messages": turns}
    if system:
        sent["system"] = "\n\n".join(system)
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    sent["max_tokens"] = limit or settings.GATEWAY_DEFAULT_MAX_TOKENS
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            sent[name] = body[name]
    stop = body.get("stop")
    if stop is not None:
        sent["stop_sequences"] = [stop] if isinstance(stop, str) else stop
    if isinstance(body.get("user"), str) and body["user"]:
        sent["metadata"] = {"user_id": body["user"]}
    if body.get("tools") is not None:
        sent["tools"] = _anthropic_tools(body["tools"])
    choice = _anthropic_tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
    if choice is not None:
        sent["tool_choice"] = choice
    return sent


def _plain_text(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "\n\n".join(p["text"] for p in content)
    raise BadRequest("`content` must be a string or a list of text parts.", param)


def _user_blocks(content: Any, param: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        raise BadRequest("`content` must be a string or a non-empty list of parts.", param)
    blocks = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        where = f"{param}[{index}]"
        if kind == "text" and isinstance(part.get("text"), str):
            blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            blocks.append({"type": "image", "source": _image_source(url, where)})
        else:
            raise BadRequest(
                "Only text and image_url parts can be sent to an Anthropic connection's model.",
                where,
            )
    return blocks


def _image_source(url: Any, param: str) -> dict[str, Any]:
    if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
        media_type, _, data = url[5:].partition(";base64,")
        return {"type": "base64", "media_type": media_type, "data": data}
    if isinstance(url, str) and url.startswith(("https://", "http://")):
        return {"type": "url", "url": url}
    raise BadRequest("An image's `url` must be a base64 data URL or an http(s) URL.", param)


def _assistant_blocks(message: dict[str, Any], param: str) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    content = message.get("content")
    if content is not None and content != "":
        blocks.append({"type": "text", "text": _plain_text(content, f"{param}.content")})
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise BadRequest("`tool_calls` must be a list.", f"{param}.tool_calls")
    for index, call in enumerate(calls or []):
        where = f"{param}.tool_calls[{index}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(call.get("id"), str):
            raise BadRequest("A tool call needs an `id` and a `function`.", where)
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (TypeError, ValueError, RecursionError):
            arguments = None
        if not isinstance(arguments, dict) or not isinstance(function.get("name"), str):
            raise BadRequest(
                "A tool call needs a `name` and `arguments` that are a JSON object.", where
            )
        blocks.append(
            {"type": "tool_use", "id": call["id"], "name": function["name"], "input": arguments}
        )
    if not blocks:
        raise BadRequest("An assistant message needs `content` or `tool_calls`.", param)
    return blocks


def _tool_result(message: dict[str, Any], param: str) -> dict[str, Any]:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise BadRequest("A tool message needs its `tool_call_id`.", f"{param}.tool_call_id")
    text = _plain_text(message.get("content"), f"{param}.content")
    return {"type": "tool_result", "tool_use_id": call_id, "content": text}


def _anthropic_tools(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise BadRequest("`tools` must be a list.", "tools")
    tools = []
    for index, tool in enumerate(raw):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(function, dict)
            or tool.get("type") != "function"
            or not isinstance(function.get("name"), str)
        ):
            raise BadRequest("Only function tools with a `name` are supported.", f"tools[{index}]")
        schema = function.get("parameters")
        sent = {
            "name": function["name"],
            "input_schema": schema
            if isinstance(schema, dict)
            else {"type": "object", "properties": {}},
        }
        if isinstance(function.get("description"), str):
            sent["description"] = function["description"]
        tools.append(sent)
    return tools


def _anthropic_tool_choice(raw: Any, parallel: Any) -> dict[str, Any] | None:
    if raw is None:
        choice: dict[str, Any] | None = {"type": "auto"} if parallel is False else None
    elif raw in ("auto", "none"):
        choice = {"type": raw}
    elif raw == "required":
        choice = {"type": "any"}
    elif (
        isinstance(raw, dict)
        and isinstance(raw.get("function"), dict)
        and isinstance(raw["function"].get("name"), str)
    ):
        choice = {"type": "tool", "name": raw["function"]["name"]}
    else:
        raise BadRequest(
            "`tool_choice` must be auto, none, required or a function by name.", "tool_choice"
        )
    if choice is not None and parallel is False and choice["type"] != "none":
        choice["disable_parallel_tool_use"] = True
    return choice


async def chat_through_messages(
    request: HttpRequest, body: dict[str, Any], client: ApiClient, route: GatewayRoute
) -> HttpResponse:
    model = body["model"]
    sent = await parsed(messages_of_chat, body, size=len(request.body))
    call = await Call.begun(client, model, route, sent)  # (held for the `max_tokens` sent)
    stream = body.get("stream") is True or request.GET.get("stream") == "true"
    answered = await sent_or_refused(call, lambda target: sent, stream=stream)
    ids = _ChunkIds(f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), model)
    if answered.rest is None:
        return JsonResponse(completion_of_message(answered.forwarded.answer, ids))
    options = body.get("stream_options")
    usage = isinstance(options, dict) and options.get("include_usage") is True
    events = chunks_of_events(answered.first, call.relayed(answered), ids, usage)
    return event_stream_response(events)


@dataclass(frozen=True)
class _ChunkIds:
    id: str
    created: int
    model: str

    def chunk(self, delta: dict[str, Any] | None, **extra: Any) -> bytes:
        return completion_chunk(self.id, self.created, self.model, delta, **extra)


def completion_of_message(answer: dict[str, Any], ids: _ChunkIds) -> dict[str, Any]:
    """A provider's Messages `message` (as the pass-through read it) as a `chat.completion`."""
    content = answer.get("content")
    if not isinstance(content, list):
        raise unreadable_answer()
    text = "".join(
        b["text"]
        for b in content
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    )
    calls = [
        {
            "id": b.get("id") or tool_use_id(),
            "type": "function",
            "function": {
                "name": b.get("name") or "",
                "arguments": json.dumps(b.get("input") or {}, ensure_ascii=False),
            },
        }
        for b in content
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": text or (None if calls else ""),
        "refusal": None,
    }
    if calls:
        message["tool_calls"] = calls
    finish = _finish_reason(answer.get("stop_reason"), bool(calls))
    return completion_object(
        ids.id, ids.created, ids.model, message, finish, _chat_usage(answer.get("usage"))
    )


def _finish_reason(stop_reason: Any, called: bool) -> str:
    if called:
        return "tool_calls"
    return _FINISH_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def _chat_usage(raw: Any) -> dict[str, Any]:
    """Messages usage as Chat Completions usage (whose prompt tokens count the cached)."""
    raw = raw if isinstance(raw, dict) else {}
    cached = token_count(raw.get("cache_read_input_tokens"))
    prompt = (
        token_count(raw.get("input_tokens"))
        + cached
        + token_count(raw.get("cache_creation_input_tokens"))
    )
    completion = token_count(raw.get("output_tokens"))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


@dataclass
class _Events:
    """What the provider's Messages events said so far: the usage, the stop reason, each
    `tool_use` block's position among the calls (by the block's index), whether the
    message stopped, an error."""

    usage: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None
    calls: dict[Any, int] = field(default_factory=dict)
    done: bool = False
    error: str | None = None


async def chunks_of_events(
    first: bytes, stream: AsyncIterator[bytes], ids: _ChunkIds, include_usage: bool
) -> AsyncIterator[bytes]:
    """The provider's Messages events (`first`, then `stream`, closed when this is) as
    `chat.completion.chunk`s and `[DONE]`. An `error` event, or a stream that ends before
    `message_stop`, ends with an error chunk."""
    reader, state = SseJsonReader(), _Events()
    yield ids.chunk({"role": "assistant", "content": ""})
    async with aclosing(stream):
        piece: bytes | None = first
        while piece is not None and not state.done and state.error is None:
            out = b"".join(_from_event(event, ids, state) for event in reader.feed(piece))
            if out:
                yield out
            piece = await anext(stream, None)
    if not state.done and state.error is None:
        out = b"".join(_from_event(event, ids, state) for event in reader.feed(b"\n\n"))
        if out:
            yield out
    if not state.done and state.error is None:
        state.error = "The provider's stream ended before its answer was complete."
    if state.error is not None:
        error = OpenAIError(502, state.error, type="server_error", code="provider_error")
        yield sse_message(error.body()) + sse_message("[DONE]")
        return
    out = ids.chunk({}, finish_reason=_finish_reason(state.stop_reason, bool(state.calls)))
    if include_usage:
        out += ids.chunk(None, usage=_chat_usage(state.usage))
    yield out + sse_message("[DONE]")


def _from_event(event: dict[str, Any], ids: _ChunkIds, state: _Events) -> bytes:
    """One Messages event as chunks (or what it says of the end, kept in `state`)."""
    kind = event.get("type")
    if kind == "message_start":
        message = event.get("message")
        usage = message.get("usage") if isinstance(message, dict) else None
        if isinstance(usage, dict):
            state.usage.update(usage)
    elif kind == "content_block_start":
        block = event.get("content_block")
        if isinstance(block, dict) and block.get("type") == "tool_use":
            position = len(state.calls)
            state.calls[event.get("index")] = position
            call = {"index": position, "id": block.get("id") or tool_use_id(), "type": "function",
                    "function": {"name": block.get("name") or "", "arguments": ""}}  # fmt: skip
            return ids.chunk({"tool_calls": [call]})
        if isinstance(block, dict) and block.get("type") == "text" and block.get("text"):
            return ids.chunk({"content": block["text"]})
    elif kind == "content_block_delta":
        delta = event.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
            return ids.chunk({"content": delta["text"]})
        position = state.calls.get(event.get("index"))
        if delta.get("type") == "input_json_delta" and position is not None:
            partial = delta.get("partial_json")
            if isinstance(partial, str) and partial:
                call = {"index": position, "function": {"arguments": partial}}
                return ids.chunk({"tool_calls": [call]})
    elif kind == "message_delta":
        delta = event.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
            state.stop_reason = delta["stop_reason"]
        if isinstance(event.get("usage"), dict):
            state.usage.update({k: v for k, v in event["usage"].items() if v is not None})
    elif kind == "message_stop":
        state.done = True
    elif kind == "error":
        error = event.get("error")
        state.error = provider_failure(error.get("message") if isinstance(error, dict) else None)
    return b""
