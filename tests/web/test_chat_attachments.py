"""The chat's attachments through Django's test client: the composer's upload (as the script
and htmx send it, and without JavaScript), refusals as text, chips, sending, the thread's
thumbnails, downloads, ownership (404), viewers, escaping, and the run page's list. The
browser's button, drop and paste are in tests/browser/test_chat_attachments.py."""

from __future__ import annotations

import base64
import os

import pytest
from django.core.files.storage import storages
from django.core.files.uploadedfile import SimpleUploadedFile

from agents import tasks
from agents.conversations import attachment_read, attachment_upload
from agents.models import Attachment, Conversation, Message, Run
from agents.services import conversation_save
from providers.models import ProviderKind
from tenancy.models import Role
from tests.factories import add_member, login, make_agent, make_connection, make_user
from tests.rag.pdfs import make_pdf

pytestmark = pytest.mark.django_db

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
HX = {"HX-Request": "true"}


@pytest.fixture
def chat(trio, agent) -> Conversation:
    return conversation_save(
        tenant=trio.acme, changes={"agent": agent, "title": "Files"}, owner_user=trio.bob
    )


def url(chat: Conversation, suffix: str = "") -> str:
    return f"/t/{chat.tenant.slug}/chat/{chat.pk}/{suffix}"


def attach(client, chat, name: str, data: bytes, headers=HX):
    return client.post(
        url(chat, "attach/"), {"file": SimpleUploadedFile(name, data)}, headers=headers
    )


def test_an_upload_answers_its_chip_with_the_id_the_composer_sends(client, trio, chat):
    response = attach(login(client, trio.bob), chat, "cat.png", PNG)
    assert response.status_code == 200 and "HX-Request" in response["Vary"]
    attachment = Attachment.objects.get()
    body = response.content.decode()
    assert f'name="attachment" value="{attachment.pk}"' in body
    assert "cat.png" in body and "image/png" in body and "<html" not in body
    page = client.get(url(chat)).content.decode()  # a reload keeps the waiting chip
    assert f'id="attachment-{attachment.pk}"' in page and 'id="attach-input"' in page


def test_a_refusal_is_plain_text_and_stores_nothing(client, trio, chat):
    response = attach(login(client, trio.bob), chat, "setup.png", b"MZ\x90\x00" + bytes(64))
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")
    assert "not supported" in response.content.decode()
    assert not Attachment.objects.exists()
    assert attach(client, chat, "empty.txt", b"").status_code == 400


def test_without_javascript_the_upload_returns_to_the_conversation(client, trio, chat):
    login(client, trio.bob)
    response = attach(client, chat, "notes.txt", b"Some notes.", headers={})
    assert response.status_code == 302 and response["Location"] == url(chat)
    refused = attach(client, chat, "x.bin", bytes(range(256)), headers={})
    assert refused.status_code == 302
    page = client.get(url(chat)).content.decode()
    assert "not supported" in page and "notes.txt" in page


def test_a_form_without_javascript_attaches_every_chosen_file(client, trio, chat):
    files = [SimpleUploadedFile("a.txt", b"first"), SimpleUploadedFile("b.png", PNG)]
    response = login(client, trio.bob).post(url(chat, "attach/"), {"file": files})
    assert response.status_code == 302
    assert sorted(Attachment.objects.values_list("name", flat=True)) == ["a.txt", "b.png"]


def test_an_oversize_file_is_refused_before_it_is_read(client, trio, chat, settings):
    settings.ATTACHMENT_MAX_BYTES = 10
    response = attach(login(client, trio.bob), chat, "big.txt", b"x" * 11)
    assert response.status_code == 400 and b"larger than 10 bytes" in response.content
    assert not Attachment.objects.exists()


def test_a_name_with_html_is_escaped_everywhere(client, trio, chat, provider_server):
    name = '<img src=x onerror="alert(1)">.txt'
    login(client, trio.bob)
    chip = attach(client, chat, name, b"hello").content.decode()
    assert "<img src=x" not in chip and "&lt;img src=x" in chip
    attachment = Attachment.objects.get()
    client.post(url(chat, "send/"), {"message": "Read it", "attachment": attachment.pk})
    page = client.get(url(chat)).content.decode()
    assert "<img src=x" not in page and "&lt;img src=x onerror" in page


def test_sending_with_attachments_shows_them_on_the_message(client, trio, chat):
    login(client, trio.bob)
    attach(client, chat, "cat.png", PNG)
    attach(client, chat, "plan.pdf", make_pdf(["The plan."]))
    ids = list(Attachment.objects.values_list("pk", flat=True))
    response = client.post(
        url(chat, "send/"), {"message": "Look", "attachment": [str(i) for i in ids]}, headers=HX
    )
    body = response.content.decode()
    image, _ = Attachment.objects.order_by("pk")
    assert f'src="{url(chat, f"attachments/{image.pk}/")}"' in body  # the thumbnail
    assert "plan.pdf" in body
    run = Run.objects.get(conversation=chat)
    assert {a.pk for a in run.attachments.all()} == set(ids)
    assert Message.objects.get(run=run).attachments.count() == 2
    page = client.get(url(chat)).content.decode()
    assert 'class="attachment-thumb"' in page and 'id="attachment-' not in page  # sent: no chip


def test_a_model_without_images_refuses_in_the_composer_and_keeps_the_chip(client, trio):
    offline = make_connection(trio.acme, "Offline", ProviderKind.OFFLINE)
    demo = make_agent(trio.acme, "demo", provider_connection=offline)
    chat = conversation_save(tenant=trio.acme, changes={"agent": demo}, owner_user=trio.bob)
    login(client, trio.bob)
    attach(client, chat, "cat.png", PNG)
    attachment = Attachment.objects.get()
    response = client.post(
        url(chat, "send/"), {"message": "What is it?", "attachment": attachment.pk}, headers=HX
    )
    assert response["X-Chat-Status"] == "400"
    assert "does not take images" in response.content.decode()
    assert not Run.objects.exists() and not Message.objects.exists()
    attachment.refresh_from_db()
    assert attachment.message_id is None


@pytest.mark.parametrize("value", ["abc", "-1", "0", "99999999999999999999", "12"])
def test_a_bad_attachment_id_is_refused(client, trio, chat, value):
    response = login(client, trio.bob).post(
        url(chat, "send/"), {"message": "Hi", "attachment": value}, headers=HX
    )
    assert response["X-Chat-Status"] == "400" and not Run.objects.exists()


def test_removing_a_waiting_attachment_deletes_it(client, trio, chat):
    login(client, trio.bob)
    attach(client, chat, "a.txt", b"a")
    attachment = Attachment.objects.get()
    response = client.post(url(chat, f"attachments/{attachment.pk}/remove/"), headers=HX)
    assert response.status_code == 200 and response.content == b""
    assert not Attachment.objects.exists()


def test_downloads_are_sandboxed_images_inline_others_as_files(client, trio, chat):
    login(client, trio.bob)
    attach(client, chat, "cat.png", PNG)
    attach(client, chat, "page.html", b"<!doctype html><p>Hi</p><script>alert(1)</script>")
    image, html = Attachment.objects.order_by("pk")
    shown = client.get(url(chat, f"attachments/{image.pk}/"))
    assert shown["Content-Type"] == "image/png" and shown.content == PNG
    assert shown["Content-Disposition"].startswith("inline")
    got = client.get(url(chat, f"attachments/{html.pk}/"))
    assert got["Content-Type"] == "application/octet-stream"
    assert got["Content-Disposition"].startswith("attachment")
    assert "sandbox" in got["Content-Security-Policy"]


def test_another_users_or_tenants_attachment_answers_404(client, trio, chat):
    attachment = attachment_upload(
        tenant=trio.acme, conversation=chat, by=trio.bob, name="a.txt", data=b"secret"
    )
    login(client, trio.alice)  # acme's owner, not the conversation's
    for suffix in ("attachments/{}/", "attachments/{}/chip/", "attachments/{}/remove/", "attach/"):
        path = url(chat, suffix.format(attachment.pk))
        assert client.get(path).status_code in (404, 405)
        posted = client.post(path, {"file": SimpleUploadedFile("b.txt", b"b")})
        assert posted.status_code in (404, 405)
    alices = conversation_save(
        tenant=trio.acme, changes={"agent": chat.agent}, owner_user=trio.alice
    )
    assert client.get(url(alices, f"attachments/{attachment.pk}/")).status_code == 404
    login(client, trio.bob)
    for huge in (2**63, 10**30):
        assert client.get(url(chat, f"attachments/{huge}/")).status_code == 404
        assert client.post(url(chat, f"attachments/{huge}/remove/")).status_code == 404
    login(client, trio.charlie)
    assert client.get(f"/t/globex/chat/{chat.pk}/attachments/{attachment.pk}/").status_code == 404
    assert Attachment.objects.filter(pk=attachment.pk).exists()


def test_a_document_being_read_shows_reading_and_its_chip_polls_until_ready(
    client, trio, chat, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.ATTACHMENT_READ_INLINE_BYTES = 100
    monkeypatch.setattr(tasks.read_attachment_task, "delay", lambda *args: None)
    login(client, trio.bob)
    with django_capture_on_commit_callbacks(execute=True):
        response = attach(client, chat, "book.pdf", make_pdf(["The plan. " * 40]))
    doc = Attachment.objects.get()
    body = response.content.decode()
    assert "reading…" in body and 'hx-trigger="every 2s" hx-target="this"' in body
    chip = url(chat, f"attachments/{doc.pk}/chip/")
    assert f'hx-get="{chip}"' in body
    polled = client.get(chip, headers=HX)
    assert polled.status_code == 200 and "reading…" in polled.content.decode()
    assert "HX-Request" in polled["Vary"]
    assert client.get(chip).status_code == 302  # without htmx: the conversation's page
    attachment_read(doc.pk)  # as the worker does
    ready = client.get(chip, headers=HX).content.decode()
    assert "reading…" not in ready and "hx-get" not in ready and 'data-status="ready"' in ready
    assert f'value="{doc.pk}"' in ready  # still sent with the message


def test_a_document_that_could_not_be_read_says_why(
    client, trio, chat, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.ATTACHMENT_READ_INLINE_BYTES = 100
    monkeypatch.setattr(tasks.read_attachment_task, "delay", lambda *args: None)
    login(client, trio.bob)
    with django_capture_on_commit_callbacks(execute=True):
        attach(client, chat, "broken.pdf", b"%PDF-1.4\n" + b"junk " * 100)
    doc = Attachment.objects.get()
    attachment_read(doc.pk)
    doc.refresh_from_db()
    chip = client.get(url(chat, f"attachments/{doc.pk}/chip/"), headers=HX).content.decode()
    assert "could not be read: " in chip and "hx-get" not in chip


def test_a_viewer_cannot_attach(client, trio, agent):
    viewer = make_user("vera")
    add_member(trio.acme, viewer, Role.VIEWER)
    chat = conversation_save(tenant=trio.acme, changes={"agent": agent}, owner_user=viewer)
    login(client, viewer)
    assert attach(client, chat, "a.txt", b"a").status_code == 403
    assert not Attachment.objects.exists()


def test_the_run_page_lists_what_the_run_was_given(client, trio, chat):
    login(client, trio.bob)
    attach(client, chat, "plan.md", b"# Plan")
    attachment = Attachment.objects.get()
    client.post(url(chat, "send/"), {"message": "Read", "attachment": attachment.pk})
    run = Run.objects.get()
    page = client.get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert "Attachments" in page and "plan.md" in page and "text/plain" in page
    assert attachment.storage_key not in page


# -- files in a new chat -------------------------------------------------------------------
def new_chat(client, target: str, message: str, files, headers=None):
    return client.post(
        "/t/acme/chat/new/",
        {
            "target": target,
            "message": message,
            "file": [SimpleUploadedFile(name, data) for name, data in files],
        },
        headers=headers or {},
    )


def stored_files() -> int:
    root = storages["attachments"].path("")
    return sum(len(names) for _, _, names in os.walk(root))


def test_a_new_chat_takes_files_with_its_first_message(client, trio, agent, settings):
    page = login(client, trio.bob).get("/t/acme/chat/").content.decode()
    assert 'enctype="multipart/form-data"' in page and 'id="new-attach-input"' in page
    pdf = make_pdf(["The launch is on Tuesday."])
    response = new_chat(client, "agent:assistant", "Look", [("cat.png", PNG), ("plan.pdf", pdf)])
    chat = Conversation.objects.get(owner_user=trio.bob)
    assert response.status_code == 302 and response["Location"] == url(chat)
    run = Run.objects.get(conversation=chat)
    sent = Message.objects.get(run=run, role="user")
    assert [(a.name, a.kind, a.message_id) for a in run.attachments.order_by("id")] == [
        ("cat.png", "image", sent.pk), ("plan.pdf", "document", sent.pk)
    ]  # fmt: skip
    thread = client.get(url(chat)).content.decode()
    assert 'class="attachment-thumb"' in thread and "plan.pdf" in thread

    # As the page's script sends it: where to go, in a header.
    scripted = new_chat(client, "agent:assistant", "Again", [("a.txt", b"notes")], HX)
    second = Conversation.objects.exclude(pk=chat.pk).get()
    assert scripted.status_code == 200 and scripted["X-Chat-Location"] == url(second)


def test_a_refused_new_chat_saves_nothing_and_keeps_the_text(
    client, trio, settings, django_capture_on_commit_callbacks
):
    offline = make_connection(trio.acme, "Offline", ProviderKind.OFFLINE)
    make_agent(trio.acme, "demo", provider_connection=offline)
    login(client, trio.bob)
    before = stored_files()
    pdf = make_pdf(["A plan."])
    with django_capture_on_commit_callbacks(execute=True):  # (stored files go on commit)
        refused = new_chat(
            client, "agent:demo", "What is <b>this</b>?", [("plan.pdf", pdf), ("cat.png", PNG)]
        )
    assert refused.status_code == 400
    body = refused.content.decode()
    assert "does not take images" in body
    assert "What is &lt;b&gt;this&lt;/b&gt;?</textarea>" in body  # kept, escaped
    assert 'value="agent:demo" selected' in body
    scripted = new_chat(client, "agent:demo", "Hi", [("setup.png", b"MZ\x90\x00" + bytes(64))], HX)
    assert scripted.status_code == 400 and scripted["Content-Type"].startswith("text/plain")
    assert scripted.content.decode().startswith("setup.png: ")
    settings.ATTACHMENT_MAX_BYTES = 100
    too_big = new_chat(client, "agent:demo", "Hi", [("big.txt", b"x" * 101)], HX)
    assert too_big.status_code == 400 and "larger than 100 bytes" in too_big.content.decode()
    assert not Conversation.objects.exists() and not Attachment.objects.exists()
    assert not Run.objects.exists() and not Message.objects.exists()
    assert stored_files() == before  # the PDF stored before the refusal: gone too
