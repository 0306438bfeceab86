"""Server-sent events for runs: framing, the response, and DRF content negotiation.

Every stream is an async iterator over `agents.runs.reader.iter_run_events` handed to
`StreamingHttpResponse`: under ASGI Django iterates it on the event loop, so an open stream
waits on Redis without a thread or a database connection of its own (the request's sync
thread and its connection are released when the view returns: agentplatform.asgi_handler).
When the client goes away Django cancels the response; the iterators here are closed with
`aclosing`, so `iter_run_events` always unsubscribes from the run's channel.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from django.http import StreamingHttpResponse
from rest_framework import exceptions
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from agents.models import Run
from agents.runs import heartbeat_seconds, iter_run_events

EVENT_STREAM = "text/event-stream"
HEARTBEAT = b": heartbeat\n\n"
RETRY_MS = 3000  # how long a browser EventSource waits before it reconnects
MAX_SEQ = 2**31 - 1  # RunEvent.seq is a Postgres integer


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


async def run_event_stream(run: Run, after_seq: int = 0) -> AsyncIterator[bytes]:
    """The run's events after `after_seq` as SSE (`id` = seq, `event` = type, `data` = the
    payload), heartbeat comments while it is quiet; ends after the terminal event."""
    yield f"retry: {RETRY_MS}\n\n".encode()
    events = iter_run_events(run, after_seq, heartbeat_s=heartbeat_seconds())
    async with aclosing(events):
        async for event in events:
            if event["type"] == "heartbeat":
                yield HEARTBEAT
            else:
                yield sse_message(event["payload"], event=event["type"], id=event["seq"])


def event_stream_response(
    chunks: AsyncIterator[bytes], *, status: int = 200, headers: dict[str, str] | None = None
) -> StreamingHttpResponse:
    response = StreamingHttpResponse(chunks, status=status, content_type=EVENT_STREAM)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def resume_after(request: Request) -> int:
    """Where a stream resumes: the `Last-Event-ID` header (a reconnecting EventSource sends
    it), else `?after=`, else the start. Anything but a non-negative integer is a 400."""
    for name, raw in (
        ("Last-Event-ID", request.headers.get("Last-Event-ID")),
        ("after", request.query_params.get("after")),
    ):
        if raw is None or raw.strip() == "":
            continue
        raw = raw.strip()
        if not raw.isascii() or not raw.isdigit():
            raise exceptions.ValidationError({name: ["Give an event sequence number."]})
        return min(int(raw), MAX_SEQ)
    return 0


class EventStreamRenderer(BaseRenderer):
    """Lets DRF negotiate `Accept: text/event-stream`. Views answer such requests with a
    StreamingHttpResponse; anything else they answer (errors) is rendered as JSON by
    `EventStreamNegotiation`, so this renderer never renders a body itself."""

    media_type = EVENT_STREAM
    format = "sse"
    charset = None

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        return json.dumps(data, default=str).encode()


class EventStreamNegotiation:
    """Mixin for APIViews that may stream: negotiates JSON or SSE, answers errors in JSON."""

    renderer_classes = [JSONRenderer, EventStreamRenderer]

    def wants_event_stream(self, request: Request) -> bool:
        return isinstance(getattr(request, "accepted_renderer", None), EventStreamRenderer)

    def finalize_response(self, request, response, *args, **kwargs):
        if isinstance(response, Response) and self.wants_event_stream(request):
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)


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
