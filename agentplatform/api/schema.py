"""OpenAPI details drf-spectacular cannot infer: our API-key scheme and the error shape."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import serializers


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "tenancy.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A tenant API key: `Authorization: Bearer ap_<prefix>_<secret>`.",
        }


ErrorSerializer = inline_serializer(
    name="Error",
    fields={
        "error": inline_serializer(
            name="ErrorBody",
            fields={
                "code": serializers.CharField(),
                "message": serializers.CharField(),
                "details": serializers.JSONField(),
            },
        )
    },
)


def error(description: str) -> OpenApiResponse:
    return OpenApiResponse(response=ErrorSerializer, description=description)


ERRORS = {
    400: error("Invalid input; `details` names the fields."),
    401: error("Missing, invalid, revoked or expired API key."),
    403: error("The key lacks the scope, or the role is too low."),
    404: error("No such object in this tenant."),
    415: error("The body's content type is not accepted (send application/json)."),
    429: error("Too many requests; see Retry-After."),
}
