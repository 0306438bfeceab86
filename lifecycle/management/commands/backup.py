"""`manage.py backup --output <file> [--include-key]` (lifecycle/backup.py)."""

from __future__ import annotations

import time
from pathlib import Path

from django.core.management.base import BaseCommand

from lifecycle import backup


class Command(BaseCommand):
    help = (
        "Write a consistent backup (database dump, attachment files, manifest) of this "
        "installation while it runs; the encryption key only with --include-key."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--output", required=True, type=Path, help="A new file to write.")
        parser.add_argument(
            "--include-key",
            action="store_true",
            help="Also store SECRET_KEY and FIELD_ENCRYPTION_KEYS (keep the file as safe as "
            "the keys; without them, the restored secrets need the keys set by hand).",
        )

    def handle(self, *args, output: Path, include_key: bool, **options) -> None:
        started = time.monotonic()
        manifest = backup.write_backup(output, include_key=include_key)
        files = manifest["files"]
        key = manifest["key"]
        self.stdout.write(
            f"Backup written to {output.resolve()} ({output.stat().st_size:,} bytes) in "
            f"{time.monotonic() - started:.1f} s: database {manifest['database']['size']:,} "
            f"bytes, {files['count']} files ({files['bytes']:,} bytes), "
            f"{len(manifest['migrations'])} migrations applied; {len(key['keys'])} encryption "
            f"key{'s' if len(key['keys']) != 1 else ''} "
            f"({'included' if key['included'] else 'not included'}; fingerprints in the manifest)."
        )
        if key["unreadable"]:
            self.stderr.write(
                f"{key['unreadable']} stored secrets decrypt with none of "
                "FIELD_ENCRYPTION_KEYS: a restore cannot make them readable."
            )
        if not key["included"]:
            where = (
                "FIELD_ENCRYPTION_KEYS and SECRET_KEY"
                if key["source"] == "environment"
                else "DATA_DIR/local-secrets.json"
            )
            self.stdout.write(f"The keys are not in it: keep {where} apart; a restore needs them.")
        if files["kept_in"] == "bucket":
            self.stdout.write(
                f"The attachments' bucket: its {files['count']} objects under the prefix are in "
                "the backup (copied after the dump)."
            )
