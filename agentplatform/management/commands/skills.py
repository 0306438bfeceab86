"""`manage.py skills import --tenant <slug> <folder-or-zip>`: install a skill package as a
new version (docs/skills.md). It acts as the platform (no user): the audit log names
"system". A refused package prints why, naming the file, and changes nothing."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents import skills
from tenancy.models import Tenant


class Command(BaseCommand):
    help = "Install skills (the Agent Skills format) for a tenant."

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="command", required=True)
        load = commands.add_parser("import", help="Install a skill's folder or zip.")
        load.add_argument("--tenant", required=True, help="The tenant's slug.")
        load.add_argument("path", help="The skill's folder, or a zip of it.")
        load.add_argument(
            "--approve", action="store_true", help="Approve the version, for agents to use."
        )

    def handle(self, *args, **options) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No tenant {options['tenant']!r}.")
        try:
            package = skills.skill_package_read_path(options["path"])
            version, created = skills.skill_import(tenant=tenant, by=None, package=package)
            if options["approve"]:
                skills.skill_version_approve(tenant=tenant, by=None, version=version)
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from None
        state = "approved" if version.status == skills.SkillStatus.APPROVED else "draft"
        made = "installed" if created else "identical to the installed"
        self.stdout.write(f"{package.name}@{version.number}: {made} version ({state}).")
