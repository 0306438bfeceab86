"""Attachments in an S3-compatible bucket (ATTACHMENT_S3_*: agentplatform.config.
attachments_storage, django-storages' S3 backend) against moto's S3 server on loopback, in
a thread of this process: stored, read back for a run, listed without any address or
credential, and deleted with their conversation once the deletion commits."""

from __future__ import annotations

import base64

import boto3
import pytest
from django.core.exceptions import ImproperlyConfigured
from moto.server import ThreadedMotoServer

from agentplatform import config
from agents.conversations import (
    attachment_bytes,
    attachment_upload,
    conversation_fork,
    run_attachments,
)
from agents.models import Attachment
from agents.runs import run_start
from agents.services import conversation_delete, conversation_save
from tests.factories import login

pytestmark = pytest.mark.django_db

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
BUCKET = "chat-files"
SECRET = "moto-secret-key-not-for-output"


@pytest.fixture(scope="module")
def s3_endpoint():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def bucket(s3_endpoint, settings, monkeypatch):
    for name, value in {
        "ATTACHMENT_S3_BUCKET": BUCKET,
        "ATTACHMENT_S3_ENDPOINT_URL": s3_endpoint,
        "ATTACHMENT_S3_REGION": "us-east-1",
        "ATTACHMENT_S3_ACCESS_KEY_ID": "moto-key",
        "ATTACHMENT_S3_SECRET_ACCESS_KEY": SECRET,
    }.items():
        monkeypatch.setenv(name, value)
    client = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="moto-key",
        aws_secret_access_key=SECRET,
    )
    client.create_bucket(Bucket=BUCKET)
    # The settings' own reader, as a deployment with these variables gets it.
    settings.STORAGES = {**settings.STORAGES, "attachments": config.attachments_storage(None)}
    yield client
    for item in client.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        client.delete_object(Bucket=BUCKET, Key=item["Key"])
    client.delete_bucket(Bucket=BUCKET)


def test_attachments_live_in_the_bucket_and_go_with_their_conversation(
    trio, agent, bucket, client, django_capture_on_commit_callbacks
):
    chat = conversation_save(tenant=trio.acme, changes={"agent": agent}, owner_user=trio.bob)
    image = attachment_upload(
        tenant=trio.acme, conversation=chat, by=trio.bob, name="cat.png", data=PNG
    )
    keys = [o["Key"] for o in bucket.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert keys == [f"attachments/{image.storage_key}"]
    assert attachment_bytes(image) == PNG
    run = run_start(
        tenant=trio.acme, agent=agent, input="What is it?", conversation=chat,
        initiated_by=trio.bob, attachments=[image.pk], enqueue=False,
    )  # fmt: skip
    assert base64.b64decode(run_attachments(run).images[0].data) == PNG
    page = login(client, trio.bob).get(f"/t/acme/chat/{chat.pk}/").content.decode()
    shown = client.get(f"/t/acme/chat/{chat.pk}/attachments/{image.pk}/")
    assert shown.content == PNG
    assert SECRET not in page and "127.0.0.1" not in page and BUCKET not in page
    # A fork's copy is an object of its own: it stays when the original goes, and goes
    # with the fork.
    fork = conversation_fork(tenant=trio.acme, conversation=chat, message=run.in_reply_to)
    copy = Attachment.objects.get(conversation=fork)
    assert copy.storage_key != image.storage_key and attachment_bytes(copy) == PNG
    with django_capture_on_commit_callbacks(execute=True):
        conversation_delete(tenant=trio.acme, conversation=chat)
    keys = [o["Key"] for o in bucket.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert keys == [f"attachments/{copy.storage_key}"] and attachment_bytes(copy) == PNG
    with django_capture_on_commit_callbacks(execute=True):
        conversation_delete(tenant=trio.acme, conversation=fork)
    assert "Contents" not in bucket.list_objects_v2(Bucket=BUCKET)


def test_without_a_bucket_a_private_directory_and_with_one_the_extra(monkeypatch, tmp_path):
    monkeypatch.delenv("ATTACHMENT_S3_BUCKET", raising=False)
    local = config.attachments_storage(tmp_path)
    assert local["OPTIONS"]["location"] == str(tmp_path)
    assert local["OPTIONS"]["file_permissions_mode"] == 0o600
    monkeypatch.setenv("ATTACHMENT_S3_BUCKET", BUCKET)
    found = config.importlib.util.find_spec
    monkeypatch.setattr(
        config.importlib.util, "find_spec", lambda name: None if name == "storages" else found(name)
    )
    with pytest.raises(ImproperlyConfigured, match=r"agentplatform\[s3\]"):
        config.attachments_storage(tmp_path)
