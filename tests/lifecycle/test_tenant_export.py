"""`manage.py tenant export` (lifecycle/export.py): the documented archive of everything a
tenant holds — its manifest, configuration document, a JSON Lines file per table, its
attached files — with no secret in it and nothing of another tenant."""

from __future__ import annotations

import json
import zipfile

import pytest
from django.core.management import CommandError, call_command

from lifecycle.export import FORMAT, SECRET
from tests.factories import make_user
from tests.lifecycle.tenant_data import PNG, forget_redis, full_tenant

pytestmark = pytest.mark.django_db


@pytest.fixture
def archive(tmp_path):
    owner, member, other = make_user("olga"), make_user("mika"), make_user("otto")
    held = full_tenant("zorb-corp", owner, member, mark="Zorblax", runs=3, events=4)
    kept = full_tenant("quint-corp", other, member, mark="Quintavel", runs=1, events=1)
    path = tmp_path / "zorb.zip"
    call_command("tenant", "export", "--tenant", "zorb-corp", "--output", str(path))
    yield held, zipfile.ZipFile(path)
    forget_redis(held, kept)


def lines(archive: zipfile.ZipFile, label: str) -> list[dict]:
    return [json.loads(line) for line in archive.read(f"data/{label}.jsonl").splitlines()]


def test_the_archive_holds_every_kind_its_manifest_counts(archive):
    held, zipped = archive
    manifest = json.loads(zipped.read("manifest.json"))
    assert manifest["format"] == FORMAT
    assert manifest["tenant"] == {"id": held.tenant.pk, "slug": "zorb-corp", "name": "Zorblax Corp"}
    for label, kind in manifest["kinds"].items():
        assert len(lines(zipped, label)) == kind["rows"], label
    rows = {label: kind["rows"] for label, kind in manifest["kinds"].items()}
    assert rows["agents.run"] == 3 and rows["agents.runevent"] == 12
    assert rows["agents.conversation"] == 3 and rows["agents.message"] == 6
    assert rows["agents.fact"] == 3 and rows["rag.document"] == 1
    assert rows["tenancy.auditentry"] >= 1 and rows["agents.trigger"] == 1
    assert [r["text"] for r in lines(zipped, "agents.fact")] == [
        f"Zorblax likes tea {n}" for n in range(3)
    ]
    events = lines(zipped, "agents.runevent")
    assert {e["run_id"] for e in events} == {run.pk for run in held.runs}
    configuration = json.loads(zipped.read("configuration.json"))
    assert [a["name"] for a in configuration["agents"]] == ["Zorblax agent"]


def test_attached_files_are_in_the_archive_byte_for_byte(archive):
    _, zipped = archive
    (attachment,) = lines(zipped, "agents.attachment")
    assert zipped.read(f"files/attachments/{attachment['storage_key']}") == PNG
    assert json.loads(zipped.read("manifest.json"))["files"]["attachments"] == 1


def test_no_secret_and_nothing_of_another_tenant_is_exported(archive):
    _, zipped = archive
    (connection,) = lines(zipped, "providers.providerconnection")
    assert connection["api_key"] == SECRET
    (key,) = lines(zipped, "tenancy.apikey")
    assert key["secret_hash"] == SECRET
    (trigger,) = lines(zipped, "agents.trigger")
    assert trigger["secret"] in (SECRET, None)
    for name in zipped.namelist():
        content = zipped.read(name)
        assert b"sk-offboard-secret" not in content, name
        assert b"Quintavel" not in content, name


def test_it_refuses_an_unknown_tenant_and_an_existing_file(tmp_path, trio):
    with pytest.raises(CommandError, match="No tenant 'nope'"):
        call_command("tenant", "export", "--tenant", "nope", "--output", str(tmp_path / "a.zip"))
    taken = tmp_path / "taken.zip"
    taken.write_bytes(b"keep me")
    with pytest.raises(CommandError, match="exists"):
        call_command("tenant", "export", "--tenant", "acme", "--output", str(taken))
    assert taken.read_bytes() == b"keep me"
