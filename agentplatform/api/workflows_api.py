"""Workflows over the API: `/api/v1/workflows` (docs/workflows.md). Reading needs the read
scope (any member), changing them the config scope (an admin's). A document the compiler
refuses is a 400 listing every problem at its path (`definition.steps[2].tool`); nothing
is saved. `POST /api/v1/workflows/validate` compiles a document without saving it."""

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
    CleanModelSerializer,
    JSONObjectField,
    StrictSerializer,
    TenantCrudViewSet,
    crud_schema,
    path_text,
    query_bool,
)
from agentplatform.api.schema import ERRORS
from agents import workflows
from agents.models import WorkflowDefinition
from tenancy.models import Tenant
from tenancy.policy import Action

SLUG = OpenApiParameter("slug", OpenApiTypes.STR, OpenApiParameter.PATH)
DEFINITION_EXAMPLE = {
    "input": {
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
    "output": {"type": "object"},
    "steps": [
        {"id": "sum", "tool": "calculator", "arguments": {"expression": "input.expression"}},
        {"id": "answer", "transform": "{result: sum.result, asked: input.expression}"},
    ],
}
REQUEST_EXAMPLE = {
    "slug": "sum-up",
    "name": "Sum up",
    "description": "Computes an expression.",
    "definition": DEFINITION_EXAMPLE,
    "expose_as_tool": False,
    "enabled": True,
}
RESPONSE_EXAMPLE = {
    **REQUEST_EXAMPLE,
    "created_at": "2026-01-01T12:00:00Z",
    "updated_at": "2026-01-01T12:00:00Z",
}
PROBLEMS_EXAMPLE = {
    "error": {
        "code": "invalid",
        "message": "Some fields are invalid.",
        "details": {
            "problems": [{"path": "definition.steps[0].tool", "reason": "no tool named 'sum'"}]
        },
    }
}


def refused(exc: workflows.WorkflowInvalid) -> serializers.ValidationError:
    """The compiler's problems as a 400, each at its path in the request body."""
    problems = [
        {"path": f"definition.{p.path}" if p.path else "definition", "reason": p.reason}
        for p in exc.problems
    ]
    return serializers.ValidationError({"problems": problems})


class WorkflowSerializer(CleanModelSerializer):
    definition = JSONObjectField(
        help_text="The workflow: input (JSON Schema), steps, output (JSON Schema); "
        "docs/workflows.md."
    )

    class Meta:
        model = WorkflowDefinition
        fields = [
            "slug",
            "name",
            "description",
            "definition",
            "expose_as_tool",
            "enabled",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["created_at", "updated_at"]

    def save_with_service(
        self, tenant: Tenant, instance: WorkflowDefinition | None, changes: dict[str, Any]
    ) -> WorkflowDefinition:
        try:
            return workflows.workflow_save(
                tenant=tenant, workflow=instance, changes=changes, actor=self.context.get("actor")
            )
        except workflows.WorkflowInvalid as exc:
            raise refused(exc) from None


class ValidateSerializer(StrictSerializer):
    definition = JSONObjectField()


class CompiledSerializer(serializers.Serializer):
    valid = serializers.BooleanField()
    input_schema = serializers.JSONField()
    output_schema = serializers.JSONField(allow_null=True)
    tools = serializers.ListField(child=serializers.CharField())
    agents = serializers.ListField(child=serializers.CharField())


@extend_schema_view(
    **crud_schema(
        "workflow",
        "workflows",
        WorkflowSerializer,
        lookup=SLUG,
        filters=[OpenApiParameter("enabled", OpenApiTypes.BOOL, description="Only enabled.")],
        request_example=REQUEST_EXAMPLE,
        response_example=RESPONSE_EXAMPLE,
    )
)
class WorkflowViewSet(TenantCrudViewSet):
    """The tenant's declared workflows: typed input, steps (tool, agent, transform,
    parallel, branch) and typed output, compiled when saved."""

    model = WorkflowDefinition
    serializer_class = WorkflowSerializer
    lookup_field = "slug"
    # Compiling writes nothing: whoever may read the configuration may check a document.
    action_policy = {"validate": Action.READ_CONFIG}

    def select(self, **filters: Any) -> models.QuerySet:
        return workflows.workflows_of(tenant=self.tenant, **filters)

    def list_filters(self) -> dict[str, Any]:
        return {"enabled": query_bool(self.request, "enabled")}

    def get_object(self) -> WorkflowDefinition:
        slug = path_text(self.kwargs["slug"], "workflow")
        return workflows.workflow_get(tenant=self.tenant, slug=slug)

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        if not getattr(self, "swagger_fake_view", False):
            context["actor"] = self.actor
        return context

    def delete_with_service(self, instance: WorkflowDefinition) -> None:
        workflows.workflow_delete(tenant=self.tenant, workflow=instance, actor=self.actor)

    @extend_schema(
        summary="Check a workflow document",
        description="Compiles the document against the tenant's tools and agents; saves "
        "nothing. A 400 lists every problem at its path.",
        request=ValidateSerializer,
        responses={200: CompiledSerializer, **ERRORS},
        examples=[
            OpenApiExample("A document", {"definition": DEFINITION_EXAMPLE}, request_only=True),
            OpenApiExample("Problems", PROBLEMS_EXAMPLE, response_only=True, status_codes=["400"]),
        ],
    )
    @action(detail=False, methods=["post"])
    def validate(self, request: Request) -> Response:
        body = ValidateSerializer(data=request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        try:
            compiled = workflows.workflow_compile(
                tenant=self.tenant, definition=body.validated_data["definition"]
            )
        except workflows.WorkflowInvalid as exc:
            raise refused(exc) from None
        return Response(
            {
                "valid": True,
                "input_schema": compiled.input_schema,
                "output_schema": compiled.output_schema,
                "tools": sorted(compiled.references.tools),
                "agents": sorted(compiled.references.agents),
            }
        )
