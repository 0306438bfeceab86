"""`/api/v1/retention`: how long the tenant's runs' events, conversations, attachments and audit
entries are kept, and its legal holds (lifecycle.retention_settings; docs/operations.md,
"Retention"). Admins and admin-scope keys only (`manage_retention`), to read as to change."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentplatform.api.resources import NOT_FOUND_EXAMPLE
from agentplatform.api.schema import ERRORS
from agentplatform.api.tenant import TenantPolicyView, request_user_or_key
from lifecycle.retention_settings import (
    MAX_DAYS,
    REASON_CHARS,
    conversation_hold_lift,
    conversation_hold_place,
    retention_set,
    retention_shown,
)
from tenancy.policy import Action

DAYS_HELP = f"Days kept: 0 forever, 1 to {MAX_DAYS}; null follows the platform's default."


def _days() -> serializers.IntegerField:
    return serializers.IntegerField(
        min_value=0, max_value=MAX_DAYS, allow_null=True, required=False, help_text=DAYS_HELP
    )


class Days(serializers.Serializer):
    run_days = _days()
    conversation_days = _days()
    attachment_days = _days()
    audit_days = _days()


class RetentionChange(Days):
    legal_hold = serializers.BooleanField(
        required=False, help_text="Stops every purge of the tenant's data while true."
    )
    legal_hold_reason = serializers.CharField(
        max_length=REASON_CHARS, required=False, allow_blank=True
    )

    def validate(self, attrs):
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError(
                {name: "Not a retention setting." for name in unknown}
            )
        return attrs


class HeldConversation(serializers.Serializer):
    conversation = serializers.IntegerField()
    reason = serializers.CharField(read_only=True)
    placed_at = serializers.DateTimeField(read_only=True)


class RetentionShown(RetentionChange):
    in_effect = Days(help_text="What the purge applies: the tenant's, else the default.")
    platform_default = Days()
    held_conversations = HeldConversation(many=True)


class HoldPlace(serializers.Serializer):
    conversation = serializers.IntegerField(min_value=1)
    reason = serializers.CharField(max_length=REASON_CHARS, required=False, allow_blank=True)


EXAMPLE = OpenApiExample(
    "Ninety days of runs, a year of conversations",
    {"run_days": 90, "conversation_days": 365, "attachment_days": None, "audit_days": 0},
    request_only=True,
)
SHOWN_EXAMPLE = OpenApiExample(
    "Runs kept ninety days, the rest as the platform's default",
    {
        "run_days": 90,
        "conversation_days": None,
        "attachment_days": None,
        "audit_days": None,
        "legal_hold": False,
        "legal_hold_reason": "",
        "in_effect": {"run_days": 90, "conversation_days": 365, "attachment_days": None,
                      "audit_days": None},
        "platform_default": {"run_days": None, "conversation_days": 365,
                             "attachment_days": None, "audit_days": None},
        "held_conversations": [],
    },
    response_only=True,
)  # fmt: skip
HELD_EXAMPLE = OpenApiExample(
    "Held",
    {"conversation": 42, "reason": "Dispute 2026-118", "placed_at": "2026-12-06T09:00:00Z"},
    response_only=True,
)


class _RetentionView(TenantPolicyView, APIView):
    read_action = Action.MANAGE_RETENTION
    write_action = Action.MANAGE_RETENTION


class RetentionView(_RetentionView):
    @extend_schema(
        summary="The tenant's retention",
        description="Days kept per kind as set, in effect, the platform's default; holds.",
        responses={200: RetentionShown, **ERRORS},
        examples=[SHOWN_EXAMPLE],
    )
    def get(self, request: Request) -> Response:
        return Response(RetentionShown(retention_shown(tenant=self.tenant)).data)

    @extend_schema(
        summary="Change the tenant's retention",
        description="Fields left out keep their value; a bad value is a 400 naming its field, "
        "and nothing is saved. Audited.",
        request=RetentionChange,
        responses={200: RetentionShown, **ERRORS},
        examples=[EXAMPLE, SHOWN_EXAMPLE],
    )
    def patch(self, request: Request) -> Response:
        body = RetentionChange(data=request.data)
        body.is_valid(raise_exception=True)
        retention_set(tenant=self.tenant, changes=body.validated_data)
        return Response(RetentionShown(retention_shown(tenant=self.tenant)).data)


class HoldsView(_RetentionView):
    @extend_schema(
        summary="Place a legal hold on a conversation",
        description="No purge touches it (its messages, attachments, its runs' events) until "
        "lifted. Another tenant's conversation: 404. Audited.",
        request=HoldPlace,
        responses={201: HeldConversation, **ERRORS},
        examples=[
            OpenApiExample(
                "A hold", {"conversation": 42, "reason": "Dispute 2026-118"}, request_only=True
            ),
            HELD_EXAMPLE,
            NOT_FOUND_EXAMPLE,
        ],
    )
    def post(self, request: Request) -> Response:
        body = HoldPlace(data=request.data)
        body.is_valid(raise_exception=True)
        hold = conversation_hold_place(
            tenant=self.tenant,
            conversation_id=body.validated_data["conversation"],
            reason=body.validated_data.get("reason", ""),
            by=request_user_or_key(request),
        )
        shown = {"conversation": hold.conversation_id, "reason": hold.reason,
                 "placed_at": hold.placed_at}  # fmt: skip
        return Response(HeldConversation(shown).data, status=status.HTTP_201_CREATED)


class HoldView(_RetentionView):
    @extend_schema(
        summary="Lift a conversation's legal hold",
        responses={204: None, **ERRORS},
        examples=[NOT_FOUND_EXAMPLE],
    )
    def delete(self, request: Request, conversation: str) -> Response:
        conversation_hold_lift(tenant=self.tenant, conversation_id=conversation)
        return Response(status=status.HTTP_204_NO_CONTENT)
