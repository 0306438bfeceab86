"""The history of migrations is append-only: `migrations.lock` lists each migration that
has landed, with the sha256 of its file, and tests/test_landed_migrations.py fails when one
of them is edited, renumbered or removed (docs/operations.md, "Upgrading").

    python scripts/landed_migrations.py          # append the migrations not listed yet

It only ever appends: a listed migration's line is never rewritten. Run it after
`makemigrations`, and commit the new lines with the migration.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "migrations.lock"


def on_disk() -> dict[str, str]:
    """Every shipped migration file (of the apps at the checkout's top level: not the tests'
    own app), relative to the checkout, with its sha256."""
    found = {}
    for package in sorted(ROOT.glob("*/migrations/__init__.py")):
        for path in sorted(package.parent.glob("[0-9][0-9][0-9][0-9]_*.py")):
            found[str(path.relative_to(ROOT))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def listed() -> dict[str, str]:
    """The lock's entries, in order: path -> sha256."""
    entries = {}
    for line in LOCK.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            digest, path = line.split(maxsplit=1)
            entries[path] = digest
    return entries


def append() -> list[str]:
    known = listed() if LOCK.exists() else {}
    new = [(path, digest) for path, digest in on_disk().items() if path not in known]
    with LOCK.open("a") as lock:
        if not known:
            lock.write(
                "# Landed migrations, append-only (scripts/landed_migrations.py): sha256 path\n"
            )
        for path, digest in new:
            lock.write(f"{digest}  {path}\n")
    return [path for path, _ in new]


if __name__ == "__main__":
    added = append()
    sys.stdout.write("".join(f"listed {path}\n" for path in added) or "nothing new\n")
