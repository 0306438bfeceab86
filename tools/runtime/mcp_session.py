"""The MCP SDK's side of `tools.runtime.mcp_client`: one bounded session per exchange.

Imported by the exchanges themselves, not with the client module: the SDK costs a process
about 0.6 s to load, and only processes that talk to an MCP server need it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import REQUEST_TIMEOUT

from tools.runtime.egress import EgressError, guarded_async_client
from tools.runtime.mcp_endpoint import McpEndpoint, McpUnavailable
from tools.runtime.validation import check_schema, compile_validator


async def read_text(endpoint: McpEndpoint, session: ClientSession, uri: str) -> str:
    result = await session.read_resource(uri)
    parts = [c.text for c in result.contents if isinstance(getattr(c, "text", None), str)]
    if not parts and result.contents:
        raise McpUnavailable(endpoint.url, f"resource {uri} has no text content")
    return "\n".join(parts)


class _Session(ClientSession):
    """The SDK's session, but a tool's structured result is checked against the output
    schema its server listed by the platform's validator: the SDK's uses jsonschema with
    Python's `re`, and a server's `pattern` could hold the event loop for minutes, where
    the platform's matches patterns with RE2 and retrieves nothing (tools.runtime.validation).
    A schema the platform would refuse leaves the result unchecked, as an unlisted one."""

    def __init__(self, *args: Any, url: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._server_url = url

    async def validate_tool_result(self, name: str, result: Any) -> None:
        listing = await self.list_tools()
        schema = next((t.output_schema for t in listing.tools if t.name == name), None)
        if not isinstance(schema, dict):
            return
        try:
            check_schema(schema, what="outputSchema")
            check = compile_validator(schema)
        except ValueError:  # (SchemaError, PatternError)
            return
        if result.structured_content is None:
            raise McpUnavailable(self._server_url, f"tool {name} returned no structured content")
        error = check(result.structured_content)
        if error is not None:
            raise McpUnavailable(
                self._server_url, f"tool {name}'s result breaks its output schema: {error}"
            )


@asynccontextmanager
async def session_with(endpoint: McpEndpoint) -> AsyncIterator[ClientSession]:
    """An initialised session; every failure inside the block becomes McpUnavailable,
    and the whole block is bounded by `endpoint.timeout_s`."""
    url = endpoint.url
    client = guarded_async_client(endpoint.policy, timeout=endpoint.timeout_s)
    client.timeout = httpx2.Timeout(
        endpoint.timeout_s, connect=min(endpoint.connect_timeout_s, endpoint.timeout_s)
    )
    client.headers.update(endpoint.headers)
    failed_statuses: list[int] = []  # the SDK reports a 401 as "an error response": keep it

    async def note_status(response: httpx2.Response) -> None:
        if response.status_code >= 400:
            failed_statuses.append(response.status_code)

    client.event_hooks["response"] = [note_status]
    try:
        async with asyncio.timeout(endpoint.timeout_s):
            async with (
                client,
                streamable_http_client(url, http_client=client, terminate_on_close=False) as (
                    read,
                    write,
                ),
                _Session(read, write, read_timeout_seconds=endpoint.timeout_s, url=url) as session,
            ):
                await session.initialize()
                yield session
    except McpUnavailable:
        raise
    except TimeoutError:
        raise McpUnavailable(url, f"timed out after {endpoint.timeout_s:g} s") from None
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # one clear error for every way a server fails
        raise McpUnavailable(url, _reason(exc, failed_statuses, endpoint.timeout_s)) from exc


def _reason(exc: BaseException, failed_statuses: list[int], timeout_s: float) -> str:
    """The most telling message inside `exc` (task groups wrap the real one); a timeout
    says the same whichever clock ran out first (the call's, the SDK's or the client's)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, McpUnavailable):
        return exc.reason
    if failed_statuses and isinstance(exc, MCPError):
        status = failed_statuses[-1]
        if status in (401, 403):
            return f"the server refused the credentials (HTTP {status})"
        return f"the server answered HTTP {status}: {exc}"
    if isinstance(exc, EgressError):
        return str(exc)
    timed_out = isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT
    if timed_out or isinstance(exc, httpx2.TimeoutException | TimeoutError):
        return f"timed out after {timeout_s:g} s"
    if isinstance(exc, httpx2.HTTPStatusError):
        status = exc.response.status_code
        if status in (401, 403):
            return f"the server refused the credentials (HTTP {status})"
        return f"the server answered HTTP {status}"
    if isinstance(exc, httpx2.ConnectError):
        return f"cannot connect ({exc or 'connection failed'})"
    if isinstance(exc, MCPError):
        return f"MCP error: {exc}"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
