"""Server-sent events on the wire: one message framed, a streaming response, and the JSON
objects of a stream read back. Every face that streams (REST's run events, `/v1`'s answers
and the gateway's relayed provider streams) frames its events here."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from django.http import StreamingHttpResponse

EVENT_STREAM = "text/event-stream"


def sse_message(data: Any, *, event: str | None = None, id: int | None = None) -> bytes:
    """One SSE message. JSON never contains a raw newline, so `data` is one line."""
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    if event is not None:
        lines.append(f"event: {event}")
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), default=str)
    lines.append(f"data: {text}")
    return ("\n".join(lines) + "\n\n").encode()


def event_stream_response(
    chunks: AsyncIterator[bytes], *, status: int = 200, headers: dict[str, str] | None = None
) -> StreamingHttpResponse:
    response = StreamingHttpResponse(chunks, status=status, content_type=EVENT_STREAM)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    for name, value in (headers or {}).items():
        response[name] = value
    return response


class SseJsonReader:
    """The JSON objects of an SSE stream's `data:` lines, read as the stream's pieces come
    (an event may be split across pieces; `[DONE]`, comments and other data are skipped)."""

    def __init__(self) -> None:
        self.pending = b""

    def feed(self, piece: bytes) -> list[dict[str, Any]]:
        """The objects of the events that `piece` completes (`b"\\n\\n"` ends the last)."""
        self.pending += piece.replace(b"\r\n", b"\n")
        *events, self.pending = self.pending.split(b"\n\n")
        found = []
        for event in events:
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    data = line[5:].strip()
                    if data.startswith(b"{"):
                        try:
                            value = json.loads(data)
                        except (ValueError, RecursionError):
                            continue
                        if isinstance(value, dict) and value:
                            found.append(value)
        return found
