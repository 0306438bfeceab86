"""`manage.py backup` of a running platform, `manage.py restore` into a fresh data dir, the
platform started there finding everything; a restore without the key fails naming
FIELD_ENCRYPTION_KEYS; a non-empty target is refused (lifecycle/backup.py, restore.py)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import urllib.request

import pytest
from django.core.management import CommandError, call_command

from agents.conversations import attachment_upload
from agents.models import Conversation, Run, RunEvent
from lifecycle import restore
from rag.models import Document, KnowledgeBase
from tenancy import services as tenancy
from tenancy.models import Tenant
from tests.conftest import ROOT
from tests.factories import add_member, make_agent, make_connection, make_tenant, make_user
from tests.live_server import free_port
from tests.test_serve import Serve, wait_healthy

pytestmark = pytest.mark.integration  # starts processes

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d4944415478da63fccf00000003010100c9fe92ef0000000049454e44ae426082"
)
# What a child with a data dir of its own must not inherit from the test session.
_SESSION_ONLY = (
    "DATABASE_URL", "REDIS_URL", "ATTACHMENTS_DIR", "FIELD_ENCRYPTION_KEYS", "SECRET_KEY",
    "DB_APP_PASSWORD", "DJANGO_SETTINGS_MODULE", "MCP_RESOURCE_URL", "PORT",
)  # fmt: skip


def _env(data_dir) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SESSION_ONLY}
    return {**env, "DATA_DIR": str(data_dir), "DJANGO_SETTINGS_MODULE": "agentplatform.settings"}


def _manage(data_dir, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


FOUND = """
import json
from agents.models import Attachment, Conversation, Run
from rag.models import Document
from agents.conversations import attachment_bytes
from providers.models import ProviderConnection
chat = Conversation.objects.get(title="kept chat")
attachment = Attachment.objects.get(conversation=chat)
print(json.dumps({
    "runs": sorted(r.input for r in Run.objects.filter(conversation=chat)),
    "events": sum(r.events.count() for r in Run.objects.filter(conversation=chat)),
    "document": bytes(Document.objects.get(title="handbook").content).decode(),
    "attachment": attachment_bytes(attachment).hex(),
    "api_key": ProviderConnection.objects.get(name="Keyed").api_key,
}))
"""


def test_a_running_platform_backed_up_restores_into_a_fresh_data_dir(
    transactional_db, live_server_base, tmp_path, monkeypatch
):
    tenant = make_tenant("kept")
    user = make_user("keeper")
    add_member(tenant, user)
    make_connection(tenant, name="Keyed", api_key="sk-kept-secret")
    agent = make_agent(tenant)
    chat = Conversation.objects.create(
        tenant=tenant, agent=agent, owner_user=user, title="kept chat"
    )
    for n in range(3):
        run = Run.objects.create(tenant=tenant, agent=agent, conversation=chat, input=f"q{n}")
        RunEvent.objects.bulk_create(
            RunEvent(tenant=tenant, run=run, seq=s, type="text", payload={"n": s}) for s in range(4)
        )
    base = KnowledgeBase.objects.create(tenant=tenant, name="Docs", slug="docs")
    Document.objects.create(
        tenant=tenant, knowledge_base=base, title="handbook", source="upload", content=b"kept words"
    )
    attachment_upload(tenant=tenant, conversation=chat, by=user, name="dot.png", data=PNG)
    _, api_key = tenancy.api_key_create(tenant=tenant, name="reader", scopes=["read"])
    run = Run.objects.filter(conversation=chat).first()

    # Backed up while the session's platform (live_server_base) serves this database.
    with_key, without_key = tmp_path / "with-key.tar", tmp_path / "without-key.tar"
    call_command("backup", "--output", str(with_key), "--include-key")
    call_command("backup", "--output", str(without_key))
    with tarfile.open(without_key) as archive:
        manifest = json.load(archive.extractfile("manifest.json"))
        assert "key/local-secrets.json" not in archive.getnames()
    assert manifest["key"]["included"] is False
    assert manifest["files"]["count"] >= 1
    assert "agents.0035_governed_memory" in manifest["migrations"]

    restored = tmp_path / "restored"
    done = _manage(restored, "restore", str(with_key))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Restored in" in done.stdout

    for name in _SESSION_ONLY:
        monkeypatch.delenv(name, raising=False)
    serve = Serve(restored, port := free_port())
    try:
        serve.wait_for(r"Agent Platform is up at", timeout=90)
        status, _ = wait_healthy(f"http://127.0.0.1:{port}")
        assert status == 200, "".join(serve.lines)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/v1/runs/{run.pk}/events",
            headers={"Authorization": f"Bearer {api_key}"},
        )
        with urllib.request.urlopen(request, timeout=15) as response:
            assert response.status == 200
            assert json.loads(response.read())  # the run's events, through REST
        found = _manage(restored, "shell", "-c", FOUND)
        assert found.returncode == 0, found.stderr
        assert json.loads(found.stdout.strip().splitlines()[-1]) == {
            "runs": ["q0", "q1", "q2"],
            "events": 12,
            "document": "kept words",
            "attachment": PNG.hex(),
            "api_key": "sk-kept-secret",
        }
    finally:
        serve.process.send_signal(signal.SIGINT)
        serve.process.wait(60)

    again = _manage(restored, "restore", str(with_key))
    assert again.returncode != 0
    assert "Refusing to restore: the target is not empty" in again.stderr

    keyless = _manage(tmp_path / "keyless", "restore", str(without_key))
    assert keyless.returncode != 0
    assert "cannot be decrypted with FIELD_ENCRYPTION_KEYS" in keyless.stderr
    assert "sk-kept-secret" not in keyless.stdout + keyless.stderr


def test_restore_refuses_a_damaged_a_newer_or_a_non_empty_target_changing_nothing(
    transactional_db, tmp_path
):
    good = tmp_path / "good.tar"
    call_command("backup", "--output", str(good))
    with pytest.raises(CommandError, match="exists: give a new file name"):
        call_command("backup", "--output", str(good))
    with tarfile.open(good) as archive:
        members = {m.name: archive.extractfile(m).read() for m in archive.getmembers()}

    def variant(name: str, **changed: bytes):
        path = tmp_path / name
        with tarfile.open(path, "w") as archive:
            for member, data in {**members, **changed}.items():
                info = tarfile.TarInfo(member)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
        return path

    dump = bytearray(members["database.dump"])
    dump[-1] ^= 0xFF
    manifest = json.loads(members["manifest.json"])
    manifest["migrations"].append("agents.9999_from_the_future")
    tables = Tenant.objects.count()
    (garbage := tmp_path / "garbage.tar").write_bytes(b"not a tar file at all" * 40)
    with pytest.raises(CommandError, match="is not a backup of this platform"):
        restore.restore(garbage, say=str)
    with pytest.raises(CommandError, match=r"database\.dump in the backup is damaged"):
        restore.restore(variant("damaged.tar", **{"database.dump": bytes(dump)}), say=str)
    with pytest.raises(CommandError, match="made by a newer release"):
        restore.restore(variant("newer.tar", **{"manifest.json": json.dumps(manifest).encode()}))
    with pytest.raises(CommandError, match="Refusing to restore: the target is not empty"):
        restore.restore(good, say=str)  # the session's database: migrated, so not empty
    assert Tenant.objects.count() == tables
