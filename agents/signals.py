"""How the services and the engine ask for a run to be executed without knowing Celery:
they send `run_queued` (after the commit that queued the run); agents.tasks, the one module
that knows Celery, sends the run to a worker."""

from __future__ import annotations

from django.dispatch import Signal

run_queued = Signal()  # keyword: run_id


def request_execution(run_id: int) -> None:
    run_queued.send(sender=None, run_id=run_id)
