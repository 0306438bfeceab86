"""How the services and the engine ask for a run to be executed without knowing Celery:
they send `run_queued` (after the commit that queued the run); agents.tasks, the one module
that knows Celery, sends the run to a worker."""

from __future__ import annotations

from django.dispatch import Signal

run_queued = Signal()  # keywords: run_id, tenant_id (None: the worker looks it up)
# A run whose agent has a verifying tool succeeded (agents.verification): run_id, tenant_id.
run_succeeded = Signal()


def request_execution(run_id: int, tenant_id: int | None = None) -> None:
    run_queued.send(sender=None, run_id=run_id, tenant_id=tenant_id)


def request_verification(run_id: int, tenant_id: int) -> None:
    run_succeeded.send(sender=None, run_id=run_id, tenant_id=tenant_id)
