"""A large PDF attached over REST is read by a real Celery worker process
(agents.tasks.read_attachment_task): the upload answers `reading` at once, and a run sent
with it at once waits for the reading, then finds its passages with `attachment_search`."""

from __future__ import annotations

import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agents.models import Attachment, AttachmentChunk, AttachmentStatus, Run, RunEvent
from agents.runtime.spec import RunStatus
from tests.api.test_resources import V1, as_key
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.rag.pdfs import make_pdf

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("celery_worker_process"),
]

SECRET_PAGE = 120
PAGES = [
    f"Page {n} of the field guide: weather, rain and river banks in the valley.\n" * 6
    if n != SECRET_PAGE
    else "The secret ingredient of the recipe is saffron, a pinch per pot.\n" * 3
    for n in range(1, 181)
]


def until(condition, *, within: float = 90.0, what: str = "the condition"):
    """Wait for `condition()` to be truthy, at most `within` seconds; its value."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {within} s")
        time.sleep(0.05)


def test_a_large_pdf_answers_at_once_and_is_searched_once_read(
    client, trio, agent, provider_server, settings
):
    pdf = make_pdf(PAGES)
    assert len(pdf) > settings.ATTACHMENT_READ_INLINE_BYTES  # the rule sends it to a worker
    api = as_key(client, trio.acme, "read", "write", "run")
    conversation = api.post("/conversations", {"agent": "assistant", "title": "Guide"}).json()
    started = time.monotonic()
    uploaded = client.post(
        f"{V1}/conversations/{conversation['id']}/attachments",
        {"file": SimpleUploadedFile("guide.pdf", pdf)},
        **api._headers(),
    )
    answered_in = time.monotonic() - started
    assert uploaded.status_code == 201, uploaded.content
    body = uploaded.json()
    assert body["status"] == "reading"  # answered before any reading
    assert answered_in < 5, answered_in
    # A run sent with it at once: it waits for the worker's reading, then searches.
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("call_1", "attachment_search", '{"query": "secret ingredient"}')]),
        TextReply("Saffron (guide.pdf, page 120)."),
    )
    run = api.post(
        "/runs",
        {
            "agent": "assistant",
            "input": "What is the secret ingredient?",
            "conversation": conversation["id"],
            "attachments": [body["id"]],
        },
    )
    assert run.status_code == 201, run.content
    run_id = run.json()["id"]
    path = f"/conversations/{conversation['id']}/attachments/{body['id']}"
    until(lambda: api.get(path).json()["status"] != "reading", what="the reading")
    read = api.get(path).json()
    assert read["status"] == "ready", read
    attachment = Attachment.objects.get(pk=body["id"])
    assert attachment.status == AttachmentStatus.READY and attachment.read_attempts == 1
    assert AttachmentChunk.objects.filter(attachment=attachment).count() >= 10
    finished = {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED}
    until(lambda: Run.objects.get(pk=run_id).status in finished, what="the run")
    assert Run.objects.get(pk=run_id).status == RunStatus.SUCCEEDED
    listed = RunEvent.objects.get(run_id=run_id, type="run.attachments").payload["attachments"]
    assert [(a["id"], a["status"]) for a in listed] == [(body["id"], "ready")]  # it waited
    tool_result = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
    assert "saffron" in tool_result["content"]
    assert f"guide.pdf, page {SECRET_PAGE}" in tool_result["content"]
