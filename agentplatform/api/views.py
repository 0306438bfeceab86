from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentplatform.api.errors import error_body
from agentplatform.api.schema import ERRORS
from tenancy.access import tenants_for
from tenancy.authentication import ApiClient
from tenancy.models import Scope
from tenancy.permissions import requires_scope


class WhoAmI(APIView):
    """Who the request acts as: an API key's tenant and scopes, or a user's tenants."""

    permission_classes = [requires_scope(Scope.READ)]

    @extend_schema(
        summary="Who am I",
        responses={
            200: inline_serializer(
                name="WhoAmI",
                fields={
                    "kind": serializers.ChoiceField(choices=["api_key", "user"]),
                    "tenant": serializers.JSONField(required=False),
                    "key": serializers.JSONField(required=False),
                    "username": serializers.CharField(required=False),
                    "tenants": serializers.JSONField(required=False),
                },
            ),
            **ERRORS,
        },
    )
    def get(self, request: Request) -> Response:
        if isinstance(request.user, ApiClient):
            key = request.user.api_key
            return Response(
                {
                    "kind": "api_key",
                    "tenant": {"slug": key.tenant.slug, "name": key.tenant.name},
                    "key": {"name": key.name, "prefix": key.prefix, "scopes": key.scopes},
                }
            )
        return Response(
            {
                "kind": "user",
                "username": request.user.get_username(),
                "tenants": [{"slug": t.slug, "name": t.name} for t in tenants_for(request.user)],
            }
        )


@csrf_exempt  # it changes nothing; a POST to a mistyped path should hear 404, not a CSRF 403
def unknown_path(request: HttpRequest, rest: str = "") -> JsonResponse:
    """Any other path under /api/v1/: a 404 in the API's error format, not Django's HTML
    page, for every caller and method (it says nothing about any tenant)."""
    message = "There is no API endpoint at this path; the API is described at /api/docs/."
    return JsonResponse(error_body("not_found", message), status=404)
