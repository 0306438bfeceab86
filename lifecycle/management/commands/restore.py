"""`manage.py restore <file>` into an empty DATA_DIR (lifecycle/restore.py)."""

from __future__ import annotations

import time
from pathlib import Path

from django.core.management.base import BaseCommand

from lifecycle import restore


class Command(BaseCommand):
    help = (
        "Restore a backup of `manage.py backup` into an empty installation (a new DATA_DIR, "
        "or an empty DATABASE_URL database); refuses a non-empty one."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("archive", type=Path, help="The backup file.")

    def handle(self, *args, archive: Path, **options) -> None:
        started = time.monotonic()
        found = restore.restore(archive, say=self.stdout.write)
        rows = ", ".join(f"{label}: {n}" for label, n in found["rows"].items())
        keys = found["keys"]
        self.stdout.write(
            f"Restored in {time.monotonic() - started:.1f} s: {rows}; {found['files']} files; "
            f"the stored secrets decrypt with FIELD_ENCRYPTION_KEYS ({keys['source']})."
        )
        if keys["fit"] == "new":
            self.stdout.write(
                "These are not the keys the backup was made with; no stored secret needed "
                "them. Secrets entered from now on are encrypted with these: keep them."
            )
