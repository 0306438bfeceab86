"""Backup and restore figures for a tenant with many runs (docs/operations.md, "Backup").

    python scripts/backup_figures.py [--runs 10000] [--events 14]

Makes a fresh data dir (migrate), seeds one tenant with `--runs` finished runs of
`--events` events each (bulk inserts), then times `manage.py backup` and `manage.py
restore` into another fresh data dir, and prints their wall times and sizes. Everything is
in a temporary directory, removed at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_SESSION_ONLY = ("DATABASE_URL", "REDIS_URL", "ATTACHMENTS_DIR", "FIELD_ENCRYPTION_KEYS",
                 "SECRET_KEY", "DB_APP_PASSWORD")  # fmt: skip

SEED = """
import os, random
from agents.models import Agent, Conversation, Run, RunEvent
from tenancy.models import Tenant
runs, events = int(os.environ["SEED_RUNS"]), int(os.environ["SEED_EVENTS"])
# About 200 characters of text an event, of a 2,000-word vocabulary: compresses like prose
# (a repeated sentence would make the dump look far smaller than a real one).
words = ["".join(random.choices("abcdefghijklmnopqrstuvwxyz", k=random.randint(2, 9)))
         for _ in range(2000)]
def text():
    return " ".join(random.choices(words, k=35))
tenant = Tenant.objects.create(name="Busy", slug="busy")
agent = Agent.objects.create(tenant=tenant, slug="helper", name="Helper")
chat = Conversation.objects.create(tenant=tenant, agent=agent, title="many runs")
batch = 1000
for start in range(0, runs, batch):
    made = Run.objects.bulk_create(
        Run(tenant=tenant, agent=agent, conversation=chat, status="succeeded",
            input=f"question {n}: what is the weather like today?", output="Sunny, 21 C.")
        for n in range(start, min(start + batch, runs))
    )
    RunEvent.objects.bulk_create(
        (RunEvent(tenant=tenant, run=run, seq=s, type="text",
                  payload={"delta": text()})
         for run in made for s in range(events)),
        batch_size=5000,
    )
print(Run.objects.filter(tenant=tenant).count(), RunEvent.objects.filter(tenant=tenant).count())
"""


def manage(data_dir: Path, *args: str, **extra: str) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SESSION_ONLY}
    env.update(DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="agentplatform.settings", **extra)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"manage.py {args[0]} failed:\n{done.stdout}\n{done.stderr}")
    return time.monotonic() - started, done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=14)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="backup-figures-") as work:
        source, target, archive = Path(work, "src"), Path(work, "dst"), Path(work, "b.tar")
        seconds, _ = manage(source, "migrate", "--noinput")
        print(f"migrate (fresh data dir): {seconds:.1f} s")
        seconds, seeded = manage(
            source, "shell", "-c", SEED,
            SEED_RUNS=str(options.runs), SEED_EVENTS=str(options.events),
        )  # fmt: skip
        print(f"seeded runs, events: {seeded.splitlines()[-1]} in {seconds:.1f} s")
        seconds, said = manage(source, "backup", "--output", str(archive))
        size = archive.stat().st_size
        print(f"backup: {seconds:.1f} s wall (process start included), {size:,} bytes")
        print(f"  {said}")
        seconds, said = manage(target, "restore", str(archive))
        print(f"restore: {seconds:.1f} s wall (process start and migrate included)")
        print("".join(f"  {line}\n" for line in said.splitlines() if "Restored in" in line))
        on_disk = sum(
            p.stat().st_size for p in (source / "postgres" / "base").rglob("*") if p.is_file()
        )
        print(f"source database files on disk: {on_disk:,} bytes")


if __name__ == "__main__":
    main()
