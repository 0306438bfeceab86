from __future__ import annotations

from django.core.management.base import BaseCommand

from tenancy import rls
from tenancy.records import history


class Command(BaseCommand):
    help = (
        "Record a first configuration version of every agent, crew, tool definition, "
        "connection and knowledge base that has none yet (run once after upgrading; "
        "docs/config-history.md). Safe to run again."
    )

    def handle(self, *args, **options) -> None:
        with rls.owner():  # every tenant's objects
            count = history.record_baselines()
        self.stdout.write(f"Recorded {count} first version(s).")
