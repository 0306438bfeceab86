"""Django's ASGI handler, with each request's sync thread released before its response
streams.

Django enters one asgiref `ThreadSensitiveContext` per request, around the whole response:
the executor thread that runs the request's sync code (sync middleware, sync views, ORM
calls) lives until the last byte is sent. For an event stream that is minutes of an idle
thread per open connection. Here the context covers producing the response only: the
thread (and its database connection, given back first) is released when the view returns,
and the body — an async iterator — streams on the event loop alone. Code that runs while
streaming makes its brief database reads with `base.stream_reads.stream_read`.

The OpenAI-compatible face (`/v1/`) gets a handler of its own with settings.API_MIDDLEWARE:
the web pages' middleware (sessions, CSRF, messages, static files, HTML headers) is sync
and cost each chat several thread switches there, for nothing an API key's request uses;
and it sends request_started and request_finished on the event loop (see `handle`).
"""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import nullcontext

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.db import close_old_connections
from django.middleware.security import SecurityMiddleware
from django.urls import set_script_prefix

from base.stream_reads import RequestLanes


class StreamingASGIHandler(ASGIHandler):
    def __init__(
        self, middleware: list[str] | None = None, *, views_release_connections: bool = False
    ) -> None:
        """`middleware`: this handler's list instead of settings.MIDDLEWARE.
        `views_release_connections`: its views make every database step through
        stream_reads.brief, which gives the connection back at once (`/v1`), so no thread
        switch releases it afterwards (half a millisecond of a chat's first token); those
        steps run on a few threads the requests share (stream_reads.RequestLanes)."""
        self.middleware = middleware
        self.releases_connections = not views_release_connections
        self.lanes = RequestLanes(settings.API_DB_THREADS) if views_release_connections else None
        super().__init__()

    def load_middleware(self, is_async: bool = False) -> None:
        if self.middleware is None:
            return super().load_middleware(is_async)
        # Django builds the chain from settings.MIDDLEWARE only: lend it this handler's.
        everyone = settings.MIDDLEWARE
        settings.MIDDLEWARE = self.middleware
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = everyone

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)  # no context around the whole response

    async def handle(self, scope, receive, send):
        """Django 5.2's `handle`; for views that make every database step on a thread of its
        own (`views_release_connections`), with request_started and the response's close
        (request_finished) sent on the event loop, not on a thread each: their receivers
        close the calling thread's old database connections, reset its query log and clear
        its row-level scope, and the loop's thread holds no connection. The two thread
        switches were 0.2 to 0.6 ms of the web's CPU per gateway call, and 0.3 to 0.8 ms of
        its latency (bench/gateway.py)."""
        if self.releases_connections:
            return await super().handle(scope, receive, send)
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            await self.send_response(error_response, send)
            error_response.close()
            return

        async def process_request():
            response = await self.run_get_response(request)
            with contextlib.suppress(asyncio.CancelledError):  # the client went away
                await self.send_response(response, send)
            return response

        # As Django: the view races the client's disconnect, which cancels it.
        disconnected = asyncio.create_task(self.listen_for_disconnect(receive))
        processing = asyncio.create_task(process_request())
        await asyncio.wait([disconnected, processing], return_when=asyncio.FIRST_COMPLETED)
        for task in (disconnected, processing):
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass
                except AssertionError:
                    body_file.close()
                    raise
            else:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        try:
            response = processing.result()
        except asyncio.CancelledError:
            signals.request_finished.send(sender=self.__class__)
        else:
            response.close()
        body_file.close()

    async def run_get_response(self, request):
        with self.lanes.held() if self.lanes is not None else nullcontext():
            async with ThreadSensitiveContext():
                try:
                    return await super().run_get_response(request)
                finally:
                    # The request's thread ends with this context: give its connection back
                    # (request_finished, which would, runs later, on another thread).
                    if self.releases_connections:
                        await sync_to_async(close_old_connections)()


class AsyncSecurityMiddleware(SecurityMiddleware):
    """Django's SecurityMiddleware without the two thread switches per request that its
    generic async adapter costs (its hooks do no I/O, so they run on the event loop); and
    the Host header checked against ALLOWED_HOSTS first, as CommonMiddleware does for the
    pages (a 400 before any work)."""

    async def __acall__(self, request):
        request.get_host()  # DisallowedHost: answered 400 by Django
        response = self.process_request(request)
        if response is None:
            response = await self.get_response(request)
        if not response.streaming and not response.has_header("Content-Length"):
            # As CommonMiddleware does for the pages: without it uvicorn sends the answer
            # chunked, and the caller reads on to the end marker (about 0.1 ms a call).
            response.headers["Content-Length"] = str(len(response.content))
        return self.process_response(request, response)


def with_api(django_app, api_app, prefix: str = "/v1/"):
    """ASGI: requests under `prefix` (the OpenAI-compatible face) to `api_app`, a handler
    with settings.API_MIDDLEWARE; the rest to `django_app`."""

    async def route(scope, receive, send):
        if scope["type"] == "http" and scope.get("path", "").startswith(prefix):
            return await api_app(scope, receive, send)
        return await django_app(scope, receive, send)

    return route
