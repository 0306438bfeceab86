"""`manage.py evaluate --tenant <slug> --dataset <name> --agent <slug> [--user <member>]
[--wait]`: start an evaluation of the agent over the dataset (agents.evaluations). Without
--wait it goes to the batch workers and its id is printed; with --wait this process runs the
cases itself, one after another, and prints each outcome and the totals. Exit status 1 when
a case failed or errored, so a deployment check can gate on it."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.http import Http404

from agents.evaluations import dataset_get, evaluation_run_to_end, evaluation_start
from agents.models import Agent, CaseOutcome
from tenancy import rls
from tenancy.models import Membership, Tenant


class Command(BaseCommand):
    help = "Evaluate an agent over a dataset of cases."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tenant", required=True, help="The tenant's slug.")
        parser.add_argument("--dataset", required=True, help="The dataset's name.")
        parser.add_argument("--agent", required=True, help="The agent's slug.")
        parser.add_argument(
            "--user", help="A member to start the runs as (default: the platform itself)."
        )
        parser.add_argument(
            "--wait", action="store_true", help="Run the cases here and print the results."
        )

    def handle(self, *args, **options) -> None:
        with rls.owner():
            tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No tenant {options['tenant']!r}.")
        with rls.tenant_scope(tenant.pk):
            self._evaluate(tenant, options)

    def _evaluate(self, tenant: Tenant, options) -> None:
        user = None
        if options["user"]:
            user = get_user_model().objects.filter(username=options["user"]).first()
            if user is None or not Membership.objects.filter(tenant=tenant, user=user).exists():
                raise CommandError(f"No member {options['user']!r} of {tenant.slug}.")
        try:
            dataset = dataset_get(tenant=tenant, name_or_id=options["dataset"])
        except Http404:
            raise CommandError(f"No dataset {options['dataset']!r} in {tenant.slug}.") from None
        agent = Agent.objects.filter(tenant=tenant, slug=options["agent"]).first()
        if agent is None:
            raise CommandError(f"No agent {options['agent']!r} in {tenant.slug}.")
        try:
            evaluation = evaluation_start(
                tenant=tenant, dataset=dataset, agent=agent, by=user, dispatch=not options["wait"]
            )
        except (ValidationError, PermissionDenied) as exc:
            raise CommandError(" ".join(getattr(exc, "messages", [str(exc)]))) from None
        self.stdout.write(
            f"evaluation {evaluation.pk}: {agent.slug} v{evaluation.agent_version} over "
            f"{dataset.name} ({evaluation.cases} cases)"
        )
        if not options["wait"]:
            self.stdout.write("queued for the batch workers")
            return
        evaluation = evaluation_run_to_end(evaluation)
        for result in evaluation.results.all():
            why = f" — {result.reason}" if result.reason else ""
            run = f" (run {result.run_id})" if result.run_id else ""
            self.stdout.write(f"  {result.position + 1}. {result.outcome}{run}{why}")
        self.stdout.write(
            f"{evaluation.status}: {evaluation.passed} passed, {evaluation.failed} failed, "
            f"{evaluation.errors} errors of {evaluation.cases}"
        )
        bad = evaluation.results.exclude(outcome=CaseOutcome.PASSED).count()
        if bad:
            raise CommandError(f"{bad} case(s) did not pass", returncode=1)
