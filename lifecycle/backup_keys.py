"""The encryption keys a backup's stored secrets need, as its manifest records them, and the
check `manage.py restore` makes of the keys the restored platform will start with before it
restores anything (docs/operations.md, "Backup" and "Restore"). No Django here: manage.py
runs the check before the settings start the embedded PostgreSQL (restore_preflight.py).

The manifest holds, per key of FIELD_ENCRYPTION_KEYS (newest first), a fingerprint and how
many stored secrets it decrypts, never the key. A fingerprint is HMAC-SHA256 keyed with the
key's 32 bytes over a fixed purpose and a salt drawn for each backup (128 bits of it, hex):
- it reveals nothing of the key (HMAC is a pseudorandom function of its key), and the same
  key fingerprints differently in two backups, so a manifest matches no other record of it;
- it cannot be brute-forced into the key: the key is 256 random bits (Fernet's). A slower
  derivation (scrypt, PBKDF2) would add nothing: the dump's own Fernet tokens already let
  whoever holds the archive test a guessed key at HMAC speed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

SETTING = "FIELD_ENCRYPTION_KEYS"
# The embedded installation's generated secrets in DATA_DIR (agentplatform/embedded.py,
# `local_secrets`), and the archive member holding them (`backup --include-key`).
LOCAL_SECRETS = "local-secrets.json"
KEY = "key/local-secrets.json"
MANIFEST = "manifest.json"  # the archive's member describing it (lifecycle/backup.py)
_PURPOSE = b"agentplatform backup: fingerprint of an encryption key\x00"


class KeysMissing(Exception):
    """The keys the restored platform would start with cannot decrypt the backup's stored
    secrets (the message names FIELD_ENCRYPTION_KEYS, never a key)."""


def key_file_values(raw: bytes | str, where: str) -> dict[str, str]:
    """A key file's settings (a JSON object of strings); KeysMissing naming `where` when it
    is anything else."""
    try:
        values = json.loads(raw)
    except ValueError:
        values = None
    if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
        raise KeysMissing(f"{where} is damaged (not a JSON object of settings).")
    return values


@dataclass(frozen=True)
class NextStart:
    """The secrets the restored platform's next start reads (as the settings do), and from
    where, in words."""

    keys: list[str]
    secret_key: str | None
    source: str
    from_backup: bool = False  # the keys are the backup's own key file's


def fingerprint(key: str, salt: bytes) -> str:
    """ValueError for a key that is not a Fernet key (32 url-safe base64-encoded bytes)."""
    try:
        raw = base64.urlsafe_b64decode(key.encode())
    except (binascii.Error, UnicodeEncodeError):
        raw = b""
    if len(raw) != 32:
        raise ValueError("not a Fernet key")
    return hmac.new(raw, _PURPOSE + salt, hashlib.sha256).hexdigest()[:32]


def record(keys: list[str], tokens: Iterable[str]) -> dict:
    """The manifest's record of `keys` and of the stored secrets (Fernet `tokens`) each
    decrypts, the first that does; `unreadable`: those none decrypts. One decryption attempt
    per key tried and token (a wrong key fails at the MAC, before decrypting)."""
    fernets = [Fernet(key) for key in keys]
    counts, unreadable = [0] * len(keys), 0
    for token in tokens:
        for position, fernet in enumerate(fernets):
            try:
                fernet.decrypt(token)
            except InvalidToken:
                continue
            counts[position] += 1
            break
        else:
            unreadable += 1
    salt = os.urandom(16)
    return {
        "salt": salt.hex(),
        "keys": [
            {"fingerprint": fingerprint(key, salt), "secrets": n}
            for key, n in zip(keys, counts, strict=True)
        ],
        "unreadable": unreadable,
    }


def next_start(
    environ: Mapping[str, str], data_dir: Path, *, embedded: bool, carried: dict | None = None
) -> NextStart:
    """The secrets as the settings will read them at the restored platform's next start:
    the environment's, else (embedded PostgreSQL only) the data dir's key file, which the
    backup's own (`carried`, when it has one) replaces during the restore."""
    if embedded and carried is not None:
        values, where = carried, "the backup's own key file"
    elif embedded:
        path = data_dir / LOCAL_SECRETS
        values = key_file_values(path.read_text(), str(path)) if path.exists() else {}
        where = str(path)
    else:
        values, where = {}, ""

    def read(name: str) -> tuple[str | None, str]:
        if value := (environ.get(name) or "").strip():
            return value, "the environment"
        if value := (values.get(name) or "").strip():
            return value, where
        return None, "none is set" + (": a new key would be generated" if embedded else "")

    raw_keys, source = read(SETTING)
    return NextStart(
        keys=[k.strip() for k in (raw_keys or "").split(",") if k.strip()],
        secret_key=read("SECRET_KEY")[0],
        source=source,
        from_backup=source == where and carried is not None,
    )


def check(recorded: object, start: NextStart) -> str:
    """Whether `start.keys` decrypt what the backup's manifest (its `key` record) says its
    stored secrets need; KeysMissing, saying what to set, when not. Returns "unchecked" (a
    backup made before fingerprints: the restore's decryption check once the data is in is
    all there is), "matched" (these are, or include, every key a stored secret needs) or
    "new" (none of the backup's keys, and no stored secret needs one)."""
    read = _read_record(recorded)
    if read is None:
        return "unchecked"
    salt, entries = read
    ours = set()
    for position, key in enumerate(start.keys, 1):
        try:
            ours.add(fingerprint(key, salt))
        except ValueError:
            raise KeysMissing(
                f"{SETTING} ({start.source}): key #{position} is not a Fernet key (32 "
                "url-safe base64-encoded bytes). Nothing was restored."
            ) from None
    found = [fp in ours for fp, _ in entries]
    missing = [n for n, (here, (_, secrets)) in enumerate(zip(found, entries, strict=True), 1)
               if secrets and not here]  # fmt: skip
    if missing and start.from_backup:
        raise KeysMissing(
            f"The backup's key file does not hold the {SETTING} its manifest names: the "
            "backup is damaged or altered. Nothing was restored."
        )
    if missing:
        count = sum(entries[n - 1][1] for n in missing)
        raise KeysMissing(
            f"The backup's stored secrets cannot be decrypted with {SETTING} "
            f"({start.source}): it lacks the backed-up installation's key"
            f"{'s' if len(missing) > 1 else ''} {' and '.join(map(str, missing))} of "
            f"{len(entries)} (newest first), which encrypt{'s' if len(missing) == 1 else ''} "
            f"{count} stored secret{'s' if count != 1 else ''}. Nothing was restored. Set "
            f"{SETTING} to that installation's keys (newest first; a new key of your own may "
            f"come first), or put its {LOCAL_SECRETS} into DATA_DIR, or restore a backup made "
            "with --include-key."
        )
    return "matched" if any(found) else "new"


def _read_record(recorded: object) -> tuple[bytes, list[tuple[str, int]]] | None:
    """The salt and, per key, (fingerprint, stored secrets) of a manifest's record; None for
    a backup made before fingerprints."""
    try:
        salt = bytes.fromhex(recorded["salt"])
        entries = [(str(e["fingerprint"]), int(e["secrets"])) for e in recorded["keys"]]
    except (KeyError, TypeError, ValueError):
        return None
    return salt, entries
