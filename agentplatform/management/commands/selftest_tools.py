"""`manage.py selftest_tools [--tenant <slug>] [--tool <name> ...]`: run the tools' declared
examples (agents/selftests.py) as the platform, record each tool's health and print it. Exit
status 1 when a tool fails, so a deployment check can use it."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from agents.selftests import selftest_tools
from tenancy import rls
from tenancy.models import Tenant
from tools.models import ToolHealthStatus


class Command(BaseCommand):
    help = "Run the tools' self-tests (their declared examples) and record their health."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tenant", help="A tenant's slug (default: every tenant).")
        parser.add_argument("--tool", action="append", help="Only this tool (repeatable).")

    def handle(self, *args, **options) -> None:
        with rls.owner():  # which tenants; each is then tested in its own scope
            tenants = Tenant.objects.order_by("slug")
            if options["tenant"]:
                tenants = tenants.filter(slug=options["tenant"])
            tenants = list(tenants)
        if options["tenant"] and not tenants:
            raise CommandError(f"No tenant {options['tenant']!r}.")
        failing = 0
        for tenant in tenants:
            with rls.tenant_scope(tenant.pk):
                healths = selftest_tools(tenant, options["tool"])
            for health in healths:
                failing += health.status == ToolHealthStatus.FAILING
                self.stdout.write(f"{tenant.slug} {health.tool_name}: {health.status}")
                for result in health.results:
                    detail = f" — {result['detail']}" if result["detail"] else ""
                    self.stdout.write(f"  {result['status']}: {result['name']}{detail}")
        if failing:
            raise CommandError(f"{failing} tool(s) failing", returncode=1)
