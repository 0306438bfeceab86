"""`/api/v1/<kind>/<key>/versions`: a configured object's versions, one version, and
restoring it (tenancy/records/history.py; docs/config-history.md). The object is
named as its own resource names it (an agent's slug, a tool's name, a connection's id).
Reading needs what reading configuration needs; restoring what changing it needs.
Another tenant's object, or a version it does not have, answers 404."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.http import Http404
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.errors import Conflict
from agentplatform.api.resources import PARSERS, path_id, path_text
from agentplatform.api.schema import ERRORS, error
from agentplatform.api.serializers import DraftSerializer, draft_shown
from agentplatform.api.tenant import TenantPolicyView, request_user_or_key
from tenancy import selectors
from tenancy.models import ConfigVersion
from tenancy.policy import Action
from tenancy.records import history
from tenancy.records.saving import SaveConflict

# URL kind -> the model field its resource looks objects up by.
LOOKUPS = {
    "agents": "slug",
    "crews": "slug",
    "tools": "name",
    "provider-connections": "pk",
    "mcp-connections": "pk",
    "knowledge-bases": "slug",
    "workflows": "slug",
}

VERSION_EXAMPLE = {
    "number": 3,
    "at": "2026-01-02T08:00:00Z",
    "actor_label": "alice",
    "user": 3,
    "api_key": None,
    "restored_from": None,
    "object_type": "agents.agent",
    "object_id": "7",
    "object_repr": "Assistant",
    "changes": {"instructions": ["Be brief.", "Be brief and kind."]},
    "snapshot": {
        "fields": {"name": "Assistant", "instructions": "Be brief and kind.", "remote_token": None},
        "parts": {"grants": []},
    },
}


class VersionSerializer(serializers.ModelSerializer):
    changes = serializers.JSONField(
        help_text='`{field: [before, after]}` against the version before; secrets only as "[set]".'
    )
    snapshot = serializers.JSONField(
        help_text='`{fields, parts}`: every editable field (secrets only as "[set]" or '
        "null) and parts such as a crew's `members` and the `grants` held on the object."
    )

    class Meta:
        model = ConfigVersion
        fields = [
            "number",
            "at",
            "actor_label",
            "user",
            "api_key",
            "restored_from",
            "object_type",
            "object_id",
            "object_repr",
            "changes",
            "snapshot",
        ]
        read_only_fields = fields


class VersionView(TenantPolicyView, GenericAPIView):
    read_action = Action.READ_CONFIG
    write_action = Action.CHANGE_CONFIG
    parser_classes = PARSERS
    serializer_class = VersionSerializer

    def get_object_of(self, kind: str, lookup: dict[str, str]) -> models.Model:
        if kind not in LOOKUPS:
            raise Http404("No such kind of object.")
        field = LOOKUPS[kind]
        key = lookup[field]
        value: Any = path_id(key) if field == "pk" else path_text(key)
        return selectors.versioned_object_get(
            tenant=self.tenant, kind=kind, field=field, value=value
        )


class VersionList(VersionView):
    @extend_schema(
        summary="List an object's configuration versions",
        description="Newest first: every saved change of the agent, crew, tool definition, "
        "provider or MCP connection or knowledge base, with who, when and what changed.",
        responses={200: VersionSerializer(many=True), **ERRORS},
        examples=[OpenApiExample("Versions", [VERSION_EXAMPLE], response_only=True)],
    )
    def get(self, request: Request, kind: str, **lookup: str) -> Response:
        obj = self.get_object_of(kind, lookup)
        versions = history.versions(self.tenant, obj)
        return Response(VersionSerializer(versions, many=True).data)


class VersionDetail(VersionView):
    @extend_schema(
        summary="Get one configuration version",
        responses={200: VersionSerializer, **ERRORS},
        examples=[OpenApiExample("A version", VERSION_EXAMPLE, response_only=True)],
    )
    def get(self, request: Request, kind: str, number: str, **lookup: str) -> Response:
        obj = self.get_object_of(kind, lookup)
        version = history.version_get(self.tenant, obj, path_id(number, "version"))
        return Response(VersionSerializer(version).data)


class ProposedSerializer(serializers.Serializer):
    restored_from = serializers.IntegerField()
    draft = DraftSerializer()


class VersionRestore(VersionView):
    @extend_schema(
        summary="Restore a configuration version",
        description="Saves the object with the version's settings through the same "
        "validation as any save (the tenant's whole configuration is compiled), keeping "
        "its current secrets; the result is a new version, answered here. A version that "
        "names an object since deleted, or that the compiler refuses now, is a 400; one "
        "that equals the current settings too. An agent or crew with a required evaluation "
        "takes the version's settings as a draft (202, the draft): it goes live when its "
        "evaluation passes, as any change of it.",
        request=None,
        responses={
            200: VersionSerializer,
            202: ProposedSerializer,
            **ERRORS,
            409: error("It changed meanwhile."),
        },
        examples=[
            OpenApiExample(
                "Restored", {**VERSION_EXAMPLE, "number": 4, "restored_from": 2}, response_only=True
            )
        ],
    )
    def post(self, request: Request, kind: str, number: str, **lookup: str) -> Response:
        obj = self.get_object_of(kind, lookup)
        try:
            version = history.restore(
                tenant=self.tenant,
                instance=obj,
                number=path_id(number, "version"),
                actor=request_user_or_key(request),
            )
        except SaveConflict as exc:
            raise Conflict(str(exc)) from None
        if isinstance(version, history.Proposed):  # a gated agent or crew: a draft, evaluated
            body = {
                "restored_from": version.restored_from,
                "draft": draft_shown(obj, version.draft),
            }
            return Response(body, status=202)
        return Response(VersionSerializer(version).data)
