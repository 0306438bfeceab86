"""Map anthropic/openai SDK exceptions into our taxonomy, without leaking credentials."""

from __future__ import annotations

import email.utils
import json
import re
import sys
import time

from providers.runtime.errors import (
    AddressRefused,
    AuthenticationFailed,
    BadRequest,
    ContextTooLong,
    ModelNotFound,
    ProviderError,
    ProviderUnavailable,
    RateLimited,
    Timeout,
)
from tools.runtime.egress import EgressError, EgressRefused, EgressTimeout

_SDKS = ("anthropic", "openai")  # each adapter imports its own: neither is loaded for the other


def _sdk_errors(name: str) -> tuple[type[BaseException], ...]:
    """The exception class `name` of each SDK this process has loaded (an exception of one
    it never loaded cannot reach here)."""
    return tuple(getattr(sys.modules[sdk], name) for sdk in _SDKS if sdk in sys.modules)


_CONTEXT = re.compile(
    r"context length|context window|prompt is too long|too many tokens|maximum context", re.I
)
# Provider messages sometimes echo a masked key ("Incorrect API key provided: sk-ab***yz").
_KEYLIKE = re.compile(r"\b(?:sk|xai|gsk|sk-ant|sk-or|key)-[A-Za-z0-9_*.\-]{4,}")


def redact(text: str, api_key: str | None) -> str:
    if api_key:
        text = text.replace(api_key, "[redacted]")
    return _KEYLIKE.sub("[redacted]", text)


def map_error(exc: Exception, *, provider: str, api_key: str | None) -> ProviderError:
    egress = exc if isinstance(exc, EgressError) else exc.__cause__
    if isinstance(egress, EgressRefused):  # a base URL the platform may not reach
        return AddressRefused(
            f"This address is not allowed: {egress}. Use the provider's public address, "
            "or ask the platform operator to allow-list it."
        )
    if isinstance(exc, _sdk_errors("APITimeoutError")) or isinstance(egress, EgressTimeout):
        return Timeout(f"{provider} did not answer in time")
    if isinstance(egress, EgressError):  # its message is fit to show the tenant
        return ProviderUnavailable(f"cannot reach {provider}: {egress}")
    if isinstance(exc, _sdk_errors("APIConnectionError")):
        cause = type(exc.__cause__).__name__ if exc.__cause__ else "connection error"
        return ProviderUnavailable(f"cannot reach {provider} ({cause})")
    if not isinstance(exc, _sdk_errors("APIStatusError")):
        return ProviderUnavailable(redact(f"{provider} call failed: {exc}", api_key))
    return status_error(
        exc.status_code, _detail(exc), exc.response.headers, provider=provider, api_key=api_key
    )


def status_error(
    status: int, detail: str, headers, *, provider: str, api_key: str | None
) -> ProviderError:
    """An answer with HTTP status `status` (not 2xx) as our taxonomy has it; `detail`: the
    provider's message (credentials masked here), `headers`: its headers (Retry-After)."""
    detail = redact(detail, api_key)
    message = f"{provider} answered HTTP {status}: {detail}"
    if status == 429:
        return RateLimited(message, retry_after=_retry_after(headers))
    if status in (401, 403):
        return AuthenticationFailed(message)
    if status == 413 or (status in (400, 422) and _CONTEXT.search(detail)):
        return ContextTooLong(message)
    if status == 408:
        return Timeout(message)
    if status >= 500:
        return ProviderUnavailable(message)
    if status == 404:
        return ModelNotFound(message)
    return BadRequest(message)


def _detail(exc) -> str:
    return _message(getattr(exc, "body", None)) or str(getattr(exc, "message", exc))[:500]


def body_detail(content: bytes) -> str:
    """The provider's message in an error answer's body (`{"error": {"message": ...}}`), or
    the start of the body itself."""
    try:
        found = _message(json.loads(content))
    except (ValueError, RecursionError):
        found = ""
    return found or content.decode("utf-8", "replace").strip()[:500]


def _message(body) -> str:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:500]
    return ""


def _retry_after(headers) -> float | None:
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return float(milliseconds) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        try:
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None
