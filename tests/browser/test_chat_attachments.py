"""Attachments in the chat, in Chromium against the live server and a real Celery worker: an
image by the composer's button, a PDF dropped on the composer, a text file pasted and then
removed; both sent files reach the fake model (the image as an image part, the PDF's text
in the context) and show on the user's message. A large PDF's chip says it is being read
until the worker has read it, without a reload."""

from __future__ import annotations

import base64

import pytest

from agents.models import Attachment
from agents.services import conversation_save
from providers.models import ProviderKind
from tests.factories import make_agent, make_connection
from tests.fakes.provider_server import TextReply
from tests.rag.pdfs import make_pdf

pytestmark = pytest.mark.django_db(transaction=True)

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
PDF = make_pdf(["The quarterly budget is 4200 euros."])

# A file given to an event the way a person's drop or paste gives it.
DISPATCH = """([type, name, mime, b64]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const data = new DataTransfer();
  data.items.add(new File([bytes], name, { type: mime }));
  const target = type === "drop" ? document.getElementById("composer")
                                 : document.getElementById("composer-input");
  const event = type === "drop"
    ? new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true })
    : new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true });
  target.dispatchEvent(event);
}"""


def test_an_image_and_a_pdf_reach_the_model(
    trio, agent, provider_server, celery_worker_process, tab
):
    chat = conversation_save(
        tenant=trio.acme, changes={"agent": agent, "title": "Budget"}, owner_user=trio.bob
    )
    provider_server.script("openai", TextReply("A tiny image, and the budget is 4200 euros."))
    tab.login("bob")
    tab.goto(f"/t/acme/chat/{chat.pk}/")
    page = tab.page
    chips = page.locator("#composer-attachments .attachment-chip")

    # The button (the file input), a drop on the composer, a paste into the message.
    page.set_input_files(
        "#attach-input", files=[{"name": "pixel.png", "mimeType": "image/png", "buffer": PNG}]
    )
    chips.filter(has_text="pixel.png").wait_for()
    encoded = base64.b64encode(PDF).decode()
    page.evaluate(DISPATCH, ["drop", "budget.pdf", "application/pdf", encoded])
    chips.filter(has_text="budget.pdf").wait_for()
    note = base64.b64encode(b"A note to remove.").decode()
    page.evaluate(DISPATCH, ["paste", "note.txt", "text/plain", note])
    pasted = chips.filter(has_text="note.txt")
    pasted.wait_for()
    assert chips.count() == 3
    pasted.get_by_role("button", name="Remove note.txt").click()
    pasted.wait_for(state="detached")
    assert "application/pdf" in chips.filter(has_text="budget.pdf").text_content()
    tab.screenshot("chat-attachments-composer")

    field = page.get_by_label("Message")
    field.fill("What do these say?")
    field.press("Enter")
    page.locator(".segment:not(.streaming)", has_text="4200 euros").wait_for(timeout=15_000)
    assert chips.count() == 0  # sent with the message

    sent = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"]
    assert "The quarterly budget is 4200 euros." in sent[0]["content"]  # the PDF, in context
    assert 'name="budget.pdf"' in sent[0]["content"]
    question = sent[-1]["content"]
    assert question[0] == {"type": "text", "text": "What do these say?"}
    assert (
        question[1]["image_url"]["url"] == f"data:image/png;base64,{base64.b64encode(PNG).decode()}"
    )

    user = page.locator(".msg.user")
    user.locator("img.attachment-thumb[alt='pixel.png']").wait_for()
    assert user.locator("a.attachment-file", has_text="budget.pdf").count() == 1
    natural = user.locator("img.attachment-thumb").evaluate("img => img.naturalWidth")
    assert natural == 1  # the thumbnail loaded from the platform
    assert sorted(Attachment.objects.values_list("name", flat=True)) == ["budget.pdf", "pixel.png"]
    tab.screenshot("chat-attachments")
    tab.assert_clean()


def test_a_large_pdfs_chip_says_reading_then_ready_without_a_reload(
    trio, agent, settings, celery_worker_process, tab
):
    pages = [f"Page {n}: weather, rain and river banks in the valley.\n" * 6 for n in range(150)]
    large = make_pdf(pages)
    assert len(large) > settings.ATTACHMENT_READ_INLINE_BYTES  # read by the worker
    chat = conversation_save(
        tenant=trio.acme, changes={"agent": agent, "title": "Guide"}, owner_user=trio.bob
    )
    tab.login("bob")
    tab.goto(f"/t/acme/chat/{chat.pk}/")
    page = tab.page
    page.evaluate("() => { window.notReloaded = true; }")
    page.set_input_files(
        "#attach-input",
        files=[{"name": "guide.pdf", "mimeType": "application/pdf", "buffer": large}],
    )
    chip = page.locator("#composer-attachments .attachment-chip", has_text="guide.pdf")
    chip.wait_for()
    # The upload answered with the chip `reading`; its own polling (htmx) turns it ready.
    page.locator(
        '#composer-attachments .attachment-chip[data-status="ready"]', has_text="guide.pdf"
    ).wait_for(timeout=30_000)
    assert "reading" not in chip.text_content()
    assert page.locator("#thread").count() == 1  # (the chip's polling swaps only itself)
    assert page.evaluate("() => window.notReloaded === true")  # the same page all along
    assert Attachment.objects.get().chunks.count() > 10
    tab.assert_clean()


NEW_CHAT_DISPATCH = DISPATCH.replace('"composer"', '"new-chat-form"').replace(
    '"composer-input"', '"new-message"'
)


def test_a_new_chat_takes_files_with_its_first_message(
    trio, agent, provider_server, celery_worker_process, tab
):
    offline = make_connection(trio.acme, "Offline", ProviderKind.OFFLINE)
    make_agent(trio.acme, "demo", name="Demo", provider_connection=offline)
    provider_server.script("openai", TextReply("A pixel, and the budget is 4200 euros."))
    tab.login("bob")
    tab.goto("/t/acme/chat/?agent=demo")
    page = tab.page
    chips = page.locator("#new-attachments .attachment-chip")
    page.set_input_files(
        "#new-attach-input", files=[{"name": "pixel.png", "mimeType": "image/png", "buffer": PNG}]
    )
    page.evaluate(
        NEW_CHAT_DISPATCH, ["drop", "budget.pdf", "application/pdf", base64.b64encode(PDF).decode()]
    )
    page.evaluate(
        NEW_CHAT_DISPATCH, ["paste", "note.txt", "text/plain", base64.b64encode(b"x").decode()]
    )
    chips.filter(has_text="note.txt").wait_for()
    assert chips.count() == 3
    chips.filter(has_text="note.txt").get_by_role("button", name="Remove note.txt").click()
    assert chips.count() == 2

    # A model without images: refused, and nothing is lost on the page or saved.
    field = page.get_by_label("Message")
    field.fill("What do these say?")
    field.press("Enter")
    page.locator("#new-notice", has_text="does not take images").wait_for()
    assert chips.count() == 2 and field.input_value() == "What do these say?"
    assert not Attachment.objects.exists()

    page.get_by_label("Chat with").select_option("agent:assistant")
    field.press("Enter")
    page.locator(".segment:not(.streaming)", has_text="4200 euros").wait_for(timeout=15_000)
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"]
    assert "The quarterly budget is 4200 euros." in sent[0]["content"]
    assert sent[-1]["content"][1]["image_url"]["url"].endswith(base64.b64encode(PNG).decode())
    assert sorted(Attachment.objects.values_list("name", flat=True)) == ["budget.pdf", "pixel.png"]
    tab.assert_clean()
