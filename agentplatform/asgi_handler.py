"""Django's ASGI handler, with each request's sync thread released before its response
streams.

Django enters one asgiref `ThreadSensitiveContext` per request, around the whole response:
the executor thread that runs the request's sync code (sync middleware, sync views, ORM
calls) lives until the last byte is sent. For an event stream that is minutes of an idle
thread per open connection. Here the context covers producing the response only: the
thread (and its database connection, given back first) is released when the view returns,
and the body — an async iterator — streams on the event loop alone. Code that runs while
streaming makes its brief database reads with `agentplatform.stream_reads.stream_read`.
"""

from __future__ import annotations

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.db import close_old_connections


class StreamingASGIHandler(ASGIHandler):
    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)  # no context around the whole response

    async def run_get_response(self, request):
        async with ThreadSensitiveContext():
            try:
                return await super().run_get_response(request)
            finally:
                # The request's thread ends with this context: give its connection back
                # (request_finished, which would, runs later, on another thread).
                await sync_to_async(close_old_connections)()
