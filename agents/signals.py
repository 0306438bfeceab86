"""How the services and the engine ask for a run to be executed without knowing Celery:
they send `run_queued` (after the commit that queued the run); agents.tasks, the one module
that knows Celery, sends the run to a worker."""

from __future__ import annotations

from django.dispatch import Signal

# keywords: run_id, tenant_id (None: the worker looks it up), batch (True: an evaluation's
# run, sent to the batch queue so it never waits in front of interactive runs)
run_queued = Signal()
# A run whose agent has a verifying tool succeeded (agents.verification): run_id, tenant_id.
run_succeeded = Signal()


# An evaluation has something to do (start runs, score finished ones): evaluation_id,
# tenant_id, delay_s (agents.evaluations.evaluation_advance; agents.tasks sends it).
evaluation_due = Signal()
# An evaluation of a draft completed or was cancelled: evaluation (agents.publishing decides
# the draft; sent on every step after the end, the decision is taken once).
evaluation_ended = Signal()


def request_execution(run_id: int, tenant_id: int | None = None, *, batch: bool = False) -> None:
    run_queued.send(sender=None, run_id=run_id, tenant_id=tenant_id, batch=batch)


def request_evaluation_step(evaluation_id: int, tenant_id: int, delay_s: float = 0) -> None:
    evaluation_due.send(
        sender=None, evaluation_id=evaluation_id, tenant_id=tenant_id, delay_s=delay_s
    )


def request_verification(run_id: int, tenant_id: int) -> None:
    run_succeeded.send(sender=None, run_id=run_id, tenant_id=tenant_id)


# A large attached document waits to be read (agents.conversations.attachment_reading):
# attachment_id, tenant_id; agents.tasks sends it to a worker. Sent after the commit that
# stored it.
attachment_to_read = Signal()


def request_attachment_reading(attachment_id: int, tenant_id: int) -> None:
    attachment_to_read.send(sender=None, attachment_id=attachment_id, tenant_id=tenant_id)
