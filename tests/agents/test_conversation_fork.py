"""Forking a conversation carries its files (agents/conversations/fork.py,
attachments.attachments_copy): the fork's runs are given the same images and documents,
the long ones searched; each conversation's files are its own copies; the tenant's limit
counts them."""

from __future__ import annotations

import base64
import os

import pytest
from django.core.exceptions import ValidationError
from django.core.files.storage import storages

from agents.conversations import (
    attachment_bytes,
    attachment_upload,
    conversation_fork,
    run_attachment_list,
    run_attachments,
)
from agents.models import Attachment, AttachmentChunk, Conversation, Message
from agents.runs import run_regenerate, run_start
from agents.runs.engine import execute_run
from agents.services import conversation_delete, conversation_save
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.rag.pdfs import make_pdf

pytestmark = pytest.mark.django_db

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
PAGES = [f"Page {n} is about weather and rain. " * 8 for n in range(1, 4)] + [
    "The secret ingredient of the recipe is saffron. " * 3
]


@pytest.fixture
def chat(trio, agent, settings) -> Conversation:
    settings.ATTACHMENT_INLINE_CHARS = 200  # the PDF is searched, not inlined
    return conversation_save(
        tenant=trio.acme, changes={"agent": agent, "title": "Files"}, owner_user=trio.bob
    )


def sent_with_files(trio, chat, provider_server):
    """bob sends an image and a long PDF; the model answers."""
    ids = [
        attachment_upload(tenant=trio.acme, conversation=chat, by=trio.bob, name=n, data=d).pk
        for n, d in (("cat.png", PNG), ("book.pdf", make_pdf(PAGES)))
    ]
    run = run_start(
        tenant=trio.acme, agent=chat.agent, input="Look", conversation=chat,
        initiated_by=trio.bob, attachments=ids,
    )  # fmt: skip
    provider_server.script("openai", TextReply("A cat and a book."))
    assert execute_run(run.pk) == "succeeded"
    return run


def test_a_fork_carries_the_files_and_keeps_them_when_the_original_goes(
    trio, chat, provider_server, django_capture_on_commit_callbacks
):
    first = sent_with_files(trio, chat, provider_server)
    originals = list(Attachment.objects.order_by("id"))
    fork = conversation_fork(tenant=trio.acme, conversation=chat, message=first.in_reply_to)

    copies = list(Attachment.objects.filter(conversation=fork).order_by("id"))
    question = Message.objects.get(conversation=fork, role="user")
    assert [(c.name, c.kind, c.message_id) for c in copies] == [
        ("cat.png", "image", question.pk), ("book.pdf", "document", question.pk)
    ]  # fmt: skip
    assert {c.storage_key for c in copies}.isdisjoint(o.storage_key for o in originals)
    assert [attachment_bytes(c) for c in copies] == [attachment_bytes(o) for o in originals]
    assert AttachmentChunk.objects.filter(attachment=copies[1]).count() == (
        AttachmentChunk.objects.filter(attachment=originals[1]).count()
    )

    # The original goes (its files once committed); the fork's stay readable.
    with django_capture_on_commit_callbacks(execute=True):
        conversation_delete(tenant=trio.acme, conversation=chat)
    assert not any(storages["attachments"].exists(o.storage_key) for o in originals)
    assert attachment_bytes(copies[0]) == PNG

    # The fork's question answered again: given the image and the searchable PDF.
    fork.refresh_from_db()
    again = run_regenerate(tenant=trio.acme, conversation=fork, initiated_by=trio.bob)
    assert run_attachment_list(again) == copies
    assert [t.name for t in run_attachments(again).tools] == ["attachment_search"]
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("call_1", "attachment_search", '{"query": "secret ingredient"}')]),
        TextReply("Saffron (book.pdf, page 4)."),
    )
    assert execute_run(again.pk) == "succeeded"
    first_call, second_call = provider_server.requests_to("/v1/chat/completions")[-2:]
    question_sent = first_call.body["messages"][-1]["content"]
    assert question_sent[1]["image_url"]["url"].endswith(base64.b64encode(PNG).decode())
    found = second_call.body["messages"][-1]["content"]
    assert "saffron" in found and "book.pdf, page 4" in found


def test_a_later_turn_of_a_fork_searches_its_documents(trio, chat, provider_server):
    sent_with_files(trio, chat, provider_server)
    answer = Message.objects.get(conversation=chat, role="assistant")
    fork = conversation_fork(tenant=trio.acme, conversation=chat, message=answer)
    later = run_start(
        tenant=trio.acme, agent=chat.agent, input="The secret?", conversation=fork,
        initiated_by=trio.bob,
    )  # fmt: skip
    given = run_attachment_list(later)
    assert [(a.name, a.conversation_id) for a in given] == [("book.pdf", fork.pk)]  # no image


def test_a_fork_past_the_tenants_limit_is_refused_and_leaves_nothing(
    trio, chat, provider_server, settings
):
    first = sent_with_files(trio, chat, provider_server)
    used = sum(Attachment.objects.values_list("size", flat=True))
    settings.ATTACHMENT_TENANT_MAX_BYTES = used + 10  # room for the originals only
    root = storages["attachments"].path("")
    files_before = sum(len(names) for _, _, names in os.walk(root))
    counts = Conversation.objects.count(), Message.objects.count(), Attachment.objects.count()
    with pytest.raises(ValidationError, match="would exceed"):
        conversation_fork(tenant=trio.acme, conversation=chat, message=first.in_reply_to)
    assert (
        Conversation.objects.count(), Message.objects.count(), Attachment.objects.count()
    ) == counts  # fmt: skip
    assert sum(len(names) for _, _, names in os.walk(root)) == files_before
