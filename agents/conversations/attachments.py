"""Files attached in a conversation: uploaded (checked from their content, within the limits,
stored through the attachments storage), sent with a message, listed, read back, deleted.

An attachment is its uploader's, in their own conversation: the faces find conversations
through `agents.selectors.conversation_of` (another user's or tenant's: 404) and these
functions check the tenant and the owner again. Its bytes go to `storages["attachments"]`
(a directory under DATA_DIR, or an S3-compatible bucket: settings.py) under a key the
platform makes; the name as given is only shown. A stored file is deleted once the
transaction that deleted its row commits: one receiver for every way a row goes (the
attachment, its message, its conversation, its tenant).

A document is read in its upload when small, by a worker when large (the rule and the
states: attachment_reading.py); the checks of type and limits here are always in the
request.

Limits (settings): ATTACHMENT_MAX_BYTES a file, ATTACHMENT_TENANT_MAX_BYTES all of a
tenant's files together, ATTACHMENT_MAX_PER_MESSAGE files a message (and waiting to be
sent in one conversation).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterable, Sequence

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages
from django.db import connection, transaction
from django.db.models import Q, QuerySet, Sum
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.http import Http404
from django.utils import timezone

from agents.conversations.attachment_reading import (
    NO_READER,
    document_read,
    read_in_background,
    reading_chunks,
    reading_fields,
    reading_queued,
)
from agents.conversations.attachment_types import AttachmentRefused, detect, shown_name
from agents.conversations.branches import branch
from agents.conversations.document_reading import DocumentUnreadable, document_reading
from agents.models import (
    Attachment,
    AttachmentChunk,
    AttachmentKind,
    AttachmentStatus,
    Conversation,
    Message,
    Run,
)
from tenancy.models import ApiKey, Tenant

logger = logging.getLogger(__name__)
Uploader = AbstractBaseUser | ApiKey
_QUOTA_LOCK = 0x61747463  # pg_advisory_xact_lock(class, tenant): one upload a tenant at a time


def attachment_storage() -> Storage:
    return storages["attachments"]


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n:,} bytes"


def _owned_by(conversation: Conversation, who: Uploader) -> bool:
    if isinstance(who, ApiKey):
        return conversation.owner_api_key_id == who.pk and conversation.owner_user_id is None
    return conversation.owner_user_id == who.pk


def _uploader(who: Uploader) -> dict[str, object]:
    if isinstance(who, ApiKey):
        return {"uploaded_by_api_key": who, "uploaded_by_user": None}
    return {"uploaded_by_user": who, "uploaded_by_api_key": None}


# -- upload --------------------------------------------------------------------------------
def attachment_upload(
    *, tenant: Tenant, conversation: Conversation, by: Uploader, name: str, data: bytes
) -> Attachment:
    """A pending attachment of `conversation` (sent with the next message that names it).
    ValidationError says what is wrong (type, size, limits, a small unreadable document);
    then nothing is stored. A small document is read and its passages embedded here (the
    cost of one extraction and one embedding call); a larger one is stored `reading` and
    read by a worker once this commits (attachment_reading.py: the rule)."""
    if conversation.tenant_id != tenant.pk or not _owned_by(conversation, by):
        raise Http404("No such conversation.")
    if conversation.crew_id is not None:
        raise ValidationError(
            {"file": "A crew takes text only: attach files when chatting with an agent."}
        )
    limit = settings.ATTACHMENT_MAX_BYTES
    if len(data) > limit:
        raise ValidationError({"file": f"The file is {_size(len(data))}; at most {_size(limit)}."})
    try:
        detected = detect(data)
    except AttachmentRefused as exc:
        raise ValidationError({"file": str(exc)}) from None
    read, later = None, False
    if detected.kind == AttachmentKind.DOCUMENT:
        later = read_in_background(len(data))
        if document_reading() is None:
            raise ValidationError({"file": NO_READER})
        if not later:
            try:
                read = document_read(data, detected.media_type)
            except DocumentUnreadable as exc:
                raise ValidationError({"file": str(exc)}) from None
    key = f"t{tenant.pk}/c{conversation.pk}/{uuid.uuid4().hex}"
    stored = ""
    try:
        with transaction.atomic():
            _hold_tenant_quota(tenant, len(data))
            pending = Attachment.objects.filter(
                tenant=tenant, conversation=conversation, message=None
            ).count()
            if pending >= settings.ATTACHMENT_MAX_PER_MESSAGE:
                raise ValidationError(
                    {"file": f"At most {settings.ATTACHMENT_MAX_PER_MESSAGE} files a message: "
                     "send or remove some first."}
                )  # fmt: skip
            stored = attachment_storage().save(key, ContentFile(data))
            attachment = Attachment.objects.create(
                tenant=tenant,
                conversation=conversation,
                name=shown_name(name),
                kind=detected.kind,
                media_type=detected.media_type,
                size=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
                storage_key=stored,
                **(reading_fields(read) if read is not None else {}),
                **(_queued_for_reading() if later else {}),
                **_uploader(by),
            )
            if read is not None:
                AttachmentChunk.objects.bulk_create(reading_chunks(attachment, read))
            if later:
                reading_queued(attachment)
    except BaseException:
        if stored:  # nothing half-way: the row is not there, so neither is the file
            _delete_stored(stored)
        raise
    return attachment


def _queued_for_reading() -> dict[str, object]:
    return {"status": AttachmentStatus.READING, "reading_since": timezone.now()}


def _hold_tenant_quota(tenant: Tenant, adding: int) -> None:
    """Within the transaction: the tenant's uploads wait for each other here, so two at once
    cannot both pass the limit. One lock and one sum query."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_QUOTA_LOCK, tenant.pk % 2**31])
    used = Attachment.objects.filter(tenant=tenant).aggregate(total=Sum("size"))["total"] or 0
    limit = settings.ATTACHMENT_TENANT_MAX_BYTES
    if used + adding > limit:
        raise ValidationError(
            {"file": f"This workspace's attachments would exceed its {_size(limit)}: "
             "delete some conversations or attachments first."}
        )  # fmt: skip


# -- reads ---------------------------------------------------------------------------------
def attachments_of(*, tenant: Tenant, conversation: Conversation) -> QuerySet[Attachment]:
    """The conversation's attachments, oldest first (sent and pending)."""
    return Attachment.objects.filter(tenant=tenant, conversation=conversation).order_by("id")


def attachments_pending(*, tenant: Tenant, conversation: Conversation) -> list[Attachment]:
    """Uploaded and not sent yet: the composer's chips. One query."""
    return list(attachments_of(tenant=tenant, conversation=conversation).filter(message=None))


def attachment_of(*, tenant: Tenant, conversation: Conversation, attachment_id) -> Attachment:
    """One attachment of the conversation; 404 for any other (another conversation's, user's
    or tenant's). The caller found the conversation as its owner's."""
    try:
        attachment_id = int(attachment_id)
    except (TypeError, ValueError):
        raise Http404("No such attachment.") from None
    if not 0 < attachment_id < 2**63:
        raise Http404("No such attachment.")
    found = (
        attachments_of(tenant=tenant, conversation=conversation).filter(pk=attachment_id).first()
    )
    if found is None:
        raise Http404("No such attachment.")
    return found


def attachment_bytes(attachment: Attachment) -> bytes:
    with attachment_storage().open(attachment.storage_key, "rb") as stored:
        return stored.read()


def run_attachment_list(run: Run) -> list[Attachment]:
    """What the run received (its record's list). One query."""
    return list(Attachment.objects.filter(tenant_id=run.tenant_id, runs=run).order_by("id"))


def run_message_attachments(run: Run) -> list[Attachment]:
    """The attachments of the message `run` answers (not the earlier documents it was
    given): a version answered again is the same message. One query."""
    if run.in_reply_to_id is None:
        return []
    return list(
        Attachment.objects.filter(
            tenant_id=run.tenant_id, message_id=run.in_reply_to_id, message__role=Message.Role.USER
        ).order_by("id")
    )


def message_attachments(messages: Iterable[Message]) -> dict[int, list[Attachment]]:
    """The attachments of each of these messages, by message id. One query."""
    ids = [m.pk for m in messages]
    found: dict[int, list[Attachment]] = {}
    if not ids:
        return found
    for attachment in Attachment.objects.filter(message_id__in=ids).order_by("id"):
        found.setdefault(attachment.message_id, []).append(attachment)
    return found


# -- sending -------------------------------------------------------------------------------
def attachments_for_send(
    *, conversation: Conversation, ids: Sequence[int], by: Uploader | None
) -> list[Attachment]:
    """The pending attachments `ids` of the conversation, uploaded by `by`: what a message is
    about to be sent with. ValidationError names the first that is not one (another
    conversation's or user's reads the same as a missing one). One query."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return []
    if len(wanted) > settings.ATTACHMENT_MAX_PER_MESSAGE:
        raise ValidationError(
            {"attachments": f"At most {settings.ATTACHMENT_MAX_PER_MESSAGE} files a message."}
        )
    if by is None:
        raise PermissionDenied("Only a person or a key sends attachments.")
    found = {
        a.pk: a
        for a in Attachment.objects.filter(
            tenant_id=conversation.tenant_id,
            conversation=conversation,
            message=None,
            pk__in=[i for i in wanted if 0 < i < 2**63],
            **_uploader(by),
        )
    }
    for attachment_id in wanted:
        if attachment_id not in found:
            raise ValidationError(
                {"attachments": f"No attachment {attachment_id} waits to be sent here."}
            )
    if conversation.crew_id is not None:
        raise ValidationError({"attachments": "A crew takes text only."})
    return [found[i] for i in wanted]


def attachments_send(*, message: Message, run: Run, attachments: Sequence[Attachment]) -> None:
    """Inside the transaction that adds `message`: the attachments become its, and the run
    records them with the conversation's earlier documents (what it is given). Refused
    (ValidationError, rolling the transaction back) when another message took one
    meanwhile. Two statements, three with documents."""
    if attachments:
        taken = Attachment.objects.filter(pk__in=[a.pk for a in attachments], message=None).update(
            message=message
        )
        if taken != len(attachments):
            raise ValidationError({"attachments": "An attachment was sent with another message."})
    attachments_given(run=run, message=message)


def attachments_sent_in(conversation: Conversation) -> QuerySet[Attachment]:
    """The conversation's attachments sent with a message (not pending): when there are
    none, a run of it is given none but its own message's (`attachments_given`)."""
    return Attachment.objects.filter(conversation_id=conversation.pk, message__isnull=False)


def attachments_given(*, run: Run, message: Message) -> None:
    """Record what `run`, answering `message`, is given: the message's attachments and the
    documents sent before it on its branch (agents.conversations.branches)."""
    ids = list(
        Attachment.objects.filter(
            Q(message=message) | Q(kind=AttachmentKind.DOCUMENT, message__in=branch(message.pk)),
            tenant_id=run.tenant_id,
            conversation_id=message.conversation_id,
        ).values_list("pk", flat=True)
    )
    if ids:
        Attachment.runs.through.objects.bulk_create(
            [Attachment.runs.through(attachment_id=i, run_id=run.pk) for i in ids],
            ignore_conflicts=True,
        )


# -- forking -------------------------------------------------------------------------------
_COPIED = (  # what a fork's copy of an attachment keeps of the original
    "uploaded_by_user_id", "uploaded_by_api_key_id", "name", "kind", "media_type", "size",
    "sha256", "text_chars", "text", "status", "error", "reading_since",
)  # fmt: skip


def attachments_copy(*, tenant: Tenant, fork: Conversation, messages: dict[int, int]) -> None:
    """Inside the transaction that forks a conversation (agents/conversations/fork.py): the
    attachments of the messages `messages` maps (original id -> its copy's) copied to the
    copies, with their passages and vectors (what `attachment_search` searches; a copy of
    one still being read is read anew: attachment_reading.py). Each
    stored file is copied under a key of its own: a row deletes its file
    (`_file_goes_with_its_row`), so two rows never share one. Counted against the tenant's
    limit (ValidationError; then no copy stays). One query with none to copy."""
    carried = list(
        Attachment.objects.filter(tenant=tenant, message_id__in=list(messages)).order_by("id")
    )
    if not carried:
        return
    stored: list[str] = []
    try:
        _hold_tenant_quota(tenant, sum(a.size for a in carried))
        storage = attachment_storage()
        copies = []
        for original in carried:
            with storage.open(original.storage_key, "rb") as source:
                stored.append(storage.save(f"t{tenant.pk}/c{fork.pk}/{uuid.uuid4().hex}", source))
            copy = Attachment(
                tenant=tenant,
                conversation=fork,
                message_id=messages[original.message_id],
                storage_key=stored[-1],
                **{field: getattr(original, field) for field in _COPIED},
            )
            copies.append(copy)
        Attachment.objects.bulk_create(copies)
        for copy in copies:  # an original still being read: its copy is read on its own
            if copy.status == AttachmentStatus.READING:
                reading_queued(copy)
        new_id = {o.pk: c.pk for o, c in zip(carried, copies, strict=True)}
        AttachmentChunk.objects.bulk_create(
            AttachmentChunk(
                tenant=tenant,
                attachment_id=new_id[chunk.attachment_id],
                ordinal=chunk.ordinal,
                text=chunk.text,
                locator=chunk.locator,
                embedding=chunk.embedding,
                embedder=chunk.embedder,
            )
            for chunk in AttachmentChunk.objects.filter(attachment__in=carried).defer("search")
        )
    except BaseException:
        for key in stored:  # nothing half-way: the rows roll back, so do the files
            _delete_stored(key)
        raise


# -- deleting ------------------------------------------------------------------------------
def attachment_delete(*, tenant: Tenant, attachment: Attachment) -> None:
    """The attachment, its passages and (once committed) its stored file. A sent one leaves
    its message and the run records that listed it."""
    if attachment.tenant_id != tenant.pk:
        raise Http404("No such attachment.")
    attachment.delete()


@receiver(post_delete, sender=Attachment, dispatch_uid="attachment_file")
def _file_goes_with_its_row(sender, instance: Attachment, **kwargs) -> None:
    key = instance.storage_key
    transaction.on_commit(lambda: _delete_stored(key), robust=True)


def _delete_stored(key: str) -> None:
    try:
        attachment_storage().delete(key)
    except Exception:  # the row is gone either way; an orphaned file is logged, not raised
        logger.warning("could not delete the stored attachment %s", key, exc_info=True)
