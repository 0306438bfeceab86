"""What an MCP tool call answers when it did not succeed: shared by every tool the server
offers (agentplatform/mcp/server.py, agentplatform/mcp/resume.py)."""

from __future__ import annotations

from typing import Any

from mcp_types import CallToolResult, TextContent


def error_result(text: str, **meta: Any) -> CallToolResult:
    """An error (or pending) result: the text says what happened, `_meta` carries the run's
    id and status. Never `structuredContent`: clients check it against the tool's output
    schema even on errors (the TypeScript SDK throws when it does not match)."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)], is_error=True, meta=meta or None
    )
