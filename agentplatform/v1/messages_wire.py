"""Anthropic's Messages API on the wire: a Messages request said as a Chat Completions body
(checked block by block: `system`, text, image, `tool_use` and `tool_result` blocks,
`tools`, `tool_choice`, the sampling fields), a `message` object and the stream's events.
The agent path (`messages`) and the gateway's translation to OpenAI connections
(`gateway_translate`) both use them.
"""

from __future__ import annotations

import json
from typing import Any

from agentplatform.event_streams import sse_message
from agentplatform.v1.shapes.base import BadRequest

_TOOL_CHOICE = {"auto": "auto", "any": "required", "none": "none"}


def chat_body(body: dict[str, Any]) -> dict[str, Any]:
    """A Messages API body as a Chat Completions body (the shared parser checks the rest)."""
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, list):
        texts = [b.get("text") for b in system if isinstance(b, dict) and b.get("type") == "text"]
        if not all(isinstance(t, str) for t in texts):
            raise BadRequest("A `system` text block needs a `text` string.", "system")
        system = "\n\n".join(texts)
    if system is not None:
        if not isinstance(system, str):
            raise BadRequest("`system` must be a string or a list of text blocks.", "system")
        messages.append({"role": "system", "content": system})
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("`messages` must be a non-empty list.", "messages")
    for index, message in enumerate(raw):
        messages += _turn(message, f"messages.{index}")
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise BadRequest("`max_tokens` is required.", "max_tokens")
    chat["max_tokens"] = max_tokens
    for name, chat_name in (("temperature", "temperature"), ("top_p", "top_p"),
                            ("stop_sequences", "stop"), ("stream", "stream")):  # fmt: skip
        if body.get(name) is not None:
            chat[chat_name] = body[name]
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and metadata.get("user_id") is not None:
        chat["user"] = metadata["user_id"]
    if body.get("tools") is not None:
        chat["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    return chat


def _turn(message: Any, param: str) -> list[dict[str, Any]]:
    role = message.get("role") if isinstance(message, dict) else None
    if role not in ("user", "assistant"):
        raise BadRequest("Each message's `role` must be `user` or `assistant`.", f"{param}.role")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise BadRequest("`content` must be a string or a list of blocks.", f"{param}.content")
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for index, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        where = f"{param}.content.{index}"
        if kind == "text":
            parts.append({"type": "text", "text": block.get("text")})
        elif kind == "image" and role == "user":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block, where)}})
        elif kind == "tool_use" and role == "assistant":
            arguments = block.get("input")
            if not isinstance(arguments, dict):
                raise BadRequest("A `tool_use` block's `input` must be an object.", where)
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": json.dumps(arguments)},
                }
            )
        elif kind == "tool_result" and role == "user":
            results.append(
                {
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id"),
                    "content": _result_text(block.get("content"), block.get("is_error"), where),
                }
            )
        else:
            raise BadRequest(
                f"Blocks of type {kind!r} are not supported in {role} messages.", where
            )
    if role == "assistant":
        return [{"role": "assistant", "content": parts or None, "tool_calls": calls or None}]
    return results + ([{"role": "user", "content": parts}] if parts else [])


def _image_url(block: dict[str, Any], param: str) -> str:
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "base64":
        return f"data:{source.get('media_type')};base64,{source.get('data')}"
    if isinstance(source, dict) and source.get("type") == "url":
        return source.get("url") or ""
    raise BadRequest("An image block's `source` must be base64 or url.", param)


def _result_text(content: Any, is_error: Any, param: str) -> str:
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list) and all(
        isinstance(b, dict) and b.get("type") == "text" for b in content
    ):
        text = "\n".join(str(b.get("text", "")) for b in content)
    else:
        raise BadRequest("A `tool_result` block's content must be text.", param)
    return f"error: {text}" if is_error else text


def _tools(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise BadRequest("`tools` must be a list.", "tools")
    tools = []
    for index, tool in enumerate(raw):
        if not isinstance(tool, dict) or "input_schema" not in tool:
            raise BadRequest(
                "Only custom tools (name, description, input_schema) are supported.",
                f"tools.{index}",
            )
        function = {"name": tool.get("name"), "parameters": tool.get("input_schema")}
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        tools.append({"type": "function", "function": function})
    return tools


def _tool_choice(raw: Any) -> Any:
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind in _TOOL_CHOICE:
        return _TOOL_CHOICE[kind]
    if kind == "tool":
        return {"type": "function", "function": {"name": raw.get("name")}}
    raise BadRequest("`tool_choice.type` must be auto, any, tool or none.", "tool_choice")


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
