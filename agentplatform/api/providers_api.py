"""Provider connections: CRUD with a write-only API key, and a connection test; model
aliases (gateway fallback and load sharing)."""

from __future__ import annotations

from typing import Any

from django.db import models
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    extend_schema,
    extend_schema_view,
)
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.resources import (
    ID,
    TenantCrudViewSet,
    crud_schema,
    path_id,
    query_bool,
    query_text,
)
from agentplatform.api.schema import ERRORS
from agentplatform.api.serializers import (
    ConnectionTestSerializer,
    ModelAliasSerializer,
    ProviderConnectionSerializer,
)
from providers import selectors
from providers.models import ModelAlias, ProviderConnection
from providers.services import connection_delete, connection_test, model_alias_delete

CONNECTION_REQUEST = {
    "name": "OpenRouter",
    "kind": "openai_compatible",
    "preset": "openrouter",
    "api_key": "sk-or-...",
    "default_model": "anthropic/claude-sonnet-4.5",
    "allowed_models": [],
    "is_default": True,
}
CONNECTION_RESPONSE = {
    "id": 4,
    **{k: v for k, v in CONNECTION_REQUEST.items() if k != "api_key"},
    "base_url": "",
    "has_api_key": True,
    "extra_headers": {},
    "timeout_s": 60.0,
    "max_retries": 3,
    "health_status": "unknown",
    "health_message": "",
    "last_checked_at": None,
    "created_at": "2025-01-01T12:00:00Z",
    "updated_at": "2025-01-01T12:00:00Z",
}


@extend_schema_view(
    **crud_schema(
        "provider connection",
        "provider connections",
        ProviderConnectionSerializer,
        lookup=ID,
        filters=[
            OpenApiParameter("kind", OpenApiTypes.STR, description="Provider kind."),
            OpenApiParameter("is_default", OpenApiTypes.BOOL),
        ],
        request_example=CONNECTION_REQUEST,
        response_example=CONNECTION_RESPONSE,
    )
)
class ProviderConnectionViewSet(TenantCrudViewSet):
    """The tenant's model providers. `api_key` is write-only: send it to set it, null or
    "" to clear it, omit it to keep it; responses carry `has_api_key`. Making one
    connection the default unsets the previous default."""

    model = ProviderConnection
    serializer_class = ProviderConnectionSerializer

    def select(self, **filters: Any) -> models.QuerySet:
        return selectors.connections_of(tenant=self.tenant, **filters)

    def list_filters(self) -> dict[str, Any]:
        return {
            "kind": query_text(self.request, "kind"),
            "is_default": query_bool(self.request, "is_default"),
        }

    def get_object(self) -> ProviderConnection:
        pk = path_id(self.kwargs["pk"], "provider connection")
        return selectors.connection_get(tenant=self.tenant, connection_id=pk)

    def delete_with_service(self, instance: ProviderConnection) -> None:
        connection_delete(tenant=self.tenant, connection=instance)

    @extend_schema(
        summary="Test a provider connection",
        description="Lists the provider's models (or sends a 1-token request) and records "
        "the outcome in `health_status`. A failing provider is `ok: false` with status 200.",
        parameters=[ID],
        request=None,
        responses={200: ConnectionTestSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "Connected",
                {
                    "ok": True,
                    "message": "Connected: 12 model(s) available (gpt-4.1, ...).",
                    "health_status": "ok",
                    "last_checked_at": "2025-01-01T12:00:00Z",
                },
                response_only=True,
            )
        ],
    )
    @action(detail=True, methods=["post"])
    def test(self, request: Request, pk: str) -> Response:
        connection = self.get_object()
        ok, message = connection_test(connection)
        connection.refresh_from_db(fields=["health_status", "last_checked_at"])
        return Response(
            ConnectionTestSerializer(
                {
                    "ok": ok,
                    "message": message,
                    "health_status": connection.health_status,
                    "last_checked_at": connection.last_checked_at,
                }
            ).data
        )


ALIAS_REQUEST = {
    "name": "chat",
    "targets": [
        {"connection": "OpenAI", "model": "gpt-4.1-mini"},
        {"connection": "OpenAI second key", "model": "gpt-4.1-mini"},
        {"connection": "OpenRouter", "model": "openai/gpt-4.1-mini"},
    ],
    "load_balancing": "round_robin",
}
ALIAS_RESPONSE = {
    "id": 2,
    **ALIAS_REQUEST,
    "created_at": "2025-01-01T12:00:00Z",
    "updated_at": "2025-01-01T12:00:00Z",
}


@extend_schema_view(
    **crud_schema(
        "model alias",
        "model aliases",
        ModelAliasSerializer,
        lookup=ID,
        filters=[],
        request_example=ALIAS_REQUEST,
        response_example=ALIAS_RESPONSE,
    )
)
class ModelAliasViewSet(TenantCrudViewSet):
    """The tenant's model aliases: a gateway model `alias/<name>` on /v1 that tries its
    connection/model pairs in order on a retryable failure (rate limit, 5xx, timeout,
    unreachable), those serving the first pair's model sharing its load when
    `load_balancing` is set. Each pair's connection must be the tenant's, and allow its
    model. docs/fallback.md."""

    model = ModelAlias
    serializer_class = ModelAliasSerializer

    def select(self, **filters: Any) -> models.QuerySet:
        return selectors.model_aliases_of(tenant=self.tenant)

    def get_object(self) -> ModelAlias:
        pk = path_id(self.kwargs["pk"], "model alias")
        return selectors.model_alias_get(tenant=self.tenant, alias_id=pk)

    def delete_with_service(self, instance: ModelAlias) -> None:
        model_alias_delete(tenant=self.tenant, alias=instance)
