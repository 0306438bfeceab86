"""`GET`/`PUT /api/v1/config`: the tenant's whole configuration as one document
(docs/configuration-as-code.md). Admins only, both ways: an export shows every tool's URL
and every agent's instructions, and an import changes them all."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import renderers, status
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentplatform.api.errors import error_body
from agentplatform.api.resources import query_bool
from agentplatform.api.schema import ERRORS
from agentplatform.api.tenant import allowed, request_principal, request_tenant
from agents.config_document import config_export, config_import
from agents.runtime.config.loading import MAX_DOCUMENT_BYTES, dump_document
from tenancy.policy import Action


class YAMLRenderer(renderers.BaseRenderer):
    media_type = "application/yaml"
    format = "yaml"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type=None, renderer_context=None) -> bytes:
        return b"" if data is None else dump_document(data, "yaml").encode("utf-8")


class DocumentParser(BaseParser):
    """The body as bytes, whatever its content type: the document loader reads it (safe
    YAML, bounded JSON). At most one byte past the limit is read, so the loader refuses
    a larger body without it being held."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None) -> bytes:
        return b"" if stream is None else stream.read(MAX_DOCUMENT_BYTES + 1)


EXAMPLE = {
    "version": 1,
    "policy": {"require_confirmation_for_writes": False},
    "connections": [{"name": "main", "kind": "anthropic", "secret": "connection:main"}],
    "tools": [
        {
            "name": "weather",
            "description": "Today's weather in a city.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
            "config": {
                "url": "https://api.example.com/weather",
                "arguments": [{"argument": "city", "to": "query"}],
            },
        }
    ],
    "agents": [{"slug": "assistant", "name": "Assistant", "connection": "main"}],
    "crews": [],
}
PLAN_EXAMPLE = {
    "valid": True,
    "applied": False,
    "prune": False,
    "changes": [
        {
            "section": "agents",
            "name": "assistant",
            "action": "update",
            "fields": {"instructions": {"from": "", "to": "Be brief."}},
        }
    ],
    "problems": [],
    "new_secrets": [],
}


class ConfigDocumentView(APIView):
    read_action = Action.CHANGE_CONFIG  # not READ_CONFIG: see the module's docstring
    write_action = Action.CHANGE_CONFIG
    renderer_classes = [renderers.JSONRenderer, YAMLRenderer]
    parser_classes = [DocumentParser]

    def get_permissions(self):
        return [allowed(self.read_action, self.write_action)()]

    @extend_schema(
        summary="Export the configuration document",
        description="The tenant's provider connections, tools, agents and crews as one "
        "document (version 1, schema: docs/config-schema/v1.json). Secrets appear by name "
        "only. JSON by default; YAML with `Accept: application/yaml` or `?format=yaml`. "
        "Skill versions by reference; with `?skill_files=true`, with their files inline.",
        parameters=[
            OpenApiParameter("format", OpenApiTypes.STR, enum=["json", "yaml"], required=False),
            OpenApiParameter("skill_files", OpenApiTypes.BOOL, required=False),
        ],
        responses={
            (200, "application/json"): OpenApiTypes.OBJECT,
            (200, "application/yaml"): OpenApiTypes.OBJECT,
            **ERRORS,
        },
        examples=[OpenApiExample("A document", value=EXAMPLE, response_only=True)],
    )
    def get(self, request: Request) -> Response:
        inline = request.query_params.get("skill_files", "").lower() in ("1", "true", "yes")
        return Response(config_export(tenant=request_tenant(request), skill_files=inline))

    @extend_schema(
        summary="Import a configuration document",
        description="Compiles the document (YAML or JSON, up to 1 MB), diffs it against the "
        "tenant's objects and applies the changes in one transaction. Objects the document "
        "does not name stay, unless `prune=true`. `dry_run=true` applies it and rolls it back: "
        "the diff, or every problem the import would meet, and nothing changed. Applying "
        "the same document again changes nothing. A document with "
        "problems is a 400 listing each one with its path; nothing is changed. A webhook "
        "trigger the import creates gets a new signing secret, in `new_secrets` of this "
        "answer only (never in a document).",
        parameters=[
            OpenApiParameter("dry_run", OpenApiTypes.BOOL, required=False),
            OpenApiParameter("prune", OpenApiTypes.BOOL, required=False),
        ],
        request={"application/json": OpenApiTypes.OBJECT, "application/yaml": OpenApiTypes.STR},
        responses={
            (200, "application/json"): OpenApiTypes.OBJECT,
            (200, "application/yaml"): OpenApiTypes.OBJECT,
            **ERRORS,
        },
        examples=[
            OpenApiExample("A document", value=EXAMPLE, request_only=True),
            OpenApiExample("The plan", value=PLAN_EXAMPLE, response_only=True),
        ],
    )
    def put(self, request: Request) -> Response:
        dry_run = bool(query_bool(request, "dry_run"))
        prune = bool(query_bool(request, "prune"))
        content_type = request.content_type or ""
        format = "json" if "json" in content_type else "yaml" if "yaml" in content_type else None
        body = request.data if isinstance(request.data, bytes) else b""  # no body: DRF's {}
        plan = config_import(
            tenant=request_tenant(request),
            text=body,
            format=format,
            prune=prune,
            dry_run=dry_run,
            by=request_principal(request),
        )
        if not plan.valid:
            problems = [problem.as_dict() for problem in plan.problems]
            body = error_body(
                "invalid", "The document was not applied; see details.problems.",
                {"problems": problems},
            )  # fmt: skip
            return Response(body, status=status.HTTP_400_BAD_REQUEST)
        return Response(plan.as_dict())
