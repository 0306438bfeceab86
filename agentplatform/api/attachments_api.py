"""Files attached in one of the caller's conversations (`/conversations/{conversation}/
attachments`): upload, list, read, download, delete. A run is sent with them by naming
their ids (`POST /runs` with `conversation` and `attachments`). Another user's or tenant's
conversation or attachment answers 404."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpResponse
from django.utils.http import content_disposition_header
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.resources import NOT_FOUND_EXAMPLE, StrictSerializer, TenantViewSet, path_id
from agentplatform.api.schema import ERRORS, error
from agents import conversations, selectors
from agents.models import Attachment, Conversation
from tenancy.policy import Action

CONVERSATION = OpenApiParameter(
    "conversation", OpenApiTypes.INT, OpenApiParameter.PATH, description="Conversation id."
)
ATTACHMENT_ID = OpenApiParameter(
    "id", OpenApiTypes.INT, OpenApiParameter.PATH, description="Attachment id."
)
TOO_LARGE = {413: error("The file is larger than `ATTACHMENT_MAX_BYTES`.")}
ATTACHMENT_RESPONSE = {
    "id": 9,
    "name": "contract.pdf",
    "kind": "document",
    "media_type": "application/pdf",
    "size": 48213,
    "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "message": None,
    "status": "ready",
    "error": "",
    "created_at": "2026-01-01T12:00:00Z",
}


class TooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"
    default_detail = "The file is too large."


class AttachmentSerializer(serializers.ModelSerializer):
    message = serializers.IntegerField(
        source="message_id",
        read_only=True,
        allow_null=True,
        help_text="The message it was sent with; null while it waits to be sent.",
    )
    kind = serializers.CharField(read_only=True, help_text="`image` or `document`.")
    media_type = serializers.CharField(
        read_only=True, help_text="Its type as its content shows, never as its name says."
    )
    status = serializers.CharField(
        read_only=True,
        help_text="`ready`; `reading` while a worker reads a large document (poll this "
        "attachment until it changes); `failed` when it could not be read (`error` says why).",
    )
    error = serializers.CharField(
        read_only=True, help_text="Why a `failed` document could not be read; empty otherwise."
    )

    class Meta:
        model = Attachment
        fields = [
            "id", "name", "kind", "media_type", "size", "sha256", "message", "status", "error",
            "created_at",
        ]  # fmt: skip
        read_only_fields = fields


class AttachmentUploadSerializer(StrictSerializer):
    file = serializers.FileField(
        allow_empty_file=False,
        help_text="The file (multipart/form-data): an image (PNG, JPEG, GIF, WebP), a PDF, or "
        "text (plain, Markdown, HTML). Its type is read from its content.",
    )

    def validate_file(self, value: Any) -> Any:
        if value.size > settings.ATTACHMENT_MAX_BYTES:
            raise TooLarge(f"The file is larger than {settings.ATTACHMENT_MAX_BYTES:,} bytes.")
        return value


@extend_schema_view(
    list=extend_schema(
        summary="List a conversation's attachments",
        description="Oldest first: those sent with its messages and those waiting to be sent.",
        parameters=[CONVERSATION],
        responses={200: AttachmentSerializer(many=True), **ERRORS},
        examples=[OpenApiExample("An attachment", ATTACHMENT_RESPONSE, response_only=True)],
    ),
    create=extend_schema(
        summary="Attach a file to a conversation",
        description="It waits to be sent: `POST /runs` with this conversation and its id in "
        "`attachments`. Images go to the model with that message (an agent whose model "
        "takes images); documents become the conversation's context, small ones whole and "
        "long ones through the `attachment_search` tool. A document larger than "
        "`ATTACHMENT_READ_INLINE_BYTES` (64 KiB by default) is answered at once with "
        "`status` `reading` and read by a worker, then `ready` or `failed` (with `error`); a "
        "run sent with it meanwhile waits for it, bounded. Refused with 400: an empty file, "
        "a type other than those accepted, too many files waiting, the workspace's total "
        "limit, a small unreadable document, a crew's conversation; over the size limit: 413.",
        parameters=[CONVERSATION],
        request={"multipart/form-data": AttachmentUploadSerializer},
        responses={201: AttachmentSerializer, **ERRORS, **TOO_LARGE},
        examples=[OpenApiExample("Attached", ATTACHMENT_RESPONSE, response_only=True)],
    ),
    retrieve=extend_schema(
        summary="Get an attachment",
        parameters=[CONVERSATION, ATTACHMENT_ID],
        responses={200: AttachmentSerializer, **ERRORS},
        examples=[OpenApiExample("An attachment", ATTACHMENT_RESPONSE, response_only=True)],
    ),
    destroy=extend_schema(
        summary="Delete an attachment and its stored file",
        parameters=[CONVERSATION, ATTACHMENT_ID],
        responses={204: None, **ERRORS},
        examples=[NOT_FOUND_EXAMPLE],
    ),
)
class AttachmentViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    TenantViewSet,
):
    """The attachments of one of the caller's conversations."""

    serializer_class = AttachmentSerializer
    read_action = Action.READ_DATA
    write_action = Action.WRITE_DATA
    pagination_class = None  # a message's few, a conversation's tens

    def conversation(self) -> Conversation:
        cached = getattr(self, "_conversation", None)
        if cached is None:
            conversation_id = path_id(self.kwargs["conversation"], "conversation")
            cached = self._conversation = selectors.conversation_of(
                tenant=self.tenant, owner=self.actor, conversation_id=conversation_id
            )
        return cached

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Attachment.objects.none()
        return conversations.attachments_of(tenant=self.tenant, conversation=self.conversation())

    def get_object(self) -> Attachment:
        return conversations.attachment_of(
            tenant=self.tenant,
            conversation=self.conversation(),
            attachment_id=path_id(self.kwargs["pk"], "attachment"),
        )

    def create(self, request: Request, *args, **kwargs) -> Response:
        conversation = self.conversation()
        body = AttachmentUploadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        upload = body.validated_data["file"]
        attachment = conversations.attachment_upload(
            tenant=self.tenant,
            conversation=conversation,
            by=self.actor,
            name=upload.name or "",
            data=upload.read(settings.ATTACHMENT_MAX_BYTES + 1),
        )
        return Response(AttachmentSerializer(attachment).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: Attachment) -> None:
        conversations.attachment_delete(tenant=self.tenant, attachment=instance)

    @extend_schema(
        summary="Download an attachment",
        description="Its bytes as they were uploaded, as a download (`Content-Disposition: "
        "attachment`).",
        parameters=[CONVERSATION, ATTACHMENT_ID],
        responses={
            (200, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY),
            **ERRORS,
        },
        examples=[NOT_FOUND_EXAMPLE],
    )
    @action(detail=True, methods=["get"])
    def content(self, request: Request, *args, **kwargs) -> HttpResponse:
        attachment = self.get_object()
        response = HttpResponse(
            conversations.attachment_bytes(attachment), content_type="application/octet-stream"
        )
        response["Content-Disposition"] = _disposition(attachment)
        response["Content-Security-Policy"] = "sandbox"
        return response


def _disposition(attachment: Attachment) -> str:
    """`attachment` with the name as given (RFC 6266: an ASCII fallback and UTF-8)."""
    return content_disposition_header(True, conversations.download_name(attachment.name))
