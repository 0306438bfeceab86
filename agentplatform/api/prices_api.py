"""Model prices: the tenant's own (CRUD, admins), and the built-in table they override."""

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
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.resources import (
    ID,
    CleanModelSerializer,
    TenantCrudViewSet,
    crud_schema,
    path_id,
    query_text,
)
from agentplatform.api.schema import ERRORS
from providers import selectors
from providers.models import ModelPrice
from providers.pricing import DEFAULT_PRICES
from providers.services import price_delete, price_save
from tenancy.models import Tenant

PRICE_FIELDS = ["input_price", "output_price", "cached_input_price", "cache_write_price"]


class ModelPriceSerializer(CleanModelSerializer):
    class Meta:
        model = ModelPrice
        fields = ["id", "provider_kind", "model", *PRICE_FIELDS, "updated_at"]
        read_only_fields = ["id", "updated_at"]

    def save_with_service(
        self, tenant: Tenant, price: ModelPrice | None, changes: dict[str, Any]
    ) -> ModelPrice:
        return price_save(tenant=tenant, price=price, changes=changes)


class DefaultPriceSerializer(serializers.Serializer):
    provider_kind = serializers.CharField()
    model = serializers.CharField()
    input_price = serializers.DecimalField(max_digits=10, decimal_places=4)
    output_price = serializers.DecimalField(max_digits=10, decimal_places=4)
    cached_input_price = serializers.DecimalField(max_digits=10, decimal_places=4)
    cache_write_price = serializers.DecimalField(max_digits=10, decimal_places=4)


PRICE_REQUEST = {
    "provider_kind": "openai",
    "model": "gpt-4o",
    "input_price": "2.2500",
    "output_price": "9.0000",
    "cached_input_price": "1.1250",
    "cache_write_price": "2.2500",
}


@extend_schema_view(
    **crud_schema(
        "model price",
        "model prices",
        ModelPriceSerializer,
        lookup=ID,
        filters=[OpenApiParameter("provider_kind", OpenApiTypes.STR)],
        request_example=PRICE_REQUEST,
        response_example={"id": 3, **PRICE_REQUEST, "updated_at": "2026-01-01T12:00:00Z"},
    )
)
class ModelPriceViewSet(TenantCrudViewSet):
    """The tenant's prices, in US dollars per million tokens, each for a model id or the
    beginning of one (the longest match prices a model). They override the built-in
    table (`GET /api/v1/prices/defaults`) entry by entry; runs record their cost with the
    price current when they finish. Prices are between 0 and 10000."""

    model = ModelPrice
    serializer_class = ModelPriceSerializer

    def select(self, **filters: Any) -> models.QuerySet:
        return selectors.prices_of(tenant=self.tenant, **filters)

    def list_filters(self) -> dict[str, Any]:
        return {"provider_kind": query_text(self.request, "provider_kind")}

    def get_object(self) -> ModelPrice:
        price_id = path_id(self.kwargs["pk"], "price")
        return selectors.price_get(tenant=self.tenant, price_id=price_id)

    def delete_with_service(self, instance: ModelPrice) -> None:
        price_delete(tenant=self.tenant, price=instance)

    @extend_schema(
        summary="List the built-in prices",
        description="The prices every tenant starts with (list prices as published by "
        "the providers), in US dollars per million tokens.",
        responses={200: DefaultPriceSerializer(many=True), **ERRORS},
        examples=[
            OpenApiExample(
                "Built-in prices",
                [
                    {
                        **PRICE_REQUEST,
                        "model": "gpt-4o-mini",
                        "input_price": "0.1500",
                        "output_price": "0.6000",
                        "cached_input_price": "0.0750",
                        "cache_write_price": "0.1500",
                    }
                ],
                response_only=True,
            )
        ],
    )
    @action(detail=False, methods=["get"], pagination_class=None)
    def defaults(self, request: Request) -> Response:
        rows = [
            {
                "provider_kind": kind, "model": model, "input_price": price.input,
                "output_price": price.output, "cached_input_price": price.cached_input,
                "cache_write_price": price.cache_write,
            }
            for kind, table in DEFAULT_PRICES.items()
            for model, price in sorted(table.items())
        ]  # fmt: skip
        return Response(DefaultPriceSerializer(rows, many=True).data)
