"""Anthropic's Messages API on the wire: a Messages request said as a Chat Completions body
(its shape checked item by item first: `AnthropicMessagesRequest`), a `message` object and
the stream's events. The agent path (`messages`) and the gateway's translations
(`gateway.messages`, `gateway.chat`) both use them.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from agentplatform.event_streams import sse_message
from agentplatform.v1.shapes.messages import (
    AnthropicAssistantMessage,
    AnthropicBase64Source,
    AnthropicImageBlock,
    AnthropicMessagesRequest,
    AnthropicTextBlock,
    AnthropicTool,
    AnthropicToolChoice,
    AnthropicToolResultBlock,
    AnthropicToolUseBlock,
    AnthropicUserMessage,
)

_TOOL_CHOICE = {"auto": "auto", "any": "required", "none": "none"}


def chat_body(
    body: dict[str, Any], shape: type[AnthropicMessagesRequest] = AnthropicMessagesRequest
) -> dict[str, Any]:
    """A Messages API body as a Chat Completions body (the shared parser checks the rest)."""
    request = shape.checked(body)
    messages: list[dict[str, Any]] = []
    system = request.system
    if isinstance(system, list):
        system = "\n\n".join(block.text for block in system)
    if system is not None:
        messages.append({"role": "system", "content": system})
    for message in request.messages:
        messages += _turn(message)
    chat: dict[str, Any] = {"model": request.model, "messages": messages}
    chat["max_tokens"] = request.max_tokens or 1  # (none: counted, not run)
    for name, chat_name in (("temperature", "temperature"), ("top_p", "top_p"),
                            ("stop_sequences", "stop"), ("stream", "stream")):  # fmt: skip
        if getattr(request, name) is not None:
            chat[chat_name] = getattr(request, name)
    if request.metadata is not None and request.metadata.user_id is not None:
        chat["user"] = request.metadata.user_id
    if request.tools is not None:
        chat["tools"] = [_tool(tool) for tool in request.tools]
    if request.tool_choice is not None:
        chat["tool_choice"] = _tool_choice(request.tool_choice)
    return chat


def _turn(message: AnthropicUserMessage | AnthropicAssistantMessage) -> list[dict[str, Any]]:
    role, content = message.role, message.content
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for block in content:  # (which blocks a role takes: its shape says)
        if isinstance(block, AnthropicTextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, AnthropicImageBlock):
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block)}})
        elif isinstance(block, AnthropicToolUseBlock):
            arguments = json.dumps(block.input)
            function = {"name": block.name, "arguments": arguments}
            calls.append({"id": block.id, "type": "function", "function": function})
        elif isinstance(block, AnthropicToolResultBlock):
            results.append(
                {"role": "tool", "tool_call_id": block.tool_use_id, "content": _result_text(block)}
            )
    if role == "assistant":
        return [{"role": "assistant", "content": parts or None, "tool_calls": calls or None}]
    return results + ([{"role": "user", "content": parts}] if parts else [])


def _image_url(block: AnthropicImageBlock) -> str:
    source = block.source
    if isinstance(source, AnthropicBase64Source):
        return f"data:{source.media_type};base64,{source.data}"
    return source.url


def _result_text(block: AnthropicToolResultBlock) -> str:
    content = block.content
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        text = "\n".join(part.text for part in content)
    return f"error: {text}" if block.is_error else text


def _tool(tool: AnthropicTool) -> dict[str, Any]:
    function = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description is not None:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _tool_choice(choice: AnthropicToolChoice) -> Any:
    if choice.type == "tool":
        return {"type": "function", "function": {"name": choice.name}}
    return _TOOL_CHOICE[choice.type]


# -- the answer ------------------------------------------------------------------------------
def message_object(id: str, model: str, content: list[dict[str, Any]], **fields: Any) -> dict:
    return {
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
        **fields,
    }


def messages_event(type: str, **fields: Any) -> bytes:
    """One event of a Messages stream (its `event:` line names its type)."""
    return sse_message({"type": type, **fields}, event=type)


def tool_use_id() -> str:
    """An id for a `tool_use` block whose call came without one."""
    return f"toolu_{uuid.uuid4().hex[:24]}"
