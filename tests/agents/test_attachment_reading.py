"""Reading a large attached document in a worker (agents/conversations/attachment_reading.py):
the rule that sends it there, `reading` -> `ready` | `failed`, the stale readings' sweep,
a run given one still being read, and a deletion while it is read. The task runs here as a
function (tests/agents/test_attachment_reading_worker.py runs it in a real worker)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.files.storage import storages
from django.utils import timezone

from agents import tasks
from agents.conversations import (
    attachment_read,
    attachment_readings_stale,
    attachment_upload,
    attachments_read_wait,
    conversation_fork,
    run_attachments,
)
from agents.models import Attachment, AttachmentChunk, AttachmentStatus, Message, RunEvent
from agents.runs import run_start
from agents.runs.engine import execute_run
from agents.services import conversation_delete, conversation_save
from tests.fakes.provider_server import TextReply
from tests.rag.pdfs import make_pdf

pytestmark = pytest.mark.django_db

PAGES = [f"Page {n} is about weather and rain. " * 8 for n in range(1, 4)] + [
    "The secret ingredient of the recipe is saffron. " * 3
]


@pytest.fixture
def chat(trio, agent):
    return conversation_save(
        tenant=trio.acme, changes={"agent": agent, "title": "Files"}, owner_user=trio.bob
    )


@pytest.fixture
def queued(monkeypatch, settings) -> list[tuple[int, int]]:
    """Documents over 1,000 bytes go to a worker; what is sent to one, recorded (not run)."""
    settings.ATTACHMENT_READ_INLINE_BYTES = 1000
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(tasks.read_attachment_task, "delay", lambda *args: sent.append(args))
    return sent


def upload(trio, chat, name, data, capture) -> Attachment:
    with capture(execute=True):
        return attachment_upload(
            tenant=trio.acme, conversation=chat, by=trio.bob, name=name, data=data
        )


def test_a_large_document_is_stored_at_once_and_read_by_a_worker(
    trio, chat, queued, django_capture_on_commit_callbacks
):
    pdf = make_pdf(PAGES)
    assert len(pdf) > 1000
    doc = upload(trio, chat, "book.pdf", pdf, django_capture_on_commit_callbacks)
    assert doc.status == AttachmentStatus.READING and doc.error == ""
    assert not doc.chunks.exists() and doc.text_chars == 0
    assert storages["attachments"].exists(doc.storage_key)
    assert queued == [(doc.pk, trio.acme.pk)]  # once the upload committed
    assert tasks.read_attachment_task(doc.pk, trio.acme.pk) == "ready"  # as a worker does
    doc.refresh_from_db()
    assert doc.status == AttachmentStatus.READY and doc.read_attempts == 1
    assert doc.reading_since is None and "saffron" in doc.text
    chunks = list(doc.chunks.values_list("locator", flat=True))
    assert "page 4" in chunks
    # A second delivery (acks_late) finds it read and changes nothing.
    assert tasks.read_attachment_task(doc.pk, trio.acme.pk) == "skipped"
    assert doc.chunks.count() == len(chunks)


def test_a_small_document_is_still_read_in_its_upload(
    trio, chat, queued, django_capture_on_commit_callbacks
):
    doc = upload(
        trio, chat, "plan.md", b"The launch is on Tuesday.", django_capture_on_commit_callbacks
    )
    assert doc.status == AttachmentStatus.READY and doc.chunks.exists() and queued == []
    image_like = upload(trio, chat, "notes.txt", b"x" * 999, django_capture_on_commit_callbacks)
    assert image_like.status == AttachmentStatus.READY  # at the limit: in the request


def test_an_unreadable_large_document_fails_with_a_reason_for_the_person(
    trio, chat, queued, django_capture_on_commit_callbacks
):
    broken = b"%PDF-1.4\n" + b"not a real pdf body " * 100
    doc = upload(trio, chat, "broken.pdf", broken, django_capture_on_commit_callbacks)
    assert doc.status == AttachmentStatus.READING  # the type is right; reading tells
    assert attachment_read(doc.pk) == "failed"
    doc.refresh_from_db()
    assert doc.status == AttachmentStatus.FAILED and doc.error
    assert "Traceback" not in doc.error and "pypdf" not in doc.error.lower()
    assert not doc.chunks.exists() and doc.reading_since is None
    assert attachment_read(doc.pk) == "skipped"  # failed stays failed


def test_a_stale_reading_is_queued_again_then_failed(
    trio, chat, queued, settings, django_capture_on_commit_callbacks
):
    settings.ATTACHMENT_READ_STALE_S = 60
    settings.ATTACHMENT_READ_ATTEMPTS = 2
    doc = upload(trio, chat, "book.pdf", make_pdf(PAGES), django_capture_on_commit_callbacks)
    assert attachment_readings_stale() == []  # just queued
    old = timezone.now() - timedelta(seconds=120)
    Attachment.objects.filter(pk=doc.pk).update(reading_since=old, read_attempts=1)
    queued.clear()
    assert tasks.sweep_stale_attachment_readings() == 1
    assert queued == [(doc.pk, trio.acme.pk)]
    doc.refresh_from_db()
    assert doc.status == AttachmentStatus.READING and doc.reading_since > old  # not again at once
    assert attachment_readings_stale() == []
    Attachment.objects.filter(pk=doc.pk).update(reading_since=old, read_attempts=2)
    assert attachment_readings_stale() == []  # claimed twice: failed, not queued
    doc.refresh_from_db()
    assert doc.status == AttachmentStatus.FAILED
    assert doc.error == "Reading this document did not finish; attach it again."


def test_a_run_given_a_document_still_being_read_waits_then_is_told(
    trio, chat, queued, settings, provider_server, django_capture_on_commit_callbacks
):
    settings.ATTACHMENT_READ_WAIT_S = 0  # no worker here: the wait ends at once
    settings.ATTACHMENT_INLINE_CHARS = 200  # once read, searched
    doc = upload(trio, chat, "book.pdf", make_pdf(PAGES), django_capture_on_commit_callbacks)
    run = run_start(
        tenant=trio.acme, agent=chat.agent, input="What is the secret?", conversation=chat,
        initiated_by=trio.bob, attachments=[doc.pk],
    )  # fmt: skip
    assert async_to_sync(attachments_read_wait)(run) == [doc.pk]
    provider_server.script("openai", TextReply("It is still being read."))
    assert execute_run(run.pk) == "succeeded"
    system = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][0]
    assert 'Still being read, so not available to this answer: "book.pdf"' in system["content"]
    event = RunEvent.objects.get(run=run, type="run.attachments")
    assert event.payload["attachments"][0]["status"] == "reading"
    # Read now: the next run of the conversation searches it.
    attachment_read(doc.pk)
    later = run_start(
        tenant=trio.acme, agent=chat.agent, input="And now?", conversation=chat,
        initiated_by=trio.bob,
    )  # fmt: skip
    assert async_to_sync(attachments_read_wait)(later) == []
    given = run_attachments(later)
    assert [t.name for t in given.tools] == ["attachment_search"]
    assert given.listed[0]["status"] == "ready"


def test_a_runs_wait_ends_when_the_reading_does(
    trio, chat, queued, settings, django_capture_on_commit_callbacks
):
    settings.ATTACHMENT_READ_WAIT_S = 60
    doc = upload(trio, chat, "book.pdf", make_pdf(PAGES), django_capture_on_commit_callbacks)
    run = run_start(
        tenant=trio.acme, agent=chat.agent, input="What is the secret?", conversation=chat,
        initiated_by=trio.bob, attachments=[doc.pk],
    )  # fmt: skip
    assert run_attachments(run).reading

    async def wait_while_a_worker_reads():
        waiting = asyncio.create_task(attachments_read_wait(run))
        await sync_to_async(attachment_read)(doc.pk)
        return await waiting

    started = time.monotonic()
    assert async_to_sync(wait_while_a_worker_reads)() == []
    assert time.monotonic() - started < 30  # it did not sit out its 60 s
    assert not run_attachments(run).reading


def test_a_failed_document_is_named_with_its_reason(
    trio, chat, queued, django_capture_on_commit_callbacks
):
    doc = upload(
        trio, chat, "b.pdf", b"%PDF-1.4\n" + b"junk " * 400, django_capture_on_commit_callbacks
    )
    attachment_read(doc.pk)
    doc.refresh_from_db()
    run = run_start(
        tenant=trio.acme, agent=chat.agent, input="Read it", conversation=chat,
        initiated_by=trio.bob, attachments=[doc.pk],
    )  # fmt: skip
    given = run_attachments(run)
    assert f'"b.pdf" could not be read ({doc.error})' in given.context_blocks[0][1]
    assert given.listed[0]["status"] == "failed" and given.listed[0]["error"] == doc.error
    assert given.tools == ()


def test_deleting_the_conversation_while_reading_leaves_nothing(
    trio, chat, queued, django_capture_on_commit_callbacks
):
    doc = upload(trio, chat, "book.pdf", make_pdf(PAGES), django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        conversation_delete(tenant=trio.acme, conversation=chat)
    assert not storages["attachments"].exists(doc.storage_key)
    assert tasks.read_attachment_task(doc.pk, trio.acme.pk) == "skipped"  # the late message
    assert tasks.read_attachment_task(doc.pk) == "skipped"
    assert not Attachment.objects.exists() and not AttachmentChunk.objects.exists()


def test_a_fork_of_a_document_being_read_is_read_on_its_own(
    trio, chat, queued, django_capture_on_commit_callbacks
):
    doc = upload(trio, chat, "book.pdf", make_pdf(PAGES), django_capture_on_commit_callbacks)
    run = run_start(
        tenant=trio.acme, agent=chat.agent, input="Look", conversation=chat,
        initiated_by=trio.bob, attachments=[doc.pk],
    )  # fmt: skip
    queued.clear()
    with django_capture_on_commit_callbacks(execute=True):
        fork = conversation_fork(
            tenant=trio.acme, conversation=chat, message=Message.objects.get(run=run)
        )
    copy = Attachment.objects.get(conversation=fork)
    assert copy.status == AttachmentStatus.READING and queued == [(copy.pk, trio.acme.pk)]
    assert attachment_read(copy.pk) == "ready"
    doc.refresh_from_db()
    assert doc.status == AttachmentStatus.READING  # the original is its own worker's
