"""A person's data over REST (lifecycle.person; docs/operations.md, "Offboarding"):
`GET /api/v1/me/export`, the caller's own conversations, facts and runs as a zip;
`POST /api/v1/people/{user_id}/erasure` with `{"confirm": true}`, an admin's erasure of a
person from the tenant (another tenant's person: 404)."""

from __future__ import annotations

import tempfile

from django.http import FileResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentplatform.api.resources import NOT_FOUND_EXAMPLE
from agentplatform.api.schema import ERRORS
from agentplatform.api.tenant import (
    TenantPolicyView,
    allowed,
    request_principal,
    request_tenant,
)
from lifecycle.person import person_erase, person_export, person_in_tenant
from lifecycle.tenant_exports import export_open, export_request, export_state
from tenancy.policy import Action

SPOOL_BYTES = 8 << 20  # an archive past this spills to a temporary file, not memory


class MyDataExport(APIView):
    read_action = Action.READ_DATA
    write_action = None

    def get_permissions(self):
        return [allowed(self.read_action)()]

    @extend_schema(
        summary="Download my data",
        description="The caller's own data in the tenant as a zip: conversations with their "
        "messages, what agents remember about them, the runs they started with their events, "
        "their attached files, and a manifest. A signed-in person's only: an API key holds "
        "no person's data (400).",
        responses={
            (200, "application/zip"): OpenApiResponse(OpenApiTypes.BINARY, description="zip"),
            **ERRORS,
        },
        examples=[
            OpenApiExample(
                "An API key",
                {
                    "error": {
                        "code": "invalid",
                        "message": "An API key holds no person's data: sign in to download yours.",
                        "details": {},
                    }
                },
                response_only=True,
                status_codes=["400"],
            )
        ],
    )
    def get(self, request: Request) -> FileResponse:
        tenant = request_tenant(request)
        principal = request_principal(request)
        if principal.user is None:
            raise exceptions.ValidationError(
                "An API key holds no person's data: sign in to download yours."
            )
        archive = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 (the response closes it)
        person_export(tenant=tenant, user=principal.user, output=archive)
        archive.seek(0)
        name = f"{tenant.slug}-{principal.user.get_username()}-data.zip"
        return FileResponse(
            archive, as_attachment=True, filename=name, content_type="application/zip"
        )


class ErasureSerializer(serializers.Serializer):
    confirm = serializers.BooleanField(
        help_text="Must be true: the person's conversations, facts and files are deleted "
        "for good, their runs anonymised, their membership removed."
    )


class ErasureResultSerializer(serializers.Serializer):
    conversations = serializers.IntegerField()
    facts = serializers.IntegerField()
    attachments = serializers.IntegerField()
    runs_anonymised = serializers.IntegerField()


class PersonErasure(APIView):
    read_action = Action.MANAGE_MEMBERS
    write_action = Action.MANAGE_MEMBERS

    def get_permissions(self):
        return [allowed(self.read_action, self.write_action)()]

    @extend_schema(
        summary="Erase a person from the tenant",
        description="Deletes the person's conversations (with messages and files), what "
        "agents remember about them and their uploads; anonymises the runs they started "
        "(usage and cost kept, content and events gone); removes their membership (their "
        "keys revoked). Audited. Asked again after an interruption, it finishes the work. "
        "Only an owner erases an owner; the last owner stays.",
        request=ErasureSerializer,
        responses={200: ErasureResultSerializer, **ERRORS},
        examples=[
            OpenApiExample("Erase", {"confirm": True}, request_only=True),
            OpenApiExample(
                "Erased",
                {"conversations": 3, "facts": 5, "attachments": 1, "runs_anonymised": 12},
                response_only=True,
            ),
            NOT_FOUND_EXAMPLE,
        ],
    )
    def post(self, request: Request, user_id: str) -> Response:
        tenant = request_tenant(request)
        principal = request_principal(request)
        person = person_in_tenant(tenant=tenant, user_id=user_id)
        body = ErasureSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if not body.validated_data["confirm"]:
            raise exceptions.ValidationError({"confirm": "Send true to erase the person."})
        erased = person_erase(tenant=tenant, user=person, by=principal)
        return Response(ErasureResultSerializer(erased).data)


# -- the workspace's archive (lifecycle.tenant_exports) ---------------------------------------
class TenantExportShown(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=["none", "building", "ready", "failed"],
        help_text="none: nothing asked (or expired); building: a worker writes it; ready: "
        "download it; failed: ask again.",
    )
    requested_at = serializers.DateTimeField(allow_null=True)
    rows_done = serializers.IntegerField(help_text="Rows written so far (all, once ready).")
    progress = serializers.CharField(help_text="The kind being written while it builds.")
    size = serializers.IntegerField(allow_null=True, help_text="Bytes, once ready.")
    finished_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(
        allow_null=True, help_text="When the ready archive is deleted."
    )
    download_url = serializers.CharField(allow_null=True)


def _shown(state, request: Request) -> dict:
    made = state.export
    ready = state.status == "ready"
    return {
        "status": state.status,
        "requested_at": made.requested_at if made else None,
        "rows_done": made.rows_done if made else 0,
        "progress": made.progress if made and state.building else "",
        "size": made.size if ready else None,
        "finished_at": made.finished_at if made and not state.building else None,
        "expires_at": made.expires_at if ready else None,
        "download_url": request.build_absolute_uri(reverse("api_tenant_export_download"))
        if ready
        else None,
    }


BUILDING_EXAMPLE = OpenApiExample(
    "Building",
    {"status": "building", "requested_at": "2026-12-06T09:00:00Z", "rows_done": 41000,
     "progress": "agents.runevent", "size": None, "finished_at": None, "expires_at": None,
     "download_url": None},
    response_only=True,
)  # fmt: skip
READY_EXAMPLE = OpenApiExample(
    "Ready",
    {"status": "ready", "requested_at": "2026-12-06T09:00:00Z", "rows_done": 182311,
     "progress": "", "size": 48211733, "finished_at": "2026-12-06T09:02:10Z",
     "expires_at": "2026-12-07T09:02:10Z",
     "download_url": "https://agents.example.com/api/v1/tenant/export/download"},
    response_only=True,
)  # fmt: skip
OWNERS_ONLY_EXAMPLE = OpenApiExample(
    "Not an owner",
    {"error": {"code": "permission_denied", "message": "This needs the owner role or higher.",
               "details": {}}},
    response_only=True,
    status_codes=["403"],
)  # fmt: skip


class TenantExportView(TenantPolicyView, APIView):
    read_action = Action.EXPORT_TENANT
    write_action = Action.EXPORT_TENANT

    @extend_schema(
        summary="The workspace's archive: its state",
        description="Whether an archive of the whole workspace is building, ready (with its "
        "download URL and when it is deleted) or failed. Owners only (and owner keys with "
        "the admin scope).",
        responses={200: TenantExportShown, **ERRORS},
        examples=[BUILDING_EXAMPLE, READY_EXAMPLE, OWNERS_ONLY_EXAMPLE],
    )
    def get(self, request: Request) -> Response:
        state = export_state(tenant=self.tenant)
        return Response(TenantExportShown(_shown(state, request)).data)

    @extend_schema(
        summary="Ask for the workspace's archive",
        description="A worker builds it (minutes for a big workspace): poll GET until "
        "`ready`. While one builds, that one is answered; otherwise a new one replaces the "
        "last. Audited (`export.requested`).",
        request=None,
        responses={202: TenantExportShown, **ERRORS},
        examples=[BUILDING_EXAMPLE, OWNERS_ONLY_EXAMPLE],
    )
    def post(self, request: Request) -> Response:
        state = export_request(tenant=self.tenant, by=self.principal)
        return Response(
            TenantExportShown(_shown(state, request)).data, status=status.HTTP_202_ACCEPTED
        )


class TenantExportDownload(TenantPolicyView, APIView):
    read_action = Action.EXPORT_TENANT
    write_action = None

    @extend_schema(
        summary="Download the workspace's archive",
        description="The ready archive (a zip: docs/operations.md, Offboarding). None ready: "
        "404. Every download is audited (`export.downloaded`).",
        responses={
            (200, "application/zip"): OpenApiResponse(OpenApiTypes.BINARY, description="zip"),
            **ERRORS,
        },
        examples=[NOT_FOUND_EXAMPLE, OWNERS_ONLY_EXAMPLE],
    )
    def get(self, request: Request) -> FileResponse:
        opened, name, size = export_open(tenant=self.tenant, by=self.principal)
        response = FileResponse(
            opened, as_attachment=True, filename=name, content_type="application/zip"
        )
        if size:
            response["Content-Length"] = str(size)
        return response
