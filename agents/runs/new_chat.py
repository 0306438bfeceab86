"""A chat begun with files: the conversation, its files and its first turn together, or
nothing (the chat's New chat form: agentplatform/web/chat/views.py `new`). Over REST the
same is three calls (create the conversation, upload, POST /runs with the attachments)."""

from __future__ import annotations

from collections.abc import Sequence

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.http import Http404

from agents import access, conversations
from agents.models import Agent, Conversation, Crew, Run
from agents.runs.start import run_start
from tenancy.models import Tenant
from tenancy.policy import Principal


def conversation_begin(
    *,
    tenant: Tenant,
    target: Agent | Crew,
    owner: AbstractBaseUser,
    input: str,
    files: Sequence[tuple[str, bytes]] = (),
) -> tuple[Conversation, Run | None]:
    """A new conversation of `owner` with `target`, and its first turn when `input` says
    something (None else); `owner` must be allowed to start `target` (PermissionDenied).
    With `files` (name, bytes) the turn is sent with them, checked as every upload and
    turn is (type from the content, limits, images only to a model that takes them). A
    turn is all or nothing: a refusal (ValidationError, QuotaExceeded) deletes what was
    begun, stored files too once that commits. Each document costs its reading and embedding,
    before the turn is checked."""
    if target.tenant_id != tenant.pk:
        raise Http404("No such agent or crew.")
    access.require_start(Principal.for_initiator(tenant, owner), target)
    which = "agent" if isinstance(target, Agent) else "crew"
    conversation = Conversation.objects.create(tenant=tenant, owner_user=owner, **{which: target})
    if not files and not input.strip():
        return conversation, None
    try:
        attached = [_uploaded(tenant, conversation, owner, name, data).pk for name, data in files]
        run = run_start(
            tenant=tenant,
            input=input,
            conversation=conversation,
            initiated_by=owner,
            attachments=attached,
            **{which: target},
        )
    except BaseException:  # nothing half-way: no conversation without its first turn
        conversation.delete()
        raise
    return conversation, run


def _uploaded(tenant, conversation, owner, name: str, data: bytes):
    try:
        return conversations.attachment_upload(
            tenant=tenant, conversation=conversation, by=owner, name=name, data=data
        )
    except ValidationError as exc:  # (several files: say which)
        shown = conversations.shown_name(name) or "A file"
        raise ValidationError({"file": f"{shown}: {' '.join(exc.messages)}"}) from None
