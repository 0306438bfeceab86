"""A busy tenant's data life, side by side: backup, restore, the tenant's export and its
erasure (lifecycle/; docs/operations.md, "Backup", "Offboarding").

Run: cd /work/main && nice .venv/bin/python bench/lifecycle.py   (10,000 runs)
     BENCH_SMOKE=1 .venv/bin/python bench/lifecycle.py       (200 runs)
(prints a table, writes bench/results/lifecycle.json). Needs no network: the embedded
PostgreSQL and Redis start in a temporary DATA_DIR, removed at exit.

Seeded (bulk inserts), in one tenant: RUNS finished runs of 14 events each (about 200
characters of prose-like text an event, of a 2,000-word vocabulary: compresses like real
prose, not like a repeated sentence), in RUNS/10 conversations of 20 messages each, RUNS/5
remembered facts, RUNS/50 knowledge-base documents of 20 chunks each (no vectors), and
RUNS/100 attached files of 50 kB of random bytes (incompressible) in the attachments'
directory. A second, small tenant stays beside it (the erasure must leave it).

Measured, in this order, each alone (nothing else of the bench runs meanwhile):
- backup: `lifecycle.backup.write_backup` (pg_dump of the whole database, the files, the
  manifest; key included), in this process; the archive's size;
- export: `lifecycle.export.tenant_export` of the busy tenant to a zip, in this process
  (what `manage.py tenant export` and an owner's export task run); the zip's size;
- restore: `manage.py restore` of that backup into another fresh DATA_DIR, a child
  process: its wall time (the embedded PostgreSQL's first start and initdb, pg_restore, the
  files, `migrate` in its own child, the checks) and the time it reports for itself;
- erasure: `lifecycle.erasure.tenant_erase` of the busy tenant (every row in batches of
  500, its files, its Redis keys), in this process; the rows it deleted.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0] or ".").resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

from bench.common import SMOKE, configure_django, sized, write_results  # noqa: E402

RUNS = sized(10_000, smoke=200)
RNG = random.Random(39)  # noqa: S311 (bench data: the same every run)
EVENTS = 14
BATCH = 1000
# What a child with a data dir of its own must not inherit (scripts/backup_figures.py).
_SESSION_ONLY = ("DATABASE_URL", "REDIS_URL", "ATTACHMENTS_DIR", "FIELD_ENCRYPTION_KEYS",
                 "SECRET_KEY", "DB_APP_PASSWORD")  # fmt: skip


def seed(words: list[str]):
    """The busy tenant and a small one; returns the busy one."""
    import hashlib
    import uuid

    from django.core.files.base import ContentFile
    from django.core.files.storage import storages

    from agents.models import Agent, Attachment, Conversation, Fact, Message, Run, RunEvent
    from rag.models import Chunk, Document, KnowledgeBase
    from tenancy.models import Tenant
    from tests.factories import add_member, make_user

    def text(n: int = 35) -> str:
        return " ".join(RNG.choices(words, k=n))

    busy = Tenant.objects.create(name="Busy", slug="busy")
    quiet = Tenant.objects.create(name="Quiet", slug="quiet")
    user = make_user("busy-person")
    add_member(busy, user)
    Agent.objects.create(tenant=quiet, slug="helper", name="Helper")
    agent = Agent.objects.create(tenant=busy, slug="helper", name="Helper")
    chats = Conversation.objects.bulk_create(
        Conversation(tenant=busy, agent=agent, owner_user=user, title=text(5))
        for _ in range(max(1, RUNS // 10))
    )
    Message.objects.bulk_create(
        (Message(tenant=busy, conversation=chat, role=("user", "assistant")[n % 2],
                 content=text(40)) for chat in chats for n in range(20)),
        batch_size=5000,
    )  # fmt: skip
    for start in range(0, RUNS, BATCH):
        made = Run.objects.bulk_create(
            Run(tenant=busy, agent=agent, conversation=chats[n % len(chats)],
                initiated_by_user=user, status="succeeded", input=text(15), output=text(40))
            for n in range(start, min(start + BATCH, RUNS))
        )  # fmt: skip
        RunEvent.objects.bulk_create(
            (RunEvent(tenant=busy, run=run, seq=s, type="text", payload={"delta": text()})
             for run in made for s in range(EVENTS)),
            batch_size=5000,
        )  # fmt: skip
    Fact.objects.bulk_create(
        Fact(tenant=busy, user=user, text=text(12)) for _ in range(max(1, RUNS // 5))
    )
    base = KnowledgeBase.objects.create(tenant=busy, name="Docs", slug="docs")
    for n in range(max(1, RUNS // 50)):
        body = [text(150) for _ in range(20)]
        document = Document.objects.create(
            tenant=busy, knowledge_base=base, title=f"doc {n}", source="upload",
            content="\n\n".join(body).encode(), status="ready", chunk_count=20,
        )  # fmt: skip
        Chunk.objects.bulk_create(
            Chunk(tenant=busy, knowledge_base=base, document=document, ordinal=i, text=part)
            for i, part in enumerate(body)
        )
    storage = storages["attachments"]
    for n in range(max(1, RUNS // 100)):
        data = RNG.randbytes(50_000)
        chat = chats[n % len(chats)]
        key = storage.save(f"t{busy.pk}/c{chat.pk}/{uuid.uuid4().hex}", ContentFile(data))
        Attachment.objects.create(
            tenant=busy, conversation=chat, uploaded_by_user=user, name=f"f{n}.bin",
            kind="document", media_type="application/octet-stream", size=len(data),
            sha256=hashlib.sha256(data).hexdigest(), storage_key=key, status="ready",
        )  # fmt: skip
    return busy


def counts(tenant) -> dict[str, int]:
    from agents.models import Attachment, Conversation, Fact, Message, Run, RunEvent
    from rag.models import Chunk, Document

    models = {"runs": Run, "events": RunEvent, "conversations": Conversation,
              "messages": Message, "facts": Fact, "documents": Document, "chunks": Chunk,
              "attachments": Attachment}  # fmt: skip
    return {name: model.objects.filter(tenant=tenant).count() for name, model in models.items()}


def database_bytes() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        return cursor.fetchone()[0]


def restore_in_child(archive: Path, work: Path) -> tuple[float, float | None]:
    """`manage.py restore` into a fresh DATA_DIR: wall seconds, and the seconds it reports."""
    env = {k: v for k, v in os.environ.items() if k not in _SESSION_ONLY}
    env.update(DATA_DIR=str(work / "restored"), DJANGO_SETTINGS_MODULE="agentplatform.settings")
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "manage.py", "restore", str(archive)],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"restore failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    said = re.search(r"Restored in ([\d.]+) s", done.stdout)
    return wall, float(said.group(1)) if said else None


def main() -> None:
    configure_django("bench-lifecycle-")
    from lifecycle.backup import write_backup
    from lifecycle.erasure import tenant_erase
    from lifecycle.export import tenant_export

    words = ["".join(RNG.choices("abcdefghijklmnopqrstuvwxyz", k=RNG.randint(2, 9)))
             for _ in range(2000)]  # fmt: skip
    started = time.perf_counter()
    busy = seed(words)
    seeded_s = time.perf_counter() - started
    held = counts(busy)
    db_bytes = database_bytes()
    print(f"seeded in {seeded_s:.1f} s: " + ", ".join(f"{v:,} {k}" for k, v in held.items()))
    print(f"database: {db_bytes / 1e6:.1f} MB on disk (every table and index)")

    with tempfile.TemporaryDirectory(prefix="bench-lifecycle-out-") as out:
        work = Path(out)
        archive, exported = work / "backup.tar", work / "export.zip"
        started = time.perf_counter()
        write_backup(archive, include_key=True)
        backup_s = time.perf_counter() - started
        started = time.perf_counter()
        summary = tenant_export(tenant=busy, output=exported)
        export_s = time.perf_counter() - started
        restore_s, restore_said_s = restore_in_child(archive, work)
        started = time.perf_counter()
        erased = tenant_erase(tenant=busy)
        erasure_s = time.perf_counter() - started
        sizes = {"backup": archive.stat().st_size, "export": exported.stat().st_size}

    rows_erased = sum(erased.rows.values())
    label = " (SMOKE: a few runs, not a measurement)" if SMOKE else ""
    print(f"\n{RUNS:,} runs x {EVENTS} events{label}")
    print(f"{'':<10}{'seconds':>10}{'MB':>10}  what")
    print(f"{'backup':<10}{backup_s:>10.1f}{sizes['backup'] / 1e6:>10.1f}  whole database "
          f"(pg_dump, compressed) + {held['attachments']} files")  # fmt: skip
    told = f", {restore_said_s:.1f} s by its own count" if restore_said_s is not None else ""
    print(f"{'restore':<10}{restore_s:>10.1f}{'':>10}  child process: PostgreSQL's first "
          f"start, pg_restore, files, migrate, checks{told}")  # fmt: skip
    print(f"{'export':<10}{export_s:>10.1f}{sizes['export'] / 1e6:>10.1f}  the busy tenant: "
          f"{sum(summary.rows.values()):,} rows, {summary.files} files (zip)")  # fmt: skip
    print(f"{'erasure':<10}{erasure_s:>10.1f}{'':>10}  the busy tenant: {rows_erased:,} rows, "
          f"{erased.files} files, {erased.redis_keys} Redis keys")  # fmt: skip
    write_results(
        "lifecycle",
        {"runs": RUNS, "events_per_run": EVENTS, "seeded": held, "database_bytes": db_bytes,
         "seed_s": seeded_s, "sizes": sizes, "restore_reported_s": restore_said_s,
         "rows_exported": sum(summary.rows.values()), "rows_erased": rows_erased},
        headline={
            "backup_s": backup_s, "backup_mb": sizes["backup"] / 1e6,
            "restore_s": restore_s, "export_s": export_s,
            "export_mb": sizes["export"] / 1e6, "erasure_s": erasure_s,
        },
    )  # fmt: skip


if __name__ == "__main__":
    main()
