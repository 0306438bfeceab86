"""Tenant administration over the API (admin scope): API keys and members."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.errors import Conflict
from agentplatform.api.resources import (
    ID,
    NOT_FOUND_EXAMPLE,
    TenantViewSet,
    path_id,
    query_bool,
    query_text,
)
from agentplatform.api.schema import ERRORS, error
from agentplatform.api.serializers import (
    ApiKeyCreatedSerializer,
    ApiKeyCreateSerializer,
    ApiKeySerializer,
    InvitationCreatedSerializer,
    InvitationSerializer,
    MemberAddSerializer,
    MemberRoleSerializer,
    MemberSerializer,
)
from tenancy import selectors, services
from tenancy.authentication import ApiClient
from tenancy.models import ApiKey, Invitation, Membership, Role
from tenancy.policy import Action

KEY_EXAMPLE = {
    "id": 8,
    "name": "CI pipeline",
    "prefix": "3f2a9c1d0b7e",
    "scopes": ["read", "run"],
    "created_by": "alice",
    "created_by_key": None,
    "made_by": "alice",
    "effective_role": "admin",
    "created_at": "2025-01-01T12:00:00Z",
    "last_used_at": None,
    "expires_at": None,
    "revoked_at": None,
    "usable": True,
}
MEMBER_EXAMPLE = {
    "id": 5,
    "user": {"id": 12, "username": "dana", "email": "dana@example.com"},
    "role": "member",
    "created_at": "2025-01-01T12:00:00Z",
}
INVITATION_EXAMPLE = {
    "id": 3,
    "invitee": "dana@example.com",
    "role": "member",
    "status": "pending",
    "invited_by": "alice",
    "created_at": "2025-01-01T12:00:00Z",
    "expires_at": "2025-01-08T12:00:00Z",
    "accept_url": "https://agents.example.com/invitations/Zk3...",
}
PENDING_EXAMPLE = {k: v for k, v in INVITATION_EXAMPLE.items() if k != "accept_url"}
LAST_OWNER = {409: error("A tenant must keep at least one owner.")}


class AdminViewSet(TenantViewSet):
    read_action = Action.MANAGE_KEYS
    write_action = Action.MANAGE_KEYS


class OwnerAuthority:
    """Owner memberships and invitations are changed only with an owner's authority (the
    tenancy services check it with `by=self.principal`)."""

    def acting_user(self):
        """The person behind the request: the session's user, or the key's creator (for a
        key made with a key, the person behind the maker; the operator's keys, and keys
        they made, have none: they act with no superuser's authority)."""
        user = self.request.user
        if isinstance(user, ApiClient):
            return user.api_key.created_by or AnonymousUser()
        return user


@extend_schema_view(
    list=extend_schema(
        summary="List API keys",
        description="Never the secrets: only each key's prefix. `made_by` says who made it "
        "(a username, `key <name>` for a key made with a key, or `operator`); "
        "`effective_role` is what it may do now: its `role` lowered to its creator's current "
        "role (null: its creator left, and it is unusable).",
        parameters=[
            OpenApiParameter("active", OpenApiTypes.BOOL, description="Usable (or not) keys.")
        ],
        responses={200: ApiKeySerializer(many=True), **ERRORS},
        examples=[OpenApiExample("A key", KEY_EXAMPLE, response_only=True)],
    ),
    retrieve=extend_schema(
        summary="Get an API key",
        parameters=[ID],
        responses={200: ApiKeySerializer, **ERRORS},
        examples=[OpenApiExample("A key", KEY_EXAMPLE, response_only=True)],
    ),
    create=extend_schema(
        summary="Create an API key",
        description="The response holds the full key (`key`); it is shown only here.",
        request=ApiKeyCreateSerializer,
        responses={201: ApiKeyCreatedSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "A key", {"name": "CI pipeline", "scopes": ["read", "run"]}, request_only=True
            ),
            OpenApiExample(
                "The new key",
                {**KEY_EXAMPLE, "key": "ap_3f2a9c1d0b7e_..."},
                response_only=True,
            ),
        ],
    ),
    destroy=extend_schema(
        summary="Revoke an API key",
        description="The same as `POST /api-keys/{id}/revoke`; the record stays.",
        parameters=[ID],
        responses={204: None, **ERRORS},
        examples=[NOT_FOUND_EXAMPLE],
    ),
)
class ApiKeyViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, AdminViewSet
):
    serializer_class = ApiKeySerializer

    def get_queryset(self) -> models.QuerySet:
        if getattr(self, "swagger_fake_view", False):
            return ApiKey.objects.none()
        active = query_bool(self.request, "active") if self.action == "list" else None
        return selectors.api_keys_of(tenant=self.tenant, active=active)

    def get_object(self) -> ApiKey:
        pk = path_id(self.kwargs["pk"], "API key")
        return selectors.api_key_get(tenant=self.tenant, key_id=pk)

    def create(self, request: Request) -> Response:
        serializer = ApiKeyCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        key, full_key = services.api_key_create(
            tenant=self.tenant,
            name=serializer.validated_data["name"],
            scopes=serializer.validated_data["scopes"],
            created_by=None if self.is_api_key else self.actor,
            made_by_key=self.actor if self.is_api_key else None,
            allowed_agents=serializer.validated_data.get("allowed_agents"),
            allowed_tools=serializer.validated_data.get("allowed_tools"),
            acts_for_members=serializer.validated_data.get("acts_for_members", False),
            expires_at=serializer.validated_data.get("expires_at"),
        )
        key.key = full_key
        response = Response(ApiKeyCreatedSerializer(key).data, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"
        return response

    def destroy(self, request: Request, pk: str) -> Response:
        services.api_key_revoke(key=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Revoke an API key",
        description="Requests with a revoked key answer 401. Revoking twice is harmless.",
        parameters=[ID],
        request=None,
        responses={200: ApiKeySerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "Revoked",
                {**KEY_EXAMPLE, "revoked_at": "2025-01-02T08:00:00Z", "usable": False},
                response_only=True,
            )
        ],
    )
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str) -> Response:
        key = services.api_key_revoke(key=self.get_object())
        return Response(ApiKeySerializer(key).data)


@extend_schema_view(
    list=extend_schema(
        summary="List members",
        parameters=[OpenApiParameter("role", OpenApiTypes.STR, enum=Role.values)],
        responses={200: MemberSerializer(many=True), **ERRORS},
        examples=[OpenApiExample("A member", MEMBER_EXAMPLE, response_only=True)],
    ),
    retrieve=extend_schema(
        summary="Get a member",
        parameters=[ID],
        responses={200: MemberSerializer, **ERRORS},
        examples=[OpenApiExample("A member", MEMBER_EXAMPLE, response_only=True)],
    ),
    create=extend_schema(
        summary="Invite someone",
        description=(
            "By username or e-mail, with a role. Creates an invitation (also mailed when an "
            "address is known); the person becomes a member only by opening `accept_url` "
            "signed in to their own account and accepting. The answer is the same whether "
            "or not such an account exists. Only owners invite owners. Pending invitations: "
            "`GET /invitations`; withdraw one with `DELETE /invitations/{id}`."
        ),
        request=MemberAddSerializer,
        responses={201: InvitationCreatedSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "By e-mail", {"email": "dana@example.com", "role": "member"}, request_only=True
            ),
            OpenApiExample("The invitation", INVITATION_EXAMPLE, response_only=True),
        ],
    ),
    partial_update=extend_schema(
        summary="Change a member's role",
        description="Only owners change owners or make owners; the last owner stays.",
        parameters=[ID],
        request=MemberRoleSerializer,
        responses={200: MemberSerializer, **ERRORS, **LAST_OWNER},
        examples=[
            OpenApiExample("Make admin", {"role": "admin"}, request_only=True),
            OpenApiExample("A member", {**MEMBER_EXAMPLE, "role": "admin"}, response_only=True),
        ],
    ),
    update=extend_schema(
        summary="Change a member's role",
        description="The same as PATCH.",
        parameters=[ID],
        request=MemberRoleSerializer,
        responses={200: MemberSerializer, **ERRORS, **LAST_OWNER},
        examples=[
            OpenApiExample("Make admin", {"role": "admin"}, request_only=True),
            OpenApiExample("A member", {**MEMBER_EXAMPLE, "role": "admin"}, response_only=True),
        ],
    ),
    destroy=extend_schema(
        summary="Remove a member",
        description="Only owners remove owners; the last owner stays.",
        parameters=[ID],
        responses={204: None, **ERRORS, **LAST_OWNER},
        examples=[NOT_FOUND_EXAMPLE],
    ),
)
class MemberViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    OwnerAuthority,
    AdminViewSet,
):
    """Who belongs to the tenant (OwnerAuthority for owners); adding is an invitation."""

    serializer_class = MemberSerializer
    read_action = Action.MANAGE_MEMBERS
    write_action = Action.MANAGE_MEMBERS

    def get_queryset(self) -> models.QuerySet:
        if getattr(self, "swagger_fake_view", False):
            return Membership.objects.none()
        role = query_text(self.request, "role") if self.action == "list" else None
        return selectors.memberships_of(tenant=self.tenant, role=role)

    def get_object(self) -> Membership:
        pk = path_id(self.kwargs["pk"], "member")
        return selectors.membership_get(tenant=self.tenant, membership_id=pk)

    def create(self, request: Request) -> Response:
        """An invitation, not a membership: the answer is the same whether or not an
        account has this username or e-mail (the invitee accepts at `accept_url`)."""
        serializer = MemberAddSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        acting = self.acting_user()
        invitation, token = services.invitation_create(
            tenant=self.tenant,
            invitee=data.get("username") or data["email"],
            role=data["role"],
            invited_by=acting if acting.is_authenticated else None,
            by=self.principal,
        )
        accept_url = request.build_absolute_uri(reverse("invitation", args=[token]))
        services.invitation_mail(invitation=invitation, accept_url=accept_url)
        invitation.accept_url = accept_url
        response = Response(
            InvitationCreatedSerializer(invitation).data, status=status.HTTP_201_CREATED
        )
        response["Cache-Control"] = "no-store"
        return response

    def update(self, request: Request, pk: str, partial: bool = False) -> Response:
        membership = self.get_object()
        serializer = MemberRoleSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        role = serializer.validated_data["role"]
        try:
            membership = services.membership_set(
                tenant=self.tenant, user=membership.user, role=role, by=self.principal
            )
        except DjangoValidationError as exc:
            raise _last_owner_conflict(exc) from None
        return Response(MemberSerializer(membership).data)

    def partial_update(self, request: Request, pk: str) -> Response:
        return self.update(request, pk, partial=True)

    def destroy(self, request: Request, pk: str) -> Response:
        membership = self.get_object()
        try:
            services.membership_remove(membership=membership, by=self.principal)
        except DjangoValidationError as exc:
            raise _last_owner_conflict(exc) from None
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema_view(
    list=extend_schema(
        summary="List pending invitations",
        description="Invitations not yet accepted, declined, withdrawn or expired.",
        responses={200: InvitationSerializer(many=True), **ERRORS},
        examples=[OpenApiExample("An invitation", PENDING_EXAMPLE, response_only=True)],
    ),
    retrieve=extend_schema(
        summary="Get an invitation",
        parameters=[ID],
        responses={200: InvitationSerializer, **ERRORS},
        examples=[OpenApiExample("An invitation", PENDING_EXAMPLE, response_only=True)],
    ),
    destroy=extend_schema(
        summary="Withdraw an invitation",
        description="Its link stops working; the record stays. Only owners withdraw owner "
        "invitations.",
        parameters=[ID],
        responses={204: None, **ERRORS},
        examples=[NOT_FOUND_EXAMPLE],
    ),
)
class InvitationViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    OwnerAuthority,
    AdminViewSet,
):
    serializer_class = InvitationSerializer
    read_action = Action.MANAGE_MEMBERS
    write_action = Action.MANAGE_MEMBERS

    def get_queryset(self) -> models.QuerySet:
        if getattr(self, "swagger_fake_view", False):
            return Invitation.objects.none()
        return selectors.invitations_of(tenant=self.tenant, open_only=self.action == "list")

    def get_object(self) -> Invitation:
        pk = path_id(self.kwargs["pk"], "invitation")
        return selectors.invitation_get(tenant=self.tenant, invitation_id=pk)

    def destroy(self, request: Request, pk: str) -> Response:
        services.invitation_revoke(invitation=self.get_object(), by=self.principal)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _last_owner_conflict(exc: DjangoValidationError) -> Exception:
    """The services refuse to lose the last owner with a non-field ValidationError: that
    is a 409 (the state, not the input, is the problem). Field errors stay 400s."""
    if hasattr(exc, "error_dict"):
        return exc
    return Conflict(" ".join(exc.messages))
