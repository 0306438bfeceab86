"""The keys of a backup (lifecycle/backup_keys.py) and restore's check of them before the
settings load (lifecycle/restore_preflight.py): fingerprints that tell keys apart and hold
nothing of them; rotation (several keys) judged by the keys the stored secrets need; a wrong
or missing key refused naming FIELD_ENCRYPTION_KEYS with DATA_DIR left untouched."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from cryptography.fernet import Fernet

from lifecycle import backup_keys, restore_preflight
from lifecycle.backup_keys import KeysMissing, NextStart

NEW, OLD, OTHER = (Fernet.generate_key().decode() for _ in range(3))


def secrets_under(key: str, n: int) -> list[str]:
    return [Fernet(key).encrypt(f"secret {i}".encode()).decode() for i in range(n)]


def start(*keys: str) -> NextStart:
    return NextStart(keys=list(keys), secret_key="s", source="the environment")


def test_a_fingerprint_holds_nothing_of_the_key_and_differs_per_backup():
    one, two = backup_keys.record([NEW], []), backup_keys.record([NEW], [])
    printed = json.dumps(one)
    assert NEW not in printed and NEW.encode().hex() not in printed
    assert one["salt"] != two["salt"]
    assert one["keys"][0]["fingerprint"] != two["keys"][0]["fingerprint"]  # unlinkable
    salt = bytes.fromhex(one["salt"])
    assert backup_keys.fingerprint(NEW, salt) == one["keys"][0]["fingerprint"]
    assert backup_keys.fingerprint(OLD, salt) != one["keys"][0]["fingerprint"]


def test_it_counts_the_stored_secrets_each_key_decrypts():
    tokens = [*secrets_under(NEW, 2), *secrets_under(OLD, 3), *secrets_under(OTHER, 1)]
    recorded = backup_keys.record([NEW, OLD], tokens)
    assert [k["secrets"] for k in recorded["keys"]] == [2, 3]
    assert recorded["unreadable"] == 1


def test_the_right_keys_pass_and_a_new_key_may_come_first():
    recorded = backup_keys.record([NEW, OLD], [*secrets_under(NEW, 1), *secrets_under(OLD, 1)])
    assert backup_keys.check(recorded, start(NEW, OLD)) == "matched"
    assert backup_keys.check(recorded, start(OTHER, NEW, OLD)) == "matched"  # rotated since


def test_a_wrong_key_is_refused_naming_the_setting_and_never_a_key():
    recorded = backup_keys.record([NEW], secrets_under(NEW, 2))
    with pytest.raises(KeysMissing) as refused:
        backup_keys.check(recorded, start(OTHER))
    message = str(refused.value)
    assert "cannot be decrypted with FIELD_ENCRYPTION_KEYS (the environment)" in message
    assert "key 1 of 1" in message and "2 stored secrets" in message
    assert "Nothing was restored" in message
    assert NEW not in message and OTHER not in message


def test_after_a_rotation_only_the_keys_stored_secrets_need_are_required():
    rotated = backup_keys.record([NEW, OLD], secrets_under(NEW, 2))  # reencrypt_secrets ran
    assert backup_keys.check(rotated, start(NEW)) == "matched"  # the old key dropped: fine
    halfway = backup_keys.record([NEW, OLD], [*secrets_under(NEW, 1), *secrets_under(OLD, 4)])
    with pytest.raises(KeysMissing, match=r"key 2 of 2 \(newest first\), which encrypts 4"):
        backup_keys.check(halfway, start(NEW))
    with pytest.raises(KeysMissing, match="keys 1 and 2 of 2"):
        backup_keys.check(halfway, start(OTHER))


def test_any_key_will_do_when_no_stored_secret_needs_one():
    assert backup_keys.check(backup_keys.record([NEW], []), start(OTHER)) == "new"


def test_a_backup_made_before_fingerprints_is_left_to_the_check_after_the_restore():
    before = {"source": "file", "file_present": True, "fingerprint": "ab" * 8, "included": False}
    assert backup_keys.check(before, start(OTHER)) == "unchecked"
    assert backup_keys.check(None, start(OTHER)) == "unchecked"


def test_a_key_that_is_not_a_fernet_key_is_named_by_its_position():
    recorded = backup_keys.record([NEW], secrets_under(NEW, 1))
    with pytest.raises(KeysMissing, match="key #2 is not a Fernet key") as refused:
        backup_keys.check(recorded, start(NEW, "not-a-key"))
    assert "not-a-key" not in str(refused.value)


def test_the_next_start_reads_the_environment_then_the_backups_key_file_then_the_data_dirs(
    tmp_path,
):
    (tmp_path / "local-secrets.json").write_text(
        json.dumps({"SECRET_KEY": "file", "FIELD_ENCRYPTION_KEYS": OLD})
    )
    carried = {"SECRET_KEY": "carried", "FIELD_ENCRYPTION_KEYS": f"{NEW},{OLD}"}
    env = {"FIELD_ENCRYPTION_KEYS": f" {OTHER} ", "SECRET_KEY": "  "}
    read = backup_keys.next_start(env, tmp_path, embedded=True, carried=carried)
    assert (read.keys, read.secret_key, read.from_backup) == ([OTHER], "carried", False)
    read = backup_keys.next_start({}, tmp_path, embedded=True, carried=carried)
    assert (read.keys, read.from_backup) == ([NEW, OLD], True)
    read = backup_keys.next_start({}, tmp_path, embedded=True)
    assert (read.keys, read.secret_key) == ([OLD], "file")
    assert read.source == str(tmp_path / "local-secrets.json")
    # With DATABASE_URL the settings read the environment only.
    read = backup_keys.next_start({}, tmp_path, embedded=False, carried=carried)
    assert (read.keys, read.secret_key) == ([], None)
    assert read.source == "none is set"


def members(*, keys: list[str], secrets: list[str], carried: list[str] | None) -> dict:
    """A backup's manifest (with its key record) and, when `carried`, a key file."""
    manifest = {"format": 1, "key": backup_keys.record(keys, secrets)}
    found = {"manifest.json": json.dumps(manifest).encode()}
    if carried is not None:
        values = {"SECRET_KEY": "backed-up", "FIELD_ENCRYPTION_KEYS": ",".join(carried)}
        found["key/local-secrets.json"] = json.dumps(values).encode()
    return found


def archive(path, found: dict):
    with tarfile.open(path, "w") as tar:
        for name, data in found.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_before_the_settings_a_wrong_key_stops_the_restore_leaving_data_dir_untouched(
    tmp_path, capsys
):
    backup = archive(
        tmp_path / "b.tar", members(keys=[NEW], secrets=secrets_under(NEW, 1), carried=None)
    )
    data_dir = tmp_path / "new"
    for env in ({"FIELD_ENCRYPTION_KEYS": OTHER}, {}):
        with pytest.raises(SystemExit) as stopped:
            restore_preflight.run([str(backup)], data_dir=data_dir, environ=env)
        assert str(stopped.value).startswith("CommandError: The backup's stored secrets cannot")
        assert "FIELD_ENCRYPTION_KEYS" in str(stopped.value)
    assert not data_dir.exists()
    # The right key passes; nothing is written (the settings make the data dir).
    restore_preflight.run(
        ["-v", "2", str(backup)], data_dir=data_dir, environ={"FIELD_ENCRYPTION_KEYS": NEW}
    )
    assert not data_dir.exists()


def test_a_new_data_dir_gets_the_backups_key_file_before_the_settings_read_it(tmp_path):
    backup = archive(
        tmp_path / "b.tar", members(keys=[NEW], secrets=secrets_under(NEW, 1), carried=[NEW])
    )
    restore_preflight.run([str(backup)], data_dir=tmp_path / "new", environ={})
    placed = tmp_path / "new" / "local-secrets.json"
    assert json.loads(placed.read_text())["FIELD_ENCRYPTION_KEYS"] == NEW
    assert placed.stat().st_mode & 0o777 == 0o600
    # A data dir with a key file of its own keeps it (the restore replaces it once it has
    # found the target empty); with DATABASE_URL the file is not read, so not written.
    (kept := tmp_path / "kept").mkdir()
    (kept / "local-secrets.json").write_text("{}")
    restore_preflight.run([str(backup)], data_dir=kept, environ={})
    assert (kept / "local-secrets.json").read_text() == "{}"
    restore_preflight.run(
        [str(backup)], data_dir=tmp_path / "external",
        environ={"DATABASE_URL": "postgres://u@db/app", "FIELD_ENCRYPTION_KEYS": NEW},
    )  # fmt: skip
    assert not (tmp_path / "external").exists()


def test_a_backup_whose_key_file_is_not_its_manifests_is_called_damaged(tmp_path):
    found = members(keys=[NEW], secrets=secrets_under(NEW, 1), carried=[OTHER])
    with pytest.raises(SystemExit, match="the backup is damaged or altered"):
        restore_preflight.run(
            [str(archive(tmp_path / "b.tar", found))], data_dir=tmp_path / "new", environ={}
        )
    assert not (tmp_path / "new").exists()


def test_what_it_cannot_read_it_leaves_to_the_command(tmp_path):
    (garbage := tmp_path / "garbage.tar").write_bytes(b"not a tar file" * 50)
    for argv in ([str(garbage)], [str(tmp_path / "missing.tar")], [], ["--help"]):
        restore_preflight.run(argv, data_dir=tmp_path / "new", environ={})
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("carried", [b"[]", b'{"FIELD_ENCRYPTION_KEYS": 7}', b"not json"])
def test_a_key_file_that_is_no_object_of_settings_is_called_damaged_not_a_traceback(
    tmp_path, carried
):
    found = members(keys=[NEW], secrets=secrets_under(NEW, 1), carried=None)
    found["key/local-secrets.json"] = carried
    with pytest.raises(SystemExit, match=r"key/local-secrets\.json in the backup is damaged"):
        restore_preflight.run(
            [str(archive(tmp_path / "b.tar", found))], data_dir=tmp_path / "new", environ={}
        )
    assert not (tmp_path / "new").exists()
    # The data dir's own key file, read when the backup carries none, is checked alike.
    (data_dir := tmp_path / "old").mkdir()
    (data_dir / "local-secrets.json").write_bytes(carried)
    without = members(keys=[NEW], secrets=secrets_under(NEW, 1), carried=None)
    with pytest.raises(SystemExit, match=r"local-secrets\.json is damaged"):
        restore_preflight.run(
            [str(archive(tmp_path / "c.tar", without))], data_dir=data_dir, environ={}
        )
