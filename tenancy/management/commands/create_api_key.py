from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from tenancy import services
from tenancy.models import Tenant


class Command(BaseCommand):
    help = "Create an API key for a tenant and print it once (only its hash is stored)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("tenant_slug")
        parser.add_argument("--name", required=True)
        parser.add_argument(
            "--scopes", default="read", help="Comma-separated: read,write,run,admin"
        )

    def handle(self, *args, tenant_slug: str, name: str, scopes: str, **options) -> None:
        tenant = Tenant.objects.filter(slug=tenant_slug).first()
        if tenant is None:
            raise CommandError(f"No tenant {tenant_slug!r}.")
        try:
            _, full_key = services.api_key_create(
                tenant=tenant, name=name, scopes=[s.strip() for s in scopes.split(",") if s.strip()]
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        self.stderr.write("API key (shown once; store it now):")
        self.stdout.write(full_key)
