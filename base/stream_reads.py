"""Brief database reads from async code that must not hold a thread or a connection: an
open stream (SSE, MCP, the chat), which waits for minutes on the event loop (see
agentplatform.asgi_handler: a streaming response keeps no thread of its own)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db import connection


def stream_read(function):
    """A brief database read for an open stream: on any free thread (a stream keeps none of
    its own), the connection given back right after."""
    return sync_to_async(_released(function), thread_sensitive=False)


def _released(function):
    """Run `function` and give its database connection back (unless a transaction is still
    open): an open stream waits for minutes, and must not hold one of the server's
    connections while it does."""

    def call(*args):
        try:
            return function(*args)
        finally:
            if not connection.in_atomic_block:
                connection.close()

    return call


def brief(function):
    """A brief database step of a request that goes on to stream for long (`/v1`): on the
    request's own thread (so it sees the request's transaction, as in tests), its
    connection given back right after. A streaming request otherwise keeps its connection
    until the stream ends: with hundreds of streams the pool ran dry (bench/concurrency.py)."""
    return sync_to_async(_released(function))
