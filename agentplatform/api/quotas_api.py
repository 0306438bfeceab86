"""Quotas and budgets over the API: `/api/v1/quotas` (docs/quotas.md). Reading needs the
read scope, changing them the config scope (an admin's); each answer carries what is used
of the limit in its current period and when that period ends."""

from __future__ import annotations

from typing import Any

from django.db import models
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema_field, extend_schema_view
from rest_framework import serializers

from agentplatform.api.resources import (
    ID,
    CleanModelSerializer,
    TenantCrudViewSet,
    crud_schema,
    query_text,
)
from agents import quotas, selectors
from agents.models import Agent, Quota, QuotaMetric, QuotaPeriod, QuotaScope
from tenancy import selectors as tenancy_selectors
from tenancy.models import Tenant

REQUEST_EXAMPLE = {
    "scope": "api_key",
    "api_key": 8,
    "metric": "tokens",
    "period": "day",
    "limit": "200000",
}
RESPONSE_EXAMPLE = {
    "id": 3,
    "scope": "api_key",
    "member": None,
    "api_key": 8,
    "agent": None,
    "metric": "tokens",
    "period": "day",
    "limit": "200000.000000",
    "active": True,
    "label": "the daily limit of 200,000 tokens for API key 'CI pipeline'",
    "used": 41250,
    "resets_at": "2025-01-02T00:00:00Z",
    "created_at": "2025-01-01T12:00:00Z",
    "updated_at": "2025-01-01T12:00:00Z",
}


class _MemberField(serializers.CharField):
    """Written as a username, read back from the quota's user."""

    def get_attribute(self, quota: Quota) -> Any:
        return quota.user

    def to_representation(self, user: Any) -> str:
        return user.get_username()


class _KeyField(serializers.IntegerField):
    def get_attribute(self, quota: Quota) -> Any:
        return quota.api_key_id


class _AgentField(serializers.CharField):
    def get_attribute(self, quota: Quota) -> Any:
        return quota.agent

    def to_representation(self, agent: Agent) -> str:
        return agent.slug


class QuotaSerializer(CleanModelSerializer):
    scope = serializers.ChoiceField(choices=QuotaScope.choices)
    metric = serializers.ChoiceField(choices=QuotaMetric.choices)
    period = serializers.ChoiceField(choices=QuotaPeriod.choices)
    limit = serializers.DecimalField(
        max_digits=18,
        decimal_places=6,
        min_value=0,
        help_text="Tokens (a whole number) or US dollars.",
    )
    member = _MemberField(
        required=False,
        allow_null=True,
        max_length=150,
        help_text="The member's username (scope `member`).",
    )
    api_key = _KeyField(
        required=False, allow_null=True, help_text="The API key's id (scope `api_key`)."
    )
    agent = _AgentField(
        required=False,
        allow_null=True,
        max_length=50,
        help_text="The agent's slug (scope `agent`).",
    )
    label = serializers.CharField(read_only=True)
    used = serializers.SerializerMethodField(help_text="Used in the current period.")
    resets_at = serializers.SerializerMethodField(help_text="When the current period ends.")

    class Meta:
        model = Quota
        fields = [
            "id",
            "scope",
            "member",
            "api_key",
            "agent",
            "metric",
            "period",
            "limit",
            "active",
            "label",
            "used",
            "resets_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "label", "used", "resets_at", "created_at", "updated_at"]

    @extend_schema_field(OpenApiTypes.NUMBER)  # tokens (whole) or dollars
    def get_used(self, quota: Quota) -> int | float:
        return quotas.used(quota)

    @extend_schema_field(OpenApiTypes.DATETIME)
    def get_resets_at(self, quota: Quota) -> str:
        return quotas.utc_text(quotas.resets_at(quota))

    def save_with_service(
        self, tenant: Tenant, instance: Quota | None, changes: dict[str, Any]
    ) -> Quota:
        changes = _targets(tenant, changes)
        return quotas.quota_save(
            tenant=tenant, quota=instance, changes=changes, actor=self.context.get("actor")
        )


def _targets(tenant: Tenant, changes: dict[str, Any]) -> dict[str, Any]:
    """Usernames, key ids and slugs as the tenant's objects: an unknown one is a 400 naming
    its field (another tenant's answers the same as an unknown one)."""
    errors: dict[str, str] = {}
    if "member" in changes:
        name = changes.pop("member")
        user = None
        if name:
            user = tenancy_selectors.member_user(tenant=tenant, username=name)
            if user is None:
                errors["member"] = "No member of this tenant has that username."
        changes["user"] = user
    if "api_key" in changes:
        key_id = changes.pop("api_key")
        key = tenancy_selectors.api_key_of(tenant=tenant, key_id=key_id) if key_id else None
        if key_id and key is None:
            errors["api_key"] = "No API key of this tenant has that id."
        changes["api_key"] = key
    if "agent" in changes:
        slug = changes.pop("agent")
        agent = selectors.agent_named(tenant=tenant, slug=slug) if slug else None
        if slug and agent is None:
            errors["agent"] = "No agent of this tenant has that slug."
        changes["agent"] = agent
    if errors:
        raise serializers.ValidationError(errors)
    return changes


@extend_schema_view(
    **crud_schema(
        "quota",
        "quotas",
        QuotaSerializer,
        lookup=ID,
        filters=[
            OpenApiParameter("scope", OpenApiTypes.STR, enum=QuotaScope.values),
            OpenApiParameter("metric", OpenApiTypes.STR, enum=QuotaMetric.values),
        ],
        request_example=REQUEST_EXAMPLE,
        response_example=RESPONSE_EXAMPLE,
    )
)
class QuotaViewSet(TenantCrudViewSet):
    """Limits that block: per tenant, member, API key or agent, in tokens or US dollars,
    per calendar day or month in the tenant's time zone (`/api/v1/time-zone`). A run or
    gateway call that would go over one is refused before the model is called (HTTP 429,
    `quota_exceeded`)."""

    model = Quota
    serializer_class = QuotaSerializer

    def select(self, **filters: Any) -> models.QuerySet:
        return selectors.quotas_of(tenant=self.tenant, **filters)

    def list_filters(self) -> dict[str, Any]:
        return {name: query_text(self.request, name) for name in ("scope", "metric")}

    def get_object(self) -> Quota:
        return quotas.quota_get(tenant=self.tenant, quota_id=self.kwargs["pk"])

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        if not getattr(self, "swagger_fake_view", False):
            context["actor"] = self.actor
        return context

    def delete_with_service(self, instance: Quota) -> None:
        quotas.quota_delete(tenant=self.tenant, quota=instance, actor=self.actor)
