"""Attachments (agents/conversations/attachments.py, attachment_context.py): what is taken
and refused from the content, the limits, ownership, what a run is given and records, the
search over long documents, and the stored files deleted with their rows."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.core.files.storage import storages
from django.http import Http404

from agents import conversations
from agents.conversations import (
    attachment_upload,
    attachments_of,
    run_attachment_list,
    run_attachments,
)
from agents.models import Attachment, AttachmentChunk, Conversation, Message, RunEvent
from agents.runs import run_regenerate, run_start
from agents.runs.engine import execute_run
from agents.services import conversation_delete, conversation_save
from providers.models import ProviderKind
from tests.factories import make_agent, make_connection, make_crew
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.rag.pdfs import make_pdf

pytestmark = pytest.mark.django_db

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
ELF = b"\x7fELF\x02\x01\x01\x00" + bytes(200)


def storage():
    return storages["attachments"]


@pytest.fixture
def chat(trio, agent) -> Conversation:
    return conversation_save(
        tenant=trio.acme, changes={"agent": agent, "title": "Files"}, owner_user=trio.bob
    )


def upload(trio, chat, name: str, data: bytes, by=None) -> Attachment:
    return attachment_upload(
        tenant=trio.acme, conversation=chat, by=by or trio.bob, name=name, data=data
    )


def refusal(trio, chat, name: str, data: bytes, by=None) -> str:
    with pytest.raises(ValidationError) as refused:
        upload(trio, chat, name, data, by)
    return " ".join(refused.value.messages)


# -- what is taken -------------------------------------------------------------------------
def test_types_come_from_the_content_not_the_name(trio, chat):
    image = upload(trio, chat, "notes.txt", PNG)
    pdf = upload(trio, chat, "picture.png", make_pdf(["Hello from a PDF."]))
    text = upload(trio, chat, "readme", b"# Title\n\nSome *Markdown*.")
    assert (image.kind, image.media_type) == ("image", "image/png")
    assert (pdf.kind, pdf.media_type) == ("document", "application/pdf")
    assert (text.kind, text.media_type) == ("document", "text/plain")
    assert pdf.text.strip() == "Hello from a PDF." and pdf.chunks.count() == 1
    assert len(image.sha256) == 64 and image.size == len(PNG)
    assert storage().exists(image.storage_key)
    assert "notes" not in image.storage_key  # the name as given is never a path


@pytest.mark.parametrize(
    ("name", "data", "says"),
    [
        ("setup.png", ELF, "not supported"),
        ("empty.txt", b"", "empty"),
        ("blank.txt", b"   \n", "no text"),
        ("latin1.txt", "café".encode("latin-1"), "not supported"),
        ("nul.txt", b"text\x00more", "not supported"),
        ("doc.docx", b"PK\x03\x04" + bytes(100), "not supported"),
        ("broken.pdf", b"%PDF-1.4 garbage", "could not be read"),
    ],
)
def test_other_files_are_refused_and_nothing_is_stored(trio, chat, name, data, says):
    before = _stored_files()
    assert says in refusal(trio, chat, name, data)
    assert not Attachment.objects.exists()
    assert _stored_files() == before


def _stored_files() -> set[str]:
    root = Path(storage().location)
    return {str(p) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def test_a_file_over_the_limit_is_refused(trio, chat, settings):
    settings.ATTACHMENT_MAX_BYTES = 1000
    assert "at most 1,000 bytes" in refusal(trio, chat, "big.txt", b"a" * 1001)


def test_the_tenants_total_is_a_limit(trio, chat, settings):
    settings.ATTACHMENT_TENANT_MAX_BYTES = 100
    upload(trio, chat, "a.txt", b"a" * 60)
    assert "exceed" in refusal(trio, chat, "b.txt", b"b" * 60)
    assert Attachment.objects.count() == 1


def test_too_many_files_waiting_are_refused(trio, chat, settings):
    settings.ATTACHMENT_MAX_PER_MESSAGE = 2
    upload(trio, chat, "a.txt", b"a")
    upload(trio, chat, "b.txt", b"b")
    assert "At most 2 files" in refusal(trio, chat, "c.txt", b"c")


def test_a_name_is_shown_as_given_without_control_characters(trio, chat):
    attachment = upload(trio, chat, "../../etc/\u202epasswd<script>\n.txt", b"hi")
    assert attachment.name == "../../etc/passwd<script>.txt"
    assert conversations.download_name(attachment.name) == "_.._etc_passwd<script>.txt"


def test_a_name_postgres_cannot_store_or_too_long_is_mended(trio, chat):
    odd = upload(trio, chat, "a\ud800b\x00c.txt", b"hi")
    assert odd.name == "abc.txt"
    long = upload(trio, chat, "x" * 300 + ".pdf", b"hi")
    assert len(long.name) == 255 and long.name.endswith("….pdf")


def test_only_the_conversations_owner_attaches(trio, chat):
    with pytest.raises(Http404):
        upload(trio, chat, "a.txt", b"a", by=trio.alice)  # acme's owner, not the chat's
    other = conversation_save(tenant=trio.globex, changes={"title": "x"}, owner_user=trio.charlie)
    with pytest.raises(Http404):
        attachment_upload(
            tenant=trio.acme, conversation=other, by=trio.charlie, name="a", data=b"a"
        )


def test_a_crews_conversation_takes_no_files(trio, agent):
    crew = make_crew(trio.acme, "team", members=[agent])
    chat = conversation_save(tenant=trio.acme, changes={"crew": crew}, owner_user=trio.bob)
    assert "crew" in refusal(trio, chat, "a.txt", b"a")


def test_another_conversations_attachment_answers_404(trio, chat):
    attachment = upload(trio, chat, "a.txt", b"a")
    mine = conversation_save(tenant=trio.acme, changes={"title": "y"}, owner_user=trio.bob)
    with pytest.raises(Http404):
        conversations.attachment_of(
            tenant=trio.acme, conversation=mine, attachment_id=attachment.pk
        )
    with pytest.raises(Http404):
        conversations.attachment_of(
            tenant=trio.globex, conversation=chat, attachment_id=attachment.pk
        )


# -- sending -------------------------------------------------------------------------------
def send(trio, chat, text, ids):
    return run_start(
        tenant=trio.acme,
        agent=chat.agent,
        input=text,
        conversation=chat,
        initiated_by=trio.bob,
        attachments=ids,
    )


def test_an_image_and_a_document_reach_the_model(trio, chat, provider_server):
    image = upload(trio, chat, "cat.png", PNG)
    doc = upload(trio, chat, "plan.md", b"# Plan\n\nThe launch is on Tuesday.")
    run = send(trio, chat, "What is this?", [image.pk, doc.pk])
    assert set(Message.objects.get(run=run).attachments.all()) == {image, doc}
    assert run_attachment_list(run) == [image, doc]
    provider_server.script("openai", TextReply("A cat, and the launch is on Tuesday."))
    assert execute_run(run.pk) == "succeeded"
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"]
    assert "The launch is on Tuesday." in sent[0]["content"]  # the system prompt
    assert 'name="plan.md"' in sent[0]["content"]
    event = RunEvent.objects.get(run=run, type="run.attachments")
    assert [(a["id"], a["name"], a["kind"]) for a in event.payload["attachments"]] == [
        (image.pk, "cat.png", "image"),
        (doc.pk, "plan.md", "document"),
    ]
    assert image.storage_key not in str(event.payload)
    last = sent[-1]["content"]
    assert last[0] == {"type": "text", "text": "What is this?"}
    assert last[1]["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()


def test_a_later_turn_is_given_the_documents_but_not_the_images(trio, chat, provider_server):
    image = upload(trio, chat, "cat.png", PNG)
    doc = upload(trio, chat, "plan.md", b"The launch is on Tuesday.")
    first = send(trio, chat, "Look", [image.pk, doc.pk])
    provider_server.script("openai", TextReply("Seen."), TextReply("Tuesday."))
    execute_run(first.pk)
    second = send(trio, chat, "When is the launch?", [])
    assert run_attachment_list(second) == [doc]
    execute_run(second.pk)
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"]
    assert "The launch is on Tuesday." in sent[0]["content"]
    assert all(isinstance(m["content"], str) for m in sent)  # no image part any more
    again = run_regenerate(tenant=trio.acme, conversation=chat, initiated_by=trio.bob)
    assert run_attachment_list(again) == [doc]


def test_a_model_that_takes_no_images_refuses_them_and_nothing_is_saved(trio, chat):
    offline = make_connection(trio.acme, "Offline", ProviderKind.OFFLINE)
    demo = make_agent(trio.acme, "demo", provider_connection=offline)
    chat.agent = demo
    chat.save()
    image = upload(trio, chat, "cat.png", PNG)
    with pytest.raises(ValidationError, match="does not take images"):
        send(trio, chat, "What is this?", [image.pk])
    assert not Message.objects.exists() and not chat.runs.exists()
    assert Attachment.objects.get().message_id is None  # still waiting, to remove or keep


def test_only_ones_own_waiting_attachments_are_sent(trio, chat):
    attachment = upload(trio, chat, "a.txt", b"a")
    alices = conversation_save(
        tenant=trio.acme, changes={"agent": chat.agent}, owner_user=trio.alice
    )
    with pytest.raises(ValidationError, match="No attachment"):
        run_start(
            tenant=trio.acme, agent=chat.agent, input="x", conversation=alices,
            initiated_by=trio.alice, attachments=[attachment.pk],
        )  # fmt: skip
    send(trio, chat, "first", [attachment.pk])
    with pytest.raises(ValidationError, match="No attachment"):  # sent already
        send(trio, chat, "again", [attachment.pk])
    with pytest.raises(ValidationError, match="No attachment"):
        send(trio, chat, "unknown", [2**62])
    assert Message.objects.count() == 1


# -- long documents ------------------------------------------------------------------------
def test_a_long_document_is_searched_with_citations(trio, chat, settings):
    settings.ATTACHMENT_INLINE_CHARS = 200
    pages = [f"Page {n} is about weather and rain. " * 8 for n in range(1, 4)]
    pages.append("The secret ingredient of the recipe is saffron. " * 3)
    doc = upload(trio, chat, "book.pdf", make_pdf(pages))
    assert doc.text == "" and doc.chunks.count() >= 4
    run = send(trio, chat, "What is the secret ingredient?", [doc.pk])
    given = run_attachments(run)
    assert [t.name for t in given.tools] == ["attachment_search"]
    assert "book.pdf" in given.context_blocks[0][1]
    hits = _search(trio, doc, "secret ingredient")
    assert hits[0][1:3] == ("book.pdf", "page 4")
    assert "saffron" in hits[0][3]
    assert _search(trio, doc, "saffron", tenant=trio.globex) == []


def _search(trio, doc, query, tenant=None):
    return async_to_sync(conversations.attachment_context.search_passages)(
        tenant_id=(tenant or trio.acme).pk, attachment_ids=[doc.pk], query=query, top_k=3
    )


def test_the_search_tool_runs_in_the_run(trio, chat, settings, provider_server):
    settings.ATTACHMENT_INLINE_CHARS = 10
    doc = upload(trio, chat, "notes.md", b"# Recipes\n\nThe secret ingredient is saffron.")
    run = send(trio, chat, "What is the secret?", [doc.pk])
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("call_1", "attachment_search", '{"query": "secret ingredient"}')]),
        TextReply("Saffron (notes.md, Recipes)."),
    )
    assert execute_run(run.pk) == "succeeded"
    tool_result = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
    assert "saffron" in tool_result["content"] and "notes.md, Recipes" in tool_result["content"]


# -- deleting ------------------------------------------------------------------------------
def test_files_go_with_their_conversation_once_committed(
    trio, chat, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        kept = upload(trio, chat, "a.txt", b"a")
        doc = upload(trio, chat, "b.md", b"words")
    assert storage().exists(kept.storage_key)
    with django_capture_on_commit_callbacks(execute=False) as pending:
        conversation_delete(tenant=trio.acme, conversation=chat)
    assert storage().exists(kept.storage_key)  # not before the commit
    for callback in pending:
        callback()
    assert not storage().exists(kept.storage_key) and not storage().exists(doc.storage_key)
    assert not Attachment.objects.exists() and not AttachmentChunk.objects.exists()


def test_files_go_with_their_tenant(trio, chat, django_capture_on_commit_callbacks):
    attachment = upload(trio, chat, "a.txt", b"a")
    with django_capture_on_commit_callbacks(execute=True):
        trio.acme.delete()
    assert not storage().exists(attachment.storage_key)


def test_deleting_one_attachment_deletes_its_file(trio, chat, django_capture_on_commit_callbacks):
    attachment = upload(trio, chat, "a.txt", b"a")
    with django_capture_on_commit_callbacks(execute=True):
        conversations.attachment_delete(tenant=trio.acme, attachment=attachment)
    assert not storage().exists(attachment.storage_key)
    assert not attachments_of(tenant=trio.acme, conversation=chat).exists()
