"""`manage.py backup` of a running platform, `manage.py restore` into a fresh data dir, the
platform started there finding everything; a restore with a wrong key or none fails naming
FIELD_ENCRYPTION_KEYS before PostgreSQL starts, its data dir untouched; after a key rotation
the keys the stored secrets need are required; a non-empty target is refused
(lifecycle/backup.py, backup_keys.py, restore_preflight.py, restore.py)."""

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
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command

from agents.conversations import attachment_upload
from agents.models import Conversation, Run, RunEvent
from lifecycle import restore
from rag.models import Document, KnowledgeBase
from tenancy import services as tenancy
from tenancy.models import Tenant
from tests import processes
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


def _manage(data_dir, *args: str, **env: str) -> subprocess.CompletedProcess:
    return processes.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**_env(data_dir), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


FOUND = """
import json, os
from pathlib import Path
from django.core.management import CommandError
from agents.models import Attachment, Conversation, Run
from rag.models import Document
from agents.conversations import attachment_bytes
from lifecycle import restore
from providers.models import ProviderConnection
chat = Conversation.objects.get(title="kept chat")
attachment = Attachment.objects.get(conversation=chat)
try:  # a second restore into the restored installation
    restore.restore(Path(os.environ["BACKUP"]), say=str)
    again = "restored again"
except CommandError as refused:
    again = str(refused)
print(json.dumps({
    "runs": sorted(r.input for r in Run.objects.filter(conversation=chat)),
    "events": sum(r.events.count() for r in Run.objects.filter(conversation=chat)),
    "document": bytes(Document.objects.get(title="handbook").content).decode(),
    "attachment": attachment_bytes(attachment).hex(),
    "api_key": ProviderConnection.objects.get(name="Keyed").api_key,
    "again": again.split(":")[0],
}))
"""


def test_a_running_platform_backed_up_restores_into_a_fresh_data_dir(
    transactional_db, live_server_base, tmp_path, monkeypatch, settings
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
    assert manifest["key"]["keys"][0]["secrets"] >= 1  # the provider key, under the newest
    assert len(manifest["key"]["keys"]) == len(settings.FIELD_ENCRYPTION_KEYS)
    assert not any(key in json.dumps(manifest) for key in settings.FIELD_ENCRYPTION_KEYS)
    assert manifest["files"]["count"] >= 1
    assert "agents.0035_governed_memory" in manifest["migrations"]

    # A wrong key, or none (a new one would be generated): refused before the settings start
    # PostgreSQL, so the data dir is not even made.
    wrong = Fernet.generate_key().decode()
    for name, keys in (("wrong-key", {"FIELD_ENCRYPTION_KEYS": wrong}), ("keyless", {})):
        refused = _manage(tmp_path / name, "restore", str(without_key), **keys)
        assert refused.returncode != 0
        assert "cannot be decrypted with FIELD_ENCRYPTION_KEYS" in refused.stderr
        assert "Nothing was restored" in refused.stderr
        assert not (tmp_path / name).exists()  # untouched: no cluster made, no server started
        said = refused.stdout + refused.stderr
        assert "sk-kept-secret" not in said and wrong not in said

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
        found = _manage(restored, "shell", "-c", FOUND, BACKUP=str(with_key))
        assert found.returncode == 0, found.stderr
        assert json.loads(found.stdout.strip().splitlines()[-1]) == {
            "runs": ["q0", "q1", "q2"],
            "events": 12,
            "document": "kept words",
            "attachment": PNG.hex(),
            "api_key": "sk-kept-secret",
            "again": "Refusing to restore",  # a second restore into it: nothing changed
        }
    finally:
        serve.process.send_signal(signal.SIGINT)
        serve.process.wait(60)


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


def test_restore_checks_the_keys_first_and_once_the_data_is_in(
    transactional_db, tmp_path, monkeypatch, settings
):
    """In this process (the settings loaded): the keys the next start reads (the environment,
    else the data dir's key file) must include every key a stored secret needs, before
    anything else; a backup made before key fingerprints meets the check after the data is
    in, which names the setting too."""
    tenant = make_tenant("rotating")
    ours, old = list(settings.FIELD_ENCRYPTION_KEYS), Fernet.generate_key().decode()
    settings.FIELD_ENCRYPTION_KEYS = [old]
    make_connection(tenant, name="Before", api_key="sk-under-the-old-key")
    settings.FIELD_ENCRYPTION_KEYS = [*ours, old]  # rotated; reencrypt_secrets not yet run
    make_connection(tenant, name="After", api_key="sk-under-the-new-key")
    call_command("backup", "--output", str(rotating := tmp_path / "rotating.tar"))
    settings.FIELD_ENCRYPTION_KEYS = ours
    with tarfile.open(rotating) as archive:
        members = {m.name: archive.extractfile(m).read() for m in archive.getmembers()}
    manifest = json.loads(members["manifest.json"])
    counts = [key["secrets"] for key in manifest["key"]["keys"]]
    assert counts[0] >= 1 and counts[-1] == 1  # "After" under the newest key, "Before" the old
    tables = Tenant.objects.count()

    lacking = f"it lacks the backed-up installation's key {len(ours) + 1} of {len(ours) + 1}"
    with pytest.raises(CommandError, match=lacking):
        restore.restore(rotating, say=str)  # this data dir's key file: the newest key only
    monkeypatch.setenv("FIELD_ENCRYPTION_KEYS", ",".join([*ours, old]))
    with pytest.raises(CommandError, match="Refusing to restore: the target is not empty"):
        restore.restore(rotating, say=str)  # past the keys, to the target (not empty here)

    # Made before fingerprints: no key record, so on to the target; then today's check.
    manifest["key"] = {"source": "file", "file_present": True, "fingerprint": "0" * 16}
    earlier = tmp_path / "earlier.tar"
    with tarfile.open(earlier, "w") as archive:
        for name, data in {**members, "manifest.json": json.dumps(manifest).encode()}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    monkeypatch.setenv("FIELD_ENCRYPTION_KEYS", ",".join(ours))
    with pytest.raises(CommandError, match="Refusing to restore: the target is not empty"):
        restore.restore(earlier, say=str)
    with pytest.raises(CommandError) as undecryptable:
        restore.check_restored(manifest, files=0)
    assert str(undecryptable.value).startswith(
        "Restored, but the stored secrets cannot be decrypted with FIELD_ENCRYPTION_KEYS "
        "(the environment; providers.ProviderConnection.api_key)"
    )
    assert "sk-under" not in str(undecryptable.value)
    monkeypatch.setenv("FIELD_ENCRYPTION_KEYS", ",".join([*ours, old]))
    assert restore.check_restored(manifest, files=0)["rows"] == manifest["rows"]
    assert Tenant.objects.count() == tables
