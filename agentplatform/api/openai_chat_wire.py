"""Chat Completions' answer on the wire: a `chat.completion` and its
`chat.completion.chunk` SSE messages, as the agent path (`openai_compat`) and the gateway's
translation from Anthropic (`gateway_translate`) both send them."""

from __future__ import annotations

from typing import Any

from agentplatform.api.sse import sse_message


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
