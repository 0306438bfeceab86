"""What `manage.py restore` checks before the settings load (manage.py calls `run`): they
start the embedded PostgreSQL in DATA_DIR (its first start makes the cluster), so a restore
with the wrong encryption keys stops here, its DATA_DIR untouched and no server started. No
Django here.

- The keys the restored platform will start with must decrypt the backup's stored secrets
  (lifecycle/backup_keys.py); `restore` checks again once the settings are loaded, for a
  call that did not come through manage.py.
- A new DATA_DIR gets the backup's key file now, when the backup has one: the settings then
  hold the secrets the next start reads, and `restore` migrates in its own process instead
  of a child's (lifecycle/restore.py, `_migrate`).

An archive it cannot read is left to the command, which says what is wrong with it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
from collections.abc import Mapping
from pathlib import Path

from lifecycle import backup_keys
from lifecycle.backup_keys import KEY, LOCAL_SECRETS, MANIFEST


def run(argv: list[str], *, data_dir: Path, environ: Mapping[str, str] = os.environ) -> None:
    """`argv`: the command's arguments (after `restore`). Exits with the command's error
    when the keys do not fit."""
    archive_path = _archive_argument(argv)
    if archive_path is None:
        return
    try:
        with tarfile.open(archive_path, "r") as archive:
            manifest = json.load(archive.extractfile(MANIFEST))
            carried = carried_key_file(archive)
    except (OSError, tarfile.TarError, KeyError, ValueError, AttributeError):
        return
    embedded = not (environ.get("DATABASE_URL") or "").strip()
    try:
        carried_values = None
        if carried is not None:
            carried_values = backup_keys.key_file_values(carried, f"{KEY} in the backup")
        start = backup_keys.next_start(environ, data_dir, embedded=embedded, carried=carried_values)
        backup_keys.check(manifest.get("key") if isinstance(manifest, dict) else None, start)
    except backup_keys.KeysMissing as error:
        sys.exit(f"CommandError: {error}")
    if embedded and carried is not None and not (data_dir / LOCAL_SECRETS).exists():
        place_key_file(data_dir, carried)


def carried_key_file(archive: tarfile.TarFile) -> bytes | None:
    """The backup's key file (`backup --include-key`), or None."""
    try:
        member = archive.extractfile(KEY)
    except KeyError:
        return None
    return member.read() if member is not None else None


def place_key_file(data_dir: Path, data: bytes) -> None:
    """`data` becomes DATA_DIR's key file (0600, written beside it and renamed)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    target = data_dir / LOCAL_SECRETS
    partial = target.with_name(f".{LOCAL_SECRETS}.restoring")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    partial.replace(target)


def _archive_argument(argv: list[str]) -> Path | None:
    """The archive named in the command's arguments; None for a help request or arguments
    the command itself will refuse."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    parser.add_argument("archive", nargs="?", type=Path)
    for option in ("--settings", "--pythonpath", "--verbosity", "-v"):
        parser.add_argument(option)
    if {"-h", "--help"} & set(argv):
        return None
    try:
        known, _ = parser.parse_known_args(argv)
    except argparse.ArgumentError:
        return None
    return known.archive
