"""OfflineModel: the embedded demo's model when no provider is connected.

It is not a language model and says so in every answer. It does three things,
deterministically and without any network:

- after tool results, it reports them ("4 (offline demo: this is the calculator tool's
  result; ...)");
- for a last user message `<tool>: <input>` naming one of the request's tools, it calls
  that tool: a JSON object input is the arguments; otherwise the input fills the tool's
  single string parameter;
- otherwise it explains that no model is connected, how to connect one, and which tools
  can be run by hand.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

from providers.runtime.fake import response_events, word_usage
from providers.runtime.types import (
    AssistantMessage,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    ToolResultMessage,
    UserMessage,
)
from tools.runtime.tool import Tool, ToolCall

MODEL_ID = "offline-demo"
NO_MODEL = "no language model is connected"
_TOOL_COMMAND = re.compile(r"^\s*([A-Za-z0-9_-]{1,64})\s*:(.*)$", re.DOTALL)


class OfflineModel:
    provider = "offline"
    model = MODEL_ID

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return self.respond(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        for event in response_events(self.respond(request)):
            yield event

    def respond(self, request: ModelRequest) -> ModelResponse:
        """The answer to `request`; a pure function of its messages and tools."""
        messages = list(request.messages)
        results = _trailing_tool_results(messages)
        if results:
            response = ModelResponse(text=_report(results))
        else:
            tools = list(request.tools) if request.tool_choice != "none" else []
            last = messages[-1] if messages else None
            command = _tool_command(last.text, tools) if isinstance(last, UserMessage) else None
            if command is None:
                response = ModelResponse(text=_notice(tools))
            else:
                tool, argument_text = command
                arguments = _arguments(tool, argument_text)
                if arguments is None:
                    response = ModelResponse(text=_needs_json(tool))
                else:
                    call = ToolCall(f"offline_{_calls_so_far(messages) + 1}", tool.name, arguments)
                    response = ModelResponse(tool_calls=(call,), stop_reason="tool_calls")
        response = replace(response, model=MODEL_ID)
        return replace(response, usage=word_usage(request, response))


def _trailing_tool_results(messages: Sequence[Any]) -> list[ToolResultMessage]:
    results: list[ToolResultMessage] = []
    for message in reversed(messages):
        if not isinstance(message, ToolResultMessage):
            break
        results.append(message)
    return results[::-1]


def _shown(result: ToolResultMessage) -> str:
    """A single-key JSON object shows its value; anything else shows as it came."""
    try:
        value = json.loads(result.content)
    except ValueError:
        return result.content
    if isinstance(value, dict) and len(value) == 1:
        (inner,) = value.values()
        return inner if isinstance(inner, str) else json.dumps(inner, ensure_ascii=False)
    return result.content


def _report(results: list[ToolResultMessage]) -> str:
    if len(results) == 1:
        (result,) = results
        if result.is_error:
            return f"The {result.name} tool failed: {result.content} (offline demo: {NO_MODEL})"
        return (
            f"{_shown(result)} (offline demo: this is the {result.name} tool's result; {NO_MODEL})"
        )
    lines = [
        f"- The {r.name} tool failed: {r.content}" if r.is_error else f"- {r.name}: {_shown(r)}"
        for r in results
    ]
    return "\n".join([*lines, f"(offline demo: these are the tools' results; {NO_MODEL})"])


def _tool_command(text: str, tools: Sequence[Tool]) -> tuple[Tool, str] | None:
    match = _TOOL_COMMAND.match(text)
    if match is None:
        return None
    name = match.group(1).lower()
    for tool in tools:
        if tool.name.lower() == name:
            return tool, match.group(2).strip()
    return None


def _arguments(tool: Tool, text: str) -> dict[str, Any] | None:
    """The call's arguments, or None when the input can't be mapped to the schema.
    An empty input calls the tool with no arguments (its defaults, or its own error)."""
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    prop = _single_string_property(tool.model_schema)
    return {prop: text} if prop is not None else None


def _single_string_property(schema: dict[str, Any]) -> str | None:
    properties = schema.get("properties") or {}
    required = schema.get("required") or []
    if len(required) == 1:
        name = required[0]
    elif len(properties) == 1:
        (name,) = properties
    else:
        return None
    kind = (properties.get(name) or {}).get("type")
    is_string = kind == "string" or (isinstance(kind, list) and "string" in kind)
    return name if is_string else None


def _needs_json(tool: Tool) -> str:
    properties = tool.model_schema.get("properties") or {}
    required = set(tool.model_schema.get("required") or [])
    names = [f"{name} (required)" if name in required else name for name in properties]
    listed = ", ".join(names) if names else "none"
    shown = [name for name in properties if name in required] or list(properties)
    example = json.dumps(dict.fromkeys(shown, "..."))
    return (
        f"The {tool.name} tool needs its arguments as a JSON object, e.g. "
        f"`{tool.name}: {example}`. Its properties: {listed}. "
        f"(offline demo: {NO_MODEL})"
    )


def _notice(tools: Sequence[Tool]) -> str:
    text = (
        f"This is the offline demo model: {NO_MODEL}, so I can't answer that. "
        "An admin can connect Anthropic, OpenAI or an OpenAI-compatible provider under "
        "Admin → Provider connections."
    )
    if not tools:
        return text + " This agent has no tools to run meanwhile."
    names = [tool.name for tool in tools]
    hint = "Meanwhile you can run a tool by writing `<tool>: <input>`"
    hint += ", e.g. `calculator: 2+2`." if "calculator" in names else "."
    return f"{text} {hint} Available tools: {', '.join(names)}."


def _calls_so_far(messages: Sequence[Any]) -> int:
    return sum(len(m.tool_calls) for m in messages if isinstance(m, AssistantMessage))
