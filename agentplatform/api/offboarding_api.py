"""A person's data over REST (lifecycle.person; docs/operations.md, "Offboarding"):
`GET /api/v1/me/export`, the caller's own conversations, facts and runs as a zip;
`POST /api/v1/people/{user_id}/erasure` with `{"confirm": true}`, an admin's erasure of a
person from the tenant (another tenant's person: 404)."""

from __future__ import annotations

import tempfile

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentplatform.api.resources import NOT_FOUND_EXAMPLE
from agentplatform.api.schema import ERRORS
from agentplatform.api.tenant import allowed, request_principal, request_tenant
from lifecycle.person import person_erase, person_export, person_in_tenant
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
