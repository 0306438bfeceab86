"""REST: attachments of one's own conversations (`/conversations/{id}/attachments`), sending
them with a run (`POST /runs` with `attachments`), and the run's record of them."""

from __future__ import annotations

import base64

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agents import tasks
from agents.conversations import attachment_read
from agents.models import Attachment, Message, Run
from agents.runs.engine import execute_run
from providers.models import ProviderKind
from tests.api.test_resources import V1, as_key, assert_error
from tests.factories import login, make_agent, make_connection
from tests.fakes.provider_server import TextReply
from tests.rag.pdfs import make_pdf

pytestmark = pytest.mark.django_db

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def upload(api, conversation_id: int, name: str, data: bytes):
    return api._record(
        api.client.post(
            f"{V1}/conversations/{conversation_id}/attachments",
            {"file": SimpleUploadedFile(name, data)},
            **api._headers(),
        )
    )


@pytest.fixture
def api(client, trio, agent):
    return as_key(client, trio.acme, "read", "write", "run")


@pytest.fixture
def conversation_id(api) -> int:
    response = api.post("/conversations", {"agent": "assistant", "title": "Files"})
    assert response.status_code == 201, response.content
    return response.json()["id"]


def test_attach_list_read_download_and_delete(api, conversation_id):
    created = upload(api, conversation_id, "plan.pdf", make_pdf(["The plan."]))
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["kind"] == "document" and body["media_type"] == "application/pdf"
    assert body["message"] is None and body["name"] == "plan.pdf" and len(body["sha256"]) == 64
    assert "storage_key" not in body and "path" not in str(body)
    path = f"/conversations/{conversation_id}/attachments"
    assert [a["id"] for a in api.get(path).json()] == [body["id"]]
    assert api.get(f"{path}/{body['id']}").json() == body
    download = api.get(f"{path}/{body['id']}/content")
    assert download["Content-Type"] == "application/octet-stream"
    assert download["Content-Disposition"].startswith('attachment; filename="plan.pdf"')
    assert download.content.startswith(b"%PDF-")
    assert api.delete(f"{path}/{body['id']}").status_code == 204
    assert not Attachment.objects.exists()


def test_a_large_document_answers_at_once_reading_then_ready(
    api, conversation_id, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.ATTACHMENT_READ_INLINE_BYTES = 100
    queued = []
    monkeypatch.setattr(tasks.read_attachment_task, "delay", lambda *args: queued.append(args))
    with django_capture_on_commit_callbacks(execute=True):
        created = upload(api, conversation_id, "plan.pdf", make_pdf(["The plan. " * 40]))
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["status"] == "reading" and body["error"] == ""
    assert queued == [(body["id"], Attachment.objects.get().tenant_id)]
    path = f"/conversations/{conversation_id}/attachments/{body['id']}"
    assert api.get(path).json()["status"] == "reading"
    attachment_read(body["id"])  # as the worker does
    assert api.get(path).json() | {"status": "x"} == body | {"status": "x"}
    assert api.get(path).json()["status"] == "ready"
    with django_capture_on_commit_callbacks(execute=True):
        broken = upload(api, conversation_id, "b.pdf", b"%PDF-1.4\n" + b"junk " * 100).json()
    assert broken["status"] == "reading"  # its type is right: reading it tells
    attachment_read(broken["id"])
    failed = api.get(f"/conversations/{conversation_id}/attachments/{broken['id']}").json()
    assert failed["status"] == "failed" and failed["error"]
    settings.ATTACHMENT_MAX_BYTES = 150  # limits and types are still refused in the request
    assert_error(upload(api, conversation_id, "big.pdf", b"%PDF-1.4\n" + b"x" * 200), 413)
    assert_error(upload(api, conversation_id, "x.png", b"MZ\x90\x00" + bytes(120)), 400)
    assert Attachment.objects.count() == 2


@pytest.mark.parametrize(
    ("name", "data", "says"),
    [
        ("photo.png", b"MZ\x90\x00" + bytes(100), "not supported"),
        ("payload.png", b"\x7fELF" + bytes(100), "not supported"),
        ("<script>.txt", bytes(range(256)), "not supported"),
    ],
)
def test_bad_files_are_refused_clearly(api, conversation_id, name, data, says):
    error = assert_error(upload(api, conversation_id, name, data), 400)
    assert says in str(error)
    assert not Attachment.objects.exists()


def test_an_empty_or_oversize_file_is_refused(api, conversation_id, settings):
    assert_error(upload(api, conversation_id, "empty.txt", b""), 400)
    settings.ATTACHMENT_MAX_BYTES = 10
    assert_error(upload(api, conversation_id, "big.txt", b"x" * 11), 413, "too_large")
    assert not Attachment.objects.exists()


def test_another_keys_or_users_conversation_and_attachment_answer_404(
    client, trio, api, conversation_id
):
    mine = upload(api, conversation_id, "a.txt", b"secret").json()["id"]
    other = as_key(client, trio.acme, "read", "write", "run")  # the same tenant, another key
    path = f"/conversations/{conversation_id}/attachments"
    assert_error(other.get(path), 404)
    assert_error(other.get(f"{path}/{mine}"), 404)
    assert_error(other.get(f"{path}/{mine}/content"), 404)
    assert_error(other.delete(f"{path}/{mine}"), 404)
    assert_error(upload(other, conversation_id, "b.txt", b"b"), 404)
    outsider = as_key(client, trio.globex, "read", "write", "run")
    assert_error(outsider.get(f"{path}/{mine}"), 404)
    assert_error(api.get(f"{path}/{mine + 1000}"), 404)
    assert_error(api.get(f"{path}/abc"), 404)
    session = login(client, trio.alice)  # acme's owner: not the key's conversation
    response = session.get(f"{V1}{path}/{mine}", HTTP_X_TENANT="acme")
    assert response.status_code == 404
    assert Attachment.objects.filter(pk=mine).exists()


def test_a_run_sends_attachments_and_records_them(api, conversation_id, provider_server):
    image = upload(api, conversation_id, "cat.png", PNG).json()
    started = api.post(
        "/runs",
        {
            "agent": "assistant",
            "input": "What is this?",
            "conversation": conversation_id,
            "attachments": [image["id"]],
        },
    )
    assert started.status_code == 201, started.content
    shown = started.json()["attachments"]
    assert shown == [
        {"id": image["id"], "name": "cat.png", "kind": "image", "media_type": "image/png",
         "size": len(PNG), "status": "ready"}
    ]  # fmt: skip
    run = Run.objects.get()
    provider_server.script("openai", TextReply("A pixel."))
    assert execute_run(run.pk) == "succeeded"
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"][-1]
    assert sent["content"][1]["type"] == "image_url"
    listed = api.get(f"/conversations/{conversation_id}/attachments").json()
    assert listed[0]["message"] == Message.objects.get(run=run, role="user").pk
    assert api.get(f"/runs/{run.pk}").json()["attachments"] == shown


def test_sending_refusals_leave_nothing_half_way(client, trio, api, conversation_id):
    image = upload(api, conversation_id, "cat.png", PNG).json()["id"]
    run = {"agent": "assistant", "input": "Hi", "conversation": conversation_id}
    assert_error(api.post("/runs", {**run, "attachments": [image + 1000]}), 400)
    assert_error(api.post("/runs", {**run, "conversation": None, "attachments": [image]}), 400)
    assert_error(api.post("/runs", {**run, "attachments": ["x"]}), 400)
    offline = make_connection(trio.acme, "Offline", ProviderKind.OFFLINE)
    make_agent(trio.acme, "demo", provider_connection=offline)
    other = api.post("/conversations", {"agent": "demo"}).json()["id"]
    picture = upload(api, other, "cat.png", PNG).json()["id"]
    refused = api.post(
        "/runs", {"agent": "demo", "input": "Hi", "conversation": other, "attachments": [picture]}
    )
    assert "does not take images" in str(assert_error(refused, 400))
    assert not Run.objects.exists() and not Message.objects.exists()
    assert Attachment.objects.filter(message=None).count() == 2
