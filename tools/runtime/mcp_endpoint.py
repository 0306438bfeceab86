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


class AccountNeeded(Exception):
    """A call needs a person to connect their account first: the run waits for them.
    `event` is (type, payload) telling them where (a link, never a secret)."""

    def __init__(self, message: str, event: tuple[str, dict]) -> None:
        super().__init__(message)
        self.event = event


@dataclass(frozen=True)
class McpEndpoint:
    """Where and how to reach one server. `headers` hold the credential: never log them."""

    url: str
    policy: EgressPolicy
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    connect_timeout_s: float = 5.0
    timeout_s: float = 30.0
