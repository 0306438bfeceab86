"""`manage.py config export|import|schema`: a tenant's configuration as one document
(docs/configuration-as-code.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.config_document import ConfigPlan, config_export, config_import
from agents.runtime.config.document import document_json_schema
from agents.runtime.config.loading import MAX_DOCUMENT_BYTES, dump_document
from tenancy.models import Tenant


class Command(BaseCommand):
    help = "Export or import a tenant's configuration document, or print its JSON Schema."

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="command", required=True)
        export = commands.add_parser("export", help="Write the tenant's document to stdout.")
        export.add_argument("--tenant", required=True, help="The tenant's slug.")
        export.add_argument("--format", choices=["yaml", "json"], default="yaml")
        export.add_argument(
            "--skill-files",
            action="store_true",
            help="Write each skill version's files inline (base64), not by reference.",
        )
        load = commands.add_parser(
            "import", help="Apply a document (a file, or - for stdin) to the tenant."
        )
        load.add_argument("--tenant", required=True, help="The tenant's slug.")
        load.add_argument("file", help="A YAML or JSON document; - reads stdin.")
        load.add_argument("--format", choices=["yaml", "json"], default=None)
        load.add_argument(
            "--dry-run",
            action="store_true",
            help="Run every check, show the changes; change nothing.",
        )
        load.add_argument(
            "--prune", action="store_true", help="Also delete objects the document leaves out."
        )
        commands.add_parser("schema", help="Print the document's JSON Schema (version 1).")

    def handle(self, *args, **options) -> None:
        if options["command"] == "schema":
            self.stdout.write(json.dumps(document_json_schema(), indent=2))
            return
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No tenant {options['tenant']!r}.")
        if options["command"] == "export":
            exported = config_export(tenant=tenant, skill_files=options["skill_files"])
            self.stdout.write(dump_document(exported, options["format"]))
            return
        plan = config_import(
            tenant=tenant,
            text=self._read(options["file"]),
            format=options["format"],
            prune=options["prune"],
            dry_run=options["dry_run"],
        )
        self._report(plan, dry_run=options["dry_run"])

    def _read(self, name: str) -> bytes:
        if name == "-":
            text = sys.stdin.buffer.read(MAX_DOCUMENT_BYTES + 1)
        else:
            try:
                with Path(name).open("rb") as file:
                    text = file.read(MAX_DOCUMENT_BYTES + 1)  # more is refused, not read
            except OSError as exc:
                raise CommandError(f"Cannot read {name}: {exc.strerror}.") from None
        return text

    def _report(self, plan: ConfigPlan, *, dry_run: bool) -> None:
        if not plan.valid:
            for problem in plan.problems:
                self.stderr.write(f"{problem.path or '(document)'}: {problem.reason}")
            raise CommandError(f"The document was not applied ({len(plan.problems)} problem(s)).")
        for change in plan.changes:
            fields = ", ".join(change.fields) if change.action == "update" else ""
            self.stdout.write(
                f"{change.action} {change.section} {change.name}"
                + (f": {fields}" if fields else "")
            )
        if not plan.changes:
            self.stdout.write("No changes.")
        elif dry_run:
            self.stdout.write("Dry run: nothing was changed.")
        else:
            self.stdout.write(self.style.SUCCESS(f"Applied {len(plan.changes)} change(s)."))
        for made in plan.new_secrets:  # on this output only: never stored readable again
            self.stdout.write(self.style.WARNING(f"{made.note}\n  {made.secret}"))
