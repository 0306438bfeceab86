"""A run's resumable state, and the checkpoint interface the caller implements.

The state is plain data (to_dict/from_dict give JSON), so a run can be saved after every
model response and tool result, and resumed by any worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from providers.runtime.types import (
    AssistantMessage,
    Image,
    Message,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from tools.runtime.frames import Frame
from tools.runtime.tool import ToolCall


@dataclass
class RunState:
    messages: list[Message] = field(default_factory=list)
    pending_calls: list[ToolCall] = field(default_factory=list)  # from the last response
    results: dict[str, ToolResultMessage] = field(default_factory=dict)  # for pending calls
    started: set[str] = field(default_factory=set)  # pending calls whose execution began
    rounds: int = 0
    tool_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    output: str = ""
    structured_output: Any = None
    structured_attempts: int = 0
    finished: str = ""  # the final status once decided, so a resume does not go on
    error: str = ""
    # Tool results others take inputs from, and reference tokens (tools/runtime/frames.py);
    # carried to the conversation's next run.
    frame: Frame = field(default_factory=Frame)
    # A remote agent's exchange (agents/runtime/remote.py): its last `state` and the message
    # it is owed next, saved before it is sent.
    remote: dict[str, Any] | None = None
    # The steering messages applied (their ids, agents/runtime/steering.py): a resumed run
    # takes only those it does not hold yet.
    steers: list[int] = field(default_factory=list)
    # Code mode's programs among the pending calls (agents/runtime/code_mode.py), by run_code
    # call id: their clock and the calls each made so far, for a replay to check.
    programs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        frame = {"frame": self.frame.to_dict()} if self.frame else {}
        remote = {"remote": self.remote} if self.remote is not None else {}
        steers = {"steers": list(self.steers)} if self.steers else {}
        programs = {"programs": self.programs} if self.programs else {}
        return {
            **frame,
            **programs,
            **remote,
            **steers,
            "messages": [message_to_dict(m) for m in self.messages],
            "pending_calls": [_call_to_dict(c) for c in self.pending_calls],
            "results": {k: message_to_dict(v) for k, v in self.results.items()},
            "started": sorted(self.started),
            "rounds": self.rounds,
            "tool_calls": self.tool_calls,
            "usage": [
                self.usage.input_tokens,
                self.usage.output_tokens,
                self.usage.cache_read_tokens,
                self.usage.cache_write_tokens,
            ],
            "output": self.output,
            "structured_output": self.structured_output,
            "structured_attempts": self.structured_attempts,
            "finished": self.finished,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        return cls(
            messages=[message_from_dict(m) for m in data.get("messages", [])],
            pending_calls=[_call_from_dict(c) for c in data.get("pending_calls", [])],
            results={
                k: message_from_dict(v)  # type: ignore[misc]
                for k, v in data.get("results", {}).items()
            },
            started=set(data.get("started", [])),
            rounds=data.get("rounds", 0),
            tool_calls=data.get("tool_calls", 0),
            usage=Usage(*data.get("usage", [0, 0, 0, 0])),
            output=data.get("output", ""),
            structured_output=data.get("structured_output"),
            structured_attempts=data.get("structured_attempts", 0),
            finished=data.get("finished", ""),
            error=data.get("error", ""),
            frame=Frame.from_dict(data.get("frame")),
            remote=data.get("remote"),
            steers=list(data.get("steers", [])),
            programs=dict(data.get("programs", {})),
        )


class Checkpointer(Protocol):
    """Called before the loop goes on, so a crash after it loses nothing recorded.

    `durable`: return only once the state is stored, because the loop is about to act on it
    where a repeat would matter (a call of a tool that is not idempotent, a parked run).
    Otherwise (a result, a model's response) the write may go on while the loop asks the
    model again: a repeated model call or idempotent tool call is all a crash in that window
    can cost. Saves are stored in order, so a durable save, and the run's outcome, come after
    every earlier one."""

    async def save(self, state: RunState, reason: str, *, durable: bool = True) -> None:
        """reason: "model_response" | "tools_started" | "tool_result" | "awaiting_approval"
        | "finished"."""
        ...


class NoCheckpoint:
    async def save(self, state: RunState, reason: str, *, durable: bool = True) -> None:
        return None


def _call_to_dict(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def _call_from_dict(data: dict[str, Any]) -> ToolCall:
    return ToolCall(id=data["id"], name=data["name"], arguments=data["arguments"])


def message_to_dict(message: Message) -> dict[str, Any]:
    if isinstance(message, UserMessage):
        if message.images:
            images = [{"media_type": i.media_type, "data": i.data} for i in message.images]
            return {"role": "user", "text": message.text, "images": images}
        return {"role": "user", "text": message.text}
    if isinstance(message, AssistantMessage):
        return {
            "role": "assistant",
            "text": message.text,
            "tool_calls": [_call_to_dict(c) for c in message.tool_calls],
        }
    return {
        "role": "tool",
        "call_id": message.call_id,
        "name": message.name,
        "content": message.content,
        "is_error": message.is_error,
    }


def message_from_dict(data: dict[str, Any]) -> Message:
    role = data["role"]
    if role == "user":
        images = tuple(Image(**i) for i in data.get("images", ()))
        return UserMessage(data["text"], images)
    if role == "assistant":
        calls = tuple(_call_from_dict(c) for c in data.get("tool_calls", []))
        return AssistantMessage(text=data.get("text", ""), tool_calls=calls)
    return ToolResultMessage(
        call_id=data["call_id"],
        name=data["name"],
        content=data["content"],
        is_error=data.get("is_error", False),
    )
