"""The chat's attachments: upload from the composer (its button, drag-and-drop and paste
post here through static/js/chat.js; without JavaScript, the composer's Upload button), a
waiting one removed, and one's own attachment shown or downloaded. Every view finds the
conversation as its owner's (`access.conversation_for`: 404 for anyone else's) and the
attachment within it (404 otherwise); writes need the member role.

An upload answers the composer's chip (htmx or the script) or, refused, a 400 whose text
the script shows as text (never as HTML). A large document's chip says "reading…" and asks
for itself again every few seconds (`chip`) until a worker has read it.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET, require_POST

from agentplatform.web.chat import access
from agents import conversations
from agents.models import Attachment, AttachmentKind, Conversation
from tenancy.policy import Action
from tenancy.resolution import tenant_member_required

CHIPS = "web/chat/attachments.html"


def _scripted(request: HttpRequest) -> bool:
    """The composer's script (or htmx) asked: it takes a fragment, not a page."""
    return bool(getattr(request, "htmx", False))


def _back(request: HttpRequest, chat: Conversation) -> HttpResponse:
    return redirect("chat:conversation", tenant_slug=request.tenant.slug, conversation_id=chat.pk)


@tenant_member_required(Action.START_RUN)
@require_POST
def attach(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """The files of the `file` field attached, waiting to be sent: their chips. Files
    before a refused one stay attached (their chips show on the page)."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    if not access.may_send(request.membership):
        raise PermissionDenied("Viewers cannot attach files.")
    uploads = request.FILES.getlist("file")  # the script sends one; a form, all chosen
    attached = []
    try:
        if not uploads:
            raise ValidationError("Choose a file to attach.")
        for upload in uploads:
            if upload.size > settings.ATTACHMENT_MAX_BYTES:
                limit = settings.ATTACHMENT_MAX_BYTES
                raise ValidationError(f"The file is larger than {limit:,} bytes.")
            attached.append(
                conversations.attachment_upload(
                    tenant=request.tenant,
                    conversation=chat,
                    by=request.user,
                    name=upload.name or "",
                    data=upload.read(settings.ATTACHMENT_MAX_BYTES + 1),
                )
            )
    except ValidationError as exc:
        text = " ".join(exc.messages)
        if not _scripted(request):
            messages.error(request, text)
            return _back(request, chat)
        response = HttpResponse(text, status=400, content_type="text/plain; charset=utf-8")
        patch_vary_headers(response, ["HX-Request"])
        return response
    if not _scripted(request):
        return _back(request, chat)
    response = HttpResponse(
        b"".join(
            render(
                request,
                f"{CHIPS}#chip",
                {"attachment": a, "conversation": chat, "tenant_slug": request.tenant.slug},
            ).content
            for a in attached
        )
    )
    patch_vary_headers(response, ["HX-Request"])
    return response


@tenant_member_required(Action.START_RUN)
@require_POST
def detach(request: HttpRequest, conversation_id: int, attachment_id: int) -> HttpResponse:
    """A waiting attachment removed from the composer (and deleted)."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    attachment = _attachment(request, chat, attachment_id)
    if attachment.message_id is not None:
        raise PermissionDenied("It was sent: delete the conversation to delete it.")
    conversations.attachment_delete(tenant=request.tenant, attachment=attachment)
    if not _scripted(request):
        return _back(request, chat)
    response = HttpResponse("")
    patch_vary_headers(response, ["HX-Request"])
    return response


@tenant_member_required(Action.READ_DATA)
@require_GET
def attachment(request: HttpRequest, conversation_id: int, attachment_id: int) -> HttpResponse:
    """One's own attachment: an image shown as itself (the thread's thumbnails), any other
    file as a download. Sandboxed: nothing in it runs."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    found = _attachment(request, chat, attachment_id)
    image = found.kind == AttachmentKind.IMAGE
    response = HttpResponse(
        conversations.attachment_bytes(found),
        content_type=found.media_type if image else "application/octet-stream",
    )
    name = conversations.download_name(found.name)
    response["Content-Disposition"] = content_disposition_header(not image, name)
    response["Content-Security-Policy"] = "sandbox; default-src 'none'"
    response["Cache-Control"] = "private, max-age=3600"
    return response


@tenant_member_required(Action.READ_DATA)
@require_GET
def chip(request: HttpRequest, conversation_id: int, attachment_id: int) -> HttpResponse:
    """A waiting attachment's chip as it is now: what a chip still `reading` polls (htmx)
    until the worker is done. Without htmx, the conversation's page (its chips too)."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    found = _attachment(request, chat, attachment_id)
    if not _scripted(request):
        return _back(request, chat)
    context = {"attachment": found, "conversation": chat, "tenant_slug": request.tenant.slug}
    response = render(request, f"{CHIPS}#chip", context)
    patch_vary_headers(response, ["HX-Request"])
    return response


def _attachment(request: HttpRequest, chat: Conversation, attachment_id: int) -> Attachment:
    return conversations.attachment_of(
        tenant=request.tenant, conversation=chat, attachment_id=attachment_id
    )
