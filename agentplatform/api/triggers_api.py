"""Triggers over REST (agents.triggers; docs/triggers.md): list, create, read, change,
delete, rotate a webhook's secret, and the runs a trigger started. Triggers are
configuration (read: viewers; write: admins); a webhook's secret is in the answer to its
creation or rotation only. A trigger's runs are seen as runs are (READ_RUN)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.resources import (
    NOT_FOUND_EXAMPLE,
    PARSERS,
    NewestFirstChecked,
    StrictSerializer,
    path_id,
)
from agentplatform.api.runs import RunSerializer
from agentplatform.api.schema import ERRORS
from agentplatform.api.tenant import TenantPolicyView
from agents import selectors
from agents.models import Trigger, TriggerKind
from agents.runtime.triggers import MAX_CRON_CHARS, MAX_TEMPLATE_CHARS
from agents.triggers import (
    hook_path,
    trigger_delete,
    trigger_get,
    trigger_rotate_secret,
    trigger_runs,
    trigger_save,
    visible_triggers,
)
from tenancy.policy import Action
from tenancy.selectors import member_user

SLUG = r"^[a-z0-9][a-z0-9_-]{0,49}$"
TRIGGER_EXAMPLE = {
    "id": 4, "name": "new-issues", "kind": "webhook", "agent": "triage", "crew": None,
    "workflow": None, "cron": "", "timezone": "UTC",
    "input_template": "Triage: {{payload.issue.title}}",
    "enabled": True, "run_as": "alice", "hook_url": "/hooks/trg_3kT9bXq2mZr8YwPq1vLs0aEe",
    "next_fire_at": None, "last_fired_at": "2026-01-01T12:00:00Z", "last_error": "",
    "created_at": "2026-01-01T11:00:00Z", "updated_at": "2026-01-01T11:00:00Z",
}  # fmt: skip


# -- schemas ---------------------------------------------------------------------------
class TriggerSerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    crew = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    workflow = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    run_as = serializers.SerializerMethodField(help_text="The member the runs are attributed to.")
    hook_url = serializers.SerializerMethodField(
        help_text="A webhook's address: POST the JSON body signed with its secret."
    )

    class Meta:
        model = Trigger
        fields = [
            "id", "name", "kind", "agent", "crew", "workflow", "cron", "timezone",
            "input_template",
            "enabled", "run_as", "hook_url", "next_fire_at", "last_fired_at", "last_error",
            "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_run_as(self, trigger: Trigger) -> str | None:
        return trigger.run_as.get_username() if trigger.run_as_id else None

    def get_hook_url(self, trigger: Trigger) -> str | None:
        return hook_path(trigger) if trigger.kind == TriggerKind.WEBHOOK else None


class TriggerCreatedSerializer(TriggerSerializer):
    secret = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="A new webhook's signing secret: shown in this answer only.",
    )

    class Meta(TriggerSerializer.Meta):
        fields = [*TriggerSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class TriggerWriteSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100, required=False)
    kind = serializers.ChoiceField(choices=TriggerKind.choices, required=False)
    agent = serializers.RegexField(SLUG, max_length=50, required=False, allow_null=True)
    crew = serializers.RegexField(SLUG, max_length=50, required=False, allow_null=True)
    workflow = serializers.RegexField(
        SLUG, max_length=50, required=False, allow_null=True,
        help_text="Slug of the workflow to run (instead of an agent or crew); its input is "
        "the rendered template read as JSON, e.g. `{{payload}}`.",
    )  # fmt: skip
    cron = serializers.CharField(
        max_length=MAX_CRON_CHARS, required=False, allow_blank=True,
        help_text="A schedule's cron expression (5 fields), e.g. `0 9 * * 1-5`.",
    )  # fmt: skip
    timezone = serializers.CharField(max_length=64, required=False, help_text="IANA name.")
    input_template = serializers.CharField(
        max_length=MAX_TEMPLATE_CHARS, required=False, trim_whitespace=False,
        help_text="The run's input; {{payload.a.b}} takes a value from a webhook's body, "
        "{{trigger.name}} and {{fired_at}} work for both kinds.",
    )  # fmt: skip
    enabled = serializers.BooleanField(required=False)
    run_as = serializers.CharField(
        max_length=150, required=False,
        help_text="The username of the member the runs are attributed to (default: you).",
    )  # fmt: skip

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        for name, value in data.items():
            if isinstance(value, str) and "\x00" in value:
                raise serializers.ValidationError({name: ["Text may not contain NUL."]})
        return data


class RotatedSerializer(serializers.Serializer):
    secret = serializers.CharField(help_text="The new signing secret: shown once.")


# -- views -----------------------------------------------------------------------------
class TriggerView(TenantPolicyView, GenericAPIView):
    read_action = Action.READ_CONFIG
    write_action = Action.CHANGE_CONFIG
    parser_classes = PARSERS
    serializer_class = TriggerSerializer

    def trigger(self, trigger_id: str) -> Trigger:
        return trigger_get(tenant=self.tenant, trigger_id=path_id(trigger_id, "trigger"))

    def changes(self, *, partial: bool) -> dict[str, Any]:
        body = TriggerWriteSerializer(data=self.request.data, partial=partial)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        for field, named in (
            ("agent", selectors.agent_named),
            ("crew", selectors.crew_named),
            ("workflow", selectors.workflow_named),
        ):
            if data.get(field):
                found = named(tenant=self.tenant, slug=data[field])
                if found is None:
                    raise serializers.ValidationError({field: [f"No {field} {data[field]!r}."]})
                data[field] = found
        if "run_as" in data:
            data["run_as"] = member_user(tenant=self.tenant, username=data["run_as"])
            if data["run_as"] is None:
                raise serializers.ValidationError({"run_as": ["No such member."]})
        return data


class TriggerListCreate(TriggerView):
    pagination_class = NewestFirstChecked

    def get_queryset(self) -> QuerySet[Trigger]:
        return visible_triggers(self.principal)

    @extend_schema(
        summary="List triggers",
        responses={200: TriggerSerializer(many=True), **ERRORS},
        examples=[OpenApiExample("Triggers", [TRIGGER_EXAMPLE], response_only=True)],
    )
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(TriggerSerializer(page, many=True).data)

    @extend_schema(
        summary="Create a trigger",
        description="A schedule (cron, time zone) or a webhook (its secret in this answer only).",
        request=TriggerWriteSerializer,
        responses={201: TriggerCreatedSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "Weekday report",
                value={"name": "report", "kind": "schedule", "agent": "analyst",
                       "cron": "0 9 * * 1-5", "timezone": "Europe/Berlin",
                       "input_template": "Summarise yesterday's tickets."},
                request_only=True,
            ),
            OpenApiExample(
                "Created", {**TRIGGER_EXAMPLE, "secret": "whsec_..."}, response_only=True
            ),
        ],
    )  # fmt: skip
    def post(self, request: Request) -> Response:
        changes = self.changes(partial=False)
        missing = [f for f in ("name", "kind", "input_template") if f not in changes]
        if missing:
            raise serializers.ValidationError({f: ["This field is required."] for f in missing})
        saved = trigger_save(tenant=self.tenant, by=self.principal, changes=changes)
        data = {**TriggerSerializer(saved.trigger).data, "secret": saved.secret}
        return Response(data, status=status.HTTP_201_CREATED)


class TriggerDetail(TriggerView):
    @extend_schema(
        summary="Get a trigger",
        responses={200: TriggerSerializer, **ERRORS},
        examples=[OpenApiExample("A trigger", TRIGGER_EXAMPLE, response_only=True)],
    )
    def get(self, request: Request, trigger_id: str) -> Response:
        return Response(TriggerSerializer(self.trigger(trigger_id)).data)

    @extend_schema(
        summary="Change a trigger",
        description="Enable or disable it, change its schedule, input or target. Its kind stays.",
        request=TriggerWriteSerializer,
        responses={200: TriggerSerializer, **ERRORS},
        examples=[OpenApiExample("Changed", TRIGGER_EXAMPLE, response_only=True)],
    )
    def patch(self, request: Request, trigger_id: str) -> Response:
        trigger = self.trigger(trigger_id)
        changes = self.changes(partial=True)
        saved = trigger_save(
            tenant=self.tenant, by=self.principal, trigger=trigger, changes=changes
        )
        return Response(TriggerSerializer(saved.trigger).data)

    @extend_schema(
        summary="Delete a trigger", description="Its runs stay.",
        responses={204: None, **ERRORS}, examples=[NOT_FOUND_EXAMPLE],
    )  # fmt: skip
    def delete(self, request: Request, trigger_id: str) -> Response:
        trigger_delete(tenant=self.tenant, by=self.principal, trigger=self.trigger(trigger_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class TriggerRotateSecret(TriggerView):
    @extend_schema(
        summary="Rotate a webhook's secret",
        description="The old secret stops working at once; the new one is in this answer only.",
        request=None,
        responses={200: RotatedSerializer, **ERRORS},
        examples=[OpenApiExample("Rotated", {"secret": "whsec_..."}, response_only=True)],
    )
    def post(self, request: Request, trigger_id: str) -> Response:
        trigger = self.trigger(trigger_id)
        secret = trigger_rotate_secret(tenant=self.tenant, by=self.principal, trigger=trigger)
        return Response({"secret": secret})


class TriggerRuns(TriggerView):
    read_action = Action.READ_RUN
    serializer_class = RunSerializer
    pagination_class = NewestFirstChecked

    @extend_schema(
        summary="List the runs a trigger started",
        description="Newest first; the runs the caller may see (admins: all).",
        responses={200: RunSerializer(many=True), **ERRORS},
        examples=[NOT_FOUND_EXAMPLE],
    )
    def get(self, request: Request, trigger_id: str) -> Response:
        trigger = self.trigger(trigger_id)
        runs = selectors.runs_with_details(trigger_runs(self.principal, trigger))
        page = self.paginate_queryset(runs)
        return self.get_paginated_response(RunSerializer(page, many=True).data)
