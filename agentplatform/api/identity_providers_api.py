"""A tenant's own identity providers over REST: `/api/v1/identity-providers` (docs/sso.md).
Owners and admins (or an admin-scope key), as for the sign-in setting; the rules of who may
change what are the services' (tenancy/sign_on/identity_providers.py), shared with
the admin. The client secret is write-only: answers say only whether one is set."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema_view
from rest_framework import serializers

from agentplatform.api.resources import (
    ID,
    CleanModelSerializer,
    StrictSerializer,
    TenantCrudViewSet,
    crud_schema,
    path_id,
    query_bool,
)
from agentplatform.api.serializers import SecretField
from tenancy.models import IdentityProvider, Role, Tenant
from tenancy.policy import Action
from tenancy.sign_on.identity_providers import (
    MAX_RULES,
    RuleSpec,
    identity_provider_delete,
    identity_provider_get,
    identity_provider_list,
    identity_provider_save,
)

REQUEST_EXAMPLE = {
    "slug": "acme-entra",
    "name": "Acme Entra ID",
    "issuer": "https://login.microsoftonline.com/00000000-0000-0000-0000-000000000000/v2.0",
    "client_id": "3f2a…",
    "client_secret": "…",
    "scopes": "openid email profile",
    "groups_claim": "groups",
    "default_role": "",
    "enabled": True,
    "rules": [
        {"group": "platform-admins", "role": "admin"},
        {"group": "engineering", "role": "member"},
    ],
}
RESPONSE_EXAMPLE = {
    "id": 2,
    **{k: v for k, v in REQUEST_EXAMPLE.items() if k != "client_secret"},
    "client_secret_set": True,
    "sign_in_url": "https://agents.example.com/sso/acme-entra/",
    "created_at": "2026-01-01T12:00:00Z",
}


class GroupRuleSerializer(StrictSerializer):
    group = serializers.CharField(max_length=255, help_text="The group's name at the provider.")
    role = serializers.ChoiceField(choices=Role.choices, help_text="The role it gives.")


class IdentityProviderSerializer(CleanModelSerializer):
    client_secret = SecretField(
        help_text='Write-only: send it to set it, null or "" to clear it (a public client, '
        "PKCE only), omit it to keep it."
    )
    client_secret_set = serializers.SerializerMethodField()
    rules = GroupRuleSerializer(
        many=True,
        required=False,
        max_length=MAX_RULES,
        help_text="Group rules: members of `group` get `role` in this tenant (the highest "
        "of their groups'). Sent: replaces them all; omitted: they stay.",
    )
    sign_in_url = serializers.SerializerMethodField()

    class Meta:
        model = IdentityProvider
        fields = [
            "id", "slug", "name", "issuer", "client_id", "client_secret", "client_secret_set",
            "scopes", "groups_claim", "default_role", "enabled", "rules", "sign_in_url",
            "created_at",
        ]  # fmt: skip
        read_only_fields = ["id", "created_at"]
        extra_kwargs = {
            "slug": {"help_text": "In the sign-in URL `/sso/<slug>/`; unique on the platform."},
            "issuer": {
                "help_text": "The provider's issuer: an https URL ("
                "`<issuer>/.well-known/openid-configuration` is read at sign-in)."
            },
        }

    def get_client_secret_set(self, provider: IdentityProvider) -> bool:
        return bool(provider.client_secret)

    def get_sign_in_url(self, provider: IdentityProvider) -> str:
        path = reverse("sso_start", args=[provider.slug])
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request is not None else path

    def save_with_service(
        self, tenant: Tenant, provider: IdentityProvider | None, changes: dict[str, Any]
    ) -> IdentityProvider:
        rules = changes.pop("rules", None)
        specs = None if rules is None else [RuleSpec(r["group"], r["role"]) for r in rules]
        return identity_provider_save(
            by=self.context["principal"], provider=provider, changes=changes, rules=specs
        )


@extend_schema_view(
    **crud_schema(
        "identity provider",
        "identity providers",
        IdentityProviderSerializer,
        lookup=ID,
        filters=[OpenApiParameter("enabled", OpenApiTypes.BOOL)],
        request_example=REQUEST_EXAMPLE,
        response_example=RESPONSE_EXAMPLE,
    )
)
class IdentityProviderViewSet(TenantCrudViewSet):
    """The tenant's own OpenID Connect providers, with their group rules (docs/sso.md).
    Owners and admins only; a provider giving the owner role (a rule or its default role)
    is an owner's alone. Platform-wide providers are not here (a superuser's, in the admin,
    or the SSO_PROVIDERS setting). While password sign-in is off, the last enabled provider
    serving the tenant can be neither disabled nor deleted."""

    model = IdentityProvider
    serializer_class = IdentityProviderSerializer
    read_action = Action.MANAGE_MEMBERS
    write_action = Action.MANAGE_MEMBERS

    def get_queryset(self) -> models.QuerySet:
        if getattr(self, "swagger_fake_view", False):
            return IdentityProvider.objects.none()
        enabled = query_bool(self.request, "enabled") if self.action == "list" else None
        return identity_provider_list(by=self.principal, enabled=enabled)

    def get_object(self) -> IdentityProvider:
        pk = path_id(self.kwargs["pk"], "identity provider")
        return identity_provider_get(by=self.principal, provider_id=pk)

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        if not getattr(self, "swagger_fake_view", False):
            context["principal"] = self.principal
        return context

    def delete_with_service(self, instance: IdentityProvider) -> None:
        identity_provider_delete(by=self.principal, provider=instance)
