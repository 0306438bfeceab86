"""Chat Completions' answer on the wire: a `chat.completion` and its
`chat.completion.chunk` SSE messages, as the agent path (`chat_completions`) and the gateway's
translation from Anthropic (`gateway.chat`) both send them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentplatform.event_streams import sse_message
from agentplatform.v1.endpoint import OpenAIError

MAX_ERROR_CHARS = 2000  # of a provider's own error message, passed on


def unreadable_answer() -> OpenAIError:
    """A provider's answer the gateway cannot make sense of: a 502 (never its text)."""
    return OpenAIError(
        502, "The provider's answer could not be read.", type="server_error", code="provider_error"
    )


def first_choice(answer: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A provider's `chat.completion` (as the pass-through read it): its first choice and
    that choice's message; `unreadable_answer` when there is none."""
    choices = answer.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise unreadable_answer()
    return choice, message


def content_text(content: Any) -> str:
    """A message's content as text (a string, or text parts as some services send it)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def provider_failure(message: Any) -> str:
    """What a caller is told of an error a provider sent in its stream."""
    said = f": {message[:MAX_ERROR_CHARS]}" if isinstance(message, str) and message else "."
    return "The provider failed" + said


@dataclass
class ChunkTally:
    """What a provider's `chat.completion.chunk`s said of the end so far (the gateway's
    translations of a chunk stream keep one)."""

    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    error: str | None = None

    def delta_of(self, chunk: dict[str, Any]) -> dict[str, Any] | None:
        """The chunk's delta, if it has one, once its error, usage and finish reason are
        noted."""
        error = chunk.get("error")
        if isinstance(error, dict):  # (some services send an error mid-stream)
            self.error = provider_failure(error.get("message"))
            return None
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            return None
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        return delta if isinstance(delta, dict) else None


def completion_object(
    id: str,
    created: int,
    model: str,
    message: dict[str, Any],
    finish_reason: str | None,
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    return {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": usage,
        "system_fingerprint": None,
    }


def completion_chunk(
    id: str, created: int, model: str, delta: dict[str, Any] | None, **extra: Any
) -> bytes:
    """A `chat.completion.chunk` SSE message; with `delta` None, one without choices (the
    usage)."""
    choices = []
    if delta is not None:
        choices = [
            {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": extra.pop("finish_reason", None),
            }
        ]
    chunk = {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": choices,
        **extra,
    }
    return sse_message(chunk)
