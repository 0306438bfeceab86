"""`GET`/`PATCH /api/v1/sign-in`: how the tenant's members sign in (docs/sso.md): whether
a password still works, and the identity providers that sign them in (never a secret).
Owners and admins (or an admin-scope key), as on the members page."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentplatform.api.schema import ERRORS
from agentplatform.api.tenant import allowed, request_tenant
from tenancy.models import Tenant
from tenancy.policy import Action
from tenancy.services import tenant_sign_in_set
from tenancy.sign_in import session_needs_password_sign_in
from tenancy.sign_on import sso


class ProviderOut(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    issuer = serializers.CharField()
    platform_wide = serializers.BooleanField()
    sign_in_url = serializers.CharField()


class SignInOut(serializers.Serializer):
    password_sign_in = serializers.BooleanField()
    identity_providers = ProviderOut(many=True)


class SignInIn(serializers.Serializer):
    password_sign_in = serializers.BooleanField()


SIGN_IN_EXAMPLE = OpenApiExample(
    "Passwords off, one provider",
    {
        "password_sign_in": False,
        "identity_providers": [
            {
                "slug": "acme-entra",
                "name": "Acme Entra ID",
                "issuer": "https://login.microsoftonline.com/00000000-0000-0000-0000-000000000000/v2.0",
                "platform_wide": False,
                "sign_in_url": "https://agents.example.com/sso/acme-entra/",
            }
        ],
    },
    response_only=True,
)


def _state(request: Request, tenant: Tenant) -> dict:
    serving = sso.providers_serving(tenant)
    return {
        "password_sign_in": tenant.password_sign_in,
        "identity_providers": [
            {
                "slug": provider.slug,
                "name": provider.name,
                "issuer": provider.issuer,
                "platform_wide": provider.tenant_id is None,
                "sign_in_url": request.build_absolute_uri(f"/sso/{provider.slug}/"),
            }
            for provider in serving
        ],
    }


class SignInView(APIView):
    read_action = Action.MANAGE_MEMBERS
    write_action = Action.MANAGE_MEMBERS

    def get_permissions(self):
        return [allowed(self.read_action, self.write_action)()]

    @extend_schema(
        summary="How members sign in",
        description="Whether password sign-in is on, and the identity providers serving "
        "the tenant (its own, and platform-wide ones with a group rule for it).",
        responses={200: SignInOut, **ERRORS},
        examples=[SIGN_IN_EXAMPLE],
    )
    def get(self, request: Request) -> Response:
        return Response(_state(request, request_tenant(request)))

    @extend_schema(
        summary="Turn password sign-in on or off",
        description="Off: sessions a password began (and MCP clients authorised in one) "
        "cannot act in this tenant, only single sign-on's can; API keys keep working, and "
        "the members' other tenants are not affected. Refused (400) while no enabled "
        "identity provider serves the tenant, and from a session a password began (sign in "
        "with single sign-on first).",
        request=SignInIn,
        responses={200: SignInOut, **ERRORS},
        examples=[
            OpenApiExample("Turn passwords off", {"password_sign_in": False}, request_only=True),
            SIGN_IN_EXAMPLE,
        ],
    )
    def patch(self, request: Request) -> Response:
        body = SignInIn(data=request.data)
        body.is_valid(raise_exception=True)
        tenant = request_tenant(request)
        tenant_sign_in_set(
            tenant=tenant,
            password_sign_in=body.validated_data["password_sign_in"],
            password_session=session_needs_password_sign_in(request),
        )
        return Response(_state(request, tenant))
