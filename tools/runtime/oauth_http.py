"""The guarded requests both OAuth clients of the platform make (single sign-on,
agentplatform/web/sso/client.py; MCP servers' OAuth, tools/mcp_oauth/protocol.py): one
exchange over the guarded egress (bounded time and size, no redirect followed unless asked),
the answer read as a JSON object, its OAuth error code, and client authentication as RFC
6749 §2.3.1 has it. No Django here; each caller words the failures for its own people.
"""

from __future__ import annotations

import base64
import math
from typing import Any
from urllib.parse import quote_plus

from tools.runtime.egress import (
    EgressError,
    EgressRefused,
    EgressResponse,
    EgressTimeout,
    GuardedHttpClient,
    ResponseTooLarge,
)

MAX_LIFETIME_S = 365 * 24 * 3600  # a token "valid" longer is taken as valid for a year


class OAuthHttpError(Exception):
    """The exchange did not happen. `kind`: "refused" (an address the egress policy
    refuses), "timeout", "too_large" or "unreachable"; `str()` is the egress's own reason
    (ours, never the server's words)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


async def oauth_request(
    client: GuardedHttpClient, method: str, url: str, *, timeout_s: float, max_bytes: int,
    **kwargs: Any,
) -> EgressResponse:  # fmt: skip
    """One exchange (JSON asked for; redirects not followed unless `follow_redirects`);
    OAuthHttpError when it could not be made."""
    headers = {"accept": "application/json", **kwargs.pop("headers", {})}
    kwargs.setdefault("follow_redirects", False)
    try:
        return await client.request(
            method, url, headers=headers, timeout_s=timeout_s, max_bytes=max_bytes, **kwargs
        )
    except EgressRefused as exc:
        raise OAuthHttpError("refused", str(exc)) from None
    except EgressTimeout as exc:
        raise OAuthHttpError("timeout", str(exc)) from None
    except ResponseTooLarge as exc:
        raise OAuthHttpError("too_large", str(exc)) from None
    except EgressError as exc:
        raise OAuthHttpError("unreachable", str(exc)) from None


def json_object(response: EgressResponse) -> dict[str, Any] | None:
    """The answer's JSON object; None when it is not one (not JSON, nested too deep for
    the parser, another type)."""
    try:
        value = response.json()
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def error_code(response: EgressResponse) -> str:
    """The well-formed OAuth `error` code of an answer (letters and underscores, short),
    else ""."""
    code = (json_object(response) or {}).get("error")
    if isinstance(code, str) and code.replace("_", "").isalpha() and len(code) <= 40:
        return code
    return ""


def basic_credentials(client_id: str, client_secret: str) -> str:
    """The Authorization header of client_secret_basic: the id and the secret each
    form-urlencoded before the Basic encoding (RFC 6749 §2.3.1)."""
    pair = f"{quote_plus(client_id)}:{quote_plus(client_secret)}"
    return "Basic " + base64.b64encode(pair.encode()).decode("ascii")


def lifetime_s(value: Any) -> int | None:
    """A token answer's `expires_in` as seconds: None when absent or not a finite positive
    number (1e400 parses as infinity), at most MAX_LIFETIME_S."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value <= 0:
        return None
    return int(min(value, MAX_LIFETIME_S))
