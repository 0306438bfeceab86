"""A client for remote MCP servers (streamable HTTP) a tenant connects as context providers.

Every exchange opens one MCP session with the official SDK (`streamable_http_client` +
`ClientSession`) over an httpx2 client from `guarded_async_client`, so the egress policy
applies to the endpoint and to every connection a redirect makes (the SDK itself follows
only same-origin redirects). Each exchange is bounded: connecting by `connect_timeout_s`,
the whole exchange (initialize + the request) by `timeout_s`. Every failure to reach or
talk to the server becomes one `McpUnavailable("<url>: <reason>")`; a tool that answers
`is_error` is not a failure of the server and comes back as `McpToolOutcome.is_error`.

No Django here: the caller passes the URL, the credential header and the egress policy.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import PaginatedRequestParams

from tools.runtime.context import RunContext
from tools.runtime.egress import EgressError, EgressPolicy, guarded_async_client
from tools.runtime.tool import Capability, Effect, Tool, ToolFailed
from tools.runtime.validation import check_schema, compile_validator

__all__ = [
    "McpEndpoint",
    "McpRemoteTool",
    "McpToolOutcome",
    "McpUnavailable",
    "auth_headers",
    "build_mcp_tool",
    "capability_from_annotations",
    "mcp_call_tool",
    "mcp_list_tools",
    "mcp_read_resource_text",
    "mcp_snapshot",
]


class McpUnavailable(Exception):
    """The server could not be reached or did not answer properly; `str()` is
    "<url>: <reason>", fit to show the tenant admin and the model."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason


@dataclass(frozen=True)
class McpEndpoint:
    """Where and how to reach one server. `headers` hold the credential: never log them."""

    url: str
    policy: EgressPolicy
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    connect_timeout_s: float = 5.0
    timeout_s: float = 30.0


@dataclass(frozen=True)
class McpRemoteTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "annotations": self.annotations,
        }


@dataclass(frozen=True)
class McpToolOutcome:
    """`value`: the structured content if the server gave one, else the text content."""

    value: Any
    is_error: bool


def auth_headers(value: str | None) -> dict[str, str]:
    """The Authorization header for a stored credential: "Bearer x" as given, a bare token
    as "Bearer <token>"; nothing for an empty value."""
    if not value:
        return {}
    value = value.strip()
    if " " in value:
        return {"Authorization": value}
    return {"Authorization": f"Bearer {value}"}


async def mcp_list_tools(endpoint: McpEndpoint) -> list[McpRemoteTool]:
    """Every tool the server lists (all pages). One session, one request per page."""
    tools, _ = await mcp_snapshot(endpoint)
    return tools


async def mcp_read_resource_text(endpoint: McpEndpoint, uri: str) -> str:
    """The text of the resource at `uri` (text parts joined; binary parts skipped)."""
    async with _session(endpoint) as session:
        return await _read_text(endpoint, session, uri)


async def mcp_snapshot(
    endpoint: McpEndpoint, resource_uri: str | None = None
) -> tuple[list[McpRemoteTool], str]:
    """The server's tools and, when `resource_uri` is given, that resource's text ("" when
    not): what a refresh stores. One session."""
    async with _session(endpoint) as session:
        tools: list[McpRemoteTool] = []
        cursor: str | None = None
        for _ in range(100):  # a server paging forever is bounded by the time limit anyway
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            listing = await session.list_tools(params=params)
            tools.extend(_remote_tool(item) for item in listing.tools)
            cursor = listing.next_cursor
            if not cursor:
                break
        text = await _read_text(endpoint, session, resource_uri) if resource_uri else ""
        return tools, text


async def mcp_call_tool(
    endpoint: McpEndpoint, name: str, arguments: dict[str, Any]
) -> McpToolOutcome:
    """Call one remote tool. McpUnavailable if the server cannot be reached or answers
    with a protocol error; a tool failure it reports comes back with is_error True.

    Costs one session: initialize, tools/list (the SDK checks structured results against
    the listed output schema) and tools/call."""
    async with _session(endpoint) as session:
        result = await session.call_tool(name, arguments)
    text = "\n".join(
        part.text for part in result.content if getattr(part, "type", None) == "text"
    ).strip()
    if result.is_error:
        return McpToolOutcome(value=text or "the tool reported an error", is_error=True)
    if result.structured_content is not None:
        return McpToolOutcome(value=result.structured_content, is_error=False)
    return McpToolOutcome(value=text, is_error=False)


async def _read_text(endpoint: McpEndpoint, session: ClientSession, uri: str) -> str:
    result = await session.read_resource(uri)
    parts = [c.text for c in result.contents if isinstance(getattr(c, "text", None), str)]
    if not parts and result.contents:
        raise McpUnavailable(endpoint.url, f"resource {uri} has no text content")
    return "\n".join(parts)


def _remote_tool(item: Any) -> McpRemoteTool:
    annotations = (
        item.annotations.model_dump(exclude_none=True, mode="json") if item.annotations else {}
    )
    return McpRemoteTool(
        name=item.name,
        description=(item.description or "").strip(),
        input_schema=dict(item.input_schema or {}),
        annotations=annotations,
    )


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
async def _session(endpoint: McpEndpoint) -> AsyncIterator[ClientSession]:
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
        raise McpUnavailable(url, _reason(exc, failed_statuses)) from exc


def _reason(exc: BaseException, failed_statuses: list[int]) -> str:
    """The most telling message inside `exc` (task groups wrap the real one)."""
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
    if isinstance(exc, httpx2.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx2.HTTPStatusError):
        status = exc.response.status_code
        if status in (401, 403):
            return f"the server refused the credentials (HTTP {status})"
        return f"the server answered HTTP {status}"
    if isinstance(exc, httpx2.ConnectError):
        return f"cannot connect ({exc or 'connection failed'})"
    if isinstance(exc, MCPError):
        return f"MCP error: {exc}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- remote tools as registry tools ---------------------------------------------------
def capability_from_annotations(annotations: Mapping[str, Any], *, timeout_s: float) -> Capability:
    """The Capability of a remote tool, read the way the MCP spec defines its hints.

    `read_only_hint` true: effect read, idempotent. Otherwise the tool may write, and the
    spec's defaults apply to what is not said: `destructive_hint` defaults to true and
    `idempotent_hint` to false. So a tool with no annotations is destructive and not
    idempotent (the safe reading: approval policies treat it as a write, and a run
    interrupted during the call never repeats it); `destructive_hint: false` makes it a
    plain write. Approval is never required by the server's say-so alone: the agent's
    approval policy decides.
    """
    idempotent_hint = annotations.get("idempotent_hint") is True
    if annotations.get("read_only_hint") is True:
        effect, idempotent = Effect.READ, True
    elif annotations.get("destructive_hint") is False:
        effect, idempotent = Effect.WRITE, idempotent_hint
    else:
        effect, idempotent = Effect.DESTRUCTIVE, idempotent_hint
    # The client gives up first, so the model reads its clearer message, not the registry's.
    return Capability(effect=effect, idempotent=idempotent, timeout_s=min(timeout_s + 5, 3600))


def build_mcp_tool(
    *,
    connection_name: str,
    prefix: str,
    remote: Mapping[str, Any],
    endpoint: McpEndpoint,
    secret_ref: str | None,
    tags: frozenset[str] = frozenset(),
) -> Tool:
    """A registry Tool named `<prefix>__<remote name>` that calls the remote tool.

    `remote` is one cached listing entry (name, description, input_schema, annotations).
    The credential is read at call time from the RunContext's secrets under `secret_ref`,
    so the model never sees it and the registry redacts it from results and events.
    Raises ValueError when the entry cannot be a tool here (a name our providers refuse,
    a schema that is not a valid JSON Schema object).
    """
    remote_name = str(remote.get("name") or "")
    name = f"{prefix}__{remote_name}"
    schema = remote.get("input_schema") or {"type": "object"}
    if not isinstance(schema, dict):
        raise ValueError(f"tool {remote_name!r}: input_schema is not an object")
    description = str(remote.get("description") or "").strip()
    if not description:
        description = f"The {remote_name} tool of the {connection_name} MCP server."
    annotations = remote.get("annotations") or {}
    return Tool(  # ValueError for a schema check_schema refuses (a pattern RE2 cannot run)
        name=name,
        description=description,
        input_schema=schema,
        handler=_McpToolCall(
            connection_name=connection_name,
            remote_name=remote_name,
            endpoint=endpoint,
            secret_ref=secret_ref,
        ),
        tags=frozenset(tags),
        capability=capability_from_annotations(annotations, timeout_s=endpoint.timeout_s),
    )


class _McpToolCall:
    """The handler of one remote tool: one MCP session per call."""

    def __init__(
        self,
        *,
        connection_name: str,
        remote_name: str,
        endpoint: McpEndpoint,
        secret_ref: str | None,
    ) -> None:
        self.connection_name = connection_name
        self.remote_name = remote_name
        self.endpoint = endpoint
        self.secret_ref = secret_ref

    async def __call__(self, arguments: dict[str, Any], ctx: RunContext) -> Any:
        headers = auth_headers(ctx.secrets.get(self.secret_ref)) if self.secret_ref else {}
        endpoint = replace(self.endpoint, headers=headers)
        try:
            outcome = await mcp_call_tool(endpoint, self.remote_name, arguments)
        except McpUnavailable as exc:
            raise ToolFailed(f"MCP server {self.connection_name} is unavailable: {exc}") from None
        if outcome.is_error:
            raise ToolFailed(
                f"the {self.remote_name} tool of MCP server {self.connection_name} "
                f"reported an error: {outcome.value}"
            )
        return outcome.value
