"""A caller's W3C Trace Context, for every HTTP request of the web process (REST, `/v1`,
webhooks, pages): when tracing is on and the request carries a valid `traceparent`, the
caller's span is current while the request is served, so the spans it makes here (a
gateway call's `chat`, a direct tool call's `execute_tool`) join the caller's trace, and a
run it starts records it for the process that executes the run (agents.observability).
Not MCP's: the mcp SDK serves a session's messages in tasks of its own, started with the
session, outside the request that carries each message.

Off, or without the header, a request costs one attribute read more. A malformed header is
ignored (the spans start a trace of their own), never refused.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as otel_context

from providers.runtime import tracing

_MAX_HEADER = 512  # a traceparent is 55 characters; anything much longer is not one


def with_caller_trace(app: Any) -> Any:
    """`app` (ASGI), serving each traced HTTP request inside its caller's trace."""

    async def served(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not tracing.enabled():
            return await app(scope, receive, send)
        parent = tracing.caller_context(
            _header(scope, b"traceparent"), _header(scope, b"tracestate")
        )
        if parent is None:
            return await app(scope, receive, send)
        token = otel_context.attach(parent)
        try:
            return await app(scope, receive, send)
        finally:
            otel_context.detach(token)

    return served


def _header(scope: dict, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key == name:  # (ASGI servers give header names in lower case)
            return value.decode("latin-1") if len(value) <= _MAX_HEADER else ""
    return ""
