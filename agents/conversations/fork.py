"""Forking a conversation: a new one holding copies of a branch (agents/conversations/
branches.py) up to a message, with the files attached to those messages (attachments.py:
their stored files copied, so deleting either conversation leaves the other's intact)."""

from __future__ import annotations

from itertools import pairwise

from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404

from agents.conversations.attachments import attachments_copy
from agents.conversations.branches import branch
from agents.models import Conversation, Message
from tenancy.models import Tenant


def conversation_fork(
    *, tenant: Tenant, conversation: Conversation, message: Message, title: str = ""
) -> Conversation:
    """A new conversation of the same owner with the same agent or crew, holding copies of
    the branch up to `message` (each copy keeps the run that wrote it, for its record) and
    of their attachments (counted against the tenant's attachment limit: ValidationError,
    and nothing is kept, when they would pass it); the original stays as it was. Six
    statements without attachments (the branch read, the conversation, its messages,
    their parents, its leaf, its attachments read); with some, a storage read and write a
    file and a few statements more."""
    if conversation.tenant_id != tenant.pk or message.conversation_id != conversation.pk:
        raise Http404("No such message in this conversation.")
    if len(title) > 200:
        raise ValidationError({"title": "At most 200 characters."})
    path = list(branch(message.pk).order_by("id"))
    with transaction.atomic():
        fork = Conversation.objects.create(
            tenant=tenant,
            agent_id=conversation.agent_id,
            crew_id=conversation.crew_id,
            owner_user_id=conversation.owner_user_id,
            owner_api_key_id=conversation.owner_api_key_id,
            title=title or f"{conversation.title or 'Conversation'} (fork)"[:200],
        )
        copies = Message.objects.bulk_create(
            Message(
                tenant_id=tenant.pk,
                conversation=fork,
                role=m.role,
                content=m.content,
                tool_calls=m.tool_calls,
                run_id=m.run_id,
                steers=m.steers,
            )
            for m in path
        )
        for previous, copy in pairwise(copies):
            copy.parent_id = previous.pk
        if len(copies) > 1:
            Message.objects.bulk_update(copies[1:], ["parent"])
        fork.leaf_id = copies[-1].pk
        fork.save(update_fields=["leaf"])
        attachments_copy(
            tenant=tenant,
            fork=fork,
            messages={m.pk: copy.pk for m, copy in zip(path, copies, strict=True)},
        )
    return fork
