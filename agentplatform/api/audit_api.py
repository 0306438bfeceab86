"""`GET /api/v1/audit-log`: the tenant's audit log, newest first (admin scope or an
owner's/admin's session). Filters as on the web page, validated by the same form."""

from __future__ import annotations

from django.db import models
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.resources import TenantViewSet
from agentplatform.api.schema import ERRORS
from tenancy import selectors
from tenancy.models import AuditAction, AuditEntry
from tenancy.policy import Action
from tenancy.records.audit_log import AuditFilterForm

ENTRY_EXAMPLE = {
    "id": 41,
    "at": "2025-01-02T08:00:00Z",
    "action": "config.changed",
    "actor_label": "alice",
    "user": 3,
    "api_key": None,
    "object_type": "providers.providerconnection",
    "object_id": "7",
    "object_repr": "OpenAI",
    "changes": {"api_key": ["[set]", "[changed]"], "timeout_s": [60.0, 30.0]},
    "ip": "203.0.113.5",
    "details": {},
}


class AuditEntrySerializer(serializers.ModelSerializer):
    changes = serializers.JSONField(
        help_text='`{field: [before, after]}`; secrets only as "[set]", "[changed]", "[cleared]".'
    )
    details = serializers.JSONField()

    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "at",
            "action",
            "actor_label",
            "user",
            "api_key",
            "object_type",
            "object_id",
            "object_repr",
            "changes",
            "ip",
            "details",
        ]
        read_only_fields = fields


class AuditLogViewSet(mixins.ListModelMixin, TenantViewSet):
    read_action = Action.READ_AUDIT
    write_action = Action.READ_AUDIT
    serializer_class = AuditEntrySerializer

    def get_queryset(self) -> models.QuerySet:
        if getattr(self, "swagger_fake_view", False):
            return AuditEntry.objects.none()
        form = AuditFilterForm(self.request.query_params)
        if not form.is_valid():
            raise exceptions.ValidationError(_errors(form))
        return selectors.audit_entries_matching(tenant=self.tenant, form=form)

    @extend_schema(
        summary="List audit log entries",
        description="Newest first, cursor-paginated. Sign-ins, configuration changes "
        "(before/after values, secrets masked), members, API keys, grants, approval "
        "decisions and runs started with API keys. Needs the `admin` scope (or an owner's "
        "or admin's session).",
        parameters=[
            OpenApiParameter("action", OpenApiTypes.STR, enum=AuditAction.values),
            OpenApiParameter("actor", OpenApiTypes.STR, description="Part of the actor's name."),
            OpenApiParameter(
                "object_type", OpenApiTypes.STR, description="An app label: `agents.agent`."
            ),
            OpenApiParameter("since", OpenApiTypes.DATE, description="From this day (UTC)."),
            OpenApiParameter("until", OpenApiTypes.DATE, description="Up to this day (UTC)."),
        ],
        responses={200: AuditEntrySerializer(many=True), **ERRORS},
        examples=[OpenApiExample("An entry", ENTRY_EXAMPLE, response_only=True)],
    )
    def list(self, request: Request) -> Response:
        return super().list(request)


def _errors(form: AuditFilterForm) -> dict[str, list[str]]:
    return {
        ("filters" if name == "__all__" else name): [str(m) for m in messages]
        for name, messages in form.errors.items()
    }
