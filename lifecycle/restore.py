"""`manage.py restore <file>`: an archive of `manage.py backup` brought back into an empty
data directory (docs/operations.md, "Restore").

Run with DATA_DIR set to the new directory. manage.py first checks the encryption keys the
restored platform will start with against the backup's manifest, before the settings start
an embedded PostgreSQL there (lifecycle/restore_preflight.py). Then, in order:
1. the keys again (for a call that did not come through manage.py): those the next start
   reads must decrypt the stored secrets, the manifest says which keys those need
   (lifecycle/backup_keys.py); else nothing is done, the error naming FIELD_ENCRYPTION_KEYS;
2. every member of the archive is checked against the manifest's size and sha256 before
   anything is written;
3. the target must be empty (no table in its database, no stored file), else nothing is done;
4. `pg_restore` in one transaction (all or nothing), without the dump's grants: the app
   login's are made again by `migrate` (step 6) for this installation's role and password;
5. the attachment files, and the key file when the archive holds one;
6. `migrate`: the app login, and any migration newer than the backup (restoring into a
   newer release is an upgrade); in this process when its settings hold the secrets the
   next start reads (SECRET_KEY gives the login's password), else in a child that reads them;
7. checks: row counts as in the manifest, every attachment's file there, and the stored
   secrets decrypted with the FIELD_ENCRYPTION_KEYS the platform will start with (all a
   backup made before key fingerprints has of step 1).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from base import encryption
from lifecycle import backup, backup_keys, restore_preflight, stored_files
from lifecycle.backup import DUMP, FILES, FORMAT
from lifecycle.backup_keys import KEY, LOCAL_SECRETS, MANIFEST


def restore(archive_path: Path, *, say=print) -> dict:
    """Restore `archive_path` into this (empty) installation; return what the checks found.
    CommandError says what is wrong: keys that do not decrypt the stored secrets, a damaged
    archive, a non-empty target, a failed restore."""
    if not archive_path.is_file():
        raise CommandError(f"No backup at {archive_path}.")
    if not tarfile.is_tarfile(archive_path):
        raise CommandError(f"{archive_path} is not a backup of this platform (not a tar file).")
    # Unpacked on DATA_DIR's disk; in the system's temporary directory when there is none
    # (DATABASE_URL and REDIS_URL set).
    data_dir = Path(settings.DATA_DIR)
    with (
        tarfile.open(archive_path, "r") as archive,
        tempfile.TemporaryDirectory(
            prefix=".restore-", dir=data_dir if data_dir.is_dir() else None
        ) as work,
    ):
        manifest = _manifest(archive)
        carried = restore_preflight.carried_key_file(archive)
        keys = _check_keys(manifest, carried)
        unpacked = Path(work)
        _unpack_checked(archive, manifest, unpacked)
        _require_empty_target()
        say(f"Restoring the database ({manifest['database']['size']:,} bytes)...")
        _pg_restore(unpacked / DUMP)
        files = _place_files(unpacked, manifest)
        if carried is not None and settings.EMBEDDED_DATABASE:
            # Replacing the one settings generated for the empty directory (nothing was
            # encrypted with it), unless manage.py put this one there already. (With
            # DATABASE_URL the settings read no key file: no copy of the secrets on disk.)
            restore_preflight.place_key_file(data_dir, carried)
    say("Running migrate (the app login; migrations newer than the backup)...")
    _migrate()
    return {**check_restored(manifest, files), "keys": keys}


def _manifest(archive: tarfile.TarFile) -> dict:
    try:
        manifest = json.load(archive.extractfile(MANIFEST))
    except (KeyError, ValueError, AttributeError):
        raise CommandError("Not a backup of this platform: it has no readable manifest.") from None
    if manifest.get("format") != FORMAT:
        raise CommandError(
            f"Backup format {manifest.get('format')!r} is not the one this release reads "
            f"({FORMAT}): restore it with the release that made it, then upgrade."
        )
    disk = MigrationLoader(None).disk_migrations
    known, apps_known = {f"{app}.{name}" for app, name in disk}, {app for app, _ in disk}
    # Of the apps this release has (another app's tables, e.g. a plugin's, come back as is).
    unknown = sorted(
        m for m in manifest["migrations"] if m.split(".")[0] in apps_known and m not in known
    )
    if unknown:
        raise CommandError(
            f"The backup was made by a newer release: it had applied {len(unknown)} migrations "
            f"this one lacks (e.g. {unknown[0]}). Restore it with that release or a later one."
        )
    return manifest


def _check_keys(manifest: dict, carried: bytes | None) -> dict:
    """What the next start's FIELD_ENCRYPTION_KEYS are (`source`) and whether they are the
    backup's (`fit`: backup_keys.check); CommandError when they cannot decrypt its secrets."""
    try:
        values = None
        if carried is not None:
            values = backup_keys.key_file_values(carried, f"{KEY} in the backup")
        start = _next_start(carried=values)
        fit = backup_keys.check(manifest.get("key"), start)
    except backup_keys.KeysMissing as error:
        raise CommandError(str(error)) from None
    return {"source": start.source, "fit": fit}


def _next_start(carried: dict | None = None) -> backup_keys.NextStart:
    return backup_keys.next_start(
        os.environ, Path(settings.DATA_DIR), embedded=settings.EMBEDDED_DATABASE, carried=carried
    )


def _unpack_checked(archive: tarfile.TarFile, manifest: dict, into: Path) -> None:
    """Extract the dump, the files and the key into `into`, each checked against the
    manifest (a member it does not list is refused, as is a path leaving `into`)."""
    expected = {DUMP: manifest["database"]}
    for entry in manifest["files"]["entries"]:
        expected[FILES + entry["path"]] = entry
    allowed = {*expected, KEY, MANIFEST}
    for member in archive.getmembers():
        if member.name not in allowed or not member.isfile():
            raise CommandError(f"The backup holds {member.name!r}, which its manifest lacks.")
    archive.extractall(into, filter="data")
    for name, entry in expected.items():
        path = into / name
        if not path.is_file():
            raise CommandError(f"The backup lacks {name}, which its manifest lists.")
        if path.stat().st_size != entry["size"] or _sha256(path) != entry["sha256"]:
            raise CommandError(f"{name} in the backup is damaged (size or sha256 differs).")


def _require_empty_target() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        tables = cursor.fetchone()[0]
    stored = stored_files.any_stored()
    if tables or stored:
        where = connection.settings_dict["NAME"]
        files = f"the attachments' {stored_files.kept_in()} holds files" if stored else "no files"
        raise CommandError(
            f"Refusing to restore: the target is not empty (database {where!r} has {tables} "
            f"tables; {files}). Restore into a new, empty DATA_DIR (with DATABASE_URL, an "
            "empty database; with ATTACHMENT_S3_BUCKET, an empty bucket or prefix); nothing "
            "was changed."
        )


def _pg_restore(dump: Path) -> None:
    args, env = backup.libpq_env()
    result = subprocess.run(
        [
            backup.pg_tool("pg_restore"),
            "--single-transaction",  # all or nothing
            "--exit-on-error",
            "--no-owner",  # the restoring login owns it all, as migrate's would
            "--no-privileges",  # the app login's grants: remade by migrate
            *args,
            str(dump),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise CommandError(f"pg_restore failed; nothing was restored:\n{result.stderr.strip()}")


def _place_files(unpacked: Path, manifest: dict) -> int:
    """The backed-up files into this installation's storage, directory or bucket."""
    entries = manifest["files"]["entries"]
    for entry in entries:
        stored_files.put(entry["path"], unpacked / FILES / entry["path"])
    return len(entries)


def _migrate() -> None:
    """In this process when its settings hold the secrets the next start reads (as after
    manage.py put the backup's key file into a new DATA_DIR, or with both in the
    environment); else in a child process, which reads them."""
    start = _next_start()
    if (start.secret_key, start.keys) == (settings.SECRET_KEY, settings.FIELD_ENCRYPTION_KEYS):
        call_command("migrate", interactive=False, verbosity=0)
        return
    result = subprocess.run(
        [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "migrate", "--noinput"],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise CommandError(f"migrate after the restore failed:\n{result.stderr.strip()[-2000:]}")


def check_restored(manifest: dict, files: int) -> dict:
    """The restored installation against `manifest`: row counts, attachments' files, stored
    secrets decrypted with the next start's FIELD_ENCRYPTION_KEYS (their newest and oldest
    value of each kind); CommandError naming what differs. One query per table and column."""
    with connection.cursor() as cursor:
        rows = backup.row_counts(cursor)
    short = {k: (n, rows.get(k)) for k, n in manifest["rows"].items() if rows.get(k) != n}
    if short:
        raise CommandError(f"Rows differ from the backup's (backup, restored): {short}")
    missing = _attachments_missing()
    if missing:
        raise CommandError(f"{len(missing)} attachments have no stored file, e.g. {missing[0]}.")
    start = _next_start()
    undecryptable = _undecryptable(MultiFernet([Fernet(k) for k in start.keys]))
    if undecryptable:
        raise CommandError(
            "Restored, but the stored secrets cannot be decrypted with FIELD_ENCRYPTION_KEYS "
            f"({start.source}; {', '.join(undecryptable)}); the platform will refuse to "
            "start. Set FIELD_ENCRYPTION_KEYS (and SECRET_KEY) to the backed-up "
            f"installation's, or put its {LOCAL_SECRETS} into DATA_DIR (a backup made with "
            "--include-key carries it)."
        )
    return {"rows": rows, "files": files}


def _attachments_missing() -> list[str]:
    stored = set(stored_files.stored_keys())
    keys = apps.get_model("agents.Attachment").objects.values_list("storage_key", flat=True)
    return [key for key in keys.iterator() if key and key not in stored]


def _undecryptable(multi: MultiFernet) -> list[str]:
    """The encrypted columns whose newest or oldest value `multi` cannot decrypt."""
    failing = []
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for model, names in encryption.encrypted_fields():
            table, pk = quote(model._meta.db_table), quote(model._meta.pk.column)
            for name in names:
                column = quote(model._meta.get_field(name).column)
                one = f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL ORDER BY {pk}"  # noqa: S608
                cursor.execute(f"({one} DESC LIMIT 1) UNION ALL ({one} LIMIT 1)")
                for (token,) in cursor.fetchall():
                    try:
                        multi.decrypt(token.encode())
                    except InvalidToken:
                        failing.append(f"{model._meta.label}.{name}")
                        break
    return failing


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
