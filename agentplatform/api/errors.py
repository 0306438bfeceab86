"""One error format for the whole API: {"error": {"code", "message", "details"}}.

Known failures map to their status here; anything else stays a 500 and is logged by
Django (never swallowed).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from agents.quotas import QuotaExceeded


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"
    default_detail = "The request conflicts with the current state."


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def _django_validation_details(exc: DjangoValidationError) -> Any:
    if hasattr(exc, "error_dict"):
        return {
            field: [message for error in errors for message in error.messages]
            for field, errors in exc.error_dict.items()
        }
    return {"non_field_errors": exc.messages}


def api_exception_handler(exc: Exception, context: dict) -> Response | None:
    if isinstance(exc, QuotaExceeded):  # (a ValidationError too: first)
        response = Response(
            error_body("quota_exceeded", str(exc), exc.details()),
            status=status.HTTP_429_TOO_MANY_REQUESTS,
        )
        response["Retry-After"] = str(exc.retry_after_s)
        return response
    if isinstance(exc, DjangoValidationError):
        conflict = getattr(exc, "code", None) == "conflict"
        exc = (Conflict if conflict else exceptions.ValidationError)(
            _django_validation_details(exc)
        )
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "Not found.")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    elif isinstance(exc, RequestDataTooBig):
        response = Response(
            error_body("too_large", "The request body is too large."),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
        return response
    response = exception_handler(exc, context)
    if response is None:
        return None
    code = getattr(exc, "default_code", "error")
    if isinstance(exc, exceptions.ValidationError):
        message, details, code = "Some fields are invalid.", response.data, "invalid"
    else:
        detail = response.data.get("detail", "") if isinstance(response.data, dict) else ""
        message, details = str(detail) or str(exc), {}
        codes = exc.get_codes() if isinstance(exc, exceptions.APIException) else None
        if isinstance(codes, str):
            code = codes
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        details = {"retry_after_s": int(exc.wait) + 1}
    response.data = error_body(code, message, details)
    return response
