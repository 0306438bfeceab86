"""`/api/v1/tools/import/preview` and `/api/v1/tools/import`: HTTP tools from an OpenAPI
3.0/3.1 or Swagger 2.0 document (tools.imports). Two endpoints rather than a `dry_run`
switch: the preview answers what the model would see and a diff per tool, the import
answers what was saved; both need the permission to change tools (CHANGE_CONFIG). A
document refused, a choice refused or a tool the configuration refuses is a 400 naming
where (`details.path`), and nothing is saved."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentplatform.api.resources import PARSERS, StrictSerializer
from agentplatform.api.schema import ERRORS
from agentplatform.api.serializers import SecretField
from agentplatform.api.tenant import TenantPolicyView
from tools.imports import ImportRefused, openapi_import, openapi_preview

MAX_DOCUMENT_CHARS = 2_000_000
PETSTORE = """openapi: 3.0.0
info: {title: Pets, version: "1"}
servers: [{url: "https://pets.example.com/v1"}]
paths:
  /pets/{petId}:
    get:
      operationId: getPet
      summary: Find a pet by id
      parameters: [{name: petId, in: path, required: true, schema: {type: integer}}]
      responses: {"200": {description: ok}}
      security: [{api_key: []}]
components:
  securitySchemes: {api_key: {type: apiKey, in: header, name: X-API-Key}}
"""


class DocumentSource(StrictSerializer):
    document = serializers.CharField(
        required=False,
        trim_whitespace=False,
        max_length=MAX_DOCUMENT_CHARS,
        help_text="The document as JSON or YAML text (or give `url`).",
    )
    url = serializers.CharField(
        required=False,
        max_length=2000,
        help_text="Where to fetch the document (through the egress guard: private addresses "
        "are refused); relative server URLs are resolved against it.",
    )
    base_url = serializers.CharField(
        required=False,
        max_length=2000,
        help_text="The API's base URL, replacing the document's servers.",
    )

    def validate(self, attrs):
        if ("document" in attrs) == ("url" in attrs):
            raise serializers.ValidationError({"document": ["Give `document` or `url`."]})
        return attrs


class ImportRequest(DocumentSource):
    operations = serializers.ListField(
        child=serializers.CharField(max_length=300),
        max_length=500,
        help_text="The operations to import: operationIds, `GET /path` sources or tool names.",
    )
    secret = SecretField(help_text="The credential of every chosen tool that sends one.")
    username = serializers.CharField(
        required=False, max_length=200, help_text="Basic authentication's username."
    )


class PreviewedToolSerializer(serializers.Serializer):
    operation_id = serializers.CharField()
    source = serializers.CharField(help_text='The operation: "GET /pets/{petId}".')
    name = serializers.CharField()
    description = serializers.CharField()
    input_schema = serializers.JSONField(help_text="What the model will fill.")
    output_schema = serializers.JSONField(allow_null=True)
    config = serializers.JSONField(help_text="The HTTP request mapping.")
    sends_credential = serializers.BooleanField()
    notes = serializers.ListField(child=serializers.CharField())
    status = serializers.ChoiceField(choices=["new", "changed", "unchanged"])
    changes = serializers.ListField(
        child=serializers.CharField(), help_text="The fields an import would change."
    )
    problems = serializers.ListField(
        child=serializers.CharField(), help_text="Why saving this tool would be refused."
    )
    replaces_builtin = serializers.BooleanField()


class SkippedSerializer(serializers.Serializer):
    source = serializers.CharField()
    operation_id = serializers.CharField()
    reason = serializers.CharField()


class PreviewSerializer(serializers.Serializer):
    title = serializers.CharField()
    format = serializers.CharField()
    base_url = serializers.CharField()
    tools = PreviewedToolSerializer(many=True)
    skipped = SkippedSerializer(many=True)
    notes = serializers.ListField(child=serializers.CharField())


class SavedSerializer(serializers.Serializer):
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=["created", "updated"])
    version = serializers.IntegerField()


class ImportedSerializer(serializers.Serializer):
    tools = SavedSerializer(many=True)


PREVIEW_EXAMPLE = {
    "title": "Pets",
    "format": "OpenAPI 3.0.0",
    "base_url": "https://pets.example.com/v1",
    "tools": [
        {
            "operation_id": "getPet",
            "source": "GET /pets/{petId}",
            "name": "getPet",
            "description": "Find a pet by id",
            "input_schema": {
                "type": "object",
                "properties": {"petId": {"type": "integer"}},
                "required": ["petId"],
            },
            "output_schema": None,
            "config": {
                "method": "GET",
                "url": "https://pets.example.com/v1/pets/{petId}",
                "arguments": [{"argument": "petId", "to": "path"}],
                "auth": {"type": "header", "header": "X-API-Key"},
            },
            "sends_credential": True,
            "notes": [],
            "status": "new",
            "changes": [],
            "problems": [],
            "replaces_builtin": False,
        }
    ],
    "skipped": [],
    "notes": [],
}
REFUSED_EXAMPLE = OpenApiExample(
    "A document refused",
    {
        "error": {
            "code": "invalid",
            "message": "Some fields are invalid.",
            "details": {
                "document": [
                    "$ref 'https://example.com/pet.json' points outside the document; only "
                    "references within it (#/...) are followed. Bundle the document first."
                ],
                "path": "paths./pets.get.requestBody",
            },
        }
    },
    response_only=True,
    status_codes=["400"],
)


class _ImportView(TenantPolicyView, APIView):
    parser_classes = PARSERS

    def source(self, data) -> dict:
        return {
            "text": data.get("document"),
            "url": data.get("url"),
            "base_url": data.get("base_url"),
        }


@extend_schema(
    summary="Preview tools from an OpenAPI document",
    description="Reads an OpenAPI 3.0/3.1 or Swagger 2.0 document (text, or fetched from "
    "`url`) and answers, per operation, the HTTP tool it makes: what the model will see "
    "(name, description, input schema), the request mapping, notes on what could not be "
    "carried over, and against the tenant's tool of the same name `new`, `changed` (with "
    "the fields) or `unchanged`. Operations HTTP tools cannot send are `skipped`, with why. "
    "Saves nothing. A document refused (too large, too deep, references outside it or "
    "expanding without bound, more than 500 operations) is a 400 naming where.",
    request=DocumentSource,
    responses={200: PreviewSerializer, **ERRORS},
    examples=[
        OpenApiExample("A document as text", {"document": PETSTORE}, request_only=True),
        OpenApiExample(
            "A document by URL",
            {"url": "https://pets.example.com/openapi.json"},
            request_only=True,
        ),
        OpenApiExample("The tools it makes", PREVIEW_EXAMPLE, response_only=True),
        REFUSED_EXAMPLE,
    ],
)
class ToolImportPreview(_ImportView):
    def post(self, request: Request) -> Response:
        serializer = DocumentSource(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            preview = openapi_preview(tenant=self.tenant, **self.source(serializer.validated_data))
        except ImportRefused as exc:
            raise _bad_request(exc) from None
        return Response(PreviewSerializer(preview.as_dict()).data)


@extend_schema(
    summary="Import tools from an OpenAPI document",
    description="Saves the tools of the chosen `operations` (as the preview shows them) in "
    "one transaction: all or none. `secret` is the credential of every chosen tool that "
    "sends one (a tool of that name keeps its stored secret when none is given). A tool "
    "of the same name is updated: its request mapping's other settings (model_view, "
    "retries) stay. Each save is checked by the configuration compiler and recorded in the "
    "audit log. Writes keep the effect their method implies, so the tenant's confirmation "
    "rule applies to them.",
    request=ImportRequest,
    responses={201: ImportedSerializer, **ERRORS},
    examples=[
        OpenApiExample(
            "Two operations",
            {"document": PETSTORE, "operations": ["getPet"], "secret": "the-api-key"},
            request_only=True,
        ),
        OpenApiExample(
            "Saved",
            {"tools": [{"name": "getPet", "status": "created", "version": 1}]},
            response_only=True,
        ),
        REFUSED_EXAMPLE,
    ],
)
class ToolImport(_ImportView):
    def post(self, request: Request) -> Response:
        serializer = ImportRequest(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            saved = openapi_import(
                tenant=self.tenant,
                operations=data["operations"],
                secret=data.get("secret"),
                username=data.get("username"),
                **self.source(data),
            )
        except ImportRefused as exc:
            raise _bad_request(exc) from None
        tools = [
            {
                "name": d.name,
                "status": "created" if d.version == 1 else "updated",
                "version": d.version,
            }
            for d in saved
        ]
        return Response(ImportedSerializer({"tools": tools}).data, status=status.HTTP_201_CREATED)


def _bad_request(exc: ImportRefused) -> exceptions.ValidationError:
    """A 400 whose details name the request's field and, within the document, the path."""
    path = exc.path or ""
    head = path.split(".", 1)[0].split("[", 1)[0]
    field = head if head in ("url", "operations", "secret", "base_url") else "document"
    if head == "tools":
        field = "operations"
    return exceptions.ValidationError({field: [exc.message], "path": path})
