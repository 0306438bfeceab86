"""OpenAI's Responses API on the wire, for both of its faces (an agent's run:
`responses`; a gateway model's call: `gateway.responses`): a Responses body as a
Chat Completions body, and the answer's `response` object, output items and typed stream
events. No database, no run: what to say is given, this says it in Responses' words.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agentplatform.event_streams import sse_message
from agentplatform.v1.shapes.chat import ChatTextPart
from agentplatform.v1.shapes.responses import (
    ResponsesInputFunctionCall,
    ResponsesInputImage,
    ResponsesInputMessage,
    ResponsesInputReasoning,
    ResponsesNamedTool,
    ResponsesRequest,
    ResponsesTextFormat,
    ResponsesTool,
)

PREFIX = "resp_"
# Their names in a Chat Completions body -> in a Responses body, for the errors' `param`.
_PARAMS = {
    "messages": "input",
    "response_format": "text.format",
    "max_tokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
}
# Fields both APIs name alike, sent on as they are (only `temperature`, `top_p`, `user` and
# `stream` are read for an agent).
_SHARED = (
    "temperature",
    "top_p",
    "user",
    "stream",
    "parallel_tool_calls",
    "prompt_cache_key",
    "safety_identifier",
    "service_tier",
)


# -- the request -----------------------------------------------------------------------------
def responses_as_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses body as a Chat Completions body a provider takes as it is: `instructions`
    and `input` as messages, function tools, `tool_choice`, `text.format` as
    `response_format`, sampling and a few options both APIs share. Its shape is checked
    item by item (`ResponsesRequest`: a 400 naming the Responses field); the rest is the
    chat parser's (agents) or the provider's (gateway models) to judge.
    `previous_response_id` and `store` are not read."""
    request = ResponsesRequest.checked(body)
    messages: list[dict[str, Any]] = []
    if request.instructions is not None:
        messages.append({"role": "system", "content": request.instructions})
    messages += _input_messages(request.input)
    chat: dict[str, Any] = {"model": request.model, "messages": messages}
    for name in _SHARED:
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        chat["reasoning_effort"] = reasoning["effort"]
    if request.tools is not None:
        chat["tools"] = [_tool(tool) for tool in request.tools]
    if request.tool_choice is not None:
        chat["tool_choice"] = _tool_choice(request.tool_choice)
    if request.text is not None and request.text.format is not None:
        chat["response_format"] = _response_format(request.text.format)
    return chat


def is_response_id(value: Any) -> bool:
    """`resp_<run id>`, the id plain ASCII digits of a size a run's id can have."""
    digits = value[len(PREFIX) :] if isinstance(value, str) and value.startswith(PREFIX) else ""
    return digits.isascii() and digits.isdigit() and len(digits) < 19


def responses_param(param: str | None) -> str | None:
    """A Chat Completions body's field as the Responses body names it."""
    if param and (function := _FUNCTION.match(param)):
        return param[: function.start(1)] + param[function.end(1) :]
    for chat_name, name in _PARAMS.items():
        if param and param.startswith(chat_name):
            return name + param[len(chat_name) :]
    return param


_FUNCTION = re.compile(r"^tools\[\d+\](\.function)")  # a chat tool's `function` is flat here


def _input_messages(raw: str | list[Any]) -> list[dict[str, Any]]:
    """`input` as Chat Completions messages: consecutive function calls join one assistant
    message, as Chat Completions carries them."""
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    messages: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] | None = None  # the open assistant turn's calls
    for item in raw:
        if isinstance(item, ResponsesInputReasoning):
            continue  # (no reasoning is carried between turns here)
        if not isinstance(item, ResponsesInputFunctionCall):
            calls = None
        if isinstance(item, ResponsesInputMessage):
            messages.append({"role": item.role, "content": _content(item.content)})
        elif isinstance(item, ResponsesInputFunctionCall):
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            if calls is None:
                calls = []
                messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            calls.append(call)
        else:
            output = item.output
            if not isinstance(output, str):
                output = json.dumps(output, ensure_ascii=False)
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
    return messages


def _content(content: str | list[Any] | None) -> Any:
    """Responses content as Chat Completions content: text parts alone as one string (as every
    OpenAI-compatible service takes it), else parts (`input_text` -> `text`, `input_image`
    -> `image_url`, `input_file` -> `file`)."""
    if content is None or isinstance(content, str):
        return content
    if content and all(isinstance(part, ChatTextPart) for part in content):
        return "\n".join(part.text for part in content)
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, ChatTextPart):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, ResponsesInputImage):
            image = {"url": part.image_url}
            if part.detail is not None:
                image["detail"] = part.detail
            parts.append({"type": "image_url", "image_url": image})
        else:
            names = ("file_data", "file_id", "filename")
            file = {k: getattr(part, k) for k in names if k in part.model_fields_set}
            parts.append({"type": "file", "file": file})
    return parts


def _tool(tool: ResponsesTool) -> dict[str, Any]:
    names = ("name", "description", "parameters", "strict")
    function = {k: getattr(tool, k) for k in names if k in tool.model_fields_set}
    return {"type": "function", "function": function}


def _tool_choice(choice: str | ResponsesNamedTool) -> Any:
    if isinstance(choice, str):
        return choice
    return {"type": "function", "function": {"name": choice.name}}


def _response_format(format: ResponsesTextFormat) -> dict[str, Any]:
    if format.type != "json_schema":
        return {"type": format.type}
    spec: dict[str, Any] = {"name": format.name or "response", "schema": format.schema_}
    if format.description is not None:
        spec["description"] = format.description
    if format.strict is not None:
        spec["strict"] = format.strict
    return {"type": "json_schema", "json_schema": spec}


# -- the answer ------------------------------------------------------------------------------
def usage_object(
    input_tokens: int, output_tokens: int, *, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    """An assistant message; an open one (`in_progress`) has no content yet."""
    content = (
        [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []
    )
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": content,
    }


def function_call_item(
    call_id: str, name: str, arguments: str, status: str = "completed"
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def response_object(
    response_id: str,
    created_at: int,
    model: str,
    *,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    incomplete: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    max_output_tokens: int | None = None,
) -> dict[str, Any]:
    """A `response`. The fields echoing a request hold fixed defaults, not the request's,
    but for `max_output_tokens` when given (a gateway call's: the maximum it was sent)."""
    extra = {"max_output_tokens": max_output_tokens} if max_output_tokens is not None else {}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "model": model,
        "output": output,
        "usage": usage,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": None,
        "tools": [],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "metadata": {},
        "text": {"format": {"type": "text"}},
        **extra,
    }


# -- the stream ------------------------------------------------------------------------------
@dataclass
class _Open:
    """An output item being streamed."""

    index: int
    item: dict[str, Any]
    pieces: list[str] = field(default_factory=list)
    done: bool = False


class ResponseEvents:
    """The typed events of one streamed response, numbered (`sequence_number`).

    `begin`; then text and function-call pieces as they come, each item opened by its
    first piece (an open message is done when a call opens: text after it is a new
    message); `finish` (every open item done, in output order); then `completed` (with
    `output`) or `failed`. Each method returns the SSE bytes to send."""

    def __init__(self, message_id: str) -> None:
        self.seq = 0
        self._message_id = message_id
        self._items: list[_Open] = []
        self._message: _Open | None = None
        self._calls: dict[Any, _Open] = {}

    def event(self, type: str, **fields: Any) -> bytes:
        self.seq += 1
        return sse_message({"type": type, "sequence_number": self.seq, **fields}, event=type)

    @property
    def output(self) -> list[dict[str, Any]]:
        """The items streamed so far, as done."""
        return [self._final(open) for open in self._items]

    def begin(self, response: dict[str, Any]) -> bytes:
        return self.event("response.created", response=response) + self.event(
            "response.in_progress", response=response
        )

    def text(self, piece: str) -> bytes:
        out = b""
        message = self._message
        if message is None or message.done:
            item_id = self._message_id
            if message is not None:  # (a second message: text after a function call)
                item_id = f"{self._message_id}_{len(self._items)}"
            message = self._message = self._open(message_item(item_id, "", "in_progress"))
            out += self.event(
                "response.output_item.added", output_index=message.index, item=message.item
            )
            out += self.event(
                "response.content_part.added",
                item_id=item_id, output_index=message.index, content_index=0,
                part={"type": "output_text", "text": "", "annotations": []},
            )  # fmt: skip
        message.pieces.append(piece)
        return out + self.event(
            "response.output_text.delta",
            item_id=message.item["id"], output_index=message.index, content_index=0,
            delta=piece, logprobs=[],
        )  # fmt: skip

    def close_message(self, text: str | None = None) -> bytes:
        """The open message done, its text `text` if given (else what was streamed)."""
        message = self._message
        if message is None or message.done:
            return b""
        message.done = True
        if text is not None:
            message.pieces = [text]
        final = self._final(message)
        part = final["content"][0]
        item_id, index = final["id"], message.index
        out = self.event(
            "response.output_text.done",
            item_id=item_id, output_index=index, content_index=0, text=part["text"], logprobs=[],
        )  # fmt: skip
        out += self.event(
            "response.content_part.done",
            item_id=item_id, output_index=index, content_index=0, part=part,
        )  # fmt: skip
        return out + self.event("response.output_item.done", output_index=index, item=final)

    def call(self, key: Any, call_id: str, name: str) -> bytes:
        """A function call opened; `key` names it for its `arguments` pieces."""
        out = self.close_message()
        opened = self._calls[key] = self._open(function_call_item(call_id, name, "", "in_progress"))
        return out + self.event(
            "response.output_item.added", output_index=opened.index, item=opened.item
        )

    def has_call(self, key: Any) -> bool:
        return key in self._calls

    def arguments(self, key: Any, piece: str) -> bytes:
        opened = self._calls[key]
        opened.pieces.append(piece)
        return self.event(
            "response.function_call_arguments.delta",
            item_id=opened.item["id"], output_index=opened.index, delta=piece,
        )  # fmt: skip

    def finish(self) -> bytes:
        out = b""
        for opened in self._items:
            if opened.done:
                continue
            if opened is self._message:
                out += self.close_message()
                continue
            opened.done = True
            final = self._final(opened)
            out += self.event(
                "response.function_call_arguments.done",
                item_id=final["id"], output_index=opened.index, arguments=final["arguments"],
            )  # fmt: skip
            out += self.event("response.output_item.done", output_index=opened.index, item=final)
        return out

    def completed(self, response: dict[str, Any]) -> bytes:
        return self.event("response.completed", response=response)

    def failed(self, response: dict[str, Any]) -> bytes:
        return self.event("response.failed", response=response)

    def _open(self, item: dict[str, Any]) -> _Open:
        opened = _Open(index=len(self._items), item=item)
        self._items.append(opened)
        return opened

    def _final(self, opened: _Open) -> dict[str, Any]:
        item = opened.item
        if item["type"] == "message":
            return message_item(item["id"], "".join(opened.pieces))
        return function_call_item(item["call_id"], item["name"], "".join(opened.pieces))
