"""What every `/v1` face shares: errors in OpenAI's (or Anthropic's) shape, and the API
key checked, allowed and throttled as the REST API does it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.core.exceptions import PermissionDenied, RequestDataTooBig, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions

from agentplatform.v1.shapes.base import BadRequest
from agentplatform.v1.shapes.messages import ANTHROPIC_ERROR_TYPES
from agents.quotas import QuotaExceeded
from base.stream_reads import brief
from tenancy import rls
from tenancy.api_keys import verified_key
from tenancy.authentication import ApiClient, ApiKeyAuthentication
from tenancy.models import ApiKey
from tenancy.policy import Action, Principal
from tenancy.request_budgets import client_retry_after

logger = logging.getLogger(__name__)
T = TypeVar("T")


# -- errors ------------------------------------------------------------------------------
class OpenAIError(Exception):
    """An error answered in OpenAI's shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type = status, message, type
        self.param, self.code, self.headers = param, code, headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def anthropic_body(self) -> dict[str, Any]:
        """The same error in Anthropic's shape (for `/v1/messages`)."""
        kind = ANTHROPIC_ERROR_TYPES.get(self.status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": self.message}}

    def response(self, anthropic: bool = False) -> JsonResponse:
        body = self.anthropic_body() if anthropic else self.body()
        response = JsonResponse(body, status=self.status)
        for name, value in self.headers.items():
            response[name] = value
        return response


def model_not_found(model: str) -> OpenAIError:
    return OpenAIError(
        404,
        f"The model `{model}` does not exist or you do not have access to it.",
        param="model",
        code="model_not_found",
    )


def require_raw_models(client: ApiClient) -> None:
    """Gateway models and embeddings call a connection's models directly: not for a key
    limited to some agents."""
    if client.api_key.allowed_agents:
        raise OpenAIError(
            403, "This API key may run only some agents, not models.", code="permission_denied"
        )


def as_api_error(exc: Exception) -> OpenAIError | None:
    """The error a caller is told for `exc`, or None for an unexpected one (a 500)."""
    if isinstance(exc, OpenAIError):
        return exc
    if isinstance(exc, RequestDataTooBig):
        return OpenAIError(413, "The request body is too large.")
    if isinstance(exc, Http404):
        return OpenAIError(404, str(exc) or "Not found.", code="not_found")
    if isinstance(exc, PermissionDenied):
        return OpenAIError(403, str(exc) or "Not allowed.", code="permission_denied")
    if isinstance(exc, BadRequest):
        return OpenAIError(400, str(exc), param=exc.param)
    if isinstance(exc, QuotaExceeded):  # (a ValidationError too: first)
        return quota_error(exc)
    if isinstance(exc, ValidationError):
        field = next(iter(getattr(exc, "error_dict", {})), "input")
        param = "messages" if field == "input" else field
        return OpenAIError(400, "; ".join(exc.messages), param=param)
    return None


def quota_error(exc: QuotaExceeded) -> OpenAIError:
    """A limit used up: 429 as OpenAI answers an exhausted quota, with when it resets."""
    return OpenAIError(
        429,
        str(exc),
        type="insufficient_quota",
        code="quota_exceeded",
        headers={"Retry-After": str(exc.retry_after_s)},
    )


def openai_errors(
    view: Callable[..., Awaitable[HttpResponse]], *, anthropic: bool = False
) -> Callable[..., Awaitable[HttpResponse]]:
    """Answer every failure in OpenAI's error shape (Anthropic's with `anthropic`);
    unknown errors are logged and a 500 that says nothing more."""

    @wraps(view)
    async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return await view(request, *args, **kwargs)
        except Exception as exc:
            error = as_api_error(exc)
            if error is None:
                logger.exception("OpenAI-compatible %s %s failed", request.method, request.path)
                error = OpenAIError(
                    500, "The server had an error processing the request.", type="server_error"
                )
            return error.response(anthropic)

    return csrf_exempt(wrapper)


@openai_errors
async def unknown_endpoint(request: HttpRequest, rest: str = "") -> HttpResponse:
    raise OpenAIError(404, f"Unknown endpoint {request.method} {request.path}.", code="unknown_url")


# -- authentication ----------------------------------------------------------------------
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="api"'}


def authenticate(request: HttpRequest, action: Action, verified: ApiKey | None = None) -> ApiClient:
    """The request's API key (`verified`: already found, by `verified_key`), allowed
    `action` by the policy (`authorized` throttles it)."""
    if verified is not None:
        rls.set_request_tenants([verified.tenant_id])  # as ApiKeyAuthentication does
        found = (ApiClient(api_key=verified), verified)
    else:
        try:
            found = ApiKeyAuthentication().authenticate(request)
        except exceptions.AuthenticationFailed as exc:
            raise OpenAIError(
                401,
                f"Incorrect API key provided: {str(exc.detail).lower()}",
                code="invalid_api_key",
                headers=CHALLENGE,
            ) from None
    if found is None:
        raise OpenAIError(
            401,
            "You didn't provide an API key. Send your tenant API key as "
            "`Authorization: Bearer <key>`.",
            code="missing_api_key",
            headers=CHALLENGE,
        )
    client = found[0]
    try:
        Principal.of_key(client.api_key).require(action)
    except PermissionDenied as exc:
        raise OpenAIError(403, str(exc), code="insufficient_scope") from None
    request.user = client  # what the throttles key on
    return client


async def authorized(request: HttpRequest, action: Action) -> ApiClient:
    """The request's API key, allowed `action` and throttled like the REST API. Checked on
    the event loop for a key this process verified before (Redis reads only, no database),
    else on a thread: the thread hop was about a third of what a gateway call adds
    (bench/gateway.py)."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, token = header.partition(" ")
    known = verified_key(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
    if known is not None:
        client = authenticate(request, action, known)
    else:
        client = await brief(authenticate)(request, action)
    await throttled(client)
    return client


async def throttled(client: ApiClient) -> None:
    """One request counted against the key's and its tenant's budgets: a 429 beyond them."""
    wait = await client_retry_after(client)
    if wait is not None:
        raise OpenAIError(
            429,
            "Rate limit reached; retry later.",
            type="requests",
            code="rate_limit_exceeded",
            headers={"Retry-After": str(wait)},
        )


def allow_method(request: HttpRequest, method: str) -> None:
    if request.method != method:
        raise OpenAIError(405, f"Use {method} for {request.path}.", code="method_not_allowed")


# -- parsing -----------------------------------------------------------------------------
INLINE_PARSE_BYTES = 64 * 1024


async def parsed(parse: Callable[..., T], raw: Any, *args: Any, size: int | None = None) -> T:
    """`parse(raw, *args)`: on the event loop for a small body (microseconds), on a thread
    for a large one (a 20 MB body or its schemas take long enough to stall other streams)."""
    if (len(raw) if size is None else size) <= INLINE_PARSE_BYTES:
        return parse(raw, *args)
    return await sync_to_async(parse, thread_sensitive=False)(raw, *args)
