"""Runs whose worker died, found to be asked for again (the beat task agents.sweep_stale_runs
sends each to a worker): running under an expired lease, or queued for longer than two
leases (the worker that took the message died before claiming it)."""

from __future__ import annotations

from datetime import timedelta

from django.db.models.functions import Now

from agents.models import Run
from agents.runs.claim import lease_seconds
from agents.runtime.spec import RunStatus
from tenancy import rls

BACKLOG_PER_SWEEP = 500


def stale_runs() -> list[int]:
    """The ids of every tenant's runs to ask for again. Each queued run is in it at most
    once per two leases (its `queued_at` moves on), so a backlog is not flooded."""
    with rls.owner():  # the runs of every tenant
        grace = timedelta(seconds=2 * lease_seconds())
        stale = list(
            Run.objects.filter(status=RunStatus.RUNNING, lease_expires_at__lt=Now()).values_list(
                "pk", flat=True
            )
        )
        waiting = Run.objects.filter(status=RunStatus.QUEUED, queued_at__lt=Now() - grace)
        lost = list(waiting.values_list("pk", flat=True)[:BACKLOG_PER_SWEEP])
        Run.objects.filter(pk__in=lost, status=RunStatus.QUEUED).update(queued_at=Now())
    return stale + lost
