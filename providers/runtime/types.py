"""Provider-neutral messages, requests, responses and stream events.

Every adapter speaks these; the agent loop never sees a provider's wire format.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from tools.runtime.tool import Tool, ToolCall

StopReason = Literal["end", "tool_calls", "max_tokens", "stop_sequence", "other"]
ToolChoice = Literal["auto", "none", "required"] | str  # or the name of one tool


@dataclass(frozen=True, slots=True)
class Image:
    """An image a user sent: its media type and bytes as base64 (providers/runtime/images.py
    checks both). `url` is where it is still to be fetched from, before any model sees it."""

    media_type: str
    data: str
    url: str = ""


@dataclass(frozen=True, slots=True)
class UserMessage:
    text: str
    images: tuple[Image, ...] = ()
    role: Literal["user"] = "user"


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    role: Literal["assistant"] = "assistant"


@dataclass(frozen=True, slots=True)
class ToolResultMessage:
    call_id: str
    name: str
    content: str  # what the model reads: the result as JSON text, or the error text
    is_error: bool = False
    role: Literal["tool"] = "tool"


Message = UserMessage | AssistantMessage | ToolResultMessage


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )


@dataclass(frozen=True)
class ModelRequest:
    model: str
    messages: Sequence[Message]
    system: str = ""
    tools: Sequence[Tool] = ()
    tool_choice: ToolChoice = "auto"
    temperature: float | None = None
    max_tokens: int = 1024
    stop: Sequence[str] = ()
    top_p: float | None = None
    seed: int | None = None  # providers without one (Anthropic) ignore it


@dataclass(frozen=True)
class ModelResponse:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: StopReason = "end"
    usage: Usage = field(default_factory=Usage)
    model: str = ""  # the model id the provider says it used

    def as_message(self) -> AssistantMessage:
        return AssistantMessage(text=self.text, tool_calls=self.tool_calls)


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    type: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """Emitted once a call's arguments are complete and parsed."""

    call: ToolCall
    type: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True)
class UsageEvent:
    usage: Usage
    type: Literal["usage"] = "usage"


@dataclass(frozen=True, slots=True)
class Done:
    response: ModelResponse
    type: Literal["done"] = "done"


StreamEvent = TextDelta | ToolCallEvent | UsageEvent | Done
