"""A client for remote MCP servers (streamable HTTP) a tenant connects as context providers.

Every exchange opens one MCP session with the official SDK (`streamable_http_client` +
`ClientSession`) over an httpx2 client from `guarded_async_client`, so the egress policy
applies to the endpoint and to every connection a redirect makes (the SDK itself follows
only same-origin redirects). Each exchange is bounded: connecting by `connect_timeout_s`,
the whole exchange (initialize + the request) by `timeout_s`. Every failure to reach or
talk to the server becomes one `McpUnavailable("<url>: <reason>")`; a tool that answers
`is_error` is not a failure of the server and comes back as `McpToolOutcome.is_error`.

No Django here: the caller passes the URL, the credential header and the egress policy.
The SDK's side lives in `mcp_session`, imported by the exchanges: loading this module (as
every web and worker process does) costs no SDK.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from tools.runtime.context import RunContext, StaticSecrets
from tools.runtime.mcp_endpoint import AccountNeeded, McpEndpoint, McpUnavailable
from tools.runtime.tool import Capability, Effect, Suspended, Tool, ToolFailed


class Credentials(Protocol):
    """The Authorization header of one call, looked up when it is made (an OAuth
    connection's token, refreshed if due: tools.mcp_oauth). Each raises ToolFailed, or
    AccountNeeded when a person must connect their account first."""

    async def __call__(self, ctx: RunContext) -> Mapping[str, str]: ...

    async def rejected(self, ctx: RunContext, headers: Mapping[str, str]) -> None:
        """The server refused (401) `headers`, given for this call: renew them, or forget
        them (unless they were renewed since)."""


__all__ = [
    "AccountNeeded",
    "Credentials",
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
    from tools.runtime.mcp_session import read_text, session_with

    async with session_with(endpoint) as session:
        return await read_text(endpoint, session, uri)


async def mcp_snapshot(
    endpoint: McpEndpoint, resource_uri: str | None = None
) -> tuple[list[McpRemoteTool], str]:
    """The server's tools and, when `resource_uri` is given, that resource's text ("" when
    not): what a refresh stores. One session."""
    from mcp.types import PaginatedRequestParams

    from tools.runtime.mcp_session import read_text, session_with

    async with session_with(endpoint) as session:
        tools: list[McpRemoteTool] = []
        cursor: str | None = None
        for _ in range(100):  # a server paging forever is bounded by the time limit anyway
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            listing = await session.list_tools(params=params)
            tools.extend(_remote_tool(item) for item in listing.tools)
            cursor = listing.next_cursor
            if not cursor:
                break
        text = await read_text(endpoint, session, resource_uri) if resource_uri else ""
        return tools, text


async def mcp_call_tool(
    endpoint: McpEndpoint, name: str, arguments: dict[str, Any]
) -> McpToolOutcome:
    """Call one remote tool. McpUnavailable if the server cannot be reached or answers
    with a protocol error; a tool failure it reports comes back with is_error True.

    Costs one session: initialize, tools/list (the SDK checks structured results against
    the listed output schema) and tools/call."""
    from tools.runtime.mcp_session import session_with

    async with session_with(endpoint) as session:
        result = await session.call_tool(name, arguments)
    text = "\n".join(
        part.text for part in result.content if getattr(part, "type", None) == "text"
    ).strip()
    if result.is_error:
        return McpToolOutcome(value=text or "the tool reported an error", is_error=True)
    if result.structured_content is not None:
        return McpToolOutcome(value=result.structured_content, is_error=False)
    return McpToolOutcome(value=text, is_error=False)


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
    credentials: Credentials | None = None,
) -> Tool:
    """A registry Tool named `<prefix>__<remote name>` that calls the remote tool.

    `remote` is one cached listing entry (name, description, input_schema, annotations).
    The credential is read at call time from the RunContext's secrets under `secret_ref`,
    so the model never sees it and the registry redacts it from results and events; or,
    for an OAuth connection, asked of `credentials` at call time.
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
            credentials=credentials,
        ),
        tags=frozenset(tags),
        capability=capability_from_annotations(annotations, timeout_s=endpoint.timeout_s),
    )


class _McpToolCall:
    """The handler of one remote tool: one MCP session per call (two when an OAuth token
    is refused: it is renewed, or forgotten, and the call made once more; a 401 means the
    server did nothing with it)."""

    def __init__(
        self,
        *,
        connection_name: str,
        remote_name: str,
        endpoint: McpEndpoint,
        secret_ref: str | None,
        credentials: Credentials | None = None,
    ) -> None:
        self.connection_name = connection_name
        self.remote_name = remote_name
        self.endpoint = endpoint
        self.secret_ref = secret_ref
        self.credentials = credentials

    async def __call__(self, arguments: dict[str, Any], ctx: RunContext) -> Any:
        try:
            outcome = await self._call(arguments, ctx)
        except AccountNeeded as needed:  # the run waits for the person to connect
            return Suspended(str(needed), event=needed.event)
        if outcome.is_error:
            raise ToolFailed(
                f"the {self.remote_name} tool of MCP server {self.connection_name} "
                f"reported an error: {outcome.value}"
            )
        return outcome.value

    async def _call(self, arguments: dict[str, Any], ctx: RunContext) -> McpToolOutcome:
        for attempt in (1, 2):
            if self.credentials is not None:
                headers = dict(await self.credentials(ctx))
            else:
                headers = auth_headers(ctx.secrets.get(self.secret_ref)) if self.secret_ref else {}
            endpoint = replace(self.endpoint, headers=headers)
            try:
                outcome = await mcp_call_tool(endpoint, self.remote_name, arguments)
            except McpUnavailable as exc:
                refused = exc.reason.startswith("the server refused the credentials (HTTP 401)")
                if attempt == 1 and refused and self.credentials is not None:
                    await self.credentials.rejected(ctx, headers)
                    continue
                message = f"MCP server {self.connection_name} is unavailable: {exc}"
                raise ToolFailed(message) from None
            if self.credentials is not None:  # an OAuth token is no tenant secret: mask it here
                token = headers.get("Authorization", "").removeprefix("Bearer ").strip()
                masked = StaticSecrets({"oauth": token}).redact(outcome.value)
                outcome = replace(outcome, value=masked)
            return outcome
        raise AssertionError("unreachable")
