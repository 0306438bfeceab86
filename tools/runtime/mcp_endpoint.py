"""Where one remote MCP server is and how to reach it, and the error of one that cannot be
reached: what both the client (`mcp_client`) and the SDK's side of it (`mcp_session`) use,
so that neither imports the other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tools.runtime.egress import EgressPolicy


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
