from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from tenancy import services
from tenancy.models import Tenant


class Command(BaseCommand):
    help = "Create a tenant and its owner (the user is created, with a printed password, if new)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", help="Display name (default: the slug)")
        parser.add_argument("--owner", required=True, help="Username of the owner")
        parser.add_argument("--email", default="", help="E-mail for a newly created owner")

    def handle(self, *args, slug: str, name: str | None, owner: str, email: str, **options):
        if Tenant.objects.filter(slug=slug).exists():
            raise CommandError(f"Tenant {slug!r} already exists.")
        try:
            with transaction.atomic():
                created = services.user_get_or_create(username=owner, email=email)
                tenant = services.tenant_create(slug=slug, name=name or slug, owner=created.user)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        self.stdout.write(f"Created tenant {tenant.slug!r} owned by {owner!r}.")
        if created.password:
            self.stdout.write(f"New user {owner!r}, password (shown once): {created.password}")
