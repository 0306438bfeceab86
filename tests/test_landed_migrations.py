"""A migration that has landed is never edited, renumbered or removed: an installation that
applied it would not apply the new version, and one that has not would differ from it
(docs/operations.md, "Upgrading"). migrations.lock lists each with its sha256."""

from __future__ import annotations

from scripts import landed_migrations

HOW = (
    "A new migration: run `python scripts/landed_migrations.py` (it appends its line to "
    "migrations.lock) and commit that line with it. A landed one must stay as it is: write a "
    "new migration instead of editing, renumbering or squashing it."
)


def test_every_landed_migration_is_unchanged_and_every_migration_is_listed():
    disk, lock = landed_migrations.on_disk(), landed_migrations.listed()
    gone = [path for path in lock if path not in disk]
    edited = [path for path, digest in lock.items() if path in disk and disk[path] != digest]
    unlisted = [path for path in disk if path not in lock]
    assert not gone, f"Landed migrations removed or renumbered: {gone}. {HOW}"
    assert not edited, f"Landed migrations edited: {edited}. {HOW}"
    assert not unlisted, f"Migrations not in migrations.lock: {unlisted}. {HOW}"


def test_new_migrations_come_after_every_landed_one_of_their_app():
    """Appended, not slipped in before a landed one (a renumbering in disguise)."""
    last: dict[str, str] = {}
    for path in landed_migrations.listed():
        app, _, name = path.split("/")
        assert name > last.get(app, ""), f"{path} is listed after {last[app]}. {HOW}"
        last[app] = name
