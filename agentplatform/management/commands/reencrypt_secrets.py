from __future__ import annotations

from django.core.management.base import BaseCommand

from base.encryption import reencrypt_all


class Command(BaseCommand):
    help = "Re-encrypt every stored secret with the newest FIELD_ENCRYPTION_KEYS key."

    def handle(self, *args, **options) -> None:
        for label, count in reencrypt_all().items():
            self.stdout.write(f"{label}: {count} row(s) re-encrypted")
        self.stdout.write(self.style.SUCCESS("Done; keys after the first may now be removed."))
