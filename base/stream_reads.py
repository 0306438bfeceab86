"""How async code reaches the database, outside a run's own loop: two ways, both giving the
connection back as soon as the step ends.

- `brief`: a brief step of a request that goes on to stream for long (`/v1`), on the
  request's own thread;
- `stream_read`: a brief read or write for an open stream (SSE, MCP, the chat) or a step
  of async code that keeps no thread (quota holds, start-up checks), on any free thread.

An open stream waits for minutes on the event loop (agentplatform.asgi_handler: a streaming
response keeps no thread of its own) and must hold neither a thread nor a connection. A run
executing on a worker's loop reaches the database through Django's `sync_to_async`, which
its lane routes (agents.runs.worker), and direct tool calls record through the group commit
(agents.runs.writer.awrite_call): those two are the Run package's own.
"""

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

    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
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
