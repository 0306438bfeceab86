"""Server-sent events of runs (REST): a run's events as a stream, and DRF content negotiation
(the framing is agentplatform.event_streams').

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

from rest_framework import exceptions
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.event_streams import EVENT_STREAM, sse_message
from agents.models import Run
from agents.runs import heartbeat_seconds, iter_run_events

HEARTBEAT = b": heartbeat\n\n"
RETRY_MS = 3000  # how long a browser EventSource waits before it reconnects
MAX_SEQ = 2**31 - 1  # RunEvent.seq is a Postgres integer


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
