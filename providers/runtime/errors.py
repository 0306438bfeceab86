"""One error taxonomy for every provider, and who must act on each.

Transient errors (`retryable`) are retried by the connection's RetryPolicy; errors that
are also a `ConfigurationError` are the tenant admin's to fix and fail at once.
"""

from __future__ import annotations

from tools.runtime.context import ConfigurationError


class ProviderError(Exception):
    """Base. Messages never contain credentials."""

    retryable = False


class RateLimited(ProviderError):
    retryable = True

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ProviderUnavailable(ProviderError):
    """Unreachable, 5xx or overloaded: try again later."""

    retryable = True


class Timeout(ProviderError):
    retryable = True


class AuthenticationFailed(ProviderError, ConfigurationError):
    """Bad or missing API key, or no permission: the tenant admin must act."""


class AddressRefused(ProviderError, ConfigurationError):
    """The base URL is an address the platform may not reach (the egress policy refuses
    private, loopback and link-local ones): the tenant admin must change it, or the
    operator allow-list it."""


class BadRequest(ProviderError):
    """The request is wrong (unknown model, invalid parameter): never retried."""


class ContextTooLong(BadRequest):
    """The conversation no longer fits the model's context window."""


class ModelNotFound(BadRequest, ConfigurationError):
    """HTTP 404: a model the provider does not know, or a base URL with a wrong path."""


class QuotaRefused(ProviderError):
    """The platform refused the call before the model was asked: a limit of the tenant's is
    used up (agents.quotas.QuotaExceeded). Its message names the limit and when it resets;
    `details()` is what the API adds to its error body."""

    def details(self) -> dict:
        return {}


class ModelBehaviorError(ProviderError):
    """The model produced something unusable (e.g. tool arguments that are not JSON).
    The agent loop reports it back to the model instead of crashing."""

    def __init__(self, message: str, *, call_id: str = "", name: str = "", raw: str = "") -> None:
        super().__init__(message)
        self.call_id = call_id
        self.name = name
        self.raw = raw


def provider_failure(exc: ProviderError, connection: str, model: str) -> str:
    """Why a request to `model` of `connection` failed, in our words, for whoever asked
    (the provider's text may quote anything)."""
    where = f"connection {connection!r}"
    if isinstance(exc, AuthenticationFailed):
        return f"{where} was refused by its provider (API key or permission): an admin must fix it"
    if isinstance(exc, AddressRefused):
        return f"{where} points at an address the platform may not reach: an admin must fix it"
    if isinstance(exc, ModelNotFound):
        return f"model {model!r} is not known to {where}"
    if isinstance(exc, ContextTooLong):
        return f"the question is too long for model {model!r}; shorten it"
    if isinstance(exc, BadRequest):
        return f"{where} refused the request to model {model!r} as invalid"
    if isinstance(exc, RateLimited):
        return f"{where} is over its provider's rate limit; try again later"
    if isinstance(exc, Timeout):
        return f"model {model!r} of {where} did not answer in time"
    if isinstance(exc, ProviderUnavailable):
        return f"the provider of {where} is unavailable; try again later"
    return f"model {model!r} of {where} failed to answer"
