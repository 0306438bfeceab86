"""Reading an attached document: its text extracted, chunked into passages and embedded (the
reader and embedder a plug-in registers: document_reading.py), stored as its chunks.

One rule decides where (settings.ATTACHMENT_READ_INLINE_BYTES): a document of at most that
many bytes is read inside its upload request (an unreadable one is refused there); a larger
one is stored at once as `reading` and read by a worker (agents.tasks.read_attachment_task,
on the batch queue), then `ready`, or `failed` with the reason in words for the person.

Durable: the task is acknowledged late and idempotent (a claim counts an attempt; the
result is stored only while the row is still `reading`, under its lock). A reading whose
worker died is queued again by `attachment_readings_stale` (beat) after
ATTACHMENT_READ_STALE_S, and failed after ATTACHMENT_READ_ATTEMPTS claims. A row deleted
meanwhile (its conversation, its tenant) waits for the storing transaction or makes it
store nothing (`_lock_a_reading_before_its_delete`): no chunk outlives its row.

A run given a document still being read waits for it, bounded (`attachments_read_wait`);
then attachment_context.py tells the model which are not ready.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.files.storage import storages
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now
from django.db.models.signals import pre_delete
from django.dispatch import receiver

from agents.conversations.document_reading import DocumentUnreadable, Passage, document_reading
from agents.models import Attachment, AttachmentChunk, AttachmentStatus, Run
from agents.signals import request_attachment_reading
from tenancy import rls

logger = logging.getLogger(__name__)

NO_READER = "Documents cannot be read on this server."
INTERNAL = "An internal error stopped reading this document (it is logged); attach it again."
UNSTORED = "The stored file could not be read; attach it again."
UNFINISHED = "Reading this document did not finish; attach it again."


@dataclass(frozen=True, slots=True)
class Reading:
    """A document read: what its row and chunks store."""

    text: str
    passages: tuple[Passage, ...]
    vectors: list[list[float]] | None
    embedder: str  # the name of the model that made `vectors` ("" without)


def read_in_background(size: int) -> bool:
    """The rule: a document larger than ATTACHMENT_READ_INLINE_BYTES is read by a worker."""
    return size > settings.ATTACHMENT_READ_INLINE_BYTES


def document_read(data: bytes, media_type: str) -> Reading:
    """Read and embedded, or DocumentUnreadable saying why (for the person). Costs one
    extraction (a PDF's parse) and one embedding call; the vectors are None when the
    embedder failed (logged): words still find the passages."""
    reading = document_reading()
    if reading is None:
        raise DocumentUnreadable(NO_READER)
    document = reading.read(data, media_type)
    vectors, embedder = None, ""
    if reading.embedder is not None and document.passages:
        try:
            vectors = async_to_sync(reading.embedder.embed)([p.text for p in document.passages])
            embedder = reading.embedder.name
        except Exception:
            logger.warning("embedding an attachment with %s failed", reading.embedder.name,
                           exc_info=True)  # fmt: skip
    return Reading(document.text, document.passages, vectors, embedder)


def reading_fields(read: Reading) -> dict[str, object]:
    """The row's fields of a document read: its whole text when it is small enough to give
    a run whole (ATTACHMENT_INLINE_CHARS)."""
    inline = len(read.text) <= settings.ATTACHMENT_INLINE_CHARS
    return {"text_chars": len(read.text), "text": read.text if inline else ""}


def reading_chunks(attachment: Attachment, read: Reading) -> list[AttachmentChunk]:
    return [
        AttachmentChunk(
            tenant_id=attachment.tenant_id,
            attachment=attachment,
            ordinal=n,
            text=passage.text,
            locator=passage.where,
            embedding=read.vectors[n] if read.vectors is not None else None,
            embedder=read.embedder,
        )
        for n, passage in enumerate(read.passages)
    ]


def reading_queued(attachment: Attachment) -> None:
    """Inside the transaction that stored a `reading` attachment: a worker is asked to read
    it once that commits."""
    attachment_id, tenant_id = attachment.pk, attachment.tenant_id
    transaction.on_commit(lambda: request_attachment_reading(attachment_id, tenant_id))


# -- the worker's side ---------------------------------------------------------------------
def attachment_read(attachment_id: int) -> str:
    """Read a `reading` attachment and store the result: "ready", "failed", or "skipped"
    (not `reading`: read already, failed, or deleted). In the attachment's tenant scope.
    Idempotent; holds no transaction while it reads. Costs a storage read, the extraction
    and the embedding; then one short transaction."""
    claimed = Attachment.objects.filter(pk=attachment_id, status=AttachmentStatus.READING).update(
        read_attempts=F("read_attempts") + 1, reading_since=Now()
    )
    attachment = Attachment.objects.filter(pk=attachment_id).first() if claimed else None
    if attachment is None:
        return "skipped"
    try:
        with storages["attachments"].open(attachment.storage_key, "rb") as stored:
            data = stored.read()
    except Exception:  # gone with its row meanwhile, or the storage failed
        logger.warning("reading attachment %s: its file could not be read", attachment_id,
                       exc_info=True)  # fmt: skip
        return _failed(attachment_id, UNSTORED)
    try:
        read = document_read(data, attachment.media_type)
    except DocumentUnreadable as exc:
        return _failed(attachment_id, str(exc))
    except Exception:
        logger.exception("reading attachment %s failed", attachment_id)
        return _failed(attachment_id, INTERNAL)
    with transaction.atomic():
        locked = (
            Attachment.objects.select_for_update()
            .filter(pk=attachment_id, status=AttachmentStatus.READING)
            .first()
        )
        if locked is None:  # deleted, or another delivery stored it first
            return "skipped"
        AttachmentChunk.objects.filter(attachment=locked).delete()
        AttachmentChunk.objects.bulk_create(reading_chunks(locked, read), batch_size=500)
        Attachment.objects.filter(pk=attachment_id).update(
            status=AttachmentStatus.READY, error="", reading_since=None, **reading_fields(read)
        )
    return "ready"


def _failed(attachment_id: int, reason: str) -> str:
    Attachment.objects.filter(pk=attachment_id, status=AttachmentStatus.READING).update(
        status=AttachmentStatus.FAILED, error=reason[:300], reading_since=None
    )
    return "failed"


def attachment_readings_stale() -> list[tuple[int, int]]:
    """(attachment id, tenant id) of the readings to queue again: `reading` for longer than
    ATTACHMENT_READ_STALE_S (a worker died, a message was lost). Those claimed
    ATTACHMENT_READ_ATTEMPTS times already are failed instead. As the platform (every
    tenant); three statements."""
    stale = Now() - timedelta(seconds=settings.ATTACHMENT_READ_STALE_S)
    with rls.owner(), transaction.atomic():
        found = Attachment.objects.filter(status=AttachmentStatus.READING, reading_since__lt=stale)
        found.filter(read_attempts__gte=settings.ATTACHMENT_READ_ATTEMPTS).update(
            status=AttachmentStatus.FAILED, error=UNFINISHED, reading_since=None
        )
        again = list(found.select_for_update(skip_locked=True).values_list("pk", "tenant_id")[:500])
        Attachment.objects.filter(pk__in=[pk for pk, _ in again]).update(reading_since=Now())
    return again


@receiver(pre_delete, sender=Attachment, dispatch_uid="attachment_reading_lock")
def _lock_a_reading_before_its_delete(sender, instance: Attachment, **kwargs) -> None:
    """A row being read is locked before it (and its chunks) are deleted: a worker storing
    its chunks finishes first (they are deleted with it), or finds the row gone. One query
    per attachment still `reading`, none for the others."""
    if instance.status == AttachmentStatus.READING:
        list(Attachment.objects.select_for_update().filter(pk=instance.pk).values_list("pk"))


# -- a run's side --------------------------------------------------------------------------
async def attachments_read_wait(run: Run) -> Sequence[int]:
    """Before a new run's first model call, when a document it was given is `reading`
    (RunAttachments.reading): wait until none is, at most ATTACHMENT_READ_WAIT_S. The ids
    still being read (empty when all are done). One query now, then one at growing
    intervals (up to 2 s) while waiting."""
    deadline = time.monotonic() + settings.ATTACHMENT_READ_WAIT_S
    pause = 0.1
    while True:
        reading = [
            pk
            async for pk in Attachment.objects.filter(
                tenant_id=run.tenant_id, runs=run, status=AttachmentStatus.READING
            ).values_list("pk", flat=True)
        ]
        left = deadline - time.monotonic()
        if not reading or left <= 0:
            return reading
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, 2.0)
