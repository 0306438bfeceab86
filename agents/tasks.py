from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from agents.execution import execute_run
from agents.models import Run
from agents.runtime.spec import RunStatus

QUEUED_TOO_LONG = timedelta(minutes=5)


@shared_task(name="agents.execute_run", acks_late=True, reject_on_worker_lost=True)
def execute_run_task(run_id: int) -> str:
    """Idempotent: a second delivery finds the run claimed or finished and does nothing."""
    return execute_run(run_id)


@shared_task(name="agents.sweep_stale_runs")
def sweep_stale_runs() -> int:
    """Queue runs whose worker died (lease expired) and queued runs whose message was lost."""
    now = timezone.now()
    stale = list(
        Run.objects.filter(status=RunStatus.RUNNING, lease_expires_at__lt=now).values_list(
            "pk", flat=True
        )
    )
    stale += Run.objects.filter(
        status=RunStatus.QUEUED, created_at__lt=now - QUEUED_TOO_LONG
    ).values_list("pk", flat=True)
    for run_id in stale:
        execute_run_task.delay(run_id)
    return len(stale)
