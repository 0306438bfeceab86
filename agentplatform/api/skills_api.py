"""A tenant's skills (`/skills`, docs/skills.md): list them, upload a package (a zip in the
Agent Skills format: each upload a new version, identical content the same one), read a
skill with its versions and a version with its files, approve a version. Reading needs
`read_config`; uploading and approving `change_config` (admins; keys with `config`). A bad
package answers 400 naming the file and why; another tenant's skill 404."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    extend_schema,
    extend_schema_view,
)
from rest_framework import exceptions, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.resources import StrictSerializer, TenantViewSet, path_text
from agentplatform.api.schema import ERRORS, error
from agents import skills

NAME = OpenApiParameter("name", OpenApiTypes.STR, OpenApiParameter.PATH, description="Its name.")
NUMBER = OpenApiParameter("number", OpenApiTypes.INT, OpenApiParameter.PATH)
VERSION_EXAMPLE = {
    "skill": "pdf-forms",
    "number": 2,
    "status": "approved",
    "description": "Fill in PDF forms. Use when the user gives a form to complete.",
    "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "size": 5120,
    "approved_at": "2026-01-02T09:00:00Z",
    "created_at": "2026-01-02T08:00:00Z",
}
SKILL_EXAMPLE = OpenApiExample(
    "A skill",
    {"name": "pdf-forms", "description": VERSION_EXAMPLE["description"], "versions": 2,
     "latest_approved": 2},
    response_only=True,
)  # fmt: skip
VERSION = OpenApiExample("A version", VERSION_EXAMPLE, response_only=True)
DETAIL = OpenApiExample(
    "A skill and its versions",
    {"name": "pdf-forms", "description": VERSION_EXAMPLE["description"],
     "versions": [VERSION_EXAMPLE]},
    response_only=True,
)  # fmt: skip
VERSION_DETAIL = OpenApiExample(
    "A version with its files",
    {**VERSION_EXAMPLE, "front_matter": {"name": "pdf-forms", "description": "..."},
     "instructions": "# Filling forms\n...",
     "files": [{"path": "SKILL.md", "size": 812}, {"path": "references/fields.md", "size": 4308}]},
    response_only=True,
)  # fmt: skip
TOO_LARGE = {413: error("The archive is larger than the limit (10 MB).")}


class TooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"
    default_detail = "The archive is too large."


class SkillSerializer(serializers.Serializer):
    name = serializers.CharField(read_only=True)
    description = serializers.CharField(read_only=True, help_text="Its latest version's.")
    versions = serializers.IntegerField(source="version_count", read_only=True)
    latest_approved = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="The newest approved version's number."
    )


class SkillVersionSerializer(serializers.Serializer):
    skill = serializers.CharField(source="skill.name", read_only=True)
    number = serializers.IntegerField(read_only=True)
    status = serializers.CharField(read_only=True, help_text="`draft` or `approved`.")
    description = serializers.CharField(read_only=True)
    sha256 = serializers.CharField(read_only=True, help_text="Of its files' paths and digests.")
    size = serializers.IntegerField(read_only=True, help_text="Its files' bytes.")
    approved_at = serializers.DateTimeField(read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(read_only=True)


class SkillVersionDetailSerializer(SkillVersionSerializer):
    front_matter = serializers.JSONField(read_only=True)
    instructions = serializers.CharField(read_only=True)
    files = serializers.SerializerMethodField()

    def get_files(self, version) -> list[dict[str, Any]]:
        return [{"path": p, "size": n} for p, n in skills.skill_version_files(version)]


class SkillDetailSerializer(serializers.Serializer):
    name = serializers.CharField(read_only=True)
    description = serializers.CharField(read_only=True)
    versions = SkillVersionSerializer(many=True, read_only=True, help_text="Newest first.")


class SkillUploadSerializer(StrictSerializer):
    file = serializers.FileField(
        allow_empty_file=False,
        help_text="A zip (multipart/form-data) of the skill's folder: SKILL.md at its root "
        "or in its one top-level folder, named as the skill.",
    )

    def validate_file(self, value: Any) -> Any:
        if value.size > skills.Limits().archive_bytes:
            raise TooLarge("The archive is larger than the limit (10 MB).")
        return value


@extend_schema_view(
    list=extend_schema(
        summary="List skills",
        responses={200: SkillSerializer(many=True), **ERRORS},
        examples=[SKILL_EXAMPLE],
    ),
    create=extend_schema(
        summary="Upload a skill package",
        description="A new draft version (201), or the version with identical content "
        "(200). Agents use a version once an admin approves it. Refused with 400, naming the "
        "file: a path that climbs or is absolute, a link, too many or too large files (counted "
        "while decompressing), a zip inside, a SKILL.md without valid front matter.",
        request={"multipart/form-data": SkillUploadSerializer},
        responses={201: SkillVersionSerializer, 200: SkillVersionSerializer, **ERRORS, **TOO_LARGE},
        examples=[VERSION],
    ),
    retrieve=extend_schema(
        summary="Get a skill with its versions, newest first",
        parameters=[NAME],
        responses={200: SkillDetailSerializer, **ERRORS},
        examples=[DETAIL],
    ),
)
class SkillViewSet(TenantViewSet):
    """The tenant's skills, by name."""

    lookup_field = "name"
    pagination_class = None  # a tenant's tens

    def list(self, request: Request, *args, **kwargs) -> Response:
        return Response(SkillSerializer(skills.skills_of(self.tenant), many=True).data)

    def create(self, request: Request, *args, **kwargs) -> Response:
        body = SkillUploadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data["file"].read(skills.Limits().archive_bytes + 1)
        version, created = skills.skill_import(
            tenant=self.tenant, by=self.principal, package=skills.skill_package_read(data)
        )
        return Response(
            SkillVersionSerializer(version).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    def retrieve(self, request: Request, *args, **kwargs) -> Response:
        skill = skills.skill_named(self.tenant, path_text(self.kwargs["name"]))
        detail = {
            "name": skill.name,
            "description": skill.description,
            "versions": skills.skill_versions(skill),
        }
        return Response(SkillDetailSerializer(detail).data)

    @extend_schema(
        summary="Get a version of a skill, with its files and instructions",
        parameters=[NAME, NUMBER],
        responses={200: SkillVersionDetailSerializer, **ERRORS},
        examples=[VERSION_DETAIL],
    )
    @action(detail=True, methods=["get"], url_path=r"versions/(?P<number>[^/]+)")
    def version(self, request: Request, *args, **kwargs) -> Response:
        version = self._version()
        return Response(SkillVersionDetailSerializer(version).data)

    @extend_schema(
        summary="Approve a version of a skill",
        description="Agents pinned to the skill's latest approved version use it from now "
        "on; approving an approved version changes nothing.",
        request=None,
        parameters=[NAME, NUMBER],
        responses={200: SkillVersionSerializer, **ERRORS},
        examples=[VERSION],
    )
    @action(detail=True, methods=["post"], url_path=r"versions/(?P<number>[^/]+)/approve")
    def approve(self, request: Request, *args, **kwargs) -> Response:
        version = self._version()
        skills.skill_version_approve(tenant=self.tenant, by=self.principal, version=version)
        return Response(SkillVersionSerializer(version).data)

    def _version(self):
        return skills.skill_version_of(
            self.tenant, path_text(self.kwargs["name"]), path_text(self.kwargs["number"])
        )
