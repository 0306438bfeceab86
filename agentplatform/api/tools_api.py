"""Tools: the tenant's effective registry (built-ins, workflows, its own definitions and its
MCP servers' tools), the definitions behind it, and executing one tool directly."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    extend_schema,
    extend_schema_serializer,
    extend_schema_view,
)
from rest_framework import exceptions, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.resources import (
    NOT_FOUND_EXAMPLE,
    TenantViewSet,
    path_text,
    query_bool,
    query_text,
)
from agentplatform.api.schema import ERRORS, error
from agentplatform.api.serializers import (
    TOOL_KINDS,
    ToolDefinitionWriteSerializer,
    ToolExecuteSerializer,
    ToolHealthSerializer,
    ToolResultSerializer,
    ToolSerializer,
)
from agents.runs import tool_run
from agents.selftests import health_by_name, selftest_tools
from tenancy.policy import Action
from tools import selectors
from tools.definitions import build_tool
from tools.loader import (
    TenantTools,
    circuit_store,
    egress_client,
    registry_for_tenant,
    tenant_tools,
)
from tools.mcp_source import MCP_SERVER
from tools.models import ToolDefinition, ToolHealth
from tools.runtime.tool import Capability, Tool
from tools.services import tool_definition_delete
from tools.tool_sources import ToolOrigin

NAME = OpenApiParameter("name", OpenApiTypes.STR, OpenApiParameter.PATH, description="Tool name.")
CONFLICT = {409: error("A definition with this name was created meanwhile.")}

TOOL_EXAMPLE = {
    "name": "calculator",
    "kind": "builtin",
    "description": "Evaluate an arithmetic expression exactly.",
    "input_schema": {
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
    "output_schema": None,
    "tags": ["builtin", "math"],
    "examples": [{"expression": "(1 + 2) * sqrt(16)"}],
    "capability": {
        "effect": "none",
        "idempotent": True,
        "requires_approval": False,
        "timeout_s": 5.0,
        "rate_limit_per_minute": None,
    },
    "enabled": True,
    "definition": None,
    "plugin": None,
    "provider": None,
}
HTTP_TOOL_REQUEST = {
    "name": "weather",
    "kind": "http",
    "description": "Today's weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
    "config": {
        "method": "GET",
        "url": "https://api.example.com/weather",
        "arguments": [{"argument": "city", "to": "query"}],
        "auth": {"type": "bearer"},
    },
    "secret": "the-service-token",
    "tags": ["weather"],
    "rate_limit_per_minute": 60,
}
HTTP_TOOL_RESPONSE = {
    **{
        k: v
        for k, v in HTTP_TOOL_REQUEST.items()
        if k not in ("secret", "config", "rate_limit_per_minute")
    },
    "output_schema": None,
    "examples": [],
    "capability": {
        "effect": "read",
        "idempotent": True,
        "requires_approval": False,
        "timeout_s": 30.0,
        "rate_limit_per_minute": 60,
    },
    "enabled": True,
    "definition": {
        "id": 9,
        "kind": "http",
        "config": HTTP_TOOL_REQUEST["config"],
        "depends_on": {},
        "examples": [],
        "effect": "",
        "idempotent": None,
        "has_secret": True,
        "enabled": True,
        "version": 1,
        "created_at": "2025-01-01T12:00:00Z",
        "updated_at": "2025-01-01T12:00:00Z",
    },
    "plugin": None,
    "provider": None,
}


@extend_schema_serializer(many=False, component_name="ToolList")  # `list` answers one object
class ToolPage(serializers.Serializer):
    next = serializers.CharField(allow_null=True, help_text="Always null: one page.")
    previous = serializers.CharField(allow_null=True)
    results = ToolSerializer(many=True)


def tool_origin(
    name: str, definition: ToolDefinition | None, toolbox: TenantTools | None
) -> ToolOrigin:
    """Where the tool comes from, as recorded where it was registered (the tenant's
    registry); a definition the registry left out is of its own kind."""
    if toolbox is not None and name in toolbox.origins:
        return toolbox.origins[name]
    return ToolOrigin(definition.kind if definition is not None else "builtin")


def mcp_providers(tenant_id: int) -> dict[str, dict[str, Any]]:
    """Each MCP connection's tag (`context:<name>`) -> the tool's `provider`. One query."""
    return {
        f"context:{c.name}": {"kind": "mcp", "id": c.pk, "name": c.name, "domains": c.domains}
        for c in selectors.mcp_connection_names(tenant_id=tenant_id)
    }


def tool_provider(item: Tool, source: str, providers: dict[str, dict[str, Any]]):
    if source != MCP_SERVER:
        return None
    return next((providers[tag] for tag in sorted(item.tags) if tag in providers), None)


def definition_info(definition: ToolDefinition) -> dict[str, Any]:
    return {
        "id": definition.pk,
        "kind": definition.kind,
        "config": definition.config,
        "depends_on": definition.depends_on,
        "examples": definition.examples,
        "effect": definition.effect,
        "idempotent": definition.idempotent,
        "has_secret": bool(definition.secret),
        "enabled": definition.enabled,
        "version": definition.version,
        "created_at": definition.created_at,
        "updated_at": definition.updated_at,
    }


def tool_entry(
    item: Tool | None,
    definition: ToolDefinition | None,
    toolbox: TenantTools | None = None,
    providers: dict[str, dict[str, Any]] | None = None,
    health: ToolHealth | None = None,
) -> dict[str, Any]:
    """One tool as the API shows it. `item` None: a definition the registry left out
    (disabled, or invalid since it was saved); its own fields describe it. `toolbox` says
    where the registry's tools come from; `providers` (from `mcp_providers`) describes
    the MCP connection an MCP tool comes from."""
    source = toolbox.sources.get(item.name, "") if (toolbox and item is not None) else ""
    if item is None and definition is not None:
        item = _built(definition)
    origin = tool_origin(item.name if item else definition.name, definition, toolbox)
    if item is not None:
        capability = asdict(item.capability)
        entry = {
            "name": item.name,
            "kind": origin.kind,
            "description": item.description,
            "input_schema": item.input_schema,
            "output_schema": item.output_schema,
            "tags": sorted(item.tags),
            "examples": list(item.examples),
            "selftests": [example.to_dict() for example in item.selftests],
        }
    else:  # its stored values as they are: a Capability may refuse them (changed past validation)
        capability = {
            **asdict(Capability()),
            "requires_approval": definition.requires_approval,
            "timeout_s": definition.timeout_s,
            "rate_limit_per_minute": definition.rate_limit_per_minute,
        }
        entry = {
            "name": definition.name,
            "kind": definition.kind,
            "description": definition.description,
            "input_schema": definition.input_schema,
            "output_schema": definition.output_schema,
            "tags": sorted(definition.tags),
            "examples": [],
            "selftests": [],
        }
    entry["capability"] = {**capability, "effect": capability["effect"].value}
    entry["enabled"] = definition.enabled if definition is not None else True
    entry["definition"] = definition_info(definition) if definition is not None else None
    entry["plugin"] = None
    if origin.kind == "plugin":
        entry["plugin"] = {"name": origin.plugin, "package": origin.package}
    entry["provider"] = tool_provider(item, source, providers or {}) if item else None
    entry["health"] = None
    if health is not None:
        entry["health"] = {
            "status": health.status,
            "checked_at": health.checked_at,
            "results": health.results,
        }
    return entry


def _built(definition: ToolDefinition) -> Tool | None:
    """The Tool a (disabled) definition would make; builds no network connection."""
    try:
        return build_tool(
            definition,
            egress=egress_client(tuple(settings.EGRESS_ALLOWLIST)),
            circuit_store=circuit_store(settings.REDIS_URL),
        )
    except (DjangoValidationError, ValueError):
        return None


@extend_schema_view(
    list=extend_schema(
        summary="List the tenant's tools",
        description="The effective registry the tenant's agents choose from: built-ins, "
        "installed plug-ins' tools, the tenant's own definitions (which replace a built-in of "
        "the same name) and its MCP servers' tools, each of the kind recorded where it was "
        "registered. `?enabled=false` lists disabled definitions instead. One page.",
        parameters=[
            OpenApiParameter("kind", OpenApiTypes.STR, enum=TOOL_KINDS, required=False),
            OpenApiParameter("tag", OpenApiTypes.STR, description="Only tools with this tag."),
            OpenApiParameter("enabled", OpenApiTypes.BOOL, description="Default: true."),
        ],
        responses={200: ToolPage, **ERRORS},
        examples=[
            OpenApiExample(
                "Tools",
                {"next": None, "previous": None, "results": [TOOL_EXAMPLE]},
                response_only=True,
            )
        ],
    ),
    create=extend_schema(
        summary="Define a tool",
        description='An HTTP tool, or (kind `builtin`, config `{"builtin": name}`) the '
        "tenant's variant of a built-in. `secret` is write-only.",
        request=ToolDefinitionWriteSerializer,
        responses={201: ToolSerializer, **ERRORS, **CONFLICT},
        examples=[
            OpenApiExample("An HTTP tool", HTTP_TOOL_REQUEST, request_only=True),
            OpenApiExample("An HTTP tool", HTTP_TOOL_RESPONSE, response_only=True),
        ],
    ),
    retrieve=extend_schema(
        summary="Get a tool",
        parameters=[NAME],
        responses={200: ToolSerializer, **ERRORS},
        examples=[OpenApiExample("A built-in", TOOL_EXAMPLE, response_only=True)],
    ),
    update=extend_schema(
        summary="Replace a tool definition",
        parameters=[NAME],
        request=ToolDefinitionWriteSerializer,
        responses={200: ToolSerializer, **ERRORS, **CONFLICT},
        examples=[
            OpenApiExample("An HTTP tool", HTTP_TOOL_REQUEST, request_only=True),
            OpenApiExample("An HTTP tool", HTTP_TOOL_RESPONSE, response_only=True),
        ],
    ),
    partial_update=extend_schema(
        summary="Change some fields of a tool definition",
        parameters=[NAME],
        request=ToolDefinitionWriteSerializer,
        responses={200: ToolSerializer, **ERRORS, **CONFLICT},
        examples=[
            OpenApiExample("Disable it", {"enabled": False}, request_only=True),
            OpenApiExample("An HTTP tool", HTTP_TOOL_RESPONSE, response_only=True),
        ],
    ),
    destroy=extend_schema(
        summary="Delete a tool definition",
        description="A built-in the definition replaced or hid comes back.",
        parameters=[NAME],
        responses={204: None, **ERRORS},
        examples=[NOT_FOUND_EXAMPLE],
    ),
)
class ToolViewSet(TenantViewSet):
    """Reads show the registry; writes change the tenant's ToolDefinition of that name."""

    lookup_field = "name"
    queryset = ToolDefinition.objects.none()  # for the schema's path parameter types only
    serializer_class = ToolDefinitionWriteSerializer
    pagination_class = None

    action_policy = {"execute": Action.EXECUTE_TOOL, "selftest": Action.EXECUTE_TOOL}

    def definitions(self) -> dict[str, ToolDefinition]:
        return selectors.definitions_of(tenant=self.tenant)

    def definition(self) -> ToolDefinition:
        name = path_text(self.kwargs["name"], "tool definition")
        return selectors.definition_get(tenant=self.tenant, name=name)

    def entry(self, name: str) -> dict[str, Any]:
        toolbox = tenant_tools(self.tenant)
        registry = toolbox.registry
        definition = selectors.definition_named(tenant=self.tenant, name=name)
        item = registry.get(name) if registry.has(name) else None
        if item is None and definition is None:
            raise Http404("No such tool.")
        health = selectors.tool_health(tenant=self.tenant, name=name)
        if item is None or (definition is not None and not definition.enabled):
            return tool_entry(None, definition, health=health)
        mcp = toolbox.sources.get(name) == MCP_SERVER
        providers = mcp_providers(self.tenant.pk) if mcp else {}
        return tool_entry(item, definition, toolbox, providers, health)

    def list(self, request: Request) -> Response:
        kind = query_text(request, "kind")
        tag = query_text(request, "tag")
        enabled = query_bool(request, "enabled")
        definitions = self.definitions()
        if enabled is False:
            entries = [tool_entry(None, d) for d in definitions.values() if not d.enabled]
        else:
            toolbox = tenant_tools(self.tenant)
            providers = mcp_providers(self.tenant.pk)
            healths = health_by_name(self.tenant)
            entries = [
                tool_entry(
                    item, definitions.get(item.name), toolbox, providers, healths.get(item.name)
                )
                for item in toolbox.registry
            ]
        entries = [
            entry
            for entry in sorted(entries, key=lambda e: e["name"])
            if (kind is None or entry["kind"] == kind) and (tag is None or tag in entry["tags"])
        ]
        results = ToolSerializer(entries, many=True).data
        return Response({"next": None, "previous": None, "results": results})

    def retrieve(self, request: Request, name: str) -> Response:
        name = path_text(name, "tool")
        return Response(ToolSerializer(self.entry(name)).data)

    def create(self, request: Request) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        definition = serializer.save(tenant=self.tenant)
        return Response(ToolSerializer(self.entry(definition.name)).data, status=201)

    def update(self, request: Request, name: str, partial: bool = False) -> Response:
        definition = self.definition()
        serializer = self.get_serializer(definition, data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        definition = serializer.save()
        return Response(ToolSerializer(self.entry(definition.name)).data)

    def partial_update(self, request: Request, name: str) -> Response:
        return self.update(request, name, partial=True)

    def destroy(self, request: Request, name: str) -> Response:
        tool_definition_delete(tenant=self.tenant, definition=self.definition())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Execute a tool",
        description="Runs one tool of the registry now, with the arguments given (validated "
        "against its input_schema), and records the call as a run (`run_id`). Tool failures "
        "and invalid arguments come back in `error` with status 200. A tool that requires "
        "approval is not executed: 202 with status `awaiting_approval` and `decide_at` (and, "
        "for an HTTP tool, `prepared_request`: the exact request approving sends); once "
        "approved (`POST /runs/{id}/approvals/{approval_id}`) a worker executes it and the "
        "run holds the result. Needs the `run` scope.",
        parameters=[NAME],
        request=ToolExecuteSerializer,
        responses={200: ToolResultSerializer, 202: ToolResultSerializer, **ERRORS},
        examples=[
            OpenApiExample("Arithmetic", {"arguments": {"expression": "6 * 7"}}, request_only=True),
            OpenApiExample(
                "A result",
                {
                    "call_id": "call_3f2a9c1d0b7e",
                    "name": "calculator",
                    "result": {"result": 42},
                    "error": None,
                    "latency_ms": 0.4,
                    "run_id": 1234,
                    "status": "succeeded",
                    "decide_at": "",
                    "prepared_request": None,
                },
                response_only=True,
            ),
        ],
    )
    @action(detail=True, methods=["post"])
    def execute(self, request: Request, name: str) -> Response:
        name = path_text(name, "tool")
        if not registry_for_tenant(self.tenant).has(name):
            raise Http404("No such tool.")
        serializer = ToolExecuteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        user = self.actor
        outcome = tool_run(
            tenant=self.tenant,
            name=name,
            arguments=serializer.validated_data["arguments"],
            api_key=user if self.is_api_key else None,
            user=None if self.is_api_key else user,
        )
        data = ToolResultSerializer(
            {
                "call_id": outcome.call_id,
                "name": name,
                "result": outcome.result,
                "error": outcome.error,
                "latency_ms": round(outcome.latency_ms, 3),
                "run_id": outcome.run_id,
                "status": outcome.status,
                "decide_at": outcome.decide_at,
                "prepared_request": outcome.prepared_request,
            }
        ).data
        parked = outcome.status == "awaiting_approval"
        return Response(data, status=status.HTTP_202_ACCEPTED if parked else status.HTTP_200_OK)

    @extend_schema(
        summary="Run a tool's self-tests",
        description="Calls each example the tool declares (`selftests`) now, as a direct call "
        "of the caller (each recorded as a run: `run_id`), and checks its result against the "
        "example's expectation; records and returns the tool's health. An example of a tool "
        "that writes or needs approval runs only when marked `safe_to_run` (else it is "
        "`skipped`); one of a tool that needs approval is `skipped` even then, since nobody "
        "can approve it. A tool without examples is a 400; a key limited to other tools, a "
        "403. Needs the `run` scope.",
        parameters=[NAME],
        request=None,
        responses={200: ToolHealthSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "Passing",
                {
                    "status": "passing",
                    "checked_at": "2026-01-01T12:00:00Z",
                    "results": [
                        {"name": "example 1", "status": "passed", "detail": "", "latency_ms": 0.3}
                    ],
                },
                response_only=True,
            )
        ],
    )
    @action(detail=True, methods=["post"])
    def selftest(self, request: Request, name: str) -> Response:
        name = path_text(name, "tool")
        registry = registry_for_tenant(self.tenant)
        if not registry.has(name):
            raise Http404("No such tool.")
        if not registry.get(name).selftests:
            raise exceptions.ValidationError(
                {"examples": ["This tool declares no examples with expectations to test."]}
            )
        [health] = selftest_tools(self.tenant, [name], by=self.actor)
        shown = {"status": health.status, "checked_at": health.checked_at}
        return Response(ToolHealthSerializer({**shown, "results": health.results}).data)
