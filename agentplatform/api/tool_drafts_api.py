"""Tool drafts before they are saved (issue #40): `POST /api/v1/tools/import/curl` makes one
HTTP tool draft from a pasted curl command (the credential it carried is never echoed: only
whether one was found), and `POST /api/v1/tools/try` tries an unsaved tool once — the dry
call, through the tool-call step and the egress guard like any call (`agents.runs.dry_call`).
Both need the right to change the tenant's tools, as writing `/tools` does."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentplatform.api.resources import NOT_FOUND_EXAMPLE, PARSERS
from agentplatform.api.schema import ERRORS
from agentplatform.api.serializers import ToolDefinitionWriteSerializer
from agentplatform.api.tenant import TenantPolicyView, request_user_or_key
from agents.runs import dry_call
from tenancy.policy import Action
from tools import selectors
from tools.imports import MAX_CURL_CHARS, ImportRefused, curl_import

BAD_REQUEST_EXAMPLE = OpenApiExample(
    "Refused",
    {
        "error": {
            "code": "invalid",
            "message": "Invalid input.",
            "details": {"command": ["Shell operators (;, &&, |, >, $(...)) are not part of a "
                                    "request: paste one curl command (quote a URL that holds &)."]},
        }
    },
    response_only=True,
    status_codes=["400"],
)  # fmt: skip


class CurlImportRequest(serializers.Serializer):
    command = serializers.CharField(
        max_length=MAX_CURL_CHARS, trim_whitespace=False, help_text="One curl command."
    )
    marks = serializers.DictField(
        child=serializers.JSONField(),
        required=False,
        help_text='The values that become arguments: {"query.city": {"name": "city", "type": '
        '"string", "description": "..."}} (or just the name); places as `places` lists them '
        '("path.42", "query.city", "header.X-Region", "body.model"). The rest stay fixed.',
    )
    name = serializers.CharField(max_length=64, required=False)
    description = serializers.CharField(max_length=4000, required=False)


class CurlPlaceSerializer(serializers.Serializer):
    place = serializers.CharField()
    value = serializers.JSONField()


class CurlToolDraftSerializer(serializers.Serializer):
    name = serializers.CharField()
    kind = serializers.CharField()
    description = serializers.CharField()
    input_schema = serializers.JSONField()
    output_schema = serializers.JSONField(allow_null=True)
    config = serializers.JSONField(help_text="The HTTP tool's config; `auth` without the secret.")
    effect = serializers.CharField(allow_blank=True)


class CurlImportResponse(serializers.Serializer):
    draft = CurlToolDraftSerializer(help_text="`POST /api/v1/tools`'s fields, without the secret.")
    source = serializers.CharField()
    notes = serializers.ListField(child=serializers.CharField())
    secret_found = serializers.BooleanField(
        help_text="The command carried a credential (never shown): send it as `secret` when "
        "saving, or give the tool's secret yourself."
    )
    places = CurlPlaceSerializer(many=True, help_text="Every value that can be marked.")


class ToolTryRequest(serializers.Serializer):
    fields = serializers.JSONField(help_text="The unsaved tool: `POST /api/v1/tools`'s fields.")
    secret = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, trim_whitespace=False,
        max_length=10_000,
        help_text='The tool\'s credential for this try; "": none (a tool with `auth` then '
        "needs one: 400); omitted or null with `tool`: the saved one is used.",
    )  # fmt: skip
    arguments = serializers.JSONField(required=False, help_text="The model's arguments.")
    tool = serializers.CharField(
        required=False, max_length=64, help_text="The saved tool these fields change, if any."
    )
    send = serializers.BooleanField(
        default=True, help_text="false: only show the exact request, send nothing."
    )


class DryCallSchemaCheckSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    problems = serializers.ListField(child=serializers.CharField())


class ToolTryResponse(serializers.Serializer):
    request = serializers.CharField(help_text="The exact request, its credential masked (***).")
    sent = serializers.BooleanField(
        help_text="The call was made (recorded as a run); false: only prepared, or refused first."
    )
    status = serializers.IntegerField(allow_null=True, help_text="The service's HTTP status.")
    answer = serializers.CharField(allow_blank=True, help_text="Its answer (at most 20,000 chars).")
    answer_truncated = serializers.BooleanField()
    model_view = serializers.JSONField(allow_null=True, help_text="What the model would read.")
    schema_check = DryCallSchemaCheckSerializer(allow_null=True, help_text="Against output_schema.")
    error = serializers.CharField(allow_null=True, help_text="Why the call failed.")
    run_id = serializers.IntegerField(allow_null=True, help_text="The run recording the call.")


GITHUB_CURL = (
    'curl -H "Accept: application/vnd.github+json" -H "Authorization: Bearer ghp_..." '
    "https://api.github.com/repos/octocat/hello-world/issues/42"
)


class ToolImportCurl(TenantPolicyView, APIView):
    write_action = Action.CHANGE_CONFIG
    parser_classes = PARSERS

    @extend_schema(
        summary="Make a tool draft from a curl command",
        description="Reads one pasted curl command (never runs it) into an HTTP tool draft: "
        "method, URL, headers, query and JSON body; the values named in `marks` become typed "
        "arguments, the rest stay fixed. The first credential sent in a header (-u, "
        "Authorization, a header named as one: X-API-Key, X-Auth-Token, ...) becomes the "
        "tool's `auth`; its value is never returned (`secret_found`). Any other credential, "
        "and one in the query (?appid=, ?key=) or the body, is left out with a note. Shell "
        "operators, files (@file, -K, -T, -F), other schemes and several requests are "
        "refused (400). Nothing is saved: `POST /api/v1/tools` saves the draft.",
        request=CurlImportRequest,
        responses={200: CurlImportResponse, **ERRORS},
        examples=[
            OpenApiExample(
                "A GitHub call, its path values as arguments",
                {
                    "command": GITHUB_CURL,
                    "marks": {
                        "path.octocat": "owner",
                        "path.hello-world": "repo",
                        "path.42": {"name": "issue_number"},
                    },
                },
                request_only=True,
            ),
            OpenApiExample(
                "The draft",
                {
                    "draft": {
                        "name": "get_repos_issues",
                        "kind": "http",
                        "description": "Calls GET api.github.com/repos/{owner}/{repo}/issues/"
                        "{issue_number}.",
                        "input_schema": {
                            "type": "object",
                            "properties": {
                                "owner": {"type": "string", "examples": ["octocat"]},
                                "repo": {"type": "string", "examples": ["hello-world"]},
                                "issue_number": {"type": "integer", "examples": [42]},
                            },
                            "required": ["owner", "repo", "issue_number"],
                        },
                        "output_schema": None,
                        "config": {
                            "method": "GET",
                            "url": "https://api.github.com/repos/{owner}/{repo}/issues/"
                            "{issue_number}",
                            "arguments": [
                                {"argument": "owner", "to": "path"},
                                {"argument": "repo", "to": "path"},
                                {"argument": "issue_number", "to": "path"},
                            ],
                            "fixed": {"headers": {"Accept": "application/vnd.github+json"}},
                            "auth": {"type": "bearer"},
                        },
                        "effect": "",
                    },
                    "source": "curl",
                    "notes": [],
                    "secret_found": True,
                    "places": [{"place": "path.42", "value": "42"}],
                },
                response_only=True,
            ),
            BAD_REQUEST_EXAMPLE,
        ],
    )
    def post(self, request: Request) -> Response:
        given = CurlImportRequest(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        try:
            found = curl_import(
                command=data["command"],
                marks=data.get("marks"),
                name=data.get("name"),
                description=data.get("description"),
            )
        except ImportRefused as exc:
            raise exceptions.ValidationError({exc.path or "command": [exc.message]}) from None
        draft = found.draft
        body = {
            "draft": draft.definition_fields(),
            "source": draft.source,
            "notes": list(draft.notes),
            "secret_found": found.secret is not None,
            "places": [{"place": p, "value": v} for p, v in found.places],
        }
        return Response(CurlImportResponse(body).data)


class ToolTry(TenantPolicyView, APIView):
    write_action = Action.CHANGE_CONFIG
    parser_classes = PARSERS

    @extend_schema(
        summary="Try an unsaved tool (a dry call)",
        description="Builds the HTTP tool the fields make — validated exactly as saving them "
        "would be, and not saved — prepares the exact request for `arguments`, and sends it "
        "through the egress guard (private addresses refused) and the tool-call step (its "
        "rate limit; recorded as a run, `run_id`). Answers with the request (credential "
        "masked), the service's status and answer, what the model would read of it and the "
        "output-schema check. Tool failures come back in `error` with status 200; invalid "
        "fields are 400, as a save's. `tool` names the saved tool the fields change (its "
        "secret is used unless `secret` is given).",
        request=ToolTryRequest,
        responses={200: ToolTryResponse, **ERRORS},
        examples=[
            OpenApiExample(
                "A weather tool, before saving it",
                {
                    "fields": {
                        "name": "weather",
                        "kind": "http",
                        "input_schema": {
                            "type": "object",
                            "properties": {"city": {"type": "string"}},
                            "required": ["city"],
                        },
                        "output_schema": {"type": "object", "required": ["temp_c"]},
                        "config": {
                            "method": "GET",
                            "url": "https://api.example.com/weather",
                            "arguments": [{"argument": "city", "to": "query"}],
                            "auth": {"type": "bearer"},
                            "model_view": {"temp": "temp_c"},
                        },
                    },
                    "secret": "the-service-token",
                    "arguments": {"city": "Paris"},
                },
                request_only=True,
            ),
            OpenApiExample(
                "The answer",
                {
                    "request": "GET https://api.example.com/weather?city=Paris\n"
                    "Authorization: Bearer ***",
                    "sent": True,
                    "status": 200,
                    "answer": '{"temp_c": 21, "city": "Paris"}',
                    "answer_truncated": False,
                    "model_view": {"temp": 21},
                    "schema_check": {"ok": True, "problems": []},
                    "error": None,
                    "run_id": 812,
                },
                response_only=True,
            ),
            NOT_FOUND_EXAMPLE,
        ],
    )
    def post(self, request: Request) -> Response:
        given = ToolTryRequest(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        definition = None
        if data.get("tool"):
            definition = selectors.definition_get(tenant=self.tenant, name=data["tool"])
        fields = _draft_fields(self, data["fields"], partial=definition is not None)
        result = dry_call(
            tenant=self.tenant,
            user=request_user_or_key(request),
            fields=fields,
            secret=data.get("secret"),
            arguments=data.get("arguments") or {},
            definition=definition,
            send=data["send"],
        )
        return Response(ToolTryResponse(result).data)


def _draft_fields(view: ToolTry, fields: Any, *, partial: bool) -> dict[str, Any]:
    """The fields' shapes checked as `POST /api/v1/tools` checks them (saving nothing); the
    secret travels apart (`secret`)."""
    if not isinstance(fields, dict):
        raise exceptions.ValidationError({"fields": ["Give the tool's fields as an object."]})
    if "secret" in fields or "enabled" in fields:
        raise exceptions.ValidationError(
            {"fields": ["Give the secret as `secret`, beside the fields; `enabled` is not tried."]}
        )
    checked = ToolDefinitionWriteSerializer(
        data=fields, partial=partial, context={"tenant": view.tenant, "principal": view.principal}
    )
    try:
        checked.is_valid(raise_exception=True)
    except exceptions.ValidationError as exc:
        raise exceptions.ValidationError({"fields": exc.detail}) from None
    return dict(checked.validated_data)
