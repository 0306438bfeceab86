"""A backup of an installation whose attachments are in an S3-compatible bucket holds the
bucket's objects, and `manage.py restore` puts them into the new installation's bucket
(lifecycle/stored_files.py) — against moto's S3 server on loopback, in a thread of this
process; the restore in a child process as a deployment's operator runs it: into an empty
database of its own (DATABASE_URL, on the session's PostgreSQL server), the keys in the
environment, not in the backup. A target bucket holding objects already is refused,
changing nothing."""

from __future__ import annotations

import json
import sys
import tarfile
import uuid

import boto3
import psycopg
import pytest
from django.core.management import call_command
from moto.server import ThreadedMotoServer

from agentplatform import config
from agentplatform.embedded import postgres_url
from agents.conversations import attachment_upload
from agents.models import Conversation
from tests import processes
from tests.conftest import ROOT
from tests.factories import add_member, make_agent, make_connection, make_tenant, make_user
from tests.lifecycle.test_backup_restore import PNG, _env

pytestmark = pytest.mark.integration  # the restore is a child process

SOURCE, TARGET = "backed-up-files", "restored-files"
S3 = {"ATTACHMENT_S3_REGION": "us-east-1", "ATTACHMENT_S3_ACCESS_KEY_ID": "moto-key",
      "ATTACHMENT_S3_SECRET_ACCESS_KEY": "moto-secret-not-for-output"}  # fmt: skip


@pytest.fixture
def s3(monkeypatch, settings):
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id="moto-key", aws_secret_access_key=S3["ATTACHMENT_S3_SECRET_ACCESS_KEY"],
    )  # fmt: skip
    for bucket in (SOURCE, TARGET):
        client.create_bucket(Bucket=bucket)
    variables = {**S3, "ATTACHMENT_S3_ENDPOINT_URL": endpoint, "ATTACHMENT_S3_BUCKET": SOURCE}
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    settings.STORAGES = {**settings.STORAGES, "attachments": config.attachments_storage(None)}
    yield client, {**variables, "ATTACHMENT_S3_BUCKET": TARGET}
    server.stop()


@pytest.fixture
def empty_database(settings):
    """A new, empty database on the session's PostgreSQL server, as `createdb` makes one
    for a restore; dropped afterwards."""
    server = settings.DATABASES["default"]
    name = f"restore_{uuid.uuid4().hex[:12]}"

    def admin(sql: str) -> None:
        with psycopg.connect(
            host=server["HOST"], port=server["PORT"] or None, user=server["USER"],
            password=server["PASSWORD"] or None, dbname="postgres", autocommit=True,
        ) as connection:  # fmt: skip
            connection.execute(sql)

    admin(f'CREATE DATABASE "{name}"')
    yield name
    admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def objects(client, bucket: str) -> dict[str, bytes]:
    listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def test_the_buckets_objects_are_backed_up_and_restored_into_a_new_bucket(
    transactional_db, s3, empty_database, tmp_path, settings
):
    client, target_env = s3
    tenant, user = make_tenant("bucketed"), make_user("filer")
    add_member(tenant, user)
    make_connection(tenant, name="Keyed", api_key="sk-bucketed-secret")
    chat = Conversation.objects.create(tenant=tenant, agent=make_agent(tenant), owner_user=user)
    for name in ("one.png", "two.png"):
        attachment_upload(tenant=tenant, conversation=chat, by=user, name=name, data=PNG)
    source = objects(client, SOURCE)
    assert len(source) == 2

    archive = tmp_path / "backup.tar"
    call_command("backup", "--output", str(archive))  # the keys stay in the environment
    with tarfile.open(archive) as backup:
        manifest = json.load(backup.extractfile("manifest.json"))
        stored = {
            name: backup.extractfile(name).read()
            for name in backup.getnames()
            if name.startswith("files/attachments/")
        }
    assert manifest["files"]["kept_in"] == "bucket" and manifest["files"]["count"] == 2
    assert {f"attachments/{n.removeprefix('files/attachments/')}" for n in stored} == set(source)
    assert set(stored.values()) == {PNG}

    deployment = {
        **target_env,
        "DATABASE_URL": postgres_url({**settings.DATABASES["default"], "NAME": empty_database}),
        "REDIS_URL": settings.REDIS_URL,
        # The session's: the app login (one role for the server) keeps its password.
        "SECRET_KEY": settings.SECRET_KEY,
        "DB_APP_PASSWORD": settings.DB_APP_PASSWORD,
        "FIELD_ENCRYPTION_KEYS": ",".join(settings.FIELD_ENCRYPTION_KEYS),
    }

    def restore(data_dir):
        env = {**_env(data_dir), **deployment}
        return processes.run(
            [sys.executable, "manage.py", "restore", str(archive)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip

    client.put_object(Bucket=TARGET, Key="attachments/t9/stray", Body=b"someone's")
    refused = restore(tmp_path / "restored")
    assert refused.returncode != 0, refused.stdout
    assert "the attachments' bucket holds files" in refused.stderr, refused.stderr[-3000:]
    assert list(objects(client, TARGET)) == ["attachments/t9/stray"]  # nothing changed
    assert S3["ATTACHMENT_S3_SECRET_ACCESS_KEY"] not in refused.stdout + refused.stderr

    client.delete_object(Bucket=TARGET, Key="attachments/t9/stray")
    done = restore(tmp_path / "restored")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the stored secrets decrypt with FIELD_ENCRYPTION_KEYS (the environment)" in done.stdout
    assert objects(client, TARGET) == source  # the same keys, the same bytes
