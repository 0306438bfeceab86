"""`manage.py tenant export|delete|requests`: a tenant's archive, its erasure, the owners'
erasure requests waiting for an operator (docs/operations.md, "Offboarding")."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lifecycle.erasure import BATCH, tenant_erase
from lifecycle.erasure_requests import erasure_requests_pending
from lifecycle.export import tenant_export
from tenancy.models import Tenant


class Command(BaseCommand):
    help = "Export everything a tenant holds as an archive, or erase the tenant."

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="command", required=True)
        export = commands.add_parser("export", help="Write the tenant's archive (a zip file).")
        export.add_argument("--tenant", required=True, help="The tenant's slug.")
        export.add_argument("--output", required=True, help="The archive's path (not overwritten).")
        delete = commands.add_parser(
            "delete", help="Erase the tenant: every row, stored file and Redis key of it."
        )
        delete.add_argument("--tenant", required=True, help="The tenant's slug.")
        delete.add_argument(
            "--yes-delete-everything",
            action="store_true",
            dest="confirmed",
            help="Confirm: without it nothing is deleted.",
        )
        delete.add_argument("--batch", type=int, default=BATCH, help="Rows per transaction.")
        commands.add_parser("requests", help="List the owners' erasure requests waiting.")

    def handle(self, *args, **options) -> None:
        self.verbosity = options["verbosity"]
        if options["command"] == "requests":
            for pending in erasure_requests_pending():
                who = pending.requested_by.get_username() if pending.requested_by else "-"
                self.stdout.write(
                    f"{pending.tenant.slug}\t{pending.requested_at:%Y-%m-%d %H:%M}\t{who}\t"
                    f"{pending.reason}"
                )
            return
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if options["command"] == "export":
            if tenant is None:
                raise CommandError(f"No tenant {options['tenant']!r}.")
            self._export(tenant, Path(options["output"]))
            return
        if tenant is None:  # erased already (or never there): the same end state
            self.stdout.write(f"No tenant {options['tenant']!r}: nothing to delete.")
            return
        if not options["confirmed"]:
            raise CommandError(
                f"This erases {tenant.slug!r} and everything it holds, for good. "
                "Run again with --yes-delete-everything to do it."
            )
        if options["batch"] < 1:
            raise CommandError("--batch must be at least 1.")
        summary = tenant_erase(tenant=tenant, batch=options["batch"], progress=self._progress)
        rows = sum(summary.rows.values())
        self.stdout.write(
            f"Erased {options['tenant']!r}: {rows} rows, {summary.files} files, "
            f"{summary.redis_keys} Redis keys."
        )

    def _export(self, tenant: Tenant, path: Path) -> None:
        try:
            output = path.open("xb")
        except FileExistsError:
            raise CommandError(f"{path} exists: name a new file.") from None
        except OSError as exc:
            raise CommandError(f"Cannot write {path}: {exc.strerror}.") from None
        with output:
            summary = tenant_export(tenant=tenant, output=output)
        rows = sum(summary.rows.values())
        self.stdout.write(f"Wrote {path}: {rows} rows, {summary.files} files.")

    def _progress(self, label: str, count: int) -> None:
        if self.verbosity >= 2:
            self.stdout.write(f"deleted {count} {label}")
            self.stdout.flush()
