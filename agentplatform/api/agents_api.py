"""Agents, crews and facts (conversations: conversations_api.py)."""

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
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.resources import (
    ID,
    NOT_FOUND_EXAMPLE,
    TenantCrudViewSet,
    TenantViewSet,
    crud_schema,
    path_id,
    path_text,
    query_bool,
    query_int,
    query_text,
)
from agentplatform.api.schema import ERRORS
from agentplatform.api.serializers import (
    AgentSerializer,
    ContextProviderSerializer,
    CrewSerializer,
    FactEditSerializer,
    FactSerializer,
)
from agents import memory, selectors
from agents.models import Agent, Crew, Fact, FactScope
from agents.services import agent_delete, crew_delete
from agents.tool_sources import agent_context_providers
from tenancy.policy import Action

ACTIVE = OpenApiParameter("active", OpenApiTypes.BOOL, description="Only active (or inactive).")
SLUG = OpenApiParameter("slug", OpenApiTypes.STR, OpenApiParameter.PATH)


AGENT_EXAMPLE = {
    "slug": "support",
    "name": "Support",
    "description": "Answers customers' questions.",
    "instructions": "Be brief and friendly. Use the tools to look things up.",
    "provider_connection": None,
    "model": "",
    "temperature": 0.2,
    "max_rounds": 10,
    "use_all_tools": False,
    "tool_names": ["calculator", "current_time"],
    "approval_policy": "flagged",
    "memory": True,
    "memory_scope": "person",
    "memory_retention_days": 90,
    "memory_key_runs": False,
    "results_without_tools": False,
    "verifier_tool": "",
    "kind": "orchestrator",
    "active": True,
}
AGENT_RESPONSE = {
    **AGENT_EXAMPLE,
    "max_tool_calls": 50,
    "max_tokens_per_run": None,
    "compaction_threshold": None,
    "compaction_connection": None,
    "compaction_model": "",
    "tool_tags": [],
    "tool_exclude": [],
    "output_schema": None,
    "remote_url": "",
    "remote_command": "",
    "has_remote_token": False,
    "remote_healthy": None,
    "remote_health_detail": "",
    "remote_health_checked_at": None,
    "version": 1,
    "created_at": "2025-01-01T12:00:00Z",
    "updated_at": "2025-01-01T12:00:00Z",
}


@extend_schema_view(
    **crud_schema(
        "agent",
        "agents",
        AgentSerializer,
        lookup=SLUG,
        filters=[ACTIVE, OpenApiParameter("kind", OpenApiTypes.STR, description="Agent kind.")],
        request_example=AGENT_EXAMPLE,
        response_example=AGENT_RESPONSE,
    )
)
class AgentViewSet(TenantCrudViewSet):
    """The tenant's agents. `remote_token` is write-only (`has_remote_token` says whether
    one is stored)."""

    model = Agent
    serializer_class = AgentSerializer
    lookup_field = "slug"

    def select(self, **filters: Any) -> models.QuerySet:
        return selectors.agents_listed(tenant=self.tenant, **filters)

    def list_filters(self) -> dict[str, Any]:
        return {
            "active": query_bool(self.request, "active"),
            "kind": query_text(self.request, "kind"),
        }

    def get_object(self) -> Agent:
        slug = path_text(self.kwargs["slug"])
        return selectors.agent_configured(tenant=self.tenant, slug=slug)

    def delete_with_service(self, instance: Agent) -> None:
        agent_delete(tenant=self.tenant, agent=instance)

    @extend_schema(
        summary="The agent's context providers",
        description="The context providers behind the agent's effective tools: each MCP "
        "server connection whose tools it gets and each knowledge base it searches, with "
        "their capability domains, health and the tools they contribute. One page.",
        parameters=[SLUG],
        responses={200: ContextProviderSerializer(many=True), **ERRORS},
        examples=[
            OpenApiExample(
                "An MCP server and a knowledge base",
                [
                    {
                        "kind": "mcp",
                        "id": 3,
                        "name": "crm",
                        "domains": ["people", "organizations"],
                        "health": {
                            "status": "ok",
                            "reason": "",
                            "checked_at": "2025-01-01T12:00:00Z",
                        },
                        "tools": ["crm__find_contact"],
                    },
                    {
                        "kind": "knowledge_base",
                        "id": 7,
                        "name": "Handbook",
                        "domains": ["knowledge", "documents"],
                        "health": {"status": "unknown", "reason": "", "checked_at": None},
                        "tools": ["knowledge_search"],
                    },
                ],
                response_only=True,
            )
        ],
    )
    @action(detail=True, methods=["get"], url_path="context-providers", pagination_class=None)
    def context_providers(self, request: Request, slug: str) -> Response:
        providers = agent_context_providers(self.get_object())
        return Response(ContextProviderSerializer([p.as_json() for p in providers], many=True).data)


CREW_EXAMPLE = {
    "slug": "research",
    "name": "Research crew",
    "description": "Finds, then writes.",
    "mode": "sequential",
    "manager": None,
    "members": ["researcher", "writer"],
    "max_delegations": 10,
    "max_depth": 3,
    "token_budget": None,
    "active": True,
}
CREW_RESPONSE = {
    **CREW_EXAMPLE,
    "compaction_threshold": None,
    "compaction_connection": None,
    "compaction_model": "",
    "created_at": "2025-01-01T12:00:00Z",
    "updated_at": "2025-01-01T12:00:00Z",
}


@extend_schema_view(
    **crud_schema(
        "crew",
        "crews",
        CrewSerializer,
        lookup=SLUG,
        filters=[ACTIVE, OpenApiParameter("mode", OpenApiTypes.STR, description="Crew mode.")],
        request_example=CREW_EXAMPLE,
        response_example=CREW_RESPONSE,
    )
)
class CrewViewSet(TenantCrudViewSet):
    """The tenant's crews; `members` is the ordered list of member agents' slugs."""

    model = Crew
    serializer_class = CrewSerializer
    lookup_field = "slug"

    def select(self, **filters: Any) -> models.QuerySet:
        return selectors.crews_of(tenant=self.tenant, **filters)

    def list_filters(self) -> dict[str, Any]:
        return {
            "active": query_bool(self.request, "active"),
            "mode": query_text(self.request, "mode"),
        }

    def get_object(self) -> Crew:
        slug = path_text(self.kwargs["slug"])
        return selectors.crew_shown(tenant=self.tenant, slug=slug)

    def delete_with_service(self, instance: Crew) -> None:
        crew_delete(tenant=self.tenant, crew=instance)


# -- facts ---------------------------------------------------------------------------------
FACT_EXAMPLE = {
    "id": 3,
    "scope": "person",
    "user": 5,
    "agent": "support",
    "api_key": None,
    "text": "Prefers answers in French.",
    "source_run": 12,
    "created_at": "2025-01-01T12:00:00Z",
    "expires_at": None,
    "edited_by": None,
    "edited_at": None,
}
SCOPE = OpenApiParameter(
    "scope", OpenApiTypes.STR, enum=[s.value for s in FactScope], description="Only this scope."
)


@extend_schema_view(
    list=extend_schema(
        summary="List remembered facts",
        description="A person sees what agents remember about them; an admin also the shared "
        "facts (agent and tenant scope) and the API keys'. An API key sees its own key-scope "
        "facts; one with the admin scope every fact (`?user=<id>`: one person's). Another "
        "person's fact is never listed (and answers 404).",
        parameters=[
            OpenApiParameter("user", OpenApiTypes.INT, description="Only this person's."),
            SCOPE,
        ],
        responses={200: FactSerializer(many=True), **ERRORS},
        examples=[OpenApiExample("A fact", FACT_EXAMPLE, response_only=True)],
    ),
    retrieve=extend_schema(
        summary="Get a fact",
        parameters=[ID],
        responses={200: FactSerializer, **ERRORS},
        examples=[OpenApiExample("A fact", FACT_EXAMPLE, response_only=True)],
    ),
    partial_update=extend_schema(
        summary="Edit a fact's text",
        description="Its text only; it is embedded again, so recall finds it by its new "
        "meaning. Audited (never the text).",
        parameters=[ID],
        request=FactEditSerializer,
        responses={200: FactSerializer, **ERRORS},
        examples=[
            OpenApiExample("New text", {"text": "Prefers answers in German."}, request_only=True)
        ],
    ),
    destroy=extend_schema(
        summary="Forget a fact",
        description="No later run recalls it. Audited.",
        parameters=[ID],
        responses={204: None, **ERRORS},
        examples=[NOT_FOUND_EXAMPLE],
    ),
)
class FactViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    TenantViewSet,
):
    """What agents remembered (agents.memory): the rule of who sees which fact is
    `facts_visible`'s; editing and forgetting need `write_data`."""

    serializer_class = FactSerializer
    read_action = Action.READ_DATA
    write_action = Action.WRITE_DATA
    http_method_names = ["get", "patch", "delete", "head", "options"]

    def get_queryset(self) -> models.QuerySet:
        if getattr(self, "swagger_fake_view", False):
            return Fact.objects.none()
        if self.action != "list":
            return memory.facts_visible(principal=self.principal)
        scope = query_text(self.request, "scope")
        if scope is not None and scope not in FactScope.values:
            raise ValidationError({"scope": f"One of {', '.join(FactScope.values)}."})
        return memory.facts_visible(
            principal=self.principal, user_id=query_int(self.request, "user"), scope=scope
        )

    def get_object(self) -> Fact:
        fact_id = path_id(self.kwargs["pk"], "fact")
        return memory.fact_visible(principal=self.principal, fact_id=fact_id)

    def partial_update(self, request: Request, *args, **kwargs) -> Response:
        fact = self.get_object()
        given = FactEditSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        fact = memory.fact_edit(principal=self.principal, fact=fact, text=given.data["text"])
        return Response(FactSerializer(fact).data)

    def destroy(self, request: Request, *args, **kwargs) -> Response:
        memory.fact_delete(principal=self.principal, fact=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
